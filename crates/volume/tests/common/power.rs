//! A power switch shared by crash-recording members: cut at one member operation, the
//! crash images of every member are taken and every later operation fails.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use blockdev::{
    BlockDevice, BlockError, CrashRecorder, DeviceInfo, DeviceStats, IoBuf, IoFuture, RamDevice,
    WriteFlags,
};

/// Shared power switch: the `cut_at`-th modifying member op (write or flush) takes the
/// crash images of every member and fails; everything after fails too.
pub struct Power {
    pub ops: AtomicU64,
    pub cut_at: u64,
    pub seed: u64,
    pub cut: AtomicBool,
    pub recorders: Vec<Arc<CrashRecorder>>,
    pub images: Mutex<Option<Vec<RamDevice>>>,
    /// Member writes and flushes yield to the scheduler before they run, so work the
    /// engine overlaps (segment writes during a checkpoint) really interleaves.
    pub yield_writes: AtomicBool,
}

impl Power {
    /// A switch over `recorders`, cut at their `cut_at`-th modifying operation.
    pub fn new(cut_at: u64, seed: u64, recorders: Vec<Arc<CrashRecorder>>) -> Arc<Power> {
        Arc::new(Power {
            ops: AtomicU64::new(0),
            cut_at,
            seed,
            cut: AtomicBool::new(false),
            recorders,
            images: Mutex::new(None),
            yield_writes: AtomicBool::new(false),
        })
    }

    /// The members behind this switch, but those in `absent`.
    pub fn members(self: &Arc<Self>, absent: &[usize]) -> Vec<Arc<dyn BlockDevice>> {
        self.recorders
            .iter()
            .enumerate()
            .filter(|(i, _)| !absent.contains(i))
            .map(|(_, r)| {
                Arc::new(PowerCut {
                    inner: r.clone(),
                    power: self.clone(),
                }) as _
            })
            .collect()
    }

    pub fn tick(&self) -> Result<(), BlockError> {
        if self.cut.load(Ordering::Acquire) {
            return Err(BlockError::Closed);
        }
        let n = self.ops.fetch_add(1, Ordering::AcqRel);
        if n == self.cut_at {
            let imgs = self
                .recorders
                .iter()
                .enumerate()
                .map(|(i, r)| r.crash_image(self.seed * 1000 + i as u64))
                .collect();
            *self.images.lock().unwrap() = Some(imgs);
            self.cut.store(true, Ordering::Release);
            return Err(BlockError::Closed);
        }
        Ok(())
    }
}

pub struct PowerCut {
    pub inner: Arc<CrashRecorder>,
    pub power: Arc<Power>,
}

impl BlockDevice for PowerCut {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            if self.power.cut.load(Ordering::Acquire) {
                return Err(BlockError::Closed);
            }
            self.inner.read(offset_bytes, buf).await
        })
    }
    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            if self.power.yield_writes.load(Ordering::Relaxed) {
                tokio::task::yield_now().await;
            }
            self.power.tick()?;
            self.inner.write(offset_bytes, buf, flags).await
        })
    }
    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            if self.power.yield_writes.load(Ordering::Relaxed) {
                tokio::task::yield_now().await;
            }
            self.power.tick()?;
            self.inner.flush().await
        })
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.power.tick()?;
            self.inner.write_zeroes(offset_bytes, len_bytes).await
        })
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.write_zeroes(offset_bytes, len_bytes)
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}
