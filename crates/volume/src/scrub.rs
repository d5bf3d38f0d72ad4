//! Scrub: read every stripe, check parity (or copies), repair what disagrees.
//!
//! Repair policy: a mismatch is first confirmed by re-reading the stripe (a transient read
//! corruption is only counted). With two or more parity shards a single bad shard (data
//! or parity) can be located: the one whose reconstruction from the others makes the whole
//! stripe consistent; it is rewritten. Otherwise (raid5, or more than one bad shard) the
//! data is taken as correct and parity is recomputed and rewritten, as md does. Mirrors
//! take the majority content if there is one, else the first copy.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use blockdev::IoBuf;

use crate::chunks::{Pacer, Window, chunks, near_chunk_span, rate_eta};
use crate::engine::{Faults, Inner};
use crate::error::Result;
use crate::layout::Family;
use crate::status::{ScrubProgress, ScrubReport, TaskPhase};
use crate::topology::Topology;
use crate::volume::Volume;

impl Volume {
    /// Scrubs the whole volume (throttled like a rebuild, a few batches in flight) and
    /// returns the report, also kept for `status()`, which shows the progress while it
    /// runs. `stop()` interrupts it.
    pub async fn scrub(&self) -> Result<ScrubReport> {
        self.inner.check_usable()?;
        if self.inner.tasks().resync_running {
            // Torn rows are the resync's to fix (parity from data); a scrub could pick
            // another shard as the bad one.
            return Err(crate::error::VolumeError::Invalid(
                "a background resync is running: scrub once it is done".into(),
            ));
        }
        let cancel = Arc::new(AtomicBool::new(false));
        self.inner.tasks().scrub_cancel = Some(cancel.clone());
        let mut report = ScrubReport::default();
        let result = self.inner.scrub_all(&cancel, &mut report).await;
        let phase = match &result {
            Ok(true) => TaskPhase::Done,
            Ok(false) => TaskPhase::Stopped,
            Err(e) => TaskPhase::Failed(e.to_string()),
        };
        report.phase = Some(phase.clone());
        let mut t = self.inner.tasks();
        t.scrub_cancel = None;
        t.last_scrub = Some(report.clone());
        if let Some(p) = t.scrub_progress.as_mut() {
            p.phase = phase;
        }
        drop(t);
        result.map(|_| report)
    }
}

impl Inner {
    async fn scrub_all(&self, cancel: &AtomicBool, report: &mut ScrubReport) -> Result<bool> {
        let rows = self.geo.rows();
        let row_bytes = self.su() * self.geo.members() as u64;
        // A log volume: the rows it uses only (free segments hold nothing to check).
        let ranges = self.layout_rows_in_use().unwrap_or_else(|| vec![(0, rows)]);
        let total: u64 = ranges.iter().map(|(a, b)| (b - a) * row_bytes).sum();
        let clock = self.opts.clock.clone();
        let started = clock.now();
        let mut pacer = Pacer::new(self.opts.throttle, clock.clone());
        let publish = |done: u64, phase: TaskPhase, busy_fraction: f64| {
            let elapsed = clock.now().saturating_sub(started).as_secs_f64();
            let (rate, eta) = rate_eta(done, total, elapsed);
            self.tasks().scrub_progress = Some(ScrubProgress {
                bytes_done: done,
                bytes_total: total,
                rate_bytes_per_sec: rate,
                eta_secs: eta,
                phase,
                busy_fraction,
            });
        };
        publish(0, TaskPhase::Running, 1.0);
        let mut todo = chunks(ranges, self.batch_rows(), rows).peekable();
        let mut window = Window::new(self.opts.inflight_batches);
        let (mut done, mut stopped) = (0u64, false);
        let mut failure = None;
        loop {
            stopped |= cancel.load(Ordering::Acquire);
            while !stopped && failure.is_none() && window.has_room() && pacer.may_issue() {
                let Some(c) = todo.next() else { break };
                pacer.issue(c.rows() * row_bytes);
                window.push(async move {
                    let _locks = self.lock_rows(c.r0, c.r1).await;
                    let part = self
                        .with_retry(|topo| async move { self.scrub_batch(&topo, c.r0, c.r1).await })
                        .await;
                    (c, part)
                });
            }
            if window.is_empty() {
                if stopped || failure.is_some() || todo.peek().is_none() {
                    break;
                }
                // Throttled: nothing in flight and no batch may start yet.
                pacer.rest().await;
                publish(done, TaskPhase::Running, pacer.busy_fraction());
                continue;
            }
            let Some((c, part)) = window.next().await else {
                continue;
            };
            match part {
                Ok(part) => add(report, &part),
                Err(e) => {
                    failure.get_or_insert(e);
                    continue;
                }
            }
            done += c.rows() * row_bytes;
            pacer.record();
            publish(done, TaskPhase::Running, pacer.busy_fraction());
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if !stopped {
            // The rest still owed, as for a rebuild.
            pacer.rest().await;
            publish(done, TaskPhase::Running, pacer.busy_fraction());
        }
        Ok(!stopped)
    }

    async fn scrub_batch(
        &self,
        topo: &Topology,
        r0: u64,
        r1: u64,
    ) -> std::result::Result<ScrubReport, Faults> {
        match self.geo.family() {
            Family::Rotating { k, m } => self.scrub_rotating(topo, r0, r1, k, m).await,
            Family::Near { copies } => self.scrub_near(topo, r0, r1, copies).await,
        }
    }

    /// Whether the row's shards (data then parity, all present) are consistent.
    fn consistent(&self, shards: &[&[u8]], k: usize, m: usize) -> bool {
        let Some(rs) = self.rs.as_ref() else {
            return true;
        };
        let len = shards.first().map_or(0, |s| s.len());
        let mut scratch: Vec<Vec<u8>> = (0..m).map(|_| vec![0u8; len]).collect();
        let mut outs: Vec<&mut [u8]> = scratch.iter_mut().map(|v| v.as_mut_slice()).collect();
        rs.verify(&shards[..k + m], &mut outs).unwrap_or(false)
    }

    async fn scrub_rotating(
        &self,
        topo: &Topology,
        r0: u64,
        r1: u64,
        k: usize,
        m: usize,
    ) -> std::result::Result<ScrubReport, Faults> {
        let su = self.su();
        let batch = self
            .read_batch(topo, r0, r1, |i| topo.readable(i, r1 * su))
            .await?;
        let mut rep = ScrubReport::default();
        for row in r0..r1 {
            let members: Vec<usize> = self.geo.row_shard_members(row).collect();
            let shards: Option<Vec<&[u8]>> =
                members.iter().map(|&mb| batch.shard(mb, row)).collect();
            let Some(shards) = shards else {
                rep.skipped += 1;
                continue;
            };
            rep.stripes_checked += 1;
            rep.bytes_checked += su * (k + m) as u64;
            if self.consistent(&shards, k, m) {
                continue;
            }
            // Confirm with a fresh read of the row.
            let again = self
                .read_batch(topo, row, row + 1, |i| members.contains(&i))
                .await?;
            let shards: Vec<&[u8]> = members
                .iter()
                .map(|&mb| again.shard(mb, row).unwrap_or(&[]))
                .collect();
            if self.consistent(&shards, k, m) {
                rep.transient += 1;
                continue;
            }
            rep.mismatches += 1;
            let writes = match self.locate_bad_shard(&shards, k, m) {
                Some((s, fixed)) => {
                    rep.located += 1;
                    vec![(members[s], row * su, fixed)]
                }
                None => {
                    let parity = self.encode_parity(&shards[..k], m).ok_or_else(Vec::new)?;
                    parity
                        .into_iter()
                        .enumerate()
                        .map(|(j, p)| (members[k + j], row * su, p))
                        .collect()
                }
            };
            self.write_pieces(topo, writes).await?;
            rep.repaired += 1;
        }
        Ok(rep)
    }

    fn encode_parity(&self, data: &[&[u8]], m: usize) -> Option<Vec<IoBuf>> {
        let rs = self.rs.as_ref()?;
        let len = data.first().map_or(0, |d| d.len());
        let mut parity: Vec<IoBuf> = (0..m).map(|_| IoBuf::new_zeroed(len)).collect();
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
        rs.encode(data, &mut outs).ok()?;
        Some(parity)
    }

    /// With m >= 2: the single shard whose reconstruction makes the row consistent, and
    /// its corrected content.
    fn locate_bad_shard(&self, shards: &[&[u8]], k: usize, m: usize) -> Option<(usize, IoBuf)> {
        if m < 2 {
            return None;
        }
        let rs = self.rs.as_ref()?;
        let mut found: Option<(usize, IoBuf)> = None;
        for s in 0..k + m {
            let mut bufs: Vec<Vec<u8>> = shards.iter().map(|x| x.to_vec()).collect();
            let mut present = vec![true; k + m];
            present[s] = false;
            let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            if rs.reconstruct_some(&mut refs, &present, &[s]).is_err() {
                continue;
            }
            let view: Vec<&[u8]> = bufs.iter().map(|b| b.as_slice()).collect();
            if self.consistent(&view, k, m) {
                if found.is_some() {
                    return None; // ambiguous
                }
                found = Some((s, IoBuf::from_slice(&bufs[s])));
            }
        }
        found
    }

    async fn scrub_near(
        &self,
        topo: &Topology,
        r0: u64,
        r1: u64,
        copies: usize,
    ) -> std::result::Result<ScrubReport, Faults> {
        let su = self.su();
        let n = self.geo.members() as u64;
        let c = copies as u64;
        let r1e = (r1 + 1).min(self.geo.rows());
        let batch = self
            .read_batch(topo, r0, r1e, |i| topo.readable(i, r1e * su))
            .await?;
        let mut rep = ScrubReport::default();
        for chunk in near_chunk_span(r0, r1, n, c, self.geo.chunks()) {
            let locs: Vec<(usize, u64)> = (0..copies)
                .map(|j| self.geo.chunk_location(chunk, j))
                .collect();
            let views: Option<Vec<&[u8]>> = locs.iter().map(|&(m, r)| batch.shard(m, r)).collect();
            let Some(views) = views else {
                rep.skipped += 1;
                continue;
            };
            rep.stripes_checked += 1;
            rep.bytes_checked += su * copies as u64;
            if views.windows(2).all(|w| w[0] == w[1]) {
                continue;
            }
            // Confirm with fresh reads of each copy.
            let mut fresh = Vec::with_capacity(copies);
            for &(member, row) in &locs {
                let b = self
                    .mread(topo, member, row * su, IoBuf::new_zeroed(su as usize))
                    .await
                    .map_err(|f| vec![f])?;
                fresh.push(b);
            }
            if fresh.windows(2).all(|w| w[0] == w[1]) {
                rep.transient += 1;
                continue;
            }
            rep.mismatches += 1;
            // Majority if there is one, else the first copy.
            let best = (0..copies)
                .max_by_key(|&i| {
                    let votes = fresh.iter().filter(|f| **f == fresh[i]).count();
                    (votes, std::cmp::Reverse(i))
                })
                .unwrap_or(0);
            let good = fresh[best].clone();
            let writes = locs
                .iter()
                .zip(&fresh)
                .filter(|(_, f)| **f != good)
                .map(|(&(member, row), _)| (member, row * su, good.clone()))
                .collect();
            self.write_pieces(topo, writes).await?;
            rep.repaired += 1;
        }
        Ok(rep)
    }
}

fn add(total: &mut ScrubReport, part: &ScrubReport) {
    total.stripes_checked += part.stripes_checked;
    total.bytes_checked += part.bytes_checked;
    total.mismatches += part.mismatches;
    total.repaired += part.repaired;
    total.located += part.located;
    total.skipped += part.skipped;
    total.transient += part.transient;
}
