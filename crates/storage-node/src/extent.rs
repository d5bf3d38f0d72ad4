//! Carving namespaces out of a drive: a first-fit allocator of 1 MiB-aligned extents.
//!
//! The allocator holds no state of its own on disk: it is rebuilt at start from the
//! extents recorded in the node state ([`ExtentAllocator::reserve`]).

use std::collections::BTreeMap;

use crate::state::Extent;

/// Allocation unit and alignment of every extent.
pub const EXTENT_UNIT_BYTES: u64 = 1 << 20;
/// Upper bound on the extents of one namespace, so a fragmented drive cannot produce
/// unbounded state records.
pub const MAX_EXTENTS_PER_NAMESPACE: usize = 256;

const _: () = assert!(EXTENT_UNIT_BYTES.is_power_of_two());
const _: () = assert!(EXTENT_UNIT_BYTES.is_multiple_of(4096));

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtentError {
    #[error("not enough free space: {requested_bytes} bytes requested, {free_bytes} free")]
    InsufficientCapacity {
        requested_bytes: u64,
        free_bytes: u64,
    },
    #[error(
        "free space too fragmented: {requested_bytes} bytes would need more than {MAX_EXTENTS_PER_NAMESPACE} extents"
    )]
    TooFragmented { requested_bytes: u64 },
    #[error("size must be greater than zero")]
    ZeroSize,
    #[error("extent {offset_bytes}+{len_bytes} is not aligned to {EXTENT_UNIT_BYTES} bytes")]
    Misaligned { offset_bytes: u64, len_bytes: u64 },
    #[error("extent {offset_bytes}+{len_bytes} lies beyond the usable {capacity_bytes} bytes")]
    OutOfRange {
        offset_bytes: u64,
        len_bytes: u64,
        capacity_bytes: u64,
    },
    #[error("extent {offset_bytes}+{len_bytes} overlaps space already in use")]
    InUse { offset_bytes: u64, len_bytes: u64 },
    #[error("extent {offset_bytes}+{len_bytes} is not allocated")]
    NotAllocated { offset_bytes: u64, len_bytes: u64 },
}

/// Free-space map of one drive, in units of [`EXTENT_UNIT_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtentAllocator {
    capacity_units: u64,
    /// Free runs: start unit -> length in units. Adjacent runs are always merged.
    free: BTreeMap<u64, u64>,
}

impl ExtentAllocator {
    /// A fully free drive of `drive_size_bytes`; a tail smaller than one unit is unusable.
    pub fn new(drive_size_bytes: u64) -> ExtentAllocator {
        let capacity_units = drive_size_bytes / EXTENT_UNIT_BYTES;
        let mut free = BTreeMap::new();
        if capacity_units > 0 {
            free.insert(0, capacity_units);
        }
        ExtentAllocator {
            capacity_units,
            free,
        }
    }

    /// Usable bytes: the drive size rounded down to the unit.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_units * EXTENT_UNIT_BYTES
    }

    pub fn free_bytes(&self) -> u64 {
        self.free.values().sum::<u64>() * EXTENT_UNIT_BYTES
    }

    pub fn allocated_bytes(&self) -> u64 {
        self.capacity_bytes() - self.free_bytes()
    }

    /// Largest single free run, in bytes.
    pub fn largest_free_bytes(&self) -> u64 {
        self.free.values().copied().max().unwrap_or(0) * EXTENT_UNIT_BYTES
    }

    /// Free runs in offset order.
    pub fn free_extents(&self) -> Vec<Extent> {
        self.free
            .iter()
            .map(|(&s, &l)| Extent {
                offset_bytes: s * EXTENT_UNIT_BYTES,
                len_bytes: l * EXTENT_UNIT_BYTES,
            })
            .collect()
    }

    /// Allocates at least `len_bytes` (rounded up to the unit): the first free run big
    /// enough, else the lowest runs in offset order. Nothing changes on error.
    pub fn allocate(&mut self, len_bytes: u64) -> Result<Vec<Extent>, ExtentError> {
        if len_bytes == 0 {
            return Err(ExtentError::ZeroSize);
        }
        let need_units = len_bytes.div_ceil(EXTENT_UNIT_BYTES);
        let free_units: u64 = self.free.values().sum();
        if need_units > free_units {
            return Err(ExtentError::InsufficientCapacity {
                requested_bytes: len_bytes,
                free_bytes: free_units * EXTENT_UNIT_BYTES,
            });
        }
        let runs: Vec<(u64, u64)> = match self.free.iter().find(|&(_, &l)| l >= need_units) {
            Some((&start, _)) => vec![(start, need_units)],
            None => {
                let mut left = need_units;
                let mut runs = Vec::new();
                for (&start, &len) in &self.free {
                    let take = len.min(left);
                    runs.push((start, take));
                    left -= take;
                    if left == 0 {
                        break;
                    }
                }
                if runs.len() > MAX_EXTENTS_PER_NAMESPACE {
                    return Err(ExtentError::TooFragmented {
                        requested_bytes: len_bytes,
                    });
                }
                runs
            }
        };
        for &(start, take) in &runs {
            self.take_units(start, take);
        }
        Ok(runs
            .into_iter()
            .map(|(s, l)| Extent {
                offset_bytes: s * EXTENT_UNIT_BYTES,
                len_bytes: l * EXTENT_UNIT_BYTES,
            })
            .collect())
    }

    /// Marks extents as used (rebuilding from the persisted state). All or nothing.
    pub fn reserve(&mut self, extents: &[Extent]) -> Result<(), ExtentError> {
        let mut trial = self.clone();
        for e in extents {
            let (start, len) = trial.units_of(e)?;
            // The whole range must sit inside one free run.
            let run = trial
                .free
                .range(..=start)
                .next_back()
                .map(|(&s, &l)| (s, l));
            match run {
                Some((s, l)) if start + len <= s + l => trial.take_units(start, len),
                _ => {
                    return Err(ExtentError::InUse {
                        offset_bytes: e.offset_bytes,
                        len_bytes: e.len_bytes,
                    });
                }
            }
        }
        *self = trial;
        Ok(())
    }

    /// Returns extents to the free map. All or nothing; freeing free space is an error.
    pub fn free(&mut self, extents: &[Extent]) -> Result<(), ExtentError> {
        let mut trial = self.clone();
        for e in extents {
            let (start, len) = trial.units_of(e)?;
            let overlaps_free = trial
                .free
                .range(..start + len)
                .next_back()
                .is_some_and(|(&s, &l)| s + l > start);
            if overlaps_free {
                return Err(ExtentError::NotAllocated {
                    offset_bytes: e.offset_bytes,
                    len_bytes: e.len_bytes,
                });
            }
            trial.insert_free(start, len);
        }
        *self = trial;
        Ok(())
    }

    /// Validates alignment and bounds; returns (start unit, length in units).
    fn units_of(&self, e: &Extent) -> Result<(u64, u64), ExtentError> {
        let (offset_bytes, len_bytes) = (e.offset_bytes, e.len_bytes);
        if len_bytes == 0
            || !offset_bytes.is_multiple_of(EXTENT_UNIT_BYTES)
            || !len_bytes.is_multiple_of(EXTENT_UNIT_BYTES)
        {
            return Err(ExtentError::Misaligned {
                offset_bytes,
                len_bytes,
            });
        }
        let (start, len) = (
            offset_bytes / EXTENT_UNIT_BYTES,
            len_bytes / EXTENT_UNIT_BYTES,
        );
        match start.checked_add(len) {
            Some(end) if end <= self.capacity_units => Ok((start, len)),
            _ => Err(ExtentError::OutOfRange {
                offset_bytes,
                len_bytes,
                capacity_bytes: self.capacity_bytes(),
            }),
        }
    }

    /// Removes `[start, start+len)` from the free run that contains it (caller checked).
    fn take_units(&mut self, start: u64, len: u64) {
        let Some((&run_start, &run_len)) = self.free.range(..=start).next_back() else {
            return;
        };
        self.free.remove(&run_start);
        if start > run_start {
            self.free.insert(run_start, start - run_start);
        }
        let (end, run_end) = (start + len, run_start + run_len);
        if run_end > end {
            self.free.insert(end, run_end - end);
        }
    }

    /// Adds a free run (caller checked it overlaps nothing free) and merges neighbours.
    fn insert_free(&mut self, mut start: u64, mut len: u64) {
        if let Some((&ps, &pl)) = self.free.range(..start).next_back()
            && ps + pl == start
        {
            self.free.remove(&ps);
            start = ps;
            len += pl;
        }
        if let Some(nl) = self.free.remove(&(start + len)) {
            len += nl;
        }
        self.free.insert(start, len);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const MIB: u64 = EXTENT_UNIT_BYTES;

    fn ext(off_mib: u64, len_mib: u64) -> Extent {
        Extent {
            offset_bytes: off_mib * MIB,
            len_bytes: len_mib * MIB,
        }
    }

    #[test]
    fn first_fit_then_span_when_fragmented() {
        let mut a = ExtentAllocator::new(10 * MIB + 4096);
        assert_eq!(a.capacity_bytes(), 10 * MIB);
        assert_eq!(a.allocate(1).unwrap(), vec![ext(0, 1)]);
        let b = a.allocate(3 * MIB).unwrap();
        assert_eq!(b, vec![ext(1, 3)]);
        assert_eq!(a.allocate(2 * MIB).unwrap(), vec![ext(4, 2)]);
        a.free(&b).unwrap();
        // First fit: the 3 MiB hole takes 2 MiB.
        assert_eq!(a.allocate(2 * MIB).unwrap(), vec![ext(1, 2)]);
        // Free now: [3,4) and [6,10): 5 MiB fits nowhere whole, so it spans both.
        assert_eq!(a.allocate(5 * MIB).unwrap(), vec![ext(3, 1), ext(6, 4)]);
        assert_eq!(a.free_bytes(), 0);
        assert_eq!(
            a.allocate(1),
            Err(ExtentError::InsufficientCapacity {
                requested_bytes: 1,
                free_bytes: 0
            })
        );
    }

    #[test]
    fn errors() {
        let mut a = ExtentAllocator::new(4 * MIB);
        assert_eq!(a.allocate(0), Err(ExtentError::ZeroSize));
        let e = a.allocate(5 * MIB).unwrap_err();
        assert_eq!(
            e.to_string(),
            "not enough free space: 5242880 bytes requested, 4194304 free"
        );
        assert!(matches!(
            a.reserve(&[ext(3, 2)]),
            Err(ExtentError::OutOfRange { .. })
        ));
        assert!(matches!(
            a.reserve(&[Extent {
                offset_bytes: 4096,
                len_bytes: MIB
            }]),
            Err(ExtentError::Misaligned { .. })
        ));
        assert!(matches!(
            a.reserve(&[Extent {
                offset_bytes: u64::MAX - MIB + 1,
                len_bytes: MIB
            }]),
            Err(ExtentError::Misaligned { .. }) | Err(ExtentError::OutOfRange { .. })
        ));
        a.reserve(&[ext(1, 2)]).unwrap();
        assert!(matches!(
            a.reserve(&[ext(2, 1)]),
            Err(ExtentError::InUse { .. })
        ));
        // All or nothing: the first extent is not kept when the second fails.
        assert!(a.reserve(&[ext(0, 1), ext(2, 1)]).is_err());
        assert_eq!(a.free_bytes(), 2 * MIB);
        assert!(matches!(
            a.free(&[ext(0, 1)]),
            Err(ExtentError::NotAllocated { .. })
        ));
        assert!(matches!(
            a.free(&[ext(1, 1), ext(1, 1)]),
            Err(ExtentError::NotAllocated { .. })
        ));
        assert_eq!(a.free_bytes(), 2 * MIB);
        a.free(&[ext(1, 2)]).unwrap();
        assert_eq!(a.free_extents(), vec![ext(0, 4)]);
        assert_eq!(ExtentAllocator::new(MIB - 512).capacity_bytes(), 0);
    }

    #[test]
    fn too_fragmented() {
        let units = MAX_EXTENTS_PER_NAMESPACE as u64 * 2 + 2;
        let mut a = ExtentAllocator::new(units * MIB);
        let every_other: Vec<Extent> = (0..units).step_by(2).map(|u| ext(u, 1)).collect();
        a.reserve(&every_other).unwrap();
        let free = a.free_bytes();
        assert!(matches!(
            a.allocate(free),
            Err(ExtentError::TooFragmented { .. })
        ));
        assert_eq!(a.free_bytes(), free);
        assert_eq!(a.allocate(2 * MIB).unwrap(), vec![ext(1, 1), ext(3, 1)]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(u64),
        Free(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1u64..12 * MIB).prop_map(Op::Alloc),
            any::<usize>().prop_map(Op::Free),
        ]
    }

    proptest! {
        /// Against a model (a bitmap of units): no overlap, never beyond the drive,
        /// free = capacity - allocated, allocation fails only when space is short, and
        /// a rebuild from the live extents gives the same free map.
        #[test]
        fn matches_bitmap_model(size_mib in 1u64..64, ops in proptest::collection::vec(op(), 1..60)) {
            let mut a = ExtentAllocator::new(size_mib * MIB);
            let mut used = vec![false; size_mib as usize];
            let mut live: Vec<Vec<Extent>> = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc(len) => {
                        let need = len.div_ceil(MIB);
                        let free_units = used.iter().filter(|u| !**u).count() as u64;
                        match a.allocate(len) {
                            Ok(exts) => {
                                prop_assert!(need <= free_units);
                                let mut got = 0;
                                for e in &exts {
                                    prop_assert!(e.offset_bytes % MIB == 0 && e.len_bytes % MIB == 0);
                                    prop_assert!(e.end_bytes().unwrap() <= size_mib * MIB);
                                    for u in e.offset_bytes / MIB..e.end_bytes().unwrap() / MIB {
                                        prop_assert!(!used[u as usize], "overlap at unit {}", u);
                                        used[u as usize] = true;
                                    }
                                    got += e.len_bytes / MIB;
                                }
                                prop_assert_eq!(got, need);
                                live.push(exts);
                            }
                            Err(ExtentError::InsufficientCapacity { .. }) => prop_assert!(need > free_units),
                            Err(e) => prop_assert!(false, "unexpected {}", e),
                        }
                    }
                    Op::Free(i) if !live.is_empty() => {
                        let exts = live.swap_remove(i % live.len());
                        a.free(&exts).unwrap();
                        for e in &exts {
                            for u in e.offset_bytes / MIB..e.end_bytes().unwrap() / MIB {
                                used[u as usize] = false;
                            }
                        }
                    }
                    Op::Free(_) => {}
                }
                let model_free = used.iter().filter(|u| !**u).count() as u64 * MIB;
                prop_assert_eq!(a.free_bytes(), model_free);
                prop_assert_eq!(a.allocated_bytes() + a.free_bytes(), size_mib * MIB);
                // Free runs are merged: no two are adjacent.
                let runs = a.free_extents();
                for w in runs.windows(2) {
                    prop_assert!(w[0].end_bytes().unwrap() < w[1].offset_bytes);
                }
            }
            let mut rebuilt = ExtentAllocator::new(size_mib * MIB);
            for exts in &live {
                rebuilt.reserve(exts).unwrap();
            }
            prop_assert_eq!(rebuilt, a);
        }
    }
}
