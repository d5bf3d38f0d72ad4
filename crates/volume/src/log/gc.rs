//! Garbage collection and the space keeper: when free segments run low, live blocks move
//! out of the sparsest segments (as `Move` records, applied only if the block was not
//! rewritten meanwhile) and a checkpoint turns the emptied segments into free ones.
//! Between victims it rests like a rebuild (`Throttle::Fraction`), except when writers
//! are waiting for space.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use blockdev::IoBuf;

use super::engine::{GC_RESERVE, Item, LogEngine};
use super::format::{LogGeometry, Record, decode_summary};
use crate::config::Throttle;
use crate::error::{Result, VolumeError};

/// Checkpoint at least every this many segments written (bounds replay at assembly).
pub const CHECKPOINT_EVERY_SEGMENTS: u64 = 1024;
/// Most segments emptied in one round.
const MAX_VICTIMS: usize = 32;
/// Destination segments one round fills at most (fewer when few are free): rounds
/// that free several segments at once mean fewer checkpoints per segment freed.
const GC_BATCH_SEGMENTS: usize = 8;
/// Victim segments read at once (a round's reads overlap; memory stays at this many
/// segment buffers).
const VICTIM_READS_IN_FLIGHT: usize = 4;

/// The victims of one round: the sparsest used segments (fewest live bytes first) whose
/// live bytes fit `destinations` segments of `capacity` bytes beside `already_bytes`,
/// at most `MAX_VICTIMS`.
/// Empty unless the round frees more segments than it fills: moving one victim into
/// one destination (what the sparsest victims of an 80 %-full log would allow a round
/// of one destination) only turns an emptied segment into a half-filled one.
pub(super) fn choose_victims(
    mut used: Vec<(u32, u64)>,
    capacity: u64,
    destinations: usize,
    already_bytes: u64,
) -> Vec<u32> {
    used.sort_by_key(|&(seg, bytes)| (bytes, seg));
    let budget = capacity * destinations as u64;
    // What the open segment holds goes out with the first destination.
    let mut total = already_bytes.min(capacity);
    let mut out = Vec::new();
    for (seg, bytes) in used {
        if total + bytes > budget || out.len() >= MAX_VICTIMS {
            break;
        }
        total += bytes;
        out.push(seg);
    }
    // Destinations the round fills (the last one partly).
    let filled = total.div_ceil(capacity.max(1)) as usize;
    if out.len() <= filled {
        out.clear();
    }
    out
}

/// Destination segments a round may fill when `free` segments are free: the writers'
/// reserve (host writes never take it) and half of the rest (host writes take segments
/// meanwhile), less one for what does not pack exactly (blocks never straddle a chunk),
/// at least 1, at most `GC_BATCH_SEGMENTS`.
pub(super) fn round_destinations(free: usize) -> usize {
    (free.min(GC_RESERVE) + free.saturating_sub(GC_RESERVE) / 2)
        .saturating_sub(1)
        .clamp(1, GC_BATCH_SEGMENTS)
}

impl LogEngine {
    /// Free segments below which garbage collection runs.
    pub(super) fn gc_low_water(&self) -> usize {
        (self.geo.segments as usize / 10).max(2 * GC_RESERVE + 2)
    }

    /// One round: moves the live blocks of the sparsest segments, as many as fill the
    /// destinations the free segments allow (so they go out full, not as sparse as
    /// their sources), provided that frees more segments than it fills. Returns how many
    /// segments it emptied (0: no round worth doing).
    pub async fn collect_garbage(self: &Arc<Self>) -> Result<usize> {
        let per_seg = LogGeometry::raw_blocks_per_segment(
            self.geo.segment_bytes,
            self.geo.stripe_unit_bytes,
            self.geo.block_bytes,
            self.geo.align_bytes,
        );
        let bs = u64::from(self.geo.block_bytes);
        let capacity = per_seg * bs;
        let victims: Vec<u32> = {
            let st = self.st();
            choose_victims(
                st.space.gc_candidates(capacity.saturating_sub(bs)),
                capacity,
                round_destinations(st.space.free.len()),
                st.open.fill,
            )
        };
        if victims.is_empty() {
            return Ok(0);
        }
        let mut tickets = Vec::new();
        let mut moved = 0u64;
        // Victim reads overlap (spawned: each owns its buffer), moves go in victim order.
        let read = |victim: u32| {
            let me = self.clone();
            tokio::spawn(async move {
                me.inner
                    .read_volume(
                        me.geo.segment_offset(victim),
                        IoBuf::new_zeroed(me.geo.segment_bytes as usize),
                    )
                    .await
            })
        };
        let mut reads: VecDeque<_> = victims
            .iter()
            .take(VICTIM_READS_IN_FLIGHT)
            .map(|&v| read(v))
            .collect();
        let mut emptied = 0usize;
        for (i, &victim) in victims.iter().enumerate() {
            let Some(pending_read) = reads.pop_front() else {
                break;
            };
            if let Some(&next) = victims.get(i + VICTIM_READS_IN_FLIGHT) {
                reads.push_back(read(next));
            }
            let data = pending_read.await.map_err(|e| {
                VolumeError::Invalid(format!("log segment {victim}: read task failed: {e}"))
            })?;
            match self
                .move_live_blocks(victim, &data?, &mut tickets, &mut moved)
                .await
            {
                Ok(()) => emptied += 1,
                Err(_) if self.st().space.free.len() <= 1 => {
                    // The last free segment went to the moves so far (sealed): they
                    // complete, their victims empty, the next checkpoint frees them.
                    tracing::debug!(volume = %self.inner.name, emptied, "garbage collection round cut short: no free segment");
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        self.kick_seal(true);
        for t in &tickets {
            self.wait_moved(t).await?;
        }
        self.counters
            .gc_segments
            .fetch_add(emptied as u64, Ordering::Relaxed);
        self.counters
            .gc_moved_bytes
            .fetch_add(moved, Ordering::Relaxed);
        Ok(emptied)
    }

    /// Waits until the segment holding moves has been written. That segment may need the
    /// last free one while segments emptied earlier wait for a checkpoint: then this
    /// checkpoint gives them back (waiting instead would wait forever: the keeper is the
    /// one that checkpoints).
    async fn wait_moved(self: &Arc<Self>, t: &super::engine::Ticket) -> Result<()> {
        let mut rx = t.subscribe();
        loop {
            let mut progress = self.progress.subscribe();
            if rx.borrow_and_update().is_some() {
                return Ok(());
            }
            let stuck = {
                let st = self.st();
                st.space.free.is_empty() && st.space.pending > 0
            };
            if stuck {
                self.checkpoint().await?;
                continue;
            }
            tokio::select! {
                r = rx.changed() => {
                    if r.is_err() {
                        return Ok(());
                    }
                }
                _ = progress.changed() => {}
            }
        }
    }

    /// Appends every block still live in `victim` (whose bytes are `data`) as a move
    /// record.
    async fn move_live_blocks(
        self: &Arc<Self>,
        victim: u32,
        data: &[u8],
        tickets: &mut Vec<Arc<super::engine::Ticket>>,
        moved: &mut u64,
    ) -> Result<()> {
        let summary = decode_summary(data, &self.geo, self.uuid, victim).ok_or_else(|| {
            VolumeError::Invalid(format!("log segment {victim} has no valid summary"))
        })?;
        for r in &summary.records {
            let (Record::Write { lba, loc } | Record::Move { lba, loc, .. }) = *r else {
                continue;
            };
            let live = self.st().space.map[lba as usize];
            if live.seg != victim || live.off != loc.off {
                continue;
            }
            let stored = &data[loc.off as usize..(loc.off + loc.len) as usize];
            if crc32c::crc32c(stored) != loc.crc {
                return Err(VolumeError::Invalid(format!(
                    "log segment {victim}: block {lba} fails its checksum"
                )));
            }
            let t = self
                .append(
                    Item::Block {
                        lba,
                        codec: loc.codec,
                        stored,
                        crc: loc.crc,
                        moved_from: Some((victim, loc.off)),
                    },
                    false,
                    true,
                    false,
                )
                .await?;
            *moved += u64::from(loc.len);
            if !tickets.iter().any(|x| Arc::ptr_eq(x, &t)) {
                tickets.push(t);
            }
        }
        Ok(())
    }

    /// One round of the space keeper. Returns true if it did something.
    pub async fn keep_space(self: &Arc<Self>) -> Result<bool> {
        let (free, pending, since) = {
            let st = self.st();
            (st.space.free.len(), st.space.pending, st.segs_since_ckpt)
        };
        let low = self.gc_low_water();
        if free < low {
            // Emptied segments come back with a checkpoint; batch them (a checkpoint
            // writes the whole map) unless space is short. It does not pause the
            // writes, so the collection goes on beside it.
            if pending > 0 && (free <= GC_RESERVE + 1 || pending >= low / 4) {
                let (ck, gc) = tokio::join!(self.checkpoint(), self.collect_garbage());
                ck?;
                gc?;
                return Ok(true);
            }
            if self.collect_garbage().await? > 0 {
                return Ok(true);
            }
            if self.st().space.pending > 0 {
                self.checkpoint().await?;
                return Ok(true);
            }
            return Ok(false);
        }
        if since >= CHECKPOINT_EVERY_SEGMENTS {
            self.checkpoint().await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Free segments down to half the low water: writers are about to wait for space,
    /// so garbage collection does not rest.
    fn urgent(&self) -> bool {
        self.st().space.free.len() <= self.gc_low_water() / 2
    }

    /// The background keeper: runs until the engine is dropped or the volume stops.
    pub(crate) fn spawn_keeper(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak: Weak<LogEngine> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut debt = Duration::ZERO;
            loop {
                let Some(me) = weak.upgrade() else { return };
                if me.inner.stopped.load(Ordering::Acquire) || me.inner.is_halted() {
                    return;
                }
                let clock = me.inner.opts.clock.clone();
                let started = clock.now();
                let did = match me.keep_space().await {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::warn!(volume = %me.inner.name, error = %e, "log space keeper");
                        false
                    }
                };
                if did {
                    if let Throttle::Fraction(f) = me.inner.opts.throttle
                        && f > 0.0
                        && f < 1.0
                        && !me.urgent()
                    {
                        let busy = clock.now().saturating_sub(started);
                        debt += busy.mul_f64((1.0 - f) / f);
                        if debt >= Duration::from_millis(100) {
                            let pay = debt;
                            drop(me);
                            clock.sleep(pay).await;
                            debt = Duration::ZERO;
                        }
                    }
                    continue;
                }
                let _ =
                    tokio::time::timeout(Duration::from_millis(200), me.gc_kick.notified()).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: u64 = 47 * 4096;

    #[test]
    fn a_round_that_frees_no_more_than_it_fills_is_not_taken() {
        // Victims half full: one destination holds one of them (1 freed, 1 filled).
        let used: Vec<(u32, u64)> = (0..10).map(|s| (s, 25 * 4096)).collect();
        assert!(choose_victims(used.clone(), CAP, 1, 0).is_empty());
        // Three destinations take five of them: two segments gained.
        assert_eq!(choose_victims(used.clone(), CAP, 3, 0), vec![0, 1, 2, 3, 4]);
        // What the open segment holds counts: four of them then.
        assert_eq!(choose_victims(used, CAP, 3, 30 * 4096), vec![0, 1, 2, 3]);
    }

    #[test]
    fn victims_are_the_sparsest_and_bounded() {
        let used = vec![(7, 46 * 4096), (3, 4096), (5, 2 * 4096), (9, 4096)];
        assert_eq!(choose_victims(used, CAP, 1, 0), vec![3, 9, 5]);
        let many: Vec<(u32, u64)> = (0..100).map(|s| (s, 0)).collect();
        assert_eq!(choose_victims(many, CAP, 8, 0).len(), MAX_VICTIMS);
    }

    #[test]
    fn the_collector_takes_the_reserve_but_one_when_writers_wait() {
        assert_eq!(round_destinations(0), 1);
        assert_eq!(round_destinations(2), 1);
        assert_eq!(round_destinations(GC_RESERVE), GC_RESERVE - 1);
        assert_eq!(round_destinations(GC_RESERVE + 4), GC_RESERVE + 1);
        assert_eq!(round_destinations(1000), GC_BATCH_SEGMENTS);
    }
}
