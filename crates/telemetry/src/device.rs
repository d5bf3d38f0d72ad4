//! [`MeteredDevice`]: a `BlockDevice` that keeps [`DeviceTelemetry`] on every I/O.
//!
//! The counters ride in the inner device's own future as an `IoObserver`
//! (`blockdev::IoFuture::observed`): no wrapper future, no allocation, no lock per I/O.

use std::sync::Arc;

use blockdev::{
    BlockDevice, BlockError, DeviceInfo, DeviceStats, IoBuf, IoFuture, IoObserver, IoOp, WriteFlags,
};

use crate::clock::{Clock, MonotonicClock};
use crate::counters::{DeviceTelemetry, OpClass};

/// The counters of one device and the clock that times its I/Os.
pub struct Meter {
    telemetry: Arc<DeviceTelemetry>,
    clock: Arc<dyn Clock>,
}

impl IoObserver for Meter {
    #[inline]
    fn begin(&self) -> u64 {
        self.telemetry.begin();
        self.clock.now_ns()
    }

    #[inline]
    fn end(&self, op: IoOp, bytes: u64, token: u64, error: Option<&BlockError>) {
        let class = match op {
            IoOp::Read => OpClass::Read,
            IoOp::Write => OpClass::Write,
            IoOp::Flush => OpClass::Flush,
            IoOp::WriteZeroes | IoOp::Discard => OpClass::Other,
        };
        let latency_ns = self.clock.now_ns().saturating_sub(token);
        self.telemetry.end(class, bytes, latency_ns, error);
    }

    fn cancelled(&self, _token: u64) {
        self.telemetry.cancelled();
    }
}

/// Wraps a device; everything passes through unchanged, timed and counted.
pub struct MeteredDevice {
    inner: Arc<dyn BlockDevice>,
    meter: Meter,
}

impl MeteredDevice {
    /// Meters `inner` into fresh counters on the process's monotonic clock.
    pub fn new(inner: Arc<dyn BlockDevice>) -> MeteredDevice {
        MeteredDevice::with(
            inner,
            Arc::new(DeviceTelemetry::new()),
            Arc::new(MonotonicClock::new()),
        )
    }

    /// Meters `inner` into `telemetry` (shared with whoever samples it) on `clock`.
    pub fn with(
        inner: Arc<dyn BlockDevice>,
        telemetry: Arc<DeviceTelemetry>,
        clock: Arc<dyn Clock>,
    ) -> MeteredDevice {
        MeteredDevice {
            inner,
            meter: Meter { telemetry, clock },
        }
    }

    pub fn telemetry(&self) -> &Arc<DeviceTelemetry> {
        &self.meter.telemetry
    }

    pub fn inner(&self) -> &Arc<dyn BlockDevice> {
        &self.inner
    }
}

impl BlockDevice for MeteredDevice {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }

    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        let len = buf.len() as u64;
        self.inner
            .read(offset_bytes, buf)
            .observed(&self.meter, IoOp::Read, len)
    }

    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        let len = buf.len() as u64;
        self.inner
            .write(offset_bytes, buf, flags)
            .observed(&self.meter, IoOp::Write, len)
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        self.inner.flush().observed(&self.meter, IoOp::Flush, 0)
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.inner.write_zeroes(offset_bytes, len_bytes).observed(
            &self.meter,
            IoOp::WriteZeroes,
            len_bytes,
        )
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.inner
            .discard(offset_bytes, len_bytes)
            .observed(&self.meter, IoOp::Discard, len_bytes)
    }

    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use blockdev::{FaultAction, FaultOps, FaultRule, FaultyDevice, RamDevice};

    use super::*;
    use crate::counters::ErrorKind;

    #[tokio::test]
    async fn counts_what_passes_through() {
        let ram: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("ram", 1 << 20));
        let faulty = Arc::new(FaultyDevice::new(ram));
        let h = faulty.handle();
        let dev = MeteredDevice::new(faulty);
        let buf = dev
            .write(0, IoBuf::from_slice(&[7u8; 4096]), WriteFlags::default())
            .await
            .unwrap();
        let buf = dev.read(0, buf).await.unwrap();
        assert_eq!(buf[100], 7);
        h.add(FaultRule::new(FaultOps::READ, FaultAction::Media));
        h.add(FaultRule::new(
            FaultOps::FLUSH,
            FaultAction::Delay(Duration::from_millis(20)),
        ));
        assert!(dev.read(0, buf).await.is_err());
        dev.flush().await.unwrap();
        dev.discard(0, 4096).await.unwrap();
        let s = dev.telemetry().snapshot();
        assert_eq!(s.ops(OpClass::Read), 1);
        assert_eq!(s.ops(OpClass::Write), 1);
        assert_eq!(s.ops(OpClass::Flush), 1);
        assert_eq!(s.ops(OpClass::Other), 1);
        assert_eq!((s.read_bytes, s.write_bytes), (4096, 4096));
        assert_eq!(s.errors(ErrorKind::Media), 1);
        assert_eq!(s.in_flight, 0);
        let flush_us = s.latency(OpClass::Flush).quantile_us(1.0);
        assert!(flush_us >= 20_000, "flush took {flush_us} µs");
    }

    #[test]
    fn a_dropped_io_leaves_no_depth_behind() {
        let ram: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("ram", 1 << 20));
        let dev = MeteredDevice::new(ram);
        drop(dev.flush());
        assert_eq!(dev.telemetry().snapshot().in_flight, 0);
    }
}
