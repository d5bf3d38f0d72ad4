//! [`ExportDevice`]: namespace 1 of a volume's subsystem on every processor node. It
//! exists for as long as the volume record does, with the record's size, and forwards
//! I/O to the assembled [`volume::Volume`] while this node owns the volume; otherwise
//! I/O fails with "not served here" (with ANA inaccessible in front, hosts rarely get
//! that far). In-flight I/O is counted so that a handoff can drain it before the volume
//! is stopped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use blockdev::{
    BlockDevice, BlockError, DeviceInfo, DeviceKind, DeviceStats, IoBuf, IoFuture, IoObserver,
    IoOp, StatsCounters, WriteFlags, check_range,
};
use tokio::sync::Notify;
use volume::Volume;

/// The exported face of one volume.
pub struct ExportDevice {
    info: DeviceInfo,
    volume: RwLock<Option<Arc<Volume>>>,
    acct: Accounting,
}

/// I/O in the volume (for a handoff's drain) and what completed.
struct Accounting {
    inflight: AtomicUsize,
    idle: Notify,
    stats: StatsCounters,
}

impl Accounting {
    /// An I/O that entered the volume ended or was dropped.
    fn leave(&self) {
        if self.inflight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }
}

/// Rides in the future of a read or write that entered the volume (no wrapper future, no
/// allocation of its own): counts it done, and out of the volume even when dropped.
impl IoObserver for Accounting {
    fn begin(&self) -> u64 {
        0
    }

    fn end(&self, op: IoOp, bytes: u64, _token: u64, error: Option<&BlockError>) {
        if error.is_none() {
            match op {
                IoOp::Read => self.stats.record_read(bytes),
                IoOp::Write => self.stats.record_write(bytes),
                _ => {}
            }
        }
        self.leave();
    }

    fn cancelled(&self, _token: u64) {
        self.leave();
    }
}

/// What host I/O to a volume that is not served here fails with (the target turns it
/// into the ANA Inaccessible path status, so multipath hosts retry on another path).
fn unavailable(why: &str) -> BlockError {
    BlockError::Unavailable(format!("not served here: {why}"))
}

/// A volume error as hosts should see it: a fenced or stopped volume is "not served
/// here" (a path error: multipath hosts retry on another processor node), never a
/// Reservation Conflict (that would fail the host's I/O for good).
fn to_host(e: BlockError) -> BlockError {
    match e {
        BlockError::ReservationConflict => unavailable("fenced by another processor node"),
        BlockError::Closed => unavailable("volume stopped (handed over)"),
        other => other,
    }
}

/// Leaves the in-flight count when a flush, write-zeroes or discard ends (or is dropped).
struct Inflight<'a>(&'a Accounting);

impl Drop for Inflight<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl ExportDevice {
    pub fn new(name: &str, size_bytes: u64, block_size_bytes: u32) -> ExportDevice {
        ExportDevice {
            info: DeviceInfo {
                name: format!("volume:{name}"),
                kind: DeviceKind::Other("ferrobay-volume".into()),
                size_bytes,
                logical_block_bytes: block_size_bytes,
                optimal_io_bytes: 0,
                max_io_bytes: blockdev::DEFAULT_MAX_IO_BYTES,
                // The volume's members may cache writes: hosts must flush.
                volatile_write_cache: true,
                supports_discard: true,
                supports_write_zeroes: true,
                rotational: false,
            },
            volume: RwLock::new(None),
            acct: Accounting {
                inflight: AtomicUsize::new(0),
                idle: Notify::new(),
                stats: StatsCounters::new(),
            },
        }
    }

    /// Serves `volume` from now on.
    pub fn attach(&self, volume: Arc<Volume>) {
        *self.volume.write().unwrap_or_else(|p| p.into_inner()) = Some(volume);
    }

    /// Stops serving: later I/O fails at once; I/O already in the volume goes on (wait
    /// for it with [`ExportDevice::drain`]). Returns the volume that was attached.
    pub fn detach(&self) -> Option<Arc<Volume>> {
        self.volume
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    pub fn is_attached(&self) -> bool {
        self.volume
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// I/O in the volume right now.
    pub fn inflight(&self) -> usize {
        self.acct.inflight.load(Ordering::Acquire)
    }

    /// Waits until no I/O is in the volume, at most `timeout`; whether it drained.
    pub async fn drain(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let idle = self.acct.idle.notified();
                if self.inflight() == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    /// The attached volume with the in-flight count raised (the caller leaves it through
    /// [`Accounting`]), or "not served here".
    fn enter(&self, offset_bytes: u64, len_bytes: u64) -> Result<Arc<Volume>, BlockError> {
        check_range(&self.info, offset_bytes, len_bytes)?;
        let guard = self.volume.read().unwrap_or_else(|p| p.into_inner());
        let Some(v) = guard.as_ref() else {
            return Err(unavailable("this processor node does not own the volume"));
        };
        // Raised under the lock: `detach` + `drain` then sees every I/O that got a volume.
        self.acct.inflight.fetch_add(1, Ordering::AcqRel);
        Ok(v.clone())
    }

    /// `enter` for an operation run in a future of its own, left when that ends.
    fn enter_guarded(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<(Arc<Volume>, Inflight<'_>), BlockError> {
        let v = self.enter(offset_bytes, len_bytes)?;
        Ok((v, Inflight(&self.acct)))
    }
}

impl BlockDevice for ExportDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    // Reads and writes: the volume's own future, renamed errors and the accounting riding
    // in it (one allocation per I/O, the volume engine's).
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        let len = buf.len() as u64;
        match self.enter(offset_bytes, len) {
            Ok(v) => v.read_shared(offset_bytes, buf).map_err(to_host).observed(
                &self.acct,
                IoOp::Read,
                len,
            ),
            Err(e) => IoFuture::ready(Err(e)),
        }
    }

    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        let len = buf.len() as u64;
        match self.enter(offset_bytes, len) {
            Ok(v) => v
                .write_shared(offset_bytes, buf, flags)
                .map_err(to_host)
                .observed(&self.acct, IoOp::Write, len),
            Err(e) => IoFuture::ready(Err(e)),
        }
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            let (v, _g) = self.enter_guarded(0, 0)?;
            v.flush().await.map_err(to_host)
        })
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            let (v, _g) = self.enter_guarded(offset_bytes, len_bytes)?;
            v.write_zeroes(offset_bytes, len_bytes)
                .await
                .map_err(to_host)
        })
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            let (v, _g) = self.enter_guarded(offset_bytes, len_bytes)?;
            v.discard(offset_bytes, len_bytes).await.map_err(to_host)
        })
    }

    fn stats(&self) -> DeviceStats {
        self.acct.stats.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockdev::RamDevice;
    use volume::{LevelSpec, VolumeConfig};

    async fn ram_volume() -> Arc<Volume> {
        let members: Vec<Arc<dyn BlockDevice>> = (0..3)
            .map(|i| Arc::new(RamDevice::with_block_size(format!("m{i}"), 16 << 20, 4096)) as _)
            .collect();
        let mut cfg = VolumeConfig::new("raid5".parse::<LevelSpec>().expect("level"));
        cfg.assume_clean = true;
        cfg.journal_bytes = 1 << 20;
        cfg.region_bytes = 1 << 20;
        Arc::new(
            Volume::create("v", cfg, members, vec![])
                .await
                .expect("create"),
        )
    }

    #[tokio::test]
    async fn serves_only_while_attached() {
        let vol = ram_volume().await;
        let dev = ExportDevice::new("v", vol.size_bytes(), 4096);
        let e = dev
            .read(0, IoBuf::new_zeroed(4096))
            .await
            .expect_err("not attached");
        assert!(matches!(e, BlockError::Unavailable(_)), "{e:?}");
        dev.attach(vol.clone());
        dev.write(4096, IoBuf::from_slice(&[5u8; 4096]), WriteFlags::default())
            .await
            .expect("write");
        let back = dev.read(4096, IoBuf::new_zeroed(4096)).await.expect("read");
        assert!(back.iter().all(|&b| b == 5));
        assert!(matches!(
            dev.read(vol.size_bytes(), IoBuf::new_zeroed(4096)).await,
            Err(BlockError::OutOfRange { .. })
        ));
        assert!(dev.drain(Duration::from_millis(10)).await);
        assert!(dev.detach().is_some());
        assert!(!dev.is_attached());
        assert!(matches!(
            dev.write(0, IoBuf::from_slice(&[1u8; 4096]), WriteFlags::default())
                .await,
            Err(BlockError::Unavailable(_))
        ));
        // A stopped (handed over) volume is "not served here" to hosts, not "closed".
        dev.attach(vol.clone());
        vol.stop().await.expect("stop");
        assert!(matches!(
            dev.read(0, IoBuf::new_zeroed(4096)).await,
            Err(BlockError::Unavailable(_))
        ));
    }

    #[tokio::test]
    async fn drain_waits_for_io_in_the_volume() {
        let dev = Arc::new(ExportDevice::new("v", 1 << 20, 4096));
        let (v, guard) = {
            dev.attach(ram_volume().await);
            dev.enter_guarded(0, 4096).expect("attached")
        };
        assert_eq!(dev.inflight(), 1);
        dev.detach();
        assert!(
            !dev.drain(Duration::from_millis(50)).await,
            "I/O still in flight"
        );
        let d = dev.clone();
        let waiter = tokio::spawn(async move { d.drain(Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(guard);
        assert!(waiter.await.expect("join"));
        drop(v);
    }

    #[tokio::test]
    async fn a_read_or_write_dropped_unfinished_leaves_the_volume() {
        let dev = ExportDevice::new("v", 1 << 20, 4096);
        dev.attach(ram_volume().await);
        let read = dev.read(0, IoBuf::new_zeroed(4096));
        let write = dev.write(0, IoBuf::new_zeroed(4096), WriteFlags::default());
        assert_eq!(dev.inflight(), 2);
        drop(read);
        drop(write);
        assert_eq!(dev.inflight(), 0);
        assert!(dev.drain(Duration::from_millis(10)).await);
        // Finished ones leave it too, and only successes are counted.
        dev.read(0, IoBuf::new_zeroed(4096)).await.expect("read");
        dev.read(1 << 20, IoBuf::new_zeroed(4096))
            .await
            .expect_err("beyond the end");
        assert_eq!(dev.inflight(), 0);
        assert_eq!(dev.stats().read_ops, 1);
    }
}
