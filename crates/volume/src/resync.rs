//! Resync after an unclean stop: make parity (or copies) agree with the data in every
//! dirty bitmap region, and only there.

use blockdev::IoBuf;

use crate::engine::{Faults, Inner};
use crate::error::Result;
use crate::layout::Family;
use crate::topology::Topology;

/// What one batch did.
#[derive(Default, Clone, Copy)]
struct Outcome {
    /// Stripes rewritten.
    fixed: u64,
    /// Stripes that could not be verified (a data member missing).
    unverifiable: u64,
}

impl Inner {
    /// Resyncs every dirty region (called by assembly before the volume is handed out).
    /// The regions stay dirty until the bitmap sweeper clears them after a flush.
    pub async fn resync_dirty(
        &self,
        journaled_rows: &std::collections::HashSet<u64>,
    ) -> Result<()> {
        if !self.intent.enabled() {
            return Ok(());
        }
        let regions = self.intent.dirty_regions();
        if regions.is_empty() {
            return Ok(());
        }
        let su = self.su();
        let rows = self.geo.rows();
        let step = self.batch_rows();
        let mut total = Outcome::default();
        for region in &regions {
            let (s, e) = self.intent.region_range(*region);
            let (first, last) = (s / su, (e / su).min(rows));
            let mut r0 = first;
            while r0 < last {
                let r1 = (r0 + step).min(last);
                let _locks = self.lock_rows(r0, r1).await;
                let o = self
                    .with_retry(|topo| async move {
                        self.resync_batch(&topo, r0, r1, journaled_rows).await
                    })
                    .await?;
                total.fixed += o.fixed;
                total.unverifiable += o.unverifiable;
                r0 = r1;
            }
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
        let first = (r0 * n).div_ceil(c);
        let last = (r1 * n).div_ceil(c).min(self.geo.chunks());
        for chunk in first..last {
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
        self.write_pieces(topo, writes).await?;
        Ok(out)
    }
}
