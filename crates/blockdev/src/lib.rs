//! The `BlockDevice` trait and local backends.
//!
//! Contract (see `docs/blockdev.md`): offsets and lengths are bytes, multiples of
//! [`DeviceInfo::logical_block_bytes`] and inside the device; buffers are owned [`IoBuf`]s
//! that move into the backend and come back on completion, so a cancelled future can never
//! leave the kernel writing into freed memory.

mod atomic_file;
mod busy_poll;
mod crash;
mod device;
mod error;
mod faulty;
mod file;
mod io_future;
mod iobuf;
mod iobuf_pool;
mod null;
mod ram;
mod spec;
mod stats;

pub use atomic_file::write_atomic;
pub use busy_poll::{BusyPoll, MAX_BUSY_POLL_US};
pub use crash::{CrashRecorder, PendingWriteInfo, WriteChoice};
pub use device::{
    BlockDevice, DEFAULT_MAX_IO_BYTES, DeviceInfo, DeviceKind, IoFuture, IoObserver, IoOp,
    MAX_OBSERVERS, WriteFlags, check_range,
};
pub use error::BlockError;
pub use faulty::{FaultAction, FaultHandle, FaultOps, FaultRule, FaultyDevice, RuleId};
pub use file::{FileDevice, IoEngine, OpenOptions};
pub use io_future::{IO_FUTURE_INLINE_ALIGN_BYTES, IO_FUTURE_INLINE_BYTES};
pub use iobuf::IoBuf;
pub use iobuf_pool::IoBufPool;
pub use null::NullDevice;
pub use ram::RamDevice;
pub use spec::{DriveSpec, SpecError, open_drive, parse_drive_spec, parse_size_bytes};
pub use stats::{DeviceStats, StatsCounters};

/// The NVMe/Linux sector: the unit of sizes on the wire and in `/sys`.
pub const SECTOR_SIZE_BYTES: u64 = 512;
/// Alignment and capacity granularity of every [`IoBuf`]; enough for O_DIRECT on any
/// device with logical blocks up to 4 KiB.
pub const IO_ALIGN_BYTES: usize = 4096;

const _: () = assert!(IO_ALIGN_BYTES.is_power_of_two());
const _: () = assert!((IO_ALIGN_BYTES as u64).is_multiple_of(SECTOR_SIZE_BYTES));
