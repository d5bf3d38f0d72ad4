//! NVMe/TCP transport: one task per connection.
//!
//! - `conn`: the connection's task: socket reads and writes, shutdown and linger.
//! - `session`: the protocol state of one connection and what ties its parts together.
//! - `receive`: PDU headers, digests, ICReq/ICResp.
//! - `capsule`: command capsules admitted, their data located.
//! - `commands`: the outstanding commands (CIDs, slots, queue depth).
//! - `r2t`: solicited write data (R2T budget, H2CData).
//! - `throttle`: commands waiting for their turn under a QoS limit.
//! - `completion`: completions, C2HData, per-connection counters, error log.
//! - `handle`, `rx`, `tx`: the connection's handle for other tasks, receive and send buffers.

pub(crate) mod capsule;
pub(crate) mod commands;
pub(crate) mod completion;
pub(crate) mod conn;
pub(crate) mod handle;
pub(crate) mod r2t;
pub(crate) mod receive;
pub(crate) mod rx;
pub(crate) mod session;
pub(crate) mod throttle;
pub(crate) mod tx;
