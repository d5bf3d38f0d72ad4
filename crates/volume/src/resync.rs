//! Resync after an unclean stop: make parity (or copies) agree with the data in every
//! dirty bitmap region, and only there.

use blockdev::IoBuf;

use crate::chunks::{Window, chunks, merge_ranges, near_chunk_span};
use crate::engine::{Faults, Inner};
use crate::error::Result;
use crate::layout::Family;
use crate::status::ResyncReport;
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
}

impl Inner {
    /// Resyncs every dirty region (called by assembly before the volume is handed out),
    /// a few batches in flight, unthrottled (the volume is not serving yet). The regions
    /// stay dirty until the bitmap sweeper clears them after a flush. What it did is kept
    /// for `status().last_resync`.
    pub async fn resync_dirty(
        &self,
        journaled_rows: &std::collections::HashSet<u64>,
    ) -> Result<()> {
        let clock = self.opts.clock.clone();
        let started = clock.now();
        let regions = if self.intent.enabled() {
            self.intent.dirty_regions()
        } else {
            Vec::new()
        };
        let su = self.su();
        let rows = self.geo.rows();
        let ranges = merge_ranges(regions.iter().map(|&region| {
            let (s, e) = self.intent.region_range(region);
            ((s / su).min(rows), (e / su).min(rows))
        }));
        let data_rows: u64 = ranges.iter().map(|(a, b)| b - a).sum();
        let mut total = Outcome::default();
        let mut todo = chunks(ranges, self.batch_rows(), rows);
        let mut window = Window::new(self.opts.inflight_batches);
        let mut failure = None;
        loop {
            while failure.is_none() && window.has_room() {
                let Some(c) = todo.next() else { break };
                window.push(async move {
                    let _locks = self.lock_rows(c.r0, c.r1).await;
                    self.with_retry(|topo| async move {
                        self.resync_batch(&topo, c.r0, c.r1, journaled_rows).await
                    })
                    .await
                });
            }
            match window.next().await {
                None => break,
                Some(Ok(o)) => {
                    total.fixed += o.fixed;
                    total.unverifiable += o.unverifiable;
                    total.read_bytes += o.read_bytes;
                    total.written_bytes += o.written_bytes;
                }
                Some(Err(e)) => {
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failure {
            return Err(e);
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
            return Ok(());
        }
        self.note(format!(
            "resync: {} dirty regions, {} stripes rewritten",
            regions.len(),
            total.fixed
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
        Ok(())
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
        journaled_rows: &std::collections::HashSet<u64>,
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
        journaled_rows: &std::collections::HashSet<u64>,
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
