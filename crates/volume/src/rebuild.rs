//! Rebuild onto a spare, a replaced member or a returning stale member: throttled,
//! checkpointed in the superblock, resumable, with progress on a watch channel.
//!
//! Speed: batches of `batch_bytes` per member, `inflight_batches` of them at once (the
//! frontier moves over them in order), read from only k survivors into buffers reused
//! from batch to batch.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use blockdev::IoBuf;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::chunks::{BufPool, Pacer, Window, chunks, intersect_ranges, merge_ranges, rate_eta};
use crate::engine::{FailedBy, Faults, Inner};
use crate::error::{Result, VolumeError};
use crate::format::MemberState;
use crate::layout::Family;
use crate::status::{RebuildProgress, TaskPhase};
use crate::topology::{Dev, Topology, same_dev};
use crate::volume::{RebuildTask, Volume};

/// A layout over the array that knows which rows hold its data (the log layout: its
/// root and checkpoint rows and the segments not free). The rows it leaves out are
/// written whole before they are read again, so a rebuild may skip them.
pub(crate) trait RowsInUse: Send + Sync {
    /// Sorted, disjoint row ranges `[start, end)`.
    fn rows_in_use(&self) -> Vec<(u64, u64)>;
}

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
            in_use_only: false,
            bytes_done: 0,
            bytes_total: 0,
            rate_bytes_per_sec: 0.0,
            eta_secs: None,
            phase: TaskPhase::Running,
            busy_fraction: 1.0,
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

    /// Rebuilds slot `t` from its frontier to the end, a few batches in flight (see
    /// `chunks`). `Ok(false)` if cancelled.
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
        let start_row = slot.frontier.load(Ordering::Acquire) / su;
        let mut ranges = self.rows_to_rebuild(start_row, valid_bytes.div_ceil(su));
        // The log layout: only the rows it uses (taken once: a row it starts using
        // later is written whole, on this member too).
        let in_use = self.layout_rows_in_use();
        let in_use_only = in_use.is_some();
        if let Some(used) = in_use {
            ranges = intersect_ranges(&ranges, &used);
        }
        let total_bytes: u64 = ranges.iter().map(|(a, b)| (b - a) * su).sum();
        info!(volume = %self.name, member = t, partial, in_use_only, from = start_row * su, total_bytes, "rebuild starting");
        let clock = self.opts.clock.clone();
        let started = clock.now();
        let mut pacer = Pacer::new(self.opts.throttle, clock.clone());
        let depth = self.opts.inflight_batches.max(1);
        let (k, _) = self.k_m();
        // Per batch in flight: k survivor reads and the rebuilt piece (near: one read per
        // member), plus the ones of the batch being issued.
        let pool = BufPool::new((depth + 1) * (k.max(self.geo.members()) + 1));
        let mut done = 0u64;
        let mut last_checkpoint = start_row * su;
        tx.send_modify(|p| {
            p.member = t;
            p.partial = partial;
            p.in_use_only = in_use_only;
            p.bytes_done = 0;
            p.bytes_total = total_bytes;
            p.rate_bytes_per_sec = 0.0;
            p.eta_secs = None;
            p.phase = TaskPhase::Running;
            p.busy_fraction = 1.0;
        });
        // Rows below the first batch need nothing.
        let first = ranges.first().map_or(rows, |r| r.0);
        if first > start_row {
            slot.frontier.store(first * su, Ordering::Release);
        }
        let publish = |done: u64, pacer: &Pacer| {
            let elapsed = clock.now().saturating_sub(started).as_secs_f64();
            let (rate, eta) = rate_eta(done, total_bytes, elapsed);
            tx.send_modify(|p| {
                p.bytes_done = done;
                p.rate_bytes_per_sec = rate;
                p.eta_secs = eta;
                p.busy_fraction = pacer.busy_fraction();
            });
        };
        let mut todo = chunks(ranges, self.batch_rows(), rows).peekable();
        let mut window = Window::new(depth);
        let mut stopping = false;
        let mut failure: Option<VolumeError> = None;
        loop {
            if !stopping && (cancel.load(Ordering::Acquire) || self.stopped.load(Ordering::Acquire))
            {
                stopping = true;
            }
            while !stopping && failure.is_none() && window.has_room() && pacer.may_issue() {
                let Some(c) = todo.next() else { break };
                pacer.issue(c.rows() * su);
                let (dev, pool) = (dev.clone(), &pool);
                window.push(async move {
                    let _locks = self.lock_rows(c.r0, c.r1).await;
                    let r = self
                        .with_retry(|topo| {
                            let dev = dev.clone();
                            async move { self.rebuild_batch(&topo, t, &dev, c.r0, c.r1, pool).await }
                        })
                        .await;
                    (c, r)
                });
            }
            if window.is_empty() {
                if stopping || failure.is_some() || todo.peek().is_none() {
                    break;
                }
                // Throttled: nothing in flight and no batch may start yet.
                pacer.rest().await;
                publish(done, &pacer);
                continue;
            }
            let Some((c, r)) = window.next().await else {
                continue;
            };
            match r {
                Ok(true) => {}
                Ok(false) => {
                    failure.get_or_insert(VolumeError::Invalid(format!(
                        "rebuild target (member {t}) failed"
                    )));
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
            if failure.is_some() {
                // Let the batches in flight finish; the frontier stays where it is.
                continue;
            }
            // In order: everything below `next` is current now.
            slot.frontier.store(c.next * su, Ordering::Release);
            done += c.rows() * su;
            pacer.record();
            publish(done, &pacer);
            if c.next * su - last_checkpoint >= self.opts.checkpoint_bytes && c.next < rows {
                self.checkpoint(t, &dev, c.next * su).await?;
                last_checkpoint = c.next * su;
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if stopping {
            self.checkpoint(t, &dev, slot.frontier.load(Ordering::Acquire))
                .await?;
            return Ok(false);
        }
        // The rest still owed: the duty cycle holds over the whole rebuild, also when it
        // is shorter than one rest.
        pacer.rest().await;
        publish(done, &pacer);
        self.finish_rebuild(t, &dev).await?;
        Ok(true)
    }

    /// Row ranges of a rebuild from `start_row`: everything, except the clean regions'
    /// part below `valid_rows` (a member that was away briefly has only its dirty regions
    /// stale there).
    fn rows_to_rebuild(&self, start_row: u64, valid_rows: u64) -> Vec<(u64, u64)> {
        let rows = self.geo.rows();
        let region_rows = (self.intent.geometry().region_bytes / self.su()).max(1);
        let mut out = Vec::new();
        let mut r = start_row;
        while r < rows {
            let region_end = ((r / region_rows + 1) * region_rows).min(rows);
            if r < valid_rows && !self.intent.is_dirty((r / region_rows) as usize) {
                r = region_end.min(valid_rows);
                continue;
            }
            out.push((r, region_end));
            r = region_end;
        }
        merge_ranges(out)
    }

    /// The rows the layout above uses (`None`: all of them, the in-place layout).
    pub(crate) fn layout_rows_in_use(&self) -> Option<Vec<(u64, u64)>> {
        self.rows_in_use
            .get()
            .and_then(|w| w.upgrade())
            .map(|l| l.rows_in_use())
    }

    fn k_m(&self) -> (usize, usize) {
        match self.geo.family() {
            Family::Rotating { k, m } => (k, m),
            Family::Near { copies } => (1, copies - 1),
        }
    }

    /// Makes the rebuilt range durable on the target, then records it.
    async fn checkpoint(&self, t: usize, dev: &Dev, offset: u64) -> Result<()> {
        self.timed(dev.flush())
            .await
            .map_err(|e| VolumeError::Member {
                member: t,
                name: dev.info().name.clone(),
                cause: e,
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
            self.fail_member_dev(t, Some(dev), &e.to_string(), FailedBy::Error)
                .await?;
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
        pool: &BufPool,
    ) -> std::result::Result<bool, Faults> {
        let target_ok = topo.slots.get(t).is_some_and(|s| {
            s.state == MemberState::Rebuilding && s.dev.as_ref().is_some_and(|d| same_dev(d, dev))
        });
        if !target_ok {
            return Ok(false);
        }
        let out = self.reconstruct_rows(topo, t, r0, r1, pool).await?;
        let out = self
            .mwrite(topo, t, r0 * self.su(), out, false)
            .await
            .map_err(|f| vec![f])?;
        pool.put(out);
        Ok(true)
    }

    /// Member `t`'s rows `[r0, r1)` computed from the other members (never read from `t`).
    pub(crate) async fn reconstruct_rows(
        &self,
        topo: &Topology,
        t: usize,
        r0: u64,
        r1: u64,
        pool: &BufPool,
    ) -> std::result::Result<IoBuf, Faults> {
        match self.geo.family() {
            Family::Rotating { k, m } => self.rebuild_rotating(topo, t, r0, r1, k, m, pool).await,
            Family::Near { copies } => self.rebuild_near(topo, t, r0, r1, copies, pool).await,
        }
    }

    /// Any k shards of a row rebuild the missing one: reads rows `[r0, r1)` from k
    /// survivors only (a different k per batch, so each survivor does its share), into
    /// pooled buffers, and reconstructs member `t`'s piece.
    #[allow(clippy::too_many_arguments)]
    async fn rebuild_rotating(
        &self,
        topo: &Topology,
        t: usize,
        r0: u64,
        r1: u64,
        k: usize,
        m: usize,
        pool: &BufPool,
    ) -> std::result::Result<IoBuf, Faults> {
        let su = self.su() as usize;
        let n = self.geo.members();
        let end_bytes = r1 * su as u64;
        let survivors: Vec<usize> = (0..n)
            .filter(|&i| i != t && topo.readable(i, end_bytes))
            .collect();
        if survivors.len() < k {
            return Err(Vec::new());
        }
        let turn = ((r0 / self.batch_rows()) as usize) % survivors.len();
        let mut chosen = vec![false; n];
        for j in 0..k {
            chosen[survivors[(turn + j) % survivors.len()]] = true;
        }
        let len = (r1 - r0) as usize * su;
        let reads = (0..n).filter(|&i| chosen[i]).map(|i| {
            let buf = pool.get(len);
            async move {
                self.mread(topo, i, r0 * su as u64, buf)
                    .await
                    .map(|b| (i, b))
            }
        });
        let mut bufs: Vec<Option<IoBuf>> = (0..n).map(|_| None).collect();
        let mut faults = Vec::new();
        for r in futures::future::join_all(reads).await {
            match r {
                Ok((i, b)) => bufs[i] = Some(b),
                Err(f) => faults.push(f),
            }
        }
        let release =
            |bufs: Vec<Option<IoBuf>>| bufs.into_iter().flatten().for_each(|b| pool.put(b));
        if !faults.is_empty() {
            release(bufs);
            return Err(faults);
        }
        let Some(rs) = self.rs.as_ref() else {
            release(bufs);
            return Err(Vec::new());
        };
        let mut out = pool.get(len);
        let mut ok = true;
        for (ri, row) in (r0..r1).enumerate() {
            let range = ri * su..(ri + 1) * su;
            let mut per_member: Vec<Option<&mut [u8]>> = bufs
                .iter_mut()
                .map(|b| b.as_mut().map(|b| &mut b[range.clone()]))
                .collect();
            let mut target = Some(&mut out[range.clone()]);
            let mut present = [false; erasure::MAX_DATA_SHARDS + erasure::MAX_PARITY_SHARDS];
            let mut refs: Vec<&mut [u8]> = Vec::with_capacity(k + m);
            let mut want = 0;
            for (s, member) in self.geo.row_shard_members(row).enumerate() {
                if member == t {
                    want = s;
                    refs.push(target.take().unwrap_or_default());
                    continue;
                }
                match per_member.get_mut(member).and_then(Option::take) {
                    Some(slice) => {
                        present[s] = true;
                        refs.push(slice);
                    }
                    None => refs.push(Default::default()),
                }
            }
            if rs
                .reconstruct_some(&mut refs, &present[..k + m], &[want])
                .is_err()
            {
                ok = false;
                break;
            }
        }
        release(bufs);
        if !ok {
            pool.put(out);
            return Err(Vec::new());
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
        pool: &BufPool,
    ) -> std::result::Result<IoBuf, Faults> {
        let su = self.su();
        let n = self.geo.members() as u64;
        let c = copies as u64;
        let (b0, b1) = (r0.saturating_sub(1), (r1 + 1).min(self.geo.rows()));
        let batch = self
            .read_batch(topo, b0, b1, |i| i != t && topo.readable(i, b1 * su))
            .await?;
        let mut out = pool.get(((r1 - r0) * su) as usize);
        for row in r0..r1 {
            let at = ((row - r0) * su) as usize;
            let dst = &mut out[at..at + su as usize];
            let slot = row * n + t as u64;
            let chunk = slot / c;
            if chunk >= self.geo.chunks() {
                // Past the last chunk (the slot holds nothing): zeroes, as after create.
                dst.fill(0);
                continue;
            }
            let src = (0..copies)
                .map(|j| self.geo.chunk_location(chunk, j))
                .filter(|&(m, _)| m != t)
                .find_map(|(m, r)| batch.shard(m, r));
            let Some(src) = src else {
                pool.put(out);
                return Err(Vec::new());
            };
            dst.copy_from_slice(src);
        }
        Ok(out)
    }
}
