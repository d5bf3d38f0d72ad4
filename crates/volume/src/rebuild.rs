//! Rebuild onto a spare, a replaced member or a returning stale member: throttled,
//! checkpointed in the superblock, resumable, with progress on a watch channel.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use blockdev::IoBuf;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::engine::{Faults, Inner};
use crate::error::{Result, VolumeError};
use crate::format::MemberState;
use crate::layout::Family;
use crate::status::{RebuildProgress, TaskPhase};
use crate::topology::{Dev, Topology, same_dev};
use crate::volume::{RebuildTask, Volume};

impl Volume {
    /// Starts rebuilding every rebuilding slot (one after the other) in the background;
    /// a failed slot first takes a spare if there is one. Returns the progress channel
    /// (the running one if a rebuild is already going).
    pub async fn start_rebuild(&self) -> Result<watch::Receiver<RebuildProgress>> {
        self.inner.check_usable()?;
        {
            let mut meta = self.inner.meta.lock().await;
            let mut topo = (*self.inner.topo()).clone();
            if topo.slots.iter().any(|s| s.state == MemberState::Failed) && !topo.spares.is_empty()
            {
                self.inner.take_spare(&mut meta, &mut topo).await;
                self.inner.set_topo(topo);
                self.inner.commit_locked(&mut meta, true).await?;
            }
        }
        self.inner.spawn_rebuild()
    }

    /// Waits for the running rebuild (if any) and returns its final progress.
    pub async fn wait_rebuild(&self) -> Option<RebuildProgress> {
        let mut rx = self.inner.tasks().rebuild.as_ref()?.progress.clone();
        let _ = rx.wait_for(|p| p.phase != TaskPhase::Running).await;
        let p = rx.borrow().clone();
        Some(p)
    }

    /// Stops a running rebuild at the next batch; its checkpoint is saved, so a later
    /// `start_rebuild` (or assembly) resumes there.
    pub async fn stop_rebuild(&self) {
        let task = self.inner.tasks().rebuild.take();
        if let Some(mut t) = task {
            t.cancel.store(true, Ordering::Release);
            if !t.handle.is_finished() {
                let _ = (&mut t.handle).await;
            }
            self.inner.tasks().rebuild = Some(t);
        }
    }
}

impl Inner {
    pub(crate) fn spawn_rebuild(self: &Arc<Self>) -> Result<watch::Receiver<RebuildProgress>> {
        let mut tasks = self.tasks();
        if let Some(r) = &tasks.rebuild
            && !r.handle.is_finished()
            && !r.exiting.load(Ordering::Acquire)
        {
            return Ok(r.progress.clone());
        }
        let topo = self.topo();
        let Some(first) = topo
            .slots
            .iter()
            .position(|s| s.state == MemberState::Rebuilding && s.dev.is_some())
        else {
            return Err(VolumeError::Invalid(
                "nothing to rebuild: no rebuilding member (replace a failed member or add a spare)"
                    .into(),
            ));
        };
        let (tx, rx) = watch::channel(RebuildProgress {
            member: first,
            partial: false,
            bytes_done: 0,
            bytes_total: 0,
            rate_bytes_per_sec: 0.0,
            eta_secs: None,
            phase: TaskPhase::Running,
        });
        let cancel = Arc::new(AtomicBool::new(false));
        let exiting = Arc::new(AtomicBool::new(false));
        let inner = self.clone();
        let (c, e) = (cancel.clone(), exiting.clone());
        let handle = tokio::spawn(async move {
            let phase = loop {
                match inner.run_rebuilds(&c, &tx).await {
                    Ok(true) => {
                        // A slot may have become rebuilding since the last look: decide
                        // under the task lock, where `kick_rebuild` looks too.
                        let mut t = inner.tasks();
                        if !std::mem::take(&mut t.rebuild_wanted) {
                            e.store(true, Ordering::Release);
                            break TaskPhase::Done;
                        }
                    }
                    Ok(false) => break TaskPhase::Stopped,
                    Err(err) => {
                        warn!(volume = %inner.name, error = %err, "rebuild failed");
                        break TaskPhase::Failed(err.to_string());
                    }
                }
            };
            tx.send_modify(|p| p.phase = phase);
        });
        tasks.rebuild_wanted = false;
        tasks.rebuild = Some(RebuildTask {
            handle,
            progress: rx.clone(),
            cancel,
            exiting,
        });
        Ok(rx)
    }

    /// Rebuilds rebuilding slots until none is left. `Ok(false)` if cancelled.
    async fn run_rebuilds(
        &self,
        cancel: &AtomicBool,
        tx: &watch::Sender<RebuildProgress>,
    ) -> Result<bool> {
        loop {
            let topo = self.topo();
            let Some(t) = topo
                .slots
                .iter()
                .position(|s| s.state == MemberState::Rebuilding && s.dev.is_some())
            else {
                return Ok(true);
            };
            if !self.rebuild_slot(t, cancel, tx).await? {
                return Ok(false);
            }
        }
    }

    /// Rebuilds slot `t` from its frontier to the end. `Ok(false)` if cancelled.
    async fn rebuild_slot(
        &self,
        t: usize,
        cancel: &AtomicBool,
        tx: &watch::Sender<RebuildProgress>,
    ) -> Result<bool> {
        let topo = self.topo();
        let slot = topo.slots[t].clone();
        let Some(dev) = slot.dev.clone() else {
            return Ok(true);
        };
        let valid_bytes = self
            .tasks()
            .sb
            .as_ref()
            .and_then(|sb| sb.members.get(t).map(|e| e.valid_bytes))
            .unwrap_or(0);
        let partial = valid_bytes > 0;
        let su = self.su();
        let rows = self.geo.rows();
        let region_rows = self.intent.geometry().region_bytes / su;
        let start_row = slot.frontier.load(Ordering::Acquire) / su;
        // Below `valid_rows` only rows of dirty regions can be stale.
        let valid_rows = valid_bytes.div_ceil(su);
        let dirty = |r: u64| self.intent.is_dirty((r / region_rows) as usize);
        // Rows to skip from `r`: a clean region's part below `valid_rows`.
        let skip_until = |r: u64| -> Option<u64> {
            let region_end = ((r / region_rows + 1) * region_rows).min(rows);
            (r < valid_rows && !dirty(r)).then(|| region_end.min(valid_rows))
        };
        let total_bytes: u64 = {
            let mut sum = 0;
            let mut r = start_row;
            while r < rows {
                let region_end = ((r / region_rows + 1) * region_rows).min(rows);
                let next = skip_until(r).unwrap_or(region_end);
                if skip_until(r).is_none() {
                    sum += (region_end - r) * su;
                }
                r = next;
            }
            sum
        };
        info!(volume = %self.name, member = t, partial, from = start_row * su, total_bytes, "rebuild starting");
        let clock = self.opts.clock.clone();
        let started = clock.now();
        let mut pacer = self.pacer();
        let mut done = 0u64;
        let mut last_checkpoint = start_row * su;
        tx.send_modify(|p| {
            p.member = t;
            p.partial = partial;
            p.bytes_done = 0;
            p.bytes_total = total_bytes;
            p.phase = TaskPhase::Running;
        });
        let mut row = start_row;
        while row < rows {
            if cancel.load(Ordering::Acquire) || self.stopped.load(Ordering::Acquire) {
                self.checkpoint(t, &dev, slot.frontier.load(Ordering::Acquire))
                    .await?;
                return Ok(false);
            }
            let region_end = ((row / region_rows + 1) * region_rows).min(rows);
            if let Some(until) = skip_until(row) {
                slot.frontier.store(until * su, Ordering::Release);
                row = until;
                continue;
            }
            let r1 = (row + self.batch_rows()).min(region_end);
            let batch_start = clock.now();
            {
                let _locks = self.lock_rows(row, r1).await;
                let ok = self
                    .with_retry(|topo| {
                        let dev = dev.clone();
                        async move { self.rebuild_batch(&topo, t, &dev, row, r1).await }
                    })
                    .await?;
                if !ok {
                    return Err(VolumeError::Invalid(format!(
                        "rebuild target (member {t}) failed"
                    )));
                }
                slot.frontier.store(r1 * su, Ordering::Release);
            }
            done += (r1 - row) * su;
            let elapsed = clock.now().saturating_sub(started).as_secs_f64();
            let rate = if elapsed > 0.0 {
                done as f64 / elapsed
            } else {
                0.0
            };
            tx.send_modify(|p| {
                p.bytes_done = done;
                p.rate_bytes_per_sec = rate;
                p.eta_secs = (rate > 0.0).then(|| (total_bytes - done) as f64 / rate);
            });
            if r1 * su - last_checkpoint >= self.opts.checkpoint_bytes {
                self.checkpoint(t, &dev, r1 * su).await?;
                last_checkpoint = r1 * su;
            }
            self.pace(&mut pacer, batch_start, (r1 - row) * su).await;
            row = r1;
        }
        self.finish_rebuild(t, &dev).await?;
        Ok(true)
    }

    /// Makes the rebuilt range durable on the target, then records it.
    async fn checkpoint(&self, t: usize, dev: &Dev, offset: u64) -> Result<()> {
        self.timed(dev.flush())
            .await
            .map_err(|e| VolumeError::Member {
                member: t,
                name: dev.info().name.clone(),
                source: e,
            })?;
        let mut sb = self.meta.lock().await;
        if !self.is_target(t, dev) {
            return Ok(());
        }
        if let Some(e) = sb.members.get_mut(t) {
            e.rebuild_offset_bytes = offset;
        }
        self.commit_locked(&mut sb, false).await?;
        // Durable now: writes below it no longer need the journal.
        if let Some(s) = self.topo().slots.get(t) {
            s.checkpoint.store(offset, Ordering::Release);
        }
        Ok(())
    }

    fn is_target(&self, t: usize, dev: &Dev) -> bool {
        let topo = self.topo();
        topo.slots.get(t).is_some_and(|s| {
            s.state == MemberState::Rebuilding && s.dev.as_ref().is_some_and(|d| same_dev(d, dev))
        })
    }

    async fn finish_rebuild(&self, t: usize, dev: &Dev) -> Result<()> {
        if let Err(e) = self.timed(dev.flush()).await {
            self.fail_member_dev(t, Some(dev), &e.to_string()).await?;
            return Err(VolumeError::Invalid(format!(
                "rebuild target (member {t}) failed: {e}"
            )));
        }
        let mut sb = self.meta.lock().await;
        if !self.is_target(t, dev) {
            return Err(VolumeError::Invalid(format!(
                "rebuild target (member {t}) changed"
            )));
        }
        let mut topo = (*self.topo()).clone();
        topo.slots[t].state = MemberState::Active;
        topo.slots[t].state_generation = sb.generation + 1;
        let generation = sb.generation + 1;
        if let Some(e) = sb.members.get_mut(t) {
            e.state = MemberState::Active;
            e.rebuild_offset_bytes = 0;
            e.valid_bytes = 0;
            e.state_generation = generation;
        }
        self.set_topo(topo);
        self.commit_locked(&mut sb, true).await?;
        drop(sb);
        self.note(format!("member {t} rebuilt and active"));
        Ok(())
    }

    /// Rebuilds rows `[r0, r1)` of member `t`. `Ok(false)` if `t` is no longer the target.
    async fn rebuild_batch(
        &self,
        topo: &Topology,
        t: usize,
        dev: &Dev,
        r0: u64,
        r1: u64,
    ) -> std::result::Result<bool, Faults> {
        let target_ok = topo.slots.get(t).is_some_and(|s| {
            s.state == MemberState::Rebuilding && s.dev.as_ref().is_some_and(|d| same_dev(d, dev))
        });
        if !target_ok {
            return Ok(false);
        }
        let out = match self.geo.family() {
            Family::Rotating { k, m } => self.rebuild_rotating(topo, t, r0, r1, k, m).await?,
            Family::Near { copies } => self.rebuild_near(topo, t, r0, r1, copies).await?,
        };
        self.mwrite(topo, t, r0 * self.su(), out, false)
            .await
            .map_err(|f| vec![f])?;
        Ok(true)
    }

    async fn rebuild_rotating(
        &self,
        topo: &Topology,
        t: usize,
        r0: u64,
        r1: u64,
        k: usize,
        m: usize,
    ) -> std::result::Result<IoBuf, Faults> {
        let su = self.su() as usize;
        let mut batch = self
            .read_batch(topo, r0, r1, |i| i != t && topo.readable(i, r1 * su as u64))
            .await?;
        let rs = self.rs.as_ref().ok_or_else(Vec::new)?;
        let mut out = IoBuf::new_zeroed((r1 - r0) as usize * su);
        for (ri, row) in (r0..r1).enumerate() {
            let members: Vec<usize> = self.geo.row_shard_members(row).collect();
            let range = ri * su..(ri + 1) * su;
            let mut per_member: Vec<Option<&mut [u8]>> = batch
                .bufs
                .iter_mut()
                .map(|b| b.as_mut().map(|b| &mut b[range.clone()]))
                .collect();
            let mut target_slice = Some(&mut out[range.clone()]);
            let mut present = vec![false; k + m];
            let mut refs: Vec<&mut [u8]> = Vec::with_capacity(k + m);
            let mut want = 0;
            for (s, &member) in members.iter().enumerate() {
                if member == t {
                    want = s;
                    refs.push(target_slice.take().unwrap_or_default());
                } else {
                    match per_member[member].take() {
                        Some(slice) => {
                            present[s] = true;
                            refs.push(slice);
                        }
                        None => refs.push(Default::default()),
                    }
                }
            }
            if present.iter().filter(|&&p| p).count() < k {
                return Err(Vec::new());
            }
            rs.reconstruct_some(&mut refs, &present, &[want])
                .map_err(|_| Vec::new())?;
        }
        Ok(out)
    }

    async fn rebuild_near(
        &self,
        topo: &Topology,
        t: usize,
        r0: u64,
        r1: u64,
        copies: usize,
    ) -> std::result::Result<IoBuf, Faults> {
        let su = self.su();
        let n = self.geo.members() as u64;
        let c = copies as u64;
        let (b0, b1) = (r0.saturating_sub(1), (r1 + 1).min(self.geo.rows()));
        let batch = self
            .read_batch(topo, b0, b1, |i| i != t && topo.readable(i, b1 * su))
            .await?;
        let mut out = IoBuf::new_zeroed(((r1 - r0) * su) as usize);
        for row in r0..r1 {
            let slot = row * n + t as u64;
            let chunk = slot / c;
            if chunk >= self.geo.chunks() {
                continue;
            }
            let src = (0..copies)
                .map(|j| self.geo.chunk_location(chunk, j))
                .filter(|&(m, _)| m != t)
                .find_map(|(m, r)| batch.shard(m, r));
            let Some(src) = src else {
                return Err(Vec::new());
            };
            let at = ((row - r0) * su) as usize;
            out[at..at + su as usize].copy_from_slice(src);
        }
        Ok(out)
    }
}
