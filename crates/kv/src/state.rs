//! The in-memory state: the index, the segment table and the applied log position.
//! Changed only by the committer (applying durable batches), the compactor's checkpoint
//! (freeing segments) and recovery; read by commands under a read lock.

use std::collections::BTreeMap;

use crate::format::{Entry, Layout, LogPosition, NO_SEGMENT};
use crate::key::Key;
use crate::stats::Usage;

/// Life of a segment: `Free -> Reserved` (chosen as the log's successor) `-> Open` (its
/// first batch applied) `-> Sealed` (the log moved on) `-> PendingFree` (compaction moved
/// every live value out) `-> Free` (a checkpoint that no longer needs it is durable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SegState {
    Free,
    Reserved,
    Open,
    Sealed,
    PendingFree,
}

#[derive(Clone, Debug)]
pub(crate) struct Segment {
    pub state: SegState,
    /// Bytes of applied batches (from offset 0).
    pub written: u32,
    /// Footprint of the live values in it.
    pub live: u64,
    /// Sealed before the last durable checkpoint was taken: no replay needs its records,
    /// so compaction may empty it.
    pub covered: bool,
    /// A value in it failed its checksum or could not be read: compaction leaves it.
    pub damaged: bool,
}

impl Segment {
    pub fn free() -> Segment {
        Segment {
            state: SegState::Free,
            written: 0,
            live: 0,
            covered: false,
            damaged: false,
        }
    }
}

/// What applying a relocation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Relocated {
    Moved,
    /// The key changed since compaction read it; the copy is garbage.
    Stale,
}

pub(crate) struct State {
    pub index: BTreeMap<Key, Entry>,
    pub segments: Vec<Segment>,
    /// Where the log continues after the last applied batch.
    pub applied: LogPosition,
    pub live_bytes: u64,
    /// Bytes of batches applied since open (monotonic) and at the last checkpoint.
    pub applied_log_bytes: u64,
    pub checkpoint_log_bytes: u64,
    /// Body size of the last checkpoint (sets the checkpoint interval's floor).
    pub checkpoint_body_bytes: u64,
    /// A log write failed: no more changes until reopened.
    pub failed: Option<String>,
    /// A user batch waits for a free segment.
    pub stalled: bool,
    /// Compaction found nothing to reclaim while a batch was stalled.
    pub no_progress: bool,
}

impl State {
    pub fn new(segment_count: u32, applied: LogPosition) -> State {
        State {
            index: BTreeMap::new(),
            segments: vec![Segment::free(); segment_count as usize],
            applied,
            live_bytes: 0,
            applied_log_bytes: 0,
            checkpoint_log_bytes: 0,
            checkpoint_body_bytes: 0,
            failed: None,
            stalled: false,
            no_progress: false,
        }
    }

    fn add_live(&mut self, layout: &Layout, e: &Entry) {
        let fp = layout.footprint(e.len);
        self.live_bytes += fp;
        if let Some(s) = self.segments.get_mut(layout.segment_of(e.addr) as usize) {
            s.live += fp;
        }
    }

    fn sub_live(&mut self, layout: &Layout, e: &Entry) {
        let fp = layout.footprint(e.len);
        self.live_bytes = self.live_bytes.saturating_sub(fp);
        if let Some(s) = self.segments.get_mut(layout.segment_of(e.addr) as usize) {
            s.live = s.live.saturating_sub(fp);
        }
    }

    pub fn put(&mut self, layout: &Layout, key: Key, e: Entry) {
        if let Some(old) = self.index.insert(key, e) {
            self.sub_live(layout, &old);
        }
        self.add_live(layout, &e);
    }

    pub fn remove(&mut self, layout: &Layout, key: &Key) {
        if let Some(old) = self.index.remove(key) {
            self.sub_live(layout, &old);
        }
    }

    /// Moves `key` to `e` if it still holds record `e.seq`.
    pub fn relocate(&mut self, layout: &Layout, key: Key, e: Entry) -> Relocated {
        match self.index.get_mut(&key) {
            Some(cur) if cur.seq == e.seq && cur.len == e.len && cur.crc == e.crc => {
                let old = std::mem::replace(cur, e);
                self.sub_live(layout, &old);
                self.add_live(layout, &e);
                Relocated::Moved
            }
            _ => Relocated::Stale,
        }
    }

    /// Records that a batch of `bytes` at (`segment`, `offset`) was applied and that the
    /// log now continues at `end`: the previous segment is sealed when the log moved on.
    pub fn advance(&mut self, segment: u32, offset: u32, bytes: u32, end: LogPosition) {
        let prev = self.applied.segment;
        if segment != prev
            && let Some(s) = self.segments.get_mut(prev as usize)
        {
            s.state = SegState::Sealed;
            s.covered = false;
        }
        if let Some(s) = self.segments.get_mut(segment as usize) {
            s.state = SegState::Open;
            s.written = s.written.max(offset + bytes);
        }
        if end.successor != NO_SEGMENT
            && let Some(s) = self.segments.get_mut(end.successor as usize)
            && s.state == SegState::Free
        {
            s.state = SegState::Reserved;
        }
        self.applied = end;
        self.applied_log_bytes += u64::from(bytes);
    }

    pub fn free_segments(&self) -> impl Iterator<Item = u32> + '_ {
        self.segments
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == SegState::Free)
            .map(|(i, _)| i as u32)
    }

    pub fn usage(&self, layout: &Layout, capacity_bytes: u64) -> Usage {
        let seg = layout.segment();
        let mut used = 0u64;
        let mut free = 0u32;
        for s in &self.segments {
            used += match s.state {
                SegState::Free => {
                    free += 1;
                    0
                }
                SegState::Reserved => 0,
                SegState::Open => u64::from(s.written),
                SegState::Sealed | SegState::PendingFree => seg,
            };
        }
        Usage {
            capacity_bytes,
            used_bytes: used,
            live_bytes: self.live_bytes,
            garbage_bytes: used.saturating_sub(self.live_bytes),
            key_count: self.index.len() as u64,
            max_keys: layout.max_keys,
            segment_count: layout.segment_count,
            free_segments: free,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::FormatOptions;
    use crate::test_alloc::allocated_bytes;

    /// The index memory per key stated in the docs (`INDEX_BYTES_PER_KEY_BOUND`): a
    /// million random keys of 16 bytes, measured with a counting allocator.
    #[test]
    fn index_memory_per_key_is_bounded() {
        let layout = Layout::compute(64 << 30, 4096, &FormatOptions::default(), [0; 16]).unwrap();
        let n = 1_000_000u64;
        let before = allocated_bytes();
        let mut st = State::new(
            layout.segment_count,
            LogPosition {
                segment: 0,
                offset: 0,
                successor: 1,
                prev_crc: 0,
                next_batch_seq: 1,
                next_record_seq: 1,
            },
        );
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&x.to_le_bytes());
            k[8..].copy_from_slice(&i.to_le_bytes());
            st.put(
                &layout,
                Key::new(&k).unwrap(),
                Entry {
                    addr: i * 4096,
                    seq: i,
                    len: 4096,
                    crc: 0,
                },
            );
        }
        let per_key = (allocated_bytes() - before) as f64 / n as f64;
        eprintln!("index: {per_key:.1} bytes per key");
        assert!(
            per_key <= crate::INDEX_BYTES_PER_KEY_BOUND as f64,
            "{per_key} bytes per key"
        );
        assert!(
            per_key >= 41.0,
            "{per_key}: below the entry size, the count is broken"
        );
    }
}
