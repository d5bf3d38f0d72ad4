//! The in-memory side of the log: the map (logical block -> stored location), per-segment
//! usage, the free and pending-free segment lists, and the in-order application of
//! segments once they are written.

use std::collections::VecDeque;

use super::format::{Loc, LogGeometry, Record};

/// Life of a segment between checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegState {
    /// Free in the current checkpoint: may be allocated (in ascending order).
    Free,
    /// Allocated and being written, not applied yet.
    Writing,
    /// Written and applied; holds live blocks.
    Used,
    /// Emptied since the last checkpoint: reusable only after the next one (the last
    /// checkpoint may still point into it).
    Pending,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub blocks: u32,
    pub bytes: u64,
    /// The room those blocks take in the segment: each stored length rounded up to the
    /// array's sector (what moving them fills elsewhere).
    pub span_bytes: u64,
}

/// Map and space accounting. All changes go through `apply`.
pub struct Space {
    pub map: Vec<Loc>,
    pub usage: Vec<Usage>,
    pub seg_state: Vec<SegState>,
    /// Allocation order of this checkpoint epoch (ascending segment index).
    pub free: VecDeque<u32>,
    pub pending: usize,
    pub mapped_blocks: u64,
    pub live_stored_bytes: u64,
    align_bytes: u64,
    /// Blocks whose map entry changed since the last checkpoint took them (the next
    /// delta), once each (`dirty_bits`).
    dirty: Vec<u64>,
    dirty_bits: Vec<u64>,
}

impl Space {
    pub fn new(geo: &LogGeometry) -> Space {
        Space {
            map: vec![Loc::NONE; geo.logical_blocks as usize],
            usage: vec![Usage::default(); geo.segments as usize],
            seg_state: vec![SegState::Free; geo.segments as usize],
            free: VecDeque::new(),
            pending: 0,
            mapped_blocks: 0,
            live_stored_bytes: 0,
            align_bytes: u64::from(geo.align_bytes).max(1),
            dirty: Vec::new(),
            dirty_bits: vec![0; geo.logical_blocks.div_ceil(64) as usize],
        }
    }

    fn mark(&mut self, lba: u64) {
        let (w, bit) = ((lba / 64) as usize, 1u64 << (lba % 64));
        if self.dirty_bits[w] & bit == 0 {
            self.dirty_bits[w] |= bit;
            self.dirty.push(lba);
        }
    }

    /// The blocks changed since the last call, ascending; the set starts empty again.
    pub fn take_dirty(&mut self) -> Vec<u64> {
        let mut d = std::mem::take(&mut self.dirty);
        for &lba in &d {
            self.dirty_bits[(lba / 64) as usize] = 0;
        }
        d.sort_unstable();
        d
    }

    /// A checkpoint that took `lbas` failed: they are still to be written.
    pub fn restore_dirty(&mut self, lbas: &[u64]) {
        for &lba in lbas {
            self.mark(lba);
        }
    }

    /// Loads one entry of a checkpoint delta: `loc` or unmapped (`Loc::NONE`).
    pub fn load_entry(&mut self, lba: u64, loc: Loc) {
        if loc.is_some() {
            self.set(lba, loc);
        } else {
            let old = self.map[lba as usize];
            if old.is_some() {
                self.release(old);
                self.map[lba as usize] = Loc::NONE;
                self.mark(lba);
            }
        }
    }

    /// Rebuilds the free list from usage: every segment without a live block, ascending.
    /// (What a checkpoint with an empty head leaves; the tests' shortcut.)
    #[cfg(test)]
    pub fn reset_free(&mut self) {
        self.free.clear();
        self.pending = 0;
        for (i, u) in self.usage.iter().enumerate() {
            if u.blocks == 0 {
                self.seg_state[i] = SegState::Free;
                self.free.push_back(i as u32);
            } else {
                self.seg_state[i] = SegState::Used;
            }
        }
    }

    /// Segments without a live block that are not being written (free or pending).
    pub fn empty_segments(&self) -> Vec<u32> {
        (0..self.seg_state.len())
            .filter(|&i| matches!(self.seg_state[i], SegState::Free | SegState::Pending))
            .map(|i| i as u32)
            .collect()
    }

    /// Allocation order of a checkpoint whose root lists `head`: the head, then every
    /// other segment without a live block, ascending. `None` if the head names a segment
    /// out of range, twice, or one holding live blocks (a root that does not belong to
    /// this map).
    pub fn allocation_order(&self, head: &[u32]) -> Option<Vec<u32>> {
        let mut in_head = vec![false; self.usage.len()];
        for &s in head {
            let slot = in_head.get_mut(s as usize)?;
            if *slot || self.usage[s as usize].blocks != 0 {
                return None;
            }
            *slot = true;
        }
        let mut order = head.to_vec();
        order.extend(
            (0..self.usage.len())
                .filter(|&i| !in_head[i] && self.usage[i].blocks == 0)
                .map(|i| i as u32),
        );
        Some(order)
    }

    /// Makes `order` the free list (all of them free, in this order); every other
    /// segment is used or pending by its usage.
    pub fn set_free_order(&mut self, order: &[u32]) {
        for (i, u) in self.usage.iter().enumerate() {
            self.seg_state[i] = if u.blocks == 0 {
                SegState::Pending
            } else {
                SegState::Used
            };
        }
        self.free.clear();
        for &s in order {
            self.seg_state[s as usize] = SegState::Free;
            self.free.push_back(s);
        }
        self.pending = self
            .seg_state
            .iter()
            .filter(|s| **s == SegState::Pending)
            .count();
    }

    /// A checkpoint's root is durable: the segments that were empty in its map (`empty`,
    /// ascending) and not allocated since (`head`) are the free list from now on. Segments
    /// emptied after its map was taken stay pending (the new checkpoint points into them).
    pub fn install_free(&mut self, empty: &[u32], head: &[u32]) {
        let mut allocated = vec![false; self.usage.len()];
        for &s in head {
            if let Some(a) = allocated.get_mut(s as usize) {
                *a = true;
            }
        }
        self.free.clear();
        for &s in empty {
            if !allocated[s as usize] {
                self.seg_state[s as usize] = SegState::Free;
                self.free.push_back(s);
            }
        }
        self.pending = self
            .seg_state
            .iter()
            .filter(|s| **s == SegState::Pending)
            .count();
    }

    fn span(&self, loc: &Loc) -> u64 {
        u64::from(loc.len).div_ceil(self.align_bytes) * self.align_bytes
    }

    fn release(&mut self, old: Loc) {
        let span = self.span(&old);
        let u = &mut self.usage[old.seg as usize];
        u.blocks -= 1;
        u.bytes -= u64::from(old.len);
        u.span_bytes -= span;
        self.mapped_blocks -= 1;
        self.live_stored_bytes -= u64::from(old.len);
        if u.blocks == 0 && self.seg_state[old.seg as usize] == SegState::Used {
            self.seg_state[old.seg as usize] = SegState::Pending;
            self.pending += 1;
        }
    }

    fn set(&mut self, lba: u64, loc: Loc) {
        self.mark(lba);
        let old = self.map[lba as usize];
        if old.is_some() {
            self.release(old);
        }
        self.map[lba as usize] = loc;
        let span = self.span(&loc);
        let u = &mut self.usage[loc.seg as usize];
        u.blocks += 1;
        u.bytes += u64::from(loc.len);
        u.span_bytes += span;
        self.mapped_blocks += 1;
        self.live_stored_bytes += u64::from(loc.len);
    }

    /// Applies the records of segment `seg` (written completely), in order.
    pub fn apply(&mut self, seg: u32, records: &[Record]) {
        self.seg_state[seg as usize] = SegState::Writing;
        for r in records {
            match *r {
                Record::Write { lba, loc } => self.set(lba, Loc { seg, ..loc }),
                Record::Trim { lba, count } => {
                    for l in lba..lba + u64::from(count) {
                        let old = self.map[l as usize];
                        if old.is_some() {
                            self.release(old);
                            self.map[l as usize] = Loc::NONE;
                            self.mark(l);
                        }
                    }
                }
                Record::Move {
                    lba,
                    loc,
                    src_seg,
                    src_off,
                } => {
                    // The source must still be the very block moved (same checksum and
                    // length): a segment emptied, freed by a checkpoint and reused while
                    // the move waited may hold a newer block of `lba` at that offset.
                    let cur = self.map[lba as usize];
                    if cur.seg == src_seg
                        && cur.off == src_off
                        && cur.crc == loc.crc
                        && cur.len == loc.len
                    {
                        self.set(lba, Loc { seg, ..loc });
                    }
                }
            }
        }
        if self.usage[seg as usize].blocks == 0 {
            self.seg_state[seg as usize] = SegState::Pending;
            self.pending += 1;
        } else {
            self.seg_state[seg as usize] = SegState::Used;
        }
    }

    /// Used segments whose live blocks take at most `max_span_bytes` (moving a fuller
    /// one frees less than a block), with that room (`Usage::span_bytes`).
    pub fn gc_candidates(&self, max_span_bytes: u64) -> Vec<(u32, u64)> {
        self.usage
            .iter()
            .enumerate()
            .filter(|(i, _)| self.seg_state[*i] == SegState::Used)
            .filter(|(_, u)| u.span_bytes <= max_span_bytes)
            .map(|(i, u)| (i as u32, u.span_bytes))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> LogGeometry {
        LogGeometry::new(64 << 20, 192 << 10, 64 << 10, 4096, 1000, 512).unwrap()
    }

    fn loc(off: u32) -> Loc {
        Loc {
            seg: 0,
            off,
            len: 100,
            crc: 1,
            codec: 1,
        }
    }

    #[test]
    fn moves_apply_only_when_the_map_still_points_at_the_source() {
        let g = geo();
        let mut s = Space::new(&g);
        s.reset_free();
        s.apply(
            0,
            &[Record::Write {
                lba: 5,
                loc: loc(0),
            }],
        );
        s.apply(
            1,
            &[Record::Write {
                lba: 5,
                loc: loc(512),
            }],
        );
        assert_eq!(s.seg_state[0], SegState::Pending);
        // A stale move (the block was overwritten since) is ignored.
        s.apply(
            2,
            &[Record::Move {
                lba: 5,
                loc: loc(0),
                src_seg: 0,
                src_off: 0,
            }],
        );
        assert_eq!(s.map[5].seg, 1);
        assert_eq!(s.seg_state[2], SegState::Pending);
        s.apply(3, &[Record::Trim { lba: 0, count: 10 }]);
        assert!(!s.map[5].is_some());
        assert_eq!((s.mapped_blocks, s.live_stored_bytes), (0, 0));
        s.reset_free();
        assert_eq!(s.free.len(), g.segments as usize);
    }
}
