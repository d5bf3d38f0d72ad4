//! The public handle: [`Volume`], a `BlockDevice` plus administration.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use blockdev::{BlockDevice, BlockError, DeviceInfo, DeviceStats, IoBuf, IoFuture, WriteFlags};
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
    /// The proactive copy task (`copy_member`), one at a time.
    pub copy: Option<crate::copy::CopyTask>,
    pub last_scrub: Option<ScrubReport>,
    pub scrub_progress: Option<crate::status::ScrubProgress>,
    pub last_resync: Option<crate::status::ResyncReport>,
    /// The background resync (`EngineOptions::background_resync`) and its progress.
    pub resync: Option<crate::resync::ResyncTask>,
    pub resync_progress: Option<crate::status::ResyncProgress>,
    /// The background resync has not ended yet (the rebuild waits for it).
    pub resync_running: bool,
    pub scrub_cancel: Option<Arc<AtomicBool>>,
    pub notes: Vec<String>,
    pub cleaner: Option<JoinHandle<()>>,
    /// The last committed superblock, for `status()` without async locking.
    pub sb: Option<Superblock>,
}

/// An assembled volume. Implements [`BlockDevice`]; see the crate docs for the API.
pub struct Volume {
    pub(crate) inner: Arc<Inner>,
    /// The log layout over `inner`'s array space, if the volume has one.
    pub(crate) log: Option<Arc<crate::log::LogEngine>>,
    /// Its garbage collector and checkpointer.
    keeper: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Volume {
    pub(crate) fn start_with_log(
        inner: Arc<Inner>,
        log: Option<Arc<crate::log::LogEngine>>,
    ) -> Volume {
        let weak = Arc::downgrade(&inner);
        let _ = inner.me.set(weak.clone());
        let period = inner.opts.bitmap_quiet;
        let cleaner = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.stopped.load(Ordering::Acquire) || inner.is_halted() {
                    return;
                }
                if let Err(e) = inner.sweep_bitmap(false).await {
                    warn!(volume = %inner.name, error = %e, "bitmap sweep failed");
                }
            }
        });
        inner.tasks().cleaner = Some(cleaner);
        if let Some(l) = &log {
            let w: std::sync::Weak<dyn crate::rebuild::RowsInUse> = Arc::downgrade(l) as _;
            let _ = inner.rows_in_use.set(w);
        }
        inner.kick_rebuild();
        let keeper = log.as_ref().map(|l| l.spawn_keeper());
        Volume {
            inner,
            log,
            keeper: std::sync::Mutex::new(keeper),
        }
    }

    pub(crate) fn abort_keeper(&self) {
        if let Some(k) = self.keeper.lock().unwrap_or_else(|e| e.into_inner()).take() {
            k.abort();
        }
    }

    /// The log layout engine, if the volume has one.
    pub fn log(&self) -> Option<&Arc<crate::log::LogEngine>> {
        self.log.as_ref()
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn uuid(&self) -> Uuid {
        self.inner.uuid
    }

    /// Usable bytes.
    pub fn size_bytes(&self) -> u64 {
        self.info().size_bytes
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
                    failed_by_operator: s.state == MemberState::Failed
                        && e.as_ref().is_some_and(|e| e.failed_by_operator),
                    missing: false,
                    replaces: None,
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
                state: if s.replaces.is_some() {
                    MemberState::Replacing
                } else {
                    MemberState::Spare
                },
                failure_domain: entry(n + j).map(|e| e.failure_domain).unwrap_or_default(),
                rebuild_offset_bytes: s
                    .replaces
                    .as_ref()
                    .map_or(0, |r| r.frontier.load(Ordering::Acquire)),
                valid_bytes: 0,
                failed_by_operator: false,
                missing: false,
                replaces: s.replaces.as_ref().map(|r| r.slot),
            })
            .collect();
        let rebuild = tasks.rebuild.as_ref().map(|r| r.progress.borrow().clone());
        let copy = tasks.copy.as_ref().map(|c| c.progress.borrow().clone());
        let rebuilding = rebuild
            .as_ref()
            .is_some_and(|r| r.phase == TaskPhase::Running);
        let state = if inner.is_halted() {
            VolumeState::Fenced
        } else if inner.stopped.load(Ordering::Acquire) {
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
            size_bytes: self.info().size_bytes,
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
            copy,
            last_scrub: tasks.last_scrub.clone(),
            scrub: tasks.scrub_progress.clone(),
            last_resync: tasks.last_resync.clone(),
            resync: tasks.resync_progress.clone(),
            notes: tasks.notes.clone(),
            read_bytes: stats.read_bytes,
            write_bytes: stats.write_bytes,
            log: self.log.as_ref().map(|l| l.status()),
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
    /// with `Closed`. A background resync is stopped after the batches in flight: the
    /// regions it did not finish stay dirty and the clean flag is not set, so the next
    /// assembly resyncs them.
    pub async fn stop(&self) -> Result<()> {
        if self.inner.stopped.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.inner.is_halted() {
            // Fenced or detached: nothing may be written, so no clean stop.
            self.abort_keeper();
            self.cancel_tasks().await;
            self.inner.stopped.store(true, Ordering::Release);
            return Err(self.inner.fenced_error());
        }
        self.abort_keeper();
        if let Some(log) = &self.log
            && !self.inner.failed.load(Ordering::Acquire)
        {
            // The map in one piece: the next assembly replays nothing.
            log.checkpoint().await?;
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
        let resync_pending = inner.intent.pending_count() > 0;
        inner
            .commit(|sb| sb.clean = !degraded && !resync_pending)
            .await?;
        info!(volume = %inner.name, "stopped");
        Ok(())
    }

    async fn cancel_tasks(&self) {
        let (rebuild, cleaner, scrub, resync, copy) = {
            let mut t = self.inner.tasks();
            (
                t.rebuild.take(),
                t.cleaner.take(),
                t.scrub_cancel.take(),
                t.resync.take(),
                t.copy.take(),
            )
        };
        if let Some(c) = copy {
            // The copy saves its checkpoint and ends after its batch in flight.
            c.cancel.store(true, Ordering::Release);
            if !c.handle.is_finished() {
                let _ = c.handle.await;
            }
        }
        if let Some(c) = scrub {
            c.store(true, Ordering::Release);
        }
        if let Some(r) = resync {
            // The resync ends after its batches in flight (their rows are locked).
            r.cancel.store(true, Ordering::Release);
            if !r.handle.is_finished() {
                let _ = r.handle.await;
            }
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

impl Volume {
    /// Adds a note for the operator to the status (e.g. from the layer that opened the
    /// devices: which ones could not be opened).
    pub fn add_note(&self, msg: impl Into<String>) {
        self.inner.note(msg.into());
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

impl Volume {
    /// True once the volume is fenced: a member answered Reservation Conflict (another
    /// host owns the volume now) or [`Volume::detach`] was called.
    pub fn is_fenced(&self) -> bool {
        self.inner.is_halted()
    }

    /// Turns true when the volume gets fenced (a member's reservation conflict, or
    /// [`Volume::detach`]); never turns back. The sender lives as long as the volume's
    /// engine, so `changed()` fails once the volume is dropped.
    pub fn fenced(&self) -> watch::Receiver<bool> {
        self.inner.subscribe_fenced()
    }

    /// Why the volume is fenced, if it is.
    pub fn fence_reason(&self) -> Option<String> {
        self.inner.fence.reason().map(str::to_string)
    }

    /// Lets go of the volume at once without writing anything (the owner lost its lease,
    /// or was fenced): from now on no member I/O is issued, not even by background work
    /// (rebuild, bitmap sweep, scrub, resync), no superblock is written and no member is
    /// failed; volume I/O fails with `BlockError::Unavailable`. The bitmap stays dirty
    /// on the members, so the next owner resyncs what may have been in flight. Member
    /// I/O already issued is not waited for. The state is `Fenced`; `stop()` then fails.
    pub fn detach(&self) {
        self.inner.halt("detached by its owner".to_string(), true);
        self.abort_keeper();
        let (cleaner, resync) = {
            let mut t = self.inner.tasks();
            (t.cleaner.take(), t.resync.take())
        };
        if let Some(c) = cleaner {
            c.abort();
        }
        if let Some(r) = resync {
            // Member I/O is refused already; dropping the batches releases their locks.
            r.cancel.store(true, Ordering::Release);
            r.handle.abort();
            let mut t = self.inner.tasks();
            t.resync_running = false;
            if let Some(p) = t.resync_progress.as_mut()
                && p.phase == Some(crate::status::TaskPhase::Running)
            {
                p.phase = Some(crate::status::TaskPhase::Stopped);
            }
        }
    }
}

impl Drop for Volume {
    /// Writes nothing: a volume dropped without `stop()` is like one whose host
    /// crashed (the next assembly resyncs its dirty regions). Background tasks still
    /// running (they hold the engine) find the volume halted and issue no member I/O.
    fn drop(&mut self) {
        self.inner.halt("volume handle dropped".to_string(), false);
        self.abort_keeper();
        let mut t = self.inner.tasks();
        if let Some(c) = t.cleaner.take() {
            c.abort();
        }
        if let Some(r) = t.rebuild.take() {
            r.cancel.store(true, Ordering::Release);
            r.handle.abort();
        }
        if let Some(r) = t.resync.take() {
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

impl Volume {
    async fn read_io(&self, offset_bytes: u64, buf: IoBuf) -> Result<IoBuf, BlockError> {
        match &self.log {
            Some(log) => log.read(offset_bytes, buf).await,
            None => self.inner.read_volume(offset_bytes, buf).await,
        }
        .map_err(block_err)
    }

    async fn write_io(
        &self,
        offset_bytes: u64,
        buf: IoBuf,
        flags: WriteFlags,
    ) -> Result<IoBuf, BlockError> {
        match &self.log {
            Some(log) => log.write(offset_bytes, buf, flags.fua).await,
            None => self.inner.write_volume(offset_bytes, buf, flags.fua).await,
        }
        .map_err(block_err)
    }

    /// [`BlockDevice::read`] holding its own reference to the volume, for a caller that
    /// lends the volume out of a lock (the one future, no wrapper around it).
    pub fn read_shared(self: Arc<Self>, offset_bytes: u64, buf: IoBuf) -> IoFuture<'static, IoBuf> {
        IoFuture::new(async move { self.read_io(offset_bytes, buf).await })
    }

    /// [`BlockDevice::write`] holding its own reference to the volume.
    pub fn write_shared(
        self: Arc<Self>,
        offset_bytes: u64,
        buf: IoBuf,
        flags: WriteFlags,
    ) -> IoFuture<'static, IoBuf> {
        IoFuture::new(async move { self.write_io(offset_bytes, buf, flags).await })
    }
}

impl BlockDevice for Volume {
    fn info(&self) -> &DeviceInfo {
        match &self.log {
            Some(log) => &log.info,
            None => &self.inner.info,
        }
    }

    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(self.read_io(offset_bytes, buf))
    }

    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(self.write_io(offset_bytes, buf, flags))
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            if let Some(log) = &self.log {
                return log.flush().await.map_err(block_err);
            }
            self.inner.check_usable().map_err(block_err)?;
            self.inner.flush_volume().await.map_err(block_err)
        })
    }

    /// Log layout: the blocks leave the map (thin provisioning); in place: zeroes are
    /// written, so parity and copies stay consistent.
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            match &self.log {
                Some(log) => log.trim(offset_bytes, len_bytes).await,
                None => self.inner.zero_volume(offset_bytes, len_bytes).await,
            }
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
