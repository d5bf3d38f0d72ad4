//! A device that stores nothing: for benchmarking the layers above.

use crate::{
    BlockDevice, DEFAULT_MAX_IO_BYTES, DeviceInfo, DeviceKind, DeviceStats, IoBuf, IoFuture,
    SECTOR_SIZE_BYTES, StatsCounters, WriteFlags, check_range,
};

/// Reads return zeroes, writes are discarded. Range checks still apply.
pub struct NullDevice {
    info: DeviceInfo,
    stats: StatsCounters,
}

impl NullDevice {
    /// `size_bytes` is rounded down to a multiple of 512.
    pub fn new(name: impl Into<String>, size_bytes: u64) -> NullDevice {
        NullDevice {
            info: DeviceInfo {
                name: name.into(),
                kind: DeviceKind::Null,
                size_bytes: size_bytes - size_bytes % SECTOR_SIZE_BYTES,
                logical_block_bytes: SECTOR_SIZE_BYTES as u32,
                optimal_io_bytes: 0,
                max_io_bytes: DEFAULT_MAX_IO_BYTES,
                volatile_write_cache: false,
                supports_discard: true,
                supports_write_zeroes: true,
                rotational: false,
            },
            stats: StatsCounters::new(),
        }
    }
}

impl BlockDevice for NullDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn read(&self, offset_bytes: u64, mut buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            check_range(&self.info, offset_bytes, buf.len() as u64)?;
            buf.fill(0);
            self.stats.record_read(buf.len() as u64);
            Ok(buf)
        })
    }

    fn write(&self, offset_bytes: u64, buf: IoBuf, _flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            check_range(&self.info, offset_bytes, buf.len() as u64)?;
            self.stats.record_write(buf.len() as u64);
            Ok(buf)
        })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.stats.record_flush();
            Ok(())
        })
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move { check_range(&self.info, offset_bytes, len_bytes) })
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move { check_range(&self.info, offset_bytes, len_bytes) })
    }

    fn stats(&self) -> DeviceStats {
        self.stats.snapshot()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::BlockError;

    #[tokio::test]
    async fn reads_zero_writes_vanish() {
        let dev = NullDevice::new("null0", 1 << 40);
        assert_eq!(dev.info().size_bytes, 1 << 40);
        dev.write(
            4096,
            IoBuf::from_slice(&[7u8; 4096]),
            WriteFlags { fua: true },
        )
        .await
        .unwrap();
        let back = dev
            .read(4096, IoBuf::from_slice(&[7u8; 4096]))
            .await
            .unwrap();
        assert!(back.iter().all(|&b| b == 0));
        let err = dev.read(1 << 40, IoBuf::new_zeroed(512)).await.unwrap_err();
        assert!(matches!(err, BlockError::OutOfRange { .. }));
        dev.flush().await.unwrap();
        let s = dev.stats();
        assert_eq!((s.read_ops, s.write_ops, s.flushes), (1, 1, 1));
    }
}
