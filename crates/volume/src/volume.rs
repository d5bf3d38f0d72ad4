//! The public handle: [`Volume`], a `BlockDevice` plus administration.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use blockdev::{BlockDevice, DeviceInfo, DeviceStats, IoBuf, IoFuture, WriteFlags};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use uuid::Uuid;

use crate::engine::Inner;
use crate::error::{Result, VolumeError};
use crate::format::{MemberState, Superblock};
use crate::status::{
    MemberStatus, RebuildProgress, ScrubReport, TaskPhase, VolumeState, VolumeStatus,
};

/// A running rebuild.
pub(crate) struct RebuildTask {
    pub handle: JoinHandle<()>,
    pub progress: watch::Receiver<RebuildProgress>,
    pub cancel: Arc<AtomicBool>,
    /// The task found nothing more to do and is ending: a new one may be spawned.
    pub exiting: Arc<AtomicBool>,
}

/// Background-task bookkeeping of a volume.
#[derive(Default)]
pub(crate) struct TaskState {
    /// A slot is waiting for a rebuild (spare taken, stale member re-added).
    pub rebuild_wanted: bool,
    pub rebuild: Option<RebuildTask>,
    pub last_scrub: Option<ScrubReport>,
    pub scrub_cancel: Option<Arc<AtomicBool>>,
    pub notes: Vec<String>,
    pub cleaner: Option<JoinHandle<()>>,
    /// The last committed superblock, for `status()` without async locking.
    pub sb: Option<Superblock>,
}

/// An assembled volume. Implements [`BlockDevice`]; see the crate docs for the API.
pub struct Volume {
    pub(crate) inner: Arc<Inner>,
}

impl Volume {
    pub(crate) fn start(inner: Arc<Inner>) -> Volume {
        let weak = Arc::downgrade(&inner);
        let _ = inner.me.set(weak.clone());
        let period = inner.opts.bitmap_quiet;
        let cleaner = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.stopped.load(Ordering::Acquire) {
                    return;
                }
                if let Err(e) = inner.sweep_bitmap(false).await {
                    warn!(volume = %inner.name, error = %e, "bitmap sweep failed");
                }
            }
        });
        inner.tasks().cleaner = Some(cleaner);
        inner.kick_rebuild();
        Volume { inner }
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn uuid(&self) -> Uuid {
        self.inner.uuid
    }

    /// Usable bytes.
    pub fn size_bytes(&self) -> u64 {
        self.inner.info.size_bytes
    }

    /// A snapshot of state, members, rebuild progress and the last scrub.
    pub fn status(&self) -> VolumeStatus {
        let inner = &self.inner;
        let topo = inner.topo();
        let tasks = inner.tasks();
        let sb = tasks.sb.clone();
        let entry = |i: usize| sb.as_ref().and_then(|sb| sb.members.get(i).cloned());
        let members = topo
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let e = entry(i);
                MemberStatus {
                    index: i,
                    uuid: s.uuid,
                    device: s.dev.as_ref().map(|d| d.info().name.clone()),
                    state: s.state,
                    failure_domain: e
                        .as_ref()
                        .map(|e| e.failure_domain.clone())
                        .unwrap_or_default(),
                    rebuild_offset_bytes: if s.state == MemberState::Rebuilding {
                        s.frontier.load(Ordering::Acquire)
                    } else {
                        0
                    },
                    valid_bytes: e.as_ref().map_or(0, |e| e.valid_bytes),
                }
            })
            .collect();
        let n = topo.slots.len();
        let spares = topo
            .spares
            .iter()
            .enumerate()
            .map(|(j, s)| MemberStatus {
                index: j,
                uuid: s.uuid,
                device: Some(s.dev.info().name.clone()),
                state: MemberState::Spare,
                failure_domain: entry(n + j).map(|e| e.failure_domain).unwrap_or_default(),
                rebuild_offset_bytes: 0,
                valid_bytes: 0,
            })
            .collect();
        let rebuild = tasks.rebuild.as_ref().map(|r| r.progress.borrow().clone());
        let rebuilding = rebuild
            .as_ref()
            .is_some_and(|r| r.phase == TaskPhase::Running);
        let state = if inner.stopped.load(Ordering::Acquire) {
            VolumeState::Stopped
        } else if inner.failed.load(Ordering::Acquire) {
            VolumeState::Failed
        } else if rebuilding {
            VolumeState::Rebuilding
        } else if topo.all_active() {
            VolumeState::Healthy
        } else {
            VolumeState::Degraded
        };
        let stats = inner.stats.snapshot();
        let geom = *inner.intent.geometry();
        VolumeStatus {
            name: inner.name.clone(),
            uuid: inner.uuid,
            layout: *inner.geo.params(),
            size_bytes: inner.info.size_bytes,
            logical_block_bytes: inner.info.logical_block_bytes,
            member_data_bytes: inner.geo.member_bytes(),
            data_offset_bytes: inner.data_offset_bytes,
            state,
            generation: sb.as_ref().map_or(0, |s| s.generation),
            clean: sb.as_ref().is_some_and(|s| s.clean),
            members,
            spares,
            region_bytes: geom.region_bytes,
            region_count: geom.region_count,
            dirty_regions: inner.intent.dirty_regions().len() as u64,
            rebuild,
            last_scrub: tasks.last_scrub.clone(),
            notes: tasks.notes.clone(),
            read_bytes: stats.read_bytes,
            write_bytes: stats.write_bytes,
        }
    }

    /// Clears quiet bitmap regions now (all of them if `force`), as the background
    /// sweeper does every `bitmap_quiet`. Returns whether anything was cleared.
    pub async fn sweep_bitmap(&self, force: bool) -> Result<bool> {
        self.inner.sweep_bitmap(force).await
    }

    /// Regions currently dirty in the write-intent bitmap.
    pub fn dirty_regions(&self) -> Vec<usize> {
        self.inner.intent.dirty_regions()
    }

    /// Clean shutdown: stops background work, flushes every member, clears the bitmap
    /// (unless degraded) and writes the superblocks with the clean flag. Later I/O fails
    /// with `Closed`.
    pub async fn stop(&self) -> Result<()> {
        if self.inner.stopped.load(Ordering::Acquire) {
            return Ok(());
        }
        self.cancel_tasks().await;
        let inner = &self.inner;
        if !inner.failed.load(Ordering::Acquire) {
            inner.flush_volume().await?;
            inner.sweep_bitmap(true).await?;
            inner.flush_volume().await?;
        }
        inner.stopped.store(true, Ordering::Release);
        let degraded = !inner.topo().all_active();
        inner.commit(|sb| sb.clean = !degraded).await?;
        info!(volume = %inner.name, "stopped");
        Ok(())
    }

    async fn cancel_tasks(&self) {
        let (rebuild, cleaner, scrub) = {
            let mut t = self.inner.tasks();
            (t.rebuild.take(), t.cleaner.take(), t.scrub_cancel.take())
        };
        if let Some(c) = scrub {
            c.store(true, Ordering::Release);
        }
        if let Some(r) = rebuild {
            r.cancel.store(true, Ordering::Release);
            // `stop_rebuild` may already have awaited it: a finished handle must not be
            // polled again.
            if !r.handle.is_finished() {
                let _ = r.handle.await;
            }
        }
        if let Some(c) = cleaner {
            c.abort();
        }
    }
}

impl Inner {
    pub(crate) fn note(&self, msg: String) {
        info!(volume = %self.name, "{msg}");
        let mut t = self.tasks();
        if t.notes.len() >= 64 {
            t.notes.remove(0);
        }
        t.notes.push(msg);
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let mut t = self.inner.tasks();
        if let Some(c) = t.cleaner.take() {
            c.abort();
        }
        if let Some(r) = t.rebuild.take() {
            r.cancel.store(true, Ordering::Release);
            r.handle.abort();
        }
    }
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volume")
            .field("name", &self.inner.name)
            .field("uuid", &self.inner.uuid)
            .finish()
    }
}

fn block_err(e: VolumeError) -> blockdev::BlockError {
    e.into()
}

impl BlockDevice for Volume {
    fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        Box::pin(async move {
            self.inner
                .read_volume(offset_bytes, buf)
                .await
                .map_err(block_err)
        })
    }

    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        Box::pin(async move {
            self.inner
                .write_volume(offset_bytes, buf, flags.fua)
                .await
                .map_err(block_err)
        })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        Box::pin(async move {
            self.inner.check_usable().map_err(block_err)?;
            self.inner.flush_volume().await.map_err(block_err)
        })
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        Box::pin(async move {
            self.inner
                .zero_volume(offset_bytes, len_bytes)
                .await
                .map_err(block_err)
        })
    }

    /// Same as `write_zeroes`: parity and copies stay consistent, reads return zeroes.
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.write_zeroes(offset_bytes, len_bytes)
    }

    fn stats(&self) -> DeviceStats {
        self.inner.stats.snapshot()
    }
}
