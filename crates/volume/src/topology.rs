//! The current member set as the I/O paths see it: an immutable snapshot swapped on every
//! membership change (one `Arc` clone per I/O), with rebuild frontiers as shared atomics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use blockdev::BlockDevice;
use uuid::Uuid;

use crate::format::MemberState;
use crate::layout::Geometry;

pub(crate) type Dev = Arc<dyn BlockDevice>;

/// One layout position.
#[derive(Clone)]
pub(crate) struct Slot {
    pub dev: Option<Dev>,
    pub uuid: Uuid,
    pub state: MemberState,
    /// Rebuilding: member data bytes `[0, frontier)` are current. Shared by snapshots.
    pub frontier: Arc<AtomicU64>,
    /// Rebuilding: the part of the frontier recorded in the superblock (durable).
    pub checkpoint: Arc<AtomicU64>,
    /// The slot's `state_generation` (identifies an absence for the stripe journal).
    pub state_generation: u64,
}

impl Slot {
    pub fn new(
        dev: Option<Dev>,
        uuid: Uuid,
        state: MemberState,
        frontier_bytes: u64,
        state_generation: u64,
    ) -> Slot {
        Slot {
            dev,
            uuid,
            state,
            frontier: Arc::new(AtomicU64::new(frontier_bytes)),
            checkpoint: Arc::new(AtomicU64::new(frontier_bytes)),
            state_generation,
        }
    }
}

#[derive(Clone)]
pub(crate) struct Spare {
    pub dev: Dev,
    pub uuid: Uuid,
    /// Set while the spare is being filled with a copy of a slot (`MemberState::Replacing`).
    pub replaces: Option<Replace>,
}

/// A proactive copy in progress: the spare mirrors every write to `slot` and is filled
/// below `frontier` by the copy task. Shared by snapshots.
#[derive(Clone)]
pub(crate) struct Replace {
    pub slot: usize,
    /// Member data bytes `[0, frontier)` are copied.
    pub frontier: Arc<AtomicU64>,
    /// The part of the frontier recorded in the superblock (durable).
    pub checkpoint: Arc<AtomicU64>,
    /// A mirrored write or the copy failed on it: it no longer follows the slot.
    pub broken: Arc<std::sync::atomic::AtomicBool>,
}

impl Replace {
    pub fn new(slot: usize, frontier_bytes: u64) -> Replace {
        Replace {
            slot,
            frontier: Arc::new(AtomicU64::new(frontier_bytes)),
            checkpoint: Arc::new(AtomicU64::new(frontier_bytes)),
            broken: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Topology {
    pub slots: Vec<Slot>,
    pub spares: Vec<Spare>,
}

/// Same device object (data pointers; vtables may differ between codegen units).
pub(crate) fn same_dev(a: &Dev, b: &Dev) -> bool {
    std::ptr::eq(Arc::as_ptr(a) as *const u8, Arc::as_ptr(b) as *const u8)
}

impl Topology {
    pub fn dev(&self, member: usize) -> Option<&Dev> {
        self.slots.get(member).and_then(|s| s.dev.as_ref())
    }

    /// Member `member` holds current data for member bytes below `end_bytes`.
    pub fn readable(&self, member: usize, end_bytes: u64) -> bool {
        match self.slots.get(member) {
            Some(s) if s.dev.is_some() => match s.state {
                MemberState::Active => true,
                MemberState::Rebuilding => end_bytes <= s.frontier.load(Ordering::Acquire),
                _ => false,
            },
            _ => false,
        }
    }

    /// Like `readable`, but for a rebuilding member only up to its durable checkpoint:
    /// what a crash now would still find current.
    pub fn durably_readable(&self, member: usize, end_bytes: u64) -> bool {
        match self.slots.get(member) {
            Some(s) if s.dev.is_some() => match s.state {
                MemberState::Active => true,
                MemberState::Rebuilding => end_bytes <= s.checkpoint.load(Ordering::Acquire),
                _ => false,
            },
            _ => false,
        }
    }

    /// Member `member` receives writes.
    pub fn writable(&self, member: usize) -> bool {
        matches!(
            self.slots.get(member),
            Some(s) if s.dev.is_some()
                && matches!(s.state, MemberState::Active | MemberState::Rebuilding)
        )
    }

    /// Per slot: not fully current (failed, missing or still rebuilding).
    pub fn lost_mask(&self) -> Vec<bool> {
        self.slots
            .iter()
            .map(|s| s.dev.is_none() || s.state != MemberState::Active)
            .collect()
    }

    /// The replacement being copied for slot `member`, if any: (its device, its copy).
    pub fn replacement(&self, member: usize) -> Option<(&Dev, &Replace)> {
        self.spares.iter().find_map(|s| {
            s.replaces
                .as_ref()
                .filter(|r| r.slot == member)
                .map(|r| (&s.dev, r))
        })
    }

    /// Index in `spares` of the first spare free to take a slot (not replacing one).
    pub fn free_spare(&self) -> Option<usize> {
        self.spares.iter().position(|s| s.replaces.is_none())
    }

    pub fn all_active(&self) -> bool {
        self.lost_mask().iter().all(|lost| !lost)
    }

    pub fn survives(&self, geo: &Geometry) -> bool {
        geo.survives(&self.lost_mask())
    }

    /// Devices that get superblock and bitmap writes: writable slots and spares, with their
    /// member-table index.
    pub fn metadata_targets(&self) -> Vec<(usize, Dev)> {
        let n = self.slots.len();
        let slots = self
            .slots
            .iter()
            .enumerate()
            .filter(|(i, _)| self.writable(*i))
            .filter_map(|(i, s)| s.dev.clone().map(|d| (i, d)));
        let spares = self
            .spares
            .iter()
            .enumerate()
            .map(|(j, s)| (n + j, s.dev.clone()));
        slots.chain(spares).collect()
    }
}
