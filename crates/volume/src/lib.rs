//! Erasure-coded volumes over any [`BlockDevice`](blockdev::BlockDevice)s: RAID-0, RAID-1
//! (n-way), RAID-10 (md "near"), RAID-5, RAID-6 and Reed-Solomon k+m (m <= 4) with
//! rotating parity, degraded I/O, hot spares, throttled resumable rebuild, scrub, and a
//! write-intent bitmap so that a crash never opens a write hole.
//!
//! The crate does not know where members live: a member is an `Arc<dyn BlockDevice>` (a
//! local file, a RAM disk, a remote NVMe namespace). The on-disk format (superblocks,
//! bitmap, layouts, assembly and fencing rules) is specified in `docs/volume-format.md`.
//!
//! # API
//!
//! - [`Volume::create`]`(name, `[`VolumeConfig`]`, members, spares)` lays out a new volume
//!   (zeroing the members' data areas unless `assume_clean`).
//! - [`Volume::assemble`]`(devices)` / [`Volume::assemble_with`]`(devices, options)` brings
//!   a volume up from its devices alone (members and spares in any order), fencing stale
//!   members and resyncing dirty bitmap regions. [`probe_device`] tells which volume a
//!   device belongs to (to group devices by volume name).
//! - A [`Volume`] is a [`BlockDevice`](blockdev::BlockDevice): reads and writes of any
//!   size and alignment in logical blocks, FUA, flush, write-zeroes/discard (as zero
//!   writes). Wrap it in an `Arc` to export it or benchmark it like any device.
//! - [`Volume::status`]` -> `[`VolumeStatus`] (serde): state, members, spares, dirty
//!   regions, rebuild progress, last scrub, notes for the operator.
//! - [`Volume::examine`]`(devices)` reports a volume as its devices describe it, and
//!   what assembly would do, without writing anything.
//! - [`Volume::fail_member`]`(i)` (the operator's: it stays out, across assemblies),
//!   [`Volume::re_add_member`]`(i, its device)` and [`Volume::replace_member`]`(i,
//!   device)` (a returning member gets a partial rebuild),
//!   [`Volume::add_spare`]`(device, domain)`. A member failed by an error or a timeout
//!   comes back by itself (partial rebuild) when assembly finds its device again.
//! - [`Volume::start_rebuild`]` -> watch::Receiver<`[`RebuildProgress`]`>` (bytes done and
//!   total, rate, ETA), [`Volume::wait_rebuild`], [`Volume::stop_rebuild`] (resumable).
//! - [`Volume::scrub`]` -> `[`ScrubReport`].
//! - [`Volume::stop`] flushes, clears the bitmap and sets the clean flag.
//!
//! Runtime knobs are in [`EngineOptions`]: member timeout (a member slower than this is
//! failed), rebuild/scrub [`Throttle`] (default: members busy 20 % of the time), bitmap
//! sweep period, checkpoint interval, automatic rebuild, and the [`Clock`] used for
//! throttling (tests use [`ManualClock`] and never wait).
//!
//! ```
//! use std::sync::Arc;
//! use blockdev::{BlockDevice, IoBuf, RamDevice, WriteFlags};
//! use volume::{LevelSpec, Volume, VolumeConfig};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let members: Vec<Arc<dyn BlockDevice>> = (0..6)
//!     .map(|i| Arc::new(RamDevice::new(format!("d{i}"), 16 << 20)) as _)
//!     .collect();
//! let level: LevelSpec = "raid6".parse()?;
//! let vol = Volume::create("vol0", VolumeConfig::new(level), members.clone(), vec![]).await?;
//! vol.write(0, IoBuf::from_slice(&[7u8; 4096]), WriteFlags { fua: true }).await?;
//! vol.fail_member(2).await?;                  // degraded: reads reconstruct
//! let back = vol.read(0, IoBuf::new_zeroed(4096)).await?;
//! assert!(back.iter().all(|&b| b == 7));
//! vol.stop().await?;
//! drop(vol);
//! // From the members alone: member 2, failed by the operator, stays out.
//! let vol = Volume::assemble(members.clone()).await?;
//! assert_eq!(vol.status().members[2].state, volume::MemberState::Failed);
//! // Re-added, it gets a partial rebuild of what changed while it was out.
//! vol.re_add_member(2, members[2].clone()).await?;
//! vol.wait_rebuild().await;
//! assert_eq!(vol.status().state, volume::VolumeState::Healthy);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # Guarantees and limits
//!
//! - Writes to one stripe are ordered (a bounded table of stripe locks); all others run in
//!   parallel, and every member is accessed concurrently. Full-stripe writes compute
//!   parity without reading; partial writes read the fewer bytes of read-modify-write
//!   and reconstruct-write.
//! - A member I/O error or timeout marks the member failed in every surviving superblock
//!   (generation bump) before the I/O is acknowledged; the volume continues within its
//!   tolerance and fails I/O with [`VolumeError::Failed`] beyond it. Assembly starts a
//!   volume degraded while at most `m` members are missing or unreadable (marking them
//!   failed) and refuses with [`VolumeError::TooFewMembers`] beyond that.
//! - After a crash every acknowledged (flushed or FUA) write reads back and every other
//!   sector reads as old or new data, never garbage, and parity agrees with the data. Rows
//!   written while degraded go through a stripe journal first, so this also holds for a
//!   crash of a degraded volume. Not covered: a member lost at the very instant of the
//!   crash (a double fault; see `docs/volume-format.md`).

mod admin;
mod assemble;
mod chunks;
pub mod clock;
mod config;
mod copy;
mod create;
mod engine;
mod error;
mod examine;
pub mod format;
mod intent;
mod journal;
pub mod layout;
mod locks;
pub mod log;
mod probe;
mod rebuild;
pub mod registry;
mod resync;
mod sbio;
mod scrub;
mod shortfall;
mod status;
mod topology;
mod volume;

pub use clock::{Clock, ManualClock, TokioClock};
pub use config::{EngineOptions, Throttle, VolumeConfig};
pub use error::VolumeError;
pub use examine::Examination;
pub use format::MemberState;
pub use layout::{LayoutParams, Level, LevelSpec};
pub use log::{Compression, LogConfig, LogParams, LogStatus};
pub use probe::{ProbeInfo, probe_device};
pub use shortfall::{Shortfall, SlotReport};
pub use status::{
    CopyProgress, MemberStatus, RebuildProgress, ResyncProgress, ResyncReport, ScrubProgress,
    ScrubReport, TaskPhase, VolumeState, VolumeStatus,
};
pub use volume::Volume;
