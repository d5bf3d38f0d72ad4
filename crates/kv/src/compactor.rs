//! The maintenance task: checkpoints and compaction.
//!
//! Compaction picks sealed segments that a durable checkpoint covers (no replay needs
//! their records), most garbage first; finds their live values with a chunked index scan;
//! reads them (only the blocks holding live values); re-appends them through the
//! committer as relocation records; and once every live value has moved, marks the
//! segment pending free. The next checkpoint (taken after the relocations were applied)
//! frees the segment when it is durable. Tombstones in a victim are simply dropped: the
//! covering checkpoint already reflects them.
//!
//! Foreground commands are never blocked for long: the index scan holds the read lock for
//! at most [`SCAN_CHUNK`] entries at a time, relocation batches are at most one batch, and
//! the throttle paces reads and writes unless a store waits for space.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;

use blockdev::{BlockError, IoBuf};
use tokio::sync::{mpsc, oneshot};

use crate::KvError;
use crate::bytes::align_up;
use crate::checkpoint;
use crate::clock::Pacer;
use crate::format::Entry;
use crate::inner::{Inner, RelocateOutcome, RelocateRequest, Relocation};
use crate::key::Key;
use crate::state::SegState;
use crate::stats::add;

/// Index entries examined per read-lock hold while looking for live values.
const SCAN_CHUNK: usize = 4096;
/// Largest read of live values; closer values share a read when the gap is small.
const READ_WINDOW_BYTES: u64 = 1 << 20;
const READ_GAP_BYTES: u64 = 64 << 10;

/// What a compaction did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactionReport {
    pub segments_reclaimed: u64,
    /// Bytes of relocation batches written.
    pub bytes_moved: u64,
    pub bytes_read: u64,
    pub bytes_reclaimed: u64,
    pub values_moved: u64,
    /// Segments left in place because a value in them could not be read intact.
    pub damaged_segments: u64,
}

pub(crate) enum MaintCommand {
    /// Compact every covered segment with any garbage, then checkpoint.
    Compact {
        reply: oneshot::Sender<Result<CompactionReport, KvError>>,
    },
    Checkpoint {
        reply: oneshot::Sender<Result<(), KvError>>,
    },
    /// Stop (after answering).
    Shutdown { reply: oneshot::Sender<()> },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Free space is low: segments with at least the configured garbage, throttled.
    Background,
    /// A store waits for space: any garbage, unthrottled, few segments per round.
    Urgent,
    /// Asked for: any garbage.
    Forced,
}

pub(crate) struct Maintenance {
    inner: Arc<Inner>,
    rx: mpsc::Receiver<MaintCommand>,
    reloc_tx: mpsc::Sender<RelocateRequest>,
    generation: u64,
    pacer: Pacer,
}

impl Maintenance {
    pub fn new(
        inner: Arc<Inner>,
        rx: mpsc::Receiver<MaintCommand>,
        reloc_tx: mpsc::Sender<RelocateRequest>,
        generation: u64,
    ) -> Maintenance {
        let pacer = Pacer::new(
            inner.opts.clock.clone(),
            inner.opts.compaction.throttle_bytes_per_sec,
        );
        Maintenance {
            inner,
            rx,
            reloc_tx,
            generation,
            pacer,
        }
    }

    pub async fn run(mut self) {
        loop {
            let cmd = tokio::select! {
                c = self.rx.recv() => match c {
                    Some(c) => Some(c),
                    None => break,
                },
                _ = self.inner.maint_wake.notified() => None,
            };
            match cmd {
                Some(MaintCommand::Compact { reply }) => {
                    let _ = reply.send(self.compact_all().await);
                }
                Some(MaintCommand::Checkpoint { reply }) => {
                    let _ = reply.send(self.checkpoint().await.map(|_| ()));
                }
                Some(MaintCommand::Shutdown { reply }) => {
                    let _ = reply.send(());
                    break;
                }
                None => {}
            }
            if let Err(e) = self.background().await {
                tracing::warn!(device = %self.inner.dev.info().name, "KV maintenance: {e}");
            }
        }
    }

    async fn checkpoint(&mut self) -> Result<checkpoint::CheckpointDone, KvError> {
        let generation = self.generation + 1;
        let done = checkpoint::checkpoint(&self.inner, generation).await?;
        self.generation = generation;
        Ok(done)
    }

    /// Work that conditions call for: a stalled store, a due checkpoint, low free space.
    async fn background(&mut self) -> Result<(), KvError> {
        loop {
            let (stalled, due, free, failed) = {
                let st = self.inner.read();
                let free = st.free_segments().count() as u32;
                let due = st.applied_log_bytes - st.checkpoint_log_bytes
                    >= crate::committer::checkpoint_interval(&self.inner, &st);
                (st.stalled, due, free, st.failed.is_some())
            };
            if failed {
                return Ok(());
            }
            if stalled {
                return self.urgent().await;
            }
            if due {
                self.checkpoint().await?;
                continue;
            }
            let start = (u64::from(self.inner.layout.segment_count)
                * u64::from(self.inner.opts.compaction.start_free_percent)
                / 100)
                .max(u64::from(self.inner.reserve_segments) + 2);
            if u64::from(free) >= start {
                return Ok(());
            }
            let report = self.round(Mode::Background, None).await?;
            if report.segments_reclaimed == 0 {
                return Ok(());
            }
        }
    }

    /// A store waits for a segment: reclaim until a user batch may switch segments again,
    /// or say that nothing can be reclaimed.
    async fn urgent(&mut self) -> Result<(), KvError> {
        let mut result = Ok(());
        let mut no_progress = false;
        for _ in 0..64 {
            let free = self.inner.read().free_segments().count() as u32;
            if free > self.inner.reserve_segments {
                break;
            }
            match self.round(Mode::Urgent, None).await {
                Ok(r) if r.segments_reclaimed == 0 && !self.has_victims(Mode::Urgent) => {
                    no_progress = true;
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    no_progress = true;
                    result = Err(e);
                    break;
                }
            }
        }
        self.inner.write().no_progress = no_progress;
        self.inner.space_wake.notify_one();
        result
    }

    /// Compacts the segments that have garbage now (not the ones its own relocations
    /// fill, which would never end).
    async fn compact_all(&mut self) -> Result<CompactionReport, KvError> {
        self.checkpoint().await?;
        let mut todo: Vec<u32> = self.victims(Mode::Forced, None, usize::MAX);
        let mut total = CompactionReport::default();
        while !todo.is_empty() {
            let r = self.round(Mode::Forced, Some(&mut todo)).await?;
            total.segments_reclaimed += r.segments_reclaimed;
            total.bytes_moved += r.bytes_moved;
            total.bytes_read += r.bytes_read;
            total.bytes_reclaimed += r.bytes_reclaimed;
            total.values_moved += r.values_moved;
            total.damaged_segments += r.damaged_segments;
        }
        Ok(total)
    }

    fn garbage_floor(&self, mode: Mode) -> u64 {
        match mode {
            Mode::Background => {
                self.inner.layout.segment()
                    * u64::from(self.inner.opts.compaction.min_garbage_percent.min(100))
                    / 100
            }
            Mode::Urgent | Mode::Forced => 1,
        }
    }

    /// Segments worth compacting, least live first: at most `max`, and only from `only`
    /// if given.
    fn victims(&self, mode: Mode, only: Option<&[u32]>, max: usize) -> Vec<u32> {
        let floor = self.garbage_floor(mode);
        let seg = self.inner.layout.segment();
        let st = self.inner.read();
        let mut v: Vec<(u64, u32)> = st
            .segments
            .iter()
            .enumerate()
            .filter(|(i, s)| {
                only.is_none_or(|o| o.contains(&(*i as u32)))
                    && s.state == SegState::Sealed
                    && s.covered
                    && !s.damaged
                    && seg.saturating_sub(s.live) >= floor.max(1)
            })
            .map(|(i, s)| (s.live, i as u32))
            .collect();
        v.sort_unstable();
        v.into_iter().take(max).map(|(_, i)| i).collect()
    }

    fn round_segments(&self, mode: Mode) -> usize {
        match mode {
            Mode::Urgent => 1,
            _ => self.inner.opts.compaction.max_segments_per_round.max(1) as usize,
        }
    }

    /// Whether a sealed segment not yet covered by a checkpoint would qualify.
    fn uncovered_garbage(&self, mode: Mode) -> bool {
        let floor = self.garbage_floor(mode).max(1);
        let seg = self.inner.layout.segment();
        let st = self.inner.read();
        st.segments.iter().any(|s| {
            s.state == SegState::Sealed
                && !s.covered
                && !s.damaged
                && seg.saturating_sub(s.live) >= floor
        })
    }

    fn has_victims(&self, mode: Mode) -> bool {
        !self.victims(mode, None, 1).is_empty()
    }

    /// One round: empty some victims (taken from `todo` if given), then checkpoint to
    /// free them.
    async fn round(
        &mut self,
        mode: Mode,
        todo: Option<&mut Vec<u32>>,
    ) -> Result<CompactionReport, KvError> {
        let max = self.round_segments(mode);
        let victims = match todo {
            Some(todo) => {
                let v = self.victims(mode, Some(todo), max);
                todo.retain(|s| !v.contains(s));
                if v.is_empty() {
                    todo.clear();
                }
                v
            }
            None => {
                let mut v = self.victims(mode, None, max);
                if v.is_empty() && self.uncovered_garbage(mode) {
                    // Segments sealed since the last checkpoint: cover them first.
                    self.checkpoint().await?;
                    v = self.victims(mode, None, max);
                }
                v
            }
        };
        let mut report = CompactionReport::default();
        if victims.is_empty() {
            return Ok(report);
        }
        add(&self.inner.counters.compaction_rounds, 1);
        let mut live = self.live_entries(&victims);
        let mut freed = 0;
        for &v in &victims {
            // Relocations may use the reserve; free what is already emptied before the
            // reserve runs out.
            let (free, pending) = {
                let st = self.inner.read();
                let pending = st
                    .segments
                    .iter()
                    .filter(|s| s.state == SegState::PendingFree)
                    .count();
                (st.free_segments().count() as u32, pending)
            };
            if free <= self.inner.reserve_segments + 1 && pending > 0 {
                freed += self.checkpoint().await?.segments_freed;
            }
            let entries = live.remove(&v).unwrap_or_default();
            self.evacuate(v, entries, mode, &mut report).await?;
        }
        freed += self.checkpoint().await?.segments_freed;
        report.segments_reclaimed = freed;
        report.bytes_reclaimed = freed * self.inner.layout.segment();
        Ok(report)
    }

    /// Index entries whose values lie in the victims, by segment.
    fn live_entries(&self, victims: &[u32]) -> HashMap<u32, Vec<(Key, Entry)>> {
        let mut out: HashMap<u32, Vec<(Key, Entry)>> =
            victims.iter().map(|&v| (v, Vec::new())).collect();
        let layout = &self.inner.layout;
        let mut after: Option<Key> = None;
        loop {
            let st = self.inner.read();
            let range = match after {
                None => st.index.range(..),
                Some(k) => st.index.range((Bound::Excluded(k), Bound::Unbounded)),
            };
            let mut n = 0;
            for (k, e) in range.take(SCAN_CHUNK) {
                n += 1;
                after = Some(*k);
                if let Some(list) = out.get_mut(&layout.segment_of(e.addr)) {
                    list.push((*k, *e));
                }
            }
            if n < SCAN_CHUNK {
                return out;
            }
        }
    }

    /// Moves every live value out of `segment` and marks it pending free.
    async fn evacuate(
        &mut self,
        segment: u32,
        mut entries: Vec<(Key, Entry)>,
        mode: Mode,
        report: &mut CompactionReport,
    ) -> Result<(), KvError> {
        let inner = Arc::clone(&self.inner);
        let layout = &inner.layout;
        let block = layout.block();
        entries.sort_unstable_by_key(|(_, e)| e.addr);
        let mut damaged = false;
        let mut pending: Vec<Relocation> = Vec::new();
        let mut pending_bytes = 0u64;
        let mut i = 0;
        while i < entries.len() {
            // One read window: values close together, at most READ_WINDOW_BYTES.
            let start = entries[i].1.addr / block * block;
            let mut end = align_up(entries[i].1.addr + u64::from(entries[i].1.len), block);
            let mut j = i + 1;
            while j < entries.len() {
                let e = &entries[j].1;
                let e_start = e.addr / block * block;
                let e_end = align_up(e.addr + u64::from(e.len), block);
                if e_start > end + READ_GAP_BYTES || e_end - start > READ_WINDOW_BYTES {
                    break;
                }
                end = end.max(e_end);
                j += 1;
            }
            let len = end - start;
            let res = inner
                .dev
                .read(layout.device_offset(start), IoBuf::new_zeroed(len as usize))
                .await;
            add(&inner.counters.compaction_bytes_read, len);
            report.bytes_read += len;
            match res {
                Ok(buf) => {
                    for (key, e) in &entries[i..j] {
                        let at = (e.addr - start) as usize;
                        let value = &buf[at..at + e.len as usize];
                        if crc32c::crc32c(value) != e.crc {
                            add(&inner.counters.checksum_errors, 1);
                            tracing::error!(device = %inner.dev.info().name, ?key, addr = e.addr,
                                "KV compaction: value fails its checksum; segment {segment} kept");
                            damaged = true;
                            continue;
                        }
                        pending_bytes += u64::from(e.len) + 64;
                        pending.push(Relocation {
                            key: *key,
                            seq: e.seq,
                            crc: e.crc,
                            value: value.to_vec(),
                        });
                        if pending_bytes >= inner.batch_max_bytes {
                            self.relocate(std::mem::take(&mut pending), report).await?;
                            pending_bytes = 0;
                        }
                    }
                }
                Err(BlockError::Media { offset_bytes }) => {
                    add(&inner.counters.media_errors, 1);
                    tracing::error!(device = %inner.dev.info().name, offset_bytes,
                        "KV compaction: media error; segment {segment} kept");
                    damaged = true;
                }
                Err(e) => return Err(KvError::Device(e)),
            }
            let unthrottled = mode == Mode::Urgent || inner.read().stalled;
            self.pay(len, unthrottled).await;
            i = j;
        }
        if !pending.is_empty() {
            self.relocate(pending, report).await?;
        }
        let mut st = inner.write();
        let seg = &mut st.segments[segment as usize];
        if damaged {
            seg.damaged = true;
            report.damaged_segments += 1;
        } else if seg.state == SegState::Sealed && seg.live == 0 {
            seg.state = SegState::PendingFree;
        } else {
            tracing::warn!(device = %inner.dev.info().name, segment, live = seg.live,
                "KV compaction: segment still holds live values; kept");
        }
        Ok(())
    }

    async fn relocate(
        &mut self,
        records: Vec<Relocation>,
        report: &mut CompactionReport,
    ) -> Result<RelocateOutcome, KvError> {
        let (reply, rx) = oneshot::channel();
        self.reloc_tx
            .send(RelocateRequest { records, reply })
            .await
            .map_err(|_| KvError::Closed)?;
        let outcome = rx.await.map_err(|_| KvError::Closed)??;
        report.bytes_moved += outcome.batch_bytes;
        report.values_moved += outcome.moved;
        let unthrottled = self.inner.read().stalled;
        self.pay(outcome.batch_bytes, unthrottled).await;
        Ok(outcome)
    }

    async fn pay(&mut self, bytes: u64, unthrottled: bool) {
        let slept = self.pacer.pay(bytes, unthrottled).await;
        add(
            &self.inner.counters.compaction_throttle_sleep_us,
            slept.as_micros() as u64,
        );
    }
}
