//! Garbage collection and the space keeper: when free segments run low, live blocks move
//! out of the sparsest segments (as `Move` records, applied only if the block was not
//! rewritten meanwhile) and a checkpoint turns the emptied segments into free ones.
//! Between victims it rests like a rebuild (`Throttle::Fraction`), except when writers
//! are waiting for space.

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
const GC_BATCH_SEGMENTS: u64 = 4;

impl LogEngine {
    /// Free segments below which garbage collection runs.
    pub(super) fn gc_low_water(&self) -> usize {
        (self.geo.segments as usize / 10).max(2 * GC_RESERVE + 2)
    }

    /// Moves the live blocks of the sparsest segments, as many as fill about one
    /// segment (so the segment they go to is full, not as sparse as its sources). Returns
    /// how many segments it emptied (0: no segment worth moving).
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
            let mut used = st.space.gc_candidates(capacity.saturating_sub(bs));
            used.sort_by_key(|&(_, bytes)| bytes);
            // Half the free segments above the host writers' reserve: a batch must not
            // run out of destinations half way (host writes take segments too).
            let spare = (st.space.free.len().saturating_sub(GC_RESERVE) / 2) as u64;
            let batch = capacity * GC_BATCH_SEGMENTS.min(spare).max(1);
            let mut total = 0u64;
            let mut out = Vec::new();
            for (seg, bytes) in used {
                if !out.is_empty() && (total + bytes > batch || out.len() >= MAX_VICTIMS) {
                    break;
                }
                total += bytes;
                out.push(seg);
            }
            out
        };
        if victims.is_empty() {
            return Ok(0);
        }
        let mut tickets = Vec::new();
        let mut moved = 0u64;
        for &victim in &victims {
            match self
                .move_live_blocks(victim, &mut tickets, &mut moved)
                .await
            {
                Ok(()) => {}
                Err(e) if self.st().space.free.is_empty() => {
                    // Out of segments mid-batch: what is appended goes out after the
                    // next checkpoint (moves apply only if still current).
                    tracing::debug!(volume = %self.inner.name, error = %e, "garbage collection paused");
                    self.counters
                        .gc_moved_bytes
                        .fetch_add(moved, Ordering::Relaxed);
                    return Ok(0);
                }
                Err(e) => return Err(e),
            }
        }
        self.kick_seal();
        for t in &tickets {
            self.wait_moved(t).await?;
        }
        self.counters
            .gc_segments
            .fetch_add(victims.len() as u64, Ordering::Relaxed);
        self.counters
            .gc_moved_bytes
            .fetch_add(moved, Ordering::Relaxed);
        Ok(victims.len())
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

    /// Appends every block still live in `victim` as a move record.
    async fn move_live_blocks(
        self: &Arc<Self>,
        victim: u32,
        tickets: &mut Vec<Arc<super::engine::Ticket>>,
        moved: &mut u64,
    ) -> Result<()> {
        let data = self
            .inner
            .read_volume(
                self.geo.segment_offset(victim),
                IoBuf::new_zeroed(self.geo.segment_bytes as usize),
            )
            .await?;
        let summary = decode_summary(&data, &self.geo, self.uuid, victim).ok_or_else(|| {
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
