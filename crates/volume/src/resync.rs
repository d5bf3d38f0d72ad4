//! Resync after an unclean stop: make parity (or copies) agree with the data in every
//! dirty bitmap region, and only there.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use blockdev::IoBuf;
use tokio::task::JoinHandle;

use crate::chunks::{Window, chunks, merge_ranges, near_chunk_span};
use crate::engine::{Faults, Inner};
use crate::error::Result;
use crate::layout::Family;
use crate::status::{ResyncProgress, ResyncReport, TaskPhase};
use crate::topology::Topology;

/// What one batch did.
#[derive(Default, Clone, Copy)]
struct Outcome {
    /// Stripes rewritten.
    fixed: u64,
    /// Stripes that could not be verified (a data member missing).
    unverifiable: u64,
    /// Member bytes read and written.
    read_bytes: u64,
    written_bytes: u64,
    /// End row of the batch and its row count.
    r1: u64,
    rows: u64,
}

/// What to resync: the dirty regions (ascending) and their rows, merged.
pub(crate) struct Plan {
    regions: Vec<usize>,
    ranges: Vec<(u64, u64)>,
    data_rows: u64,
}

/// A resync running in the background after assembly.
pub(crate) struct ResyncTask {
    pub handle: JoinHandle<()>,
    pub cancel: Arc<AtomicBool>,
}

impl Inner {
    fn resync_plan(&self) -> Plan {
        let regions = if self.intent.enabled() {
            self.intent.dirty_regions()
        } else {
            Vec::new()
        };
        let ranges = merge_ranges(regions.iter().map(|&r| self.region_rows(r)));
        let data_rows = ranges.iter().map(|(a, b)| b - a).sum();
        Plan {
            regions,
            ranges,
            data_rows,
        }
    }

    /// Rows `[first, end)` of a region.
    fn region_rows(&self, region: usize) -> (u64, u64) {
        let (su, rows) = (self.su(), self.geo.rows());
        let (s, e) = self.intent.region_range(region);
        ((s / su).min(rows), (e / su).min(rows))
    }

    /// Resyncs every dirty region (called by assembly before the volume is handed out),
    /// a few batches in flight, unthrottled (the volume is not serving yet). The regions
    /// stay dirty until the bitmap sweeper clears them after a flush. What it did is kept
    /// for `status().last_resync`.
    pub async fn resync_dirty(&self, journaled_rows: &HashSet<u64>) -> Result<()> {
        let plan = self.resync_plan();
        self.run_resync(plan, journaled_rows, None)
            .await
            .map(|_| ())
    }

    /// Starts the resync of the dirty regions in the background (the volume serves I/O
    /// meanwhile; writes and resync batches take the same row locks). The regions are
    /// marked pending so the sweeper keeps them dirty until their batch is done, and the
    /// rebuild waits for the resync (as it would for a resync at assembly). Returns false
    /// (and does nothing) when there is nothing to resync.
    pub(crate) fn spawn_resync(self: &Arc<Self>, journaled_rows: HashSet<u64>) -> bool {
        let plan = self.resync_plan();
        if plan.regions.is_empty() {
            return false;
        }
        self.intent.set_pending(&plan.regions);
        let cancel = Arc::new(AtomicBool::new(false));
        {
            let mut t = self.tasks();
            t.resync_running = true;
            t.resync_progress = Some(ResyncProgress {
                regions: plan.regions.len() as u64,
                regions_pending: plan.regions.len() as u64,
                bytes_total: self.data_bytes_of_rows(plan.data_rows),
                bytes_done: 0,
                phase: Some(TaskPhase::Running),
            });
        }
        let inner = self.clone();
        let c = cancel.clone();
        let handle = tokio::spawn(async move {
            let result = inner.run_resync(plan, &journaled_rows, Some(&c)).await;
            let phase = match &result {
                Ok(true) => TaskPhase::Done,
                Ok(false) => TaskPhase::Stopped,
                Err(e) => TaskPhase::Failed(e.to_string()),
            };
            if !matches!(phase, TaskPhase::Done) {
                let why = match &phase {
                    TaskPhase::Failed(e) => format!("failed: {e}"),
                    _ => "stopped".to_string(),
                };
                inner.note(format!(
                    "resync: background resync ended early ({why}): {} regions stay dirty \
                     for the next assembly",
                    inner.intent.pending_count()
                ));
            }
            {
                let mut t = inner.tasks();
                t.resync_running = false;
                if let Some(p) = t.resync_progress.as_mut() {
                    p.phase = Some(phase);
                    p.regions_pending = inner.intent.pending_count() as u64;
                }
            }
            inner.kick_rebuild();
        });
        self.tasks().resync = Some(ResyncTask { handle, cancel });
        true
    }

    /// Runs the resync of `plan`. In the background (`cancel` given) it publishes its
    /// progress, clears each region's pending mark once every batch up to its end is done,
    /// and stops issuing batches when cancelled (returns `Ok(false)`; the regions not
    /// finished stay pending, hence dirty).
    async fn run_resync(
        &self,
        plan: Plan,
        journaled_rows: &HashSet<u64>,
        cancel: Option<&AtomicBool>,
    ) -> Result<bool> {
        let clock = self.opts.clock.clone();
        let started = clock.now();
        let Plan {
            regions,
            ranges,
            data_rows,
        } = plan;
        let rows = self.geo.rows();
        let cancelled = || cancel.is_some_and(|c| c.load(Ordering::Acquire));
        let mut total = Outcome::default();
        let mut todo = chunks(ranges, self.batch_rows(), rows);
        let mut window = Window::new(self.opts.inflight_batches);
        let mut failure = None;
        let mut stopped = false;
        // Regions are ascending and batches complete in order: index of the first region
        // not finished yet.
        let mut next_region = 0;
        loop {
            while failure.is_none() && window.has_room() {
                if cancelled() {
                    stopped = true;
                    break;
                }
                let Some(c) = todo.next() else { break };
                window.push(async move {
                    let _locks = self.lock_rows(c.r0, c.r1).await;
                    self.with_retry(|topo| async move {
                        self.resync_batch(&topo, c.r0, c.r1, journaled_rows).await
                    })
                    .await
                    .map(|o| Outcome {
                        r1: c.r1,
                        rows: c.r1 - c.r0,
                        ..o
                    })
                });
            }
            match window.next().await {
                None => break,
                Some(Ok(o)) => {
                    total.fixed += o.fixed;
                    total.unverifiable += o.unverifiable;
                    total.read_bytes += o.read_bytes;
                    total.written_bytes += o.written_bytes;
                    if cancel.is_some() && failure.is_none() {
                        while let Some(&r) = regions.get(next_region)
                            && self.region_rows(r).1 <= o.r1
                        {
                            self.intent.clear_pending(r);
                            next_region += 1;
                        }
                        let done = self.data_bytes_of_rows(o.rows);
                        let pending = self.intent.pending_count() as u64;
                        if let Some(p) = self.tasks().resync_progress.as_mut() {
                            p.bytes_done = (p.bytes_done + done).min(p.bytes_total);
                            p.regions_pending = pending;
                        }
                    }
                }
                Some(Err(e)) => {
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if stopped {
            return Ok(false);
        }
        for &r in &regions[next_region.min(regions.len())..] {
            self.intent.clear_pending(r);
        }
        let report = ResyncReport {
            regions: regions.len() as u64,
            bytes_resynced: self.data_bytes_of_rows(data_rows),
            member_bytes_read: total.read_bytes,
            member_bytes_written: total.written_bytes,
            stripes_rewritten: total.fixed,
            stripes_unverifiable: total.unverifiable,
            duration_secs: clock.now().saturating_sub(started).as_secs_f64(),
        };
        self.tasks().last_resync = Some(report);
        if regions.is_empty() {
            return Ok(true);
        }
        self.note(format!(
            "resync: {} dirty regions, {} stripes rewritten{}",
            regions.len(),
            total.fixed,
            if cancel.is_some() {
                " (in the background)"
            } else {
                ""
            }
        ));
        if total.unverifiable > 0 {
            self.note(format!(
                "resync: {} stripes in dirty regions could not be verified because a data \
                 member is missing and they were not journaled (written before the member \
                 left, or the journal is off): the missing member's data there is only right \
                 if those writes reached every member before the crash",
                total.unverifiable
            ));
        }
        Ok(true)
    }

    /// Volume data bytes held by `rows` rows.
    fn data_bytes_of_rows(&self, rows: u64) -> u64 {
        let su = self.su();
        let per_row = match self.geo.family() {
            Family::Rotating { k, .. } => k as u64 * su,
            Family::Near { copies } => self.geo.members() as u64 * su / copies.max(1) as u64,
        };
        (rows * per_row).min(self.info.size_bytes)
    }

    async fn resync_batch(
        &self,
        topo: &Topology,
        r0: u64,
        r1: u64,
        journaled_rows: &HashSet<u64>,
    ) -> std::result::Result<Outcome, Faults> {
        match self.geo.family() {
            Family::Rotating { k, m } => {
                self.resync_rotating(topo, r0, r1, k, m, journaled_rows)
                    .await
            }
            Family::Near { copies } => self.resync_near(topo, r0, r1, copies).await,
        }
    }

    async fn resync_rotating(
        &self,
        topo: &Topology,
        r0: u64,
        r1: u64,
        k: usize,
        m: usize,
        journaled_rows: &HashSet<u64>,
    ) -> std::result::Result<Outcome, Faults> {
        let su = self.su();
        let batch = self
            .read_batch(topo, r0, r1, |i| topo.readable(i, r1 * su))
            .await?;
        let rs = self.rs.as_ref().ok_or_else(Vec::new)?;
        let mut out = Outcome::default();
        let mut writes = Vec::new();
        for row in r0..r1 {
            let members: Vec<usize> = self.geo.row_shard_members(row).collect();
            let mut data: [&[u8]; erasure::MAX_DATA_SHARDS] = [&[]; erasure::MAX_DATA_SHARDS];
            let mut complete = true;
            for (slot, &member) in data.iter_mut().zip(&members[..k]) {
                match batch.shard(member, row) {
                    Some(s) => *slot = s,
                    None => complete = false,
                }
            }
            if !complete {
                // Rows written while degraded were journaled and replayed already.
                if !journaled_rows.contains(&row) {
                    out.unverifiable += 1;
                }
                continue;
            }
            let mut parity: Vec<IoBuf> = (0..m).map(|_| IoBuf::new_zeroed(su as usize)).collect();
            let mut outs: [&mut [u8]; erasure::MAX_PARITY_SHARDS] = Default::default();
            for (o, p) in outs.iter_mut().zip(parity.iter_mut()) {
                *o = p.as_mut_slice();
            }
            rs.encode(&data[..k], &mut outs[..m])
                .map_err(|_| Vec::new())?;
            let mut rewrote = false;
            for (j, p) in parity.into_iter().enumerate() {
                let member = members[k + j];
                if !topo.writable(member) || batch.shard(member, row) == Some(&p[..]) {
                    continue;
                }
                rewrote = true;
                writes.push((member, row * su, p));
            }
            out.fixed += u64::from(rewrote);
        }
        out.read_bytes = batch.bufs.iter().flatten().map(|b| b.len() as u64).sum();
        out.written_bytes = writes.iter().map(|w| w.2.len() as u64).sum();
        self.write_pieces(topo, writes).await?;
        Ok(out)
    }

    async fn resync_near(
        &self,
        topo: &Topology,
        r0: u64,
        r1: u64,
        copies: usize,
    ) -> std::result::Result<Outcome, Faults> {
        let su = self.su();
        let n = self.geo.members() as u64;
        let c = copies as u64;
        // Copies of a chunk span at most two rows: read one row more.
        let r1e = (r1 + 1).min(self.geo.rows());
        let batch = self
            .read_batch(topo, r0, r1e, |i| topo.readable(i, r1e * su))
            .await?;
        let mut out = Outcome::default();
        let mut writes = Vec::new();
        for chunk in near_chunk_span(r0, r1, n, c, self.geo.chunks()) {
            let locs: Vec<(usize, u64)> = (0..copies)
                .map(|j| self.geo.chunk_location(chunk, j))
                .collect();
            let Some(src) = locs.iter().find_map(|&(m, r)| batch.shard(m, r)) else {
                out.unverifiable += 1;
                continue;
            };
            let mut rewrote = false;
            for &(member, row) in &locs {
                if topo.writable(member) && batch.shard(member, row) != Some(src) {
                    writes.push((member, row * su, IoBuf::from_slice(src)));
                    rewrote = true;
                }
            }
            out.fixed += u64::from(rewrote);
        }
        out.read_bytes = batch.bufs.iter().flatten().map(|b| b.len() as u64).sum();
        out.written_bytes = writes.iter().map(|w| w.2.len() as u64).sum();
        self.write_pieces(topo, writes).await?;
        Ok(out)
    }
}
