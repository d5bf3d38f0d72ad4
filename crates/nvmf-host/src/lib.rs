//! NVMe/TCP initiator in user space.
//!
//! Layers, bottom up:
//! - [`queue`]: one TCP connection (ICReq/ICResp, PDUs, digests, R2T/H2CData, C2HData) with
//!   a driver task that owns the socket; commands go in with an owned buffer and come back
//!   with their completion.
//! - [`Controller`]: the admin queue plus N I/O queues: Connect, enable, Identify, log
//!   pages, features, keep-alive, shutdown.
//! - [`discover`]: the discovery log page, read in pieces with the generation re-checked.
//! - [`RemoteNamespace`]: `blockdev::BlockDevice` for one namespace.
//! - [`NvmeTcpUrl`]: `nvme+tcp://ADDR:PORT/SUBNQN[/NSID][?digest=hd,dd]` for tools.
//!
//! ```no_run
//! # async fn demo() -> Result<(), nvmf_host::HostError> {
//! use blockdev::{BlockDevice, IoBuf};
//! use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl};
//! let host = HostIdentity::system()?;
//! let url = NvmeTcpUrl::parse("nvme+tcp://127.0.0.1:4420/nqn.2026-01.io.ferrobay:n1/1")?;
//! let ns = url.open(&host, &ConnectOptions::default()).await?;
//! let buf = ns.read(0, IoBuf::new_zeroed(4096)).await.expect("read");
//! # let _ = buf; Ok(()) }
//! ```
//!
//! Room for the rest of issue 3: a queue reports its own death ([`QueuePair::error`],
//! [`HostError::is_transport`]) and keeps no state a new connection could not rebuild
//! from [`ConnectOptions`], so reconnect (and Abort / controller reset on timeouts) can
//! live in a layer that owns several `Controller`s, one per path, and picks a path by ANA
//! state. Timed-out commands keep their CID reserved until the target answers or the
//! queue ends, so a late answer never completes a newer command.

pub mod controller;
pub mod discovery;
pub mod error;
pub mod host_identity;
pub mod namespace;
pub mod queue;
pub mod status_text;
pub mod url;

pub use controller::{ConnectOptions, Controller};
pub use discovery::{DiscoveryEntry, discover, discover_all, format_discovery_log};
pub use host_identity::HostIdentity;
pub use namespace::RemoteNamespace;
pub use url::NvmeTcpUrl;

pub use error::{CommandKind, HostError, TransportError};
pub use queue::{Completed, Payload, QueueOptions, QueuePair};
