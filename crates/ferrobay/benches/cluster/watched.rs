//! A device wrapper that notes when each I/O completes and the last acknowledged write
//! of every block (from bench's stamps), for the I/O gap and the exact check.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bench::StampCheck;
use blockdev::{BlockDevice, DeviceInfo, DeviceStats, IoBuf, IoFuture, WriteFlags};

/// Completion timestamps kept per failover run (bounded; ~10 minutes at 10k IOPS).
const MAX_COMPLETIONS: usize = 8 << 20;

/// A device that notes when each I/O completes and the write id of the last acknowledged
/// write of every block (from bench's stamps), for the I/O gap and an exact lost-write
/// check after a failover.
pub(crate) struct Watched {
    pub(crate) inner: Arc<dyn BlockDevice>,
    pub(crate) state: Mutex<WatchState>,
}

#[derive(Default)]
pub(crate) struct WatchState {
    pub(crate) completions: Vec<Instant>,
    pub(crate) acked: HashMap<u64, u32>,
}

impl Watched {
    pub(crate) fn new(inner: Arc<dyn BlockDevice>) -> Watched {
        Watched {
            inner,
            state: Mutex::new(WatchState::default()),
        }
    }

    pub(crate) fn note(&self, ack: Option<(u64, u32)>) {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.completions.len() < MAX_COMPLETIONS {
            st.completions.push(now);
        }
        if let Some((off, id)) = ack {
            st.acked.insert(off, id);
        }
    }

    pub(crate) fn take(&self) -> WatchState {
        std::mem::take(&mut *self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl BlockDevice for Watched {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            let r = self.inner.read(offset_bytes, buf).await;
            self.note(None);
            r
        })
    }
    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            let r = self.inner.write(offset_bytes, buf, flags).await;
            let ack = r.as_ref().ok().and_then(|b| match b.get(..512) {
                Some(sector) => match bench::check_sector(sector, offset_bytes) {
                    StampCheck::Ok { write_id, .. } => Some((offset_bytes, write_id)),
                    _ => None,
                },
                None => None,
            });
            self.note(ack);
            r
        })
    }
    fn flush(&self) -> IoFuture<'_, ()> {
        self.inner.flush()
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.inner.write_zeroes(offset_bytes, len_bytes)
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.inner.discard(offset_bytes, len_bytes)
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}
