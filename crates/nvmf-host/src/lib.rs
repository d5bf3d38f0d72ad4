//! NVMe/TCP initiator in user space.
//!
//! Layers, bottom up:
//! - [`queue`]: a queue pair: a pre-allocated command table (one ticket per CID, a waker
//!   each: nothing is allocated per command) that outlives TCP connections, and for each
//!   connection a driver task that owns the socket (ICReq/ICResp, PDUs, digests,
//!   R2T/H2CData, C2HData straight into the caller's buffer).
//! - [`Controller`]: the admin queue plus N I/O queues, brought up as the Linux host does,
//!   and kept up by a supervisor task: Keep Alive at KATO/2, one Asynchronous Event
//!   Request outstanding, Abort on command timeouts, controller reset and reconnect with
//!   exponential backoff. State and events go out on a watch channel
//!   ([`Controller::watch`], [`ControllerStatus`]).
//! - [`discover`]: the discovery log page, read in pieces with the generation re-checked.
//! - [`RemoteNamespace`]: `blockdev::BlockDevice` for one namespace through one controller.
//! - [`MultipathNamespace`]: `blockdev::BlockDevice` for one namespace through several
//!   controllers, by ANA state, with failover; it opens when any path connects, retries
//!   the others in the background and checks that a returning path shows the same
//!   namespace before using it.
//! - [`KvNamespace`] / [`MultipathKvNamespace`]: a Key Value namespace (Store, Retrieve,
//!   Delete, Exist, List) on the same queues, single path or multipath (see [`kv`]).
//! - [`NvmeTcpUrl`] names a namespace for tools, as
//!   `nvme+tcp://ADDR:PORT[,ADDR:PORT...]/SUBNQN[/NSID][?digest=hd,dd&queues=N...]`;
//!   [`NvmeTcpUrl::open_device`] gives a multipath device for several addresses.
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
//! # Failures and what the caller sees
//!
//! - A command that times out (`io_timeout_ms`) is aborted (Abort, admin opcode 0x08).
//!   If the Abort does not bring its completion (the target refuses, or the command is
//!   already on its media), the controller is reset: every connection closes and the
//!   controller reconnects. Admin commands are not aborted; their timeout resets at once.
//! - A lost connection, a fatal PDU error (garbage, bad header digest, a PDU cut short, a
//!   termination request: the host answers bad PDUs with an H2CTermReq) or a failed Keep
//!   Alive resets the controller the same way. [`ControllerStatus::last_error`] says why.
//! - Reconnects: the first at once, then after `reconnect_delay_ms`, doubling up to
//!   `reconnect_delay_max_ms`, until `ctrl_loss_tmo_ms` after the loss (nvme-cli's `-c`
//!   and `-l`). Then every waiting command fails with [`HostError::ControllerLost`], and
//!   so does every later one.
//! - Reads, writes, Flush, Write Zeroes and Deallocate of a [`RemoteNamespace`] are
//!   marked *retry*: submitted or in flight during a reconnect, they wait for it and are
//!   sent again on the new connection (also after an Abort that aborted them, or a data
//!   digest mismatch), at most [`queue::MAX_RETRIES`] times per command; so are the five
//!   commands of a [`KvNamespace`] (see [`kv`] for the two answers a re-send can change).
//!   Everything else
//!   (reservations, admin commands, pass-through unless asked) fails at once with the
//!   transport error: it is not idempotent, or the caller knows better.
//!
//! # The idempotence assumption
//!
//! Sending a read or a write again is safe because doing it twice has the effect of
//! doing it once: a write that reached the media before its connection died writes the
//! same bytes to the same blocks again. That holds as long as nobody else writes those
//! blocks in between: another host (which reservations fence: a preempted host's re-sent
//! writes get Reservation Conflict), or an overlapping write this host issued while the
//! first was outstanding (the `BlockDevice` contract already leaves overlapping writes in
//! flight together unordered). Multipath failover re-sends on another path under the
//! same assumption.

pub mod controller;
pub mod discovery;
pub mod error;
pub mod host_identity;
pub mod kv;
pub mod multipath;
pub mod namespace;
pub mod queue;
pub mod status_text;
pub mod url;

pub use controller::{
    ConcatOptions, ConnectOptions, Controller, ControllerState, ControllerStatus,
    DhchapCredentials, TlsCredentials,
};
pub use discovery::{DiscoveryEntry, discover, discover_all, format_discovery_log};
pub use host_identity::HostIdentity;
pub use kv::{AnyKvNamespace, BufResult, KvError, KvNamespace, KvNamespaceInfo, KvPage, StoreMode};
pub use multipath::{
    MultipathKvNamespace, MultipathNamespace, MultipathOptions, PathAddr, PathInfo, PathPolicy,
    PendingPath,
};
pub use namespace::RemoteNamespace;
pub use url::NvmeTcpUrl;

pub use error::{CommandKind, HostError, TransportError};
pub use queue::{Completed, Payload, QueueOptions, QueuePair, SubmitOptions};
