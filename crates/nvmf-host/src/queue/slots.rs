//! The command table: one slot per CID, with a free list.

use std::time::Instant;

use blockdev::IoBuf;
use nvme_proto::Completion;
use tokio::sync::oneshot;

use super::Completed;
use crate::error::{CommandKind, HostError, Result};

/// Which way a command's data moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Xfer {
    None,
    /// Host to controller; `in_capsule` when the data went with the command.
    ToController {
        in_capsule: bool,
    },
    FromController,
}

/// One outstanding command.
pub(crate) struct Slot {
    pub busy: bool,
    pub reply: Option<oneshot::Sender<Result<Completed>>>,
    pub buf: Option<IoBuf>,
    pub xfer: Xfer,
    /// Start of the data window in `buf`.
    pub buf_offset: usize,
    /// Data length of the command in bytes.
    pub len_bytes: u32,
    /// C2H bytes received so far (they arrive in order).
    pub received_bytes: u32,
    /// End of the last range an R2T asked for.
    pub r2t_end_bytes: u32,
    /// TX items still holding a reference to `buf`; completion waits for them.
    pub tx_refs: u32,
    /// A completion that arrived while `tx_refs > 0`.
    pub pending: Option<Result<Completion>>,
    /// A command-level failure found while receiving data (digest, short transfer).
    pub data_error: Option<HostError>,
    pub deadline: Instant,
    pub timeout_ms: u64,
    /// The caller was told the command timed out; the CID stays reserved until the target
    /// answers (or the queue ends), so a late answer cannot hit a new command.
    pub timed_out: bool,
    pub kind: CommandKind,
}

impl Slot {
    fn empty(now: Instant) -> Slot {
        Slot {
            busy: false,
            reply: None,
            buf: None,
            xfer: Xfer::None,
            buf_offset: 0,
            len_bytes: 0,
            received_bytes: 0,
            r2t_end_bytes: 0,
            tx_refs: 0,
            pending: None,
            data_error: None,
            deadline: now,
            timeout_ms: 0,
            timed_out: false,
            kind: CommandKind {
                admin: false,
                opcode: 0,
                fctype: 0,
            },
        }
    }
}

/// All slots of a queue. CIDs are indexes; the free list is a stack so recently used slots
/// (warm in cache) are reused first.
pub(crate) struct Slots {
    slots: Vec<Slot>,
    free: Vec<u16>,
}

impl Slots {
    pub fn new(depth: u16) -> Slots {
        let now = Instant::now();
        Slots {
            slots: (0..depth).map(|_| Slot::empty(now)).collect(),
            free: (0..depth).rev().collect(),
        }
    }

    pub fn has_free(&self) -> bool {
        !self.free.is_empty()
    }

    pub fn active(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Takes a free CID and marks its slot busy.
    pub fn alloc(&mut self) -> Option<u16> {
        let cid = self.free.pop()?;
        if let Some(s) = self.slots.get_mut(usize::from(cid)) {
            s.busy = true;
        }
        Some(cid)
    }

    /// The slot of an outstanding command.
    pub fn busy_mut(&mut self, cid: u16) -> Option<&mut Slot> {
        self.slots.get_mut(usize::from(cid)).filter(|s| s.busy)
    }

    pub fn get(&self, cid: u16) -> Option<&Slot> {
        self.slots.get(usize::from(cid))
    }

    /// Frees `cid`, returning what the caller is still owed.
    pub fn release(&mut self, cid: u16) -> Option<Slot> {
        let s = self.slots.get_mut(usize::from(cid)).filter(|s| s.busy)?;
        let taken = std::mem::replace(s, Slot::empty(s.deadline));
        self.free.push(cid);
        Some(taken)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u16, &mut Slot)> {
        self.slots
            .iter_mut()
            .enumerate()
            .filter(|(_, s)| s.busy)
            .map(|(i, s)| (i as u16, s))
    }

    /// Every busy CID (for failing them all when the queue ends).
    pub fn busy_cids(&self) -> Vec<u16> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.busy)
            .map(|(i, _)| i as u16)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_release() {
        let mut s = Slots::new(3);
        let a = s.alloc().unwrap();
        let b = s.alloc().unwrap();
        let c = s.alloc().unwrap();
        assert_eq!((a, b, c), (0, 1, 2));
        assert!(s.alloc().is_none());
        assert_eq!(s.active(), 3);
        assert!(s.release(1).is_some());
        assert!(s.release(1).is_none());
        assert!(s.busy_mut(1).is_none());
        assert_eq!(s.alloc(), Some(1));
        assert!(s.busy_mut(7).is_none());
        assert_eq!(s.busy_cids(), vec![0, 1, 2]);
    }
}
