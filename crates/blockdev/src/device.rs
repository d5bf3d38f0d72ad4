//! The `BlockDevice` trait and its description types.

use crate::{BlockError, DeviceStats, IoBuf};

pub use crate::io_future::{IoFuture, IoObserver, IoOp, MAX_OBSERVERS};

/// `max_io_bytes` of the local backends. They accept larger I/Os (the kernel or the
/// backend splits them), so this is the size callers such as the NVMe target's MDTS
/// should split at.
pub const DEFAULT_MAX_IO_BYTES: u32 = 1 << 20;

/// What kind of storage is behind a device.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    Ram,
    Null,
    File,
    BlockDevice,
    Other(String),
}

/// Static description of a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// e.g. "ram0", "/var/lib/n1/d0.img".
    pub name: String,
    pub kind: DeviceKind,
    pub size_bytes: u64,
    /// 512 or 4096: the smallest I/O unit accepted; offsets and lengths are multiples of it.
    pub logical_block_bytes: u32,
    /// 0 if unknown.
    pub optimal_io_bytes: u32,
    /// Largest single I/O the backend wants; callers split above it.
    pub max_io_bytes: u32,
    /// True when `flush` is needed for durability.
    pub volatile_write_cache: bool,
    pub supports_discard: bool,
    pub supports_write_zeroes: bool,
    pub rotational: bool,
}

/// Per-write options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteFlags {
    /// Force unit access: the write is durable when it completes.
    pub fua: bool,
}

/// A block device: RAM, a file, a kernel block device, a remote NVMe namespace, ...
///
/// All offsets and lengths are in bytes and must be multiples of
/// `info().logical_block_bytes` and lie inside `info().size_bytes`; otherwise the operation
/// fails with [`BlockError::Misaligned`] or [`BlockError::OutOfRange`] without touching the
/// device. Zero-length operations succeed and do nothing. Concurrent operations on
/// overlapping ranges are not ordered (as in NVMe). A completed write is visible to later
/// reads; it is durable after a later `flush` completes, or at completion if `fua` was set
/// (or `volatile_write_cache` is false). Dropping a future cancels waiting for the result,
/// not necessarily the I/O itself.
pub trait BlockDevice: Send + Sync + 'static {
    fn info(&self) -> &DeviceInfo;
    /// Reads `buf.len()` bytes at `offset_bytes` into `buf` and returns it.
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf>;
    /// Writes `buf` at `offset_bytes` and returns the buffer for reuse.
    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf>;
    /// Makes every write completed before this call durable.
    fn flush(&self) -> IoFuture<'_, ()>;
    /// Sets the range to zeroes (reads return zeroes afterwards on every backend).
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()>;
    /// Deallocates the range. Ram, Null and File backends read zeroes afterwards; on a
    /// kernel block device the content is whatever the device returns (often zeroes).
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()>;
    fn stats(&self) -> DeviceStats;
}

/// Validates an I/O range against a device: alignment to `logical_block_bytes` first, then
/// bounds (overflow-safe).
pub fn check_range(info: &DeviceInfo, offset_bytes: u64, len_bytes: u64) -> Result<(), BlockError> {
    let align_bytes = u64::from(info.logical_block_bytes.max(1));
    if !offset_bytes.is_multiple_of(align_bytes) || !len_bytes.is_multiple_of(align_bytes) {
        return Err(BlockError::Misaligned {
            offset_bytes,
            len_bytes,
            align_bytes,
        });
    }
    match offset_bytes.checked_add(len_bytes) {
        Some(end) if end <= info.size_bytes => Ok(()),
        _ => Err(BlockError::OutOfRange {
            offset_bytes,
            len_bytes,
            size_bytes: info.size_bytes,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn info(size_bytes: u64, lb: u32) -> DeviceInfo {
        DeviceInfo {
            name: "t".into(),
            kind: DeviceKind::Other("test".into()),
            size_bytes,
            logical_block_bytes: lb,
            optimal_io_bytes: 0,
            max_io_bytes: DEFAULT_MAX_IO_BYTES,
            volatile_write_cache: false,
            supports_discard: false,
            supports_write_zeroes: false,
            rotational: false,
        }
    }

    #[test]
    fn range_checks() {
        let i = info(8192, 512);
        assert!(check_range(&i, 0, 8192).is_ok());
        assert!(check_range(&i, 8192, 0).is_ok());
        assert!(check_range(&i, 7680, 512).is_ok());
        assert!(matches!(
            check_range(&i, 7680, 1024),
            Err(BlockError::OutOfRange { .. })
        ));
        assert!(matches!(
            check_range(&i, 8704, 0),
            Err(BlockError::OutOfRange { .. })
        ));
        assert!(matches!(
            check_range(&i, 1, 512),
            Err(BlockError::Misaligned { .. })
        ));
        assert!(matches!(
            check_range(&i, 0, 100),
            Err(BlockError::Misaligned { .. })
        ));
        let top = u64::MAX - 511;
        assert!(matches!(
            check_range(&i, top, 1024),
            Err(BlockError::OutOfRange { .. })
        ));
        let i4k = info(1 << 20, 4096);
        assert!(matches!(
            check_range(&i4k, 512, 4096),
            Err(BlockError::Misaligned {
                align_bytes: 4096,
                ..
            })
        ));
    }
}
