//! The driver's side of the command table: what it tracks per CID while a command is on
//! the wire. CIDs are the tags callers took from the shared table (`core`).

use std::time::Instant;

use nvme_proto::{Command, Completion};

use super::buf::Data;
use super::core::Submission;
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
    pub cmd: Command,
    pub data: Data,
    pub timeout_ms: Option<u64>,
    pub retry: bool,
    pub retries_left: u8,
    pub init: bool,
    pub xfer: Xfer,
    /// C2H bytes received so far (they arrive in order).
    pub received_bytes: u32,
    /// End of the last range an R2T asked for.
    pub r2t_end_bytes: u32,
    /// TX items still reading the buffer; completion waits for them.
    pub tx_refs: u32,
    /// A completion that arrived while `tx_refs > 0`.
    pub pending: Option<Result<Completion>>,
    /// A command-level failure found while receiving data (digest, short transfer).
    pub data_error: Option<HostError>,
    pub deadline: Option<Instant>,
    /// The deadline passed and was handled (reported or failed); the CID stays reserved
    /// until the target answers or the connection ends.
    pub timed_out: bool,
    pub kind: CommandKind,
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            busy: false,
            cmd: Command::new(0, 0, 0),
            data: Data::NONE,
            timeout_ms: None,
            retry: false,
            retries_left: 0,
            init: false,
            xfer: Xfer::None,
            received_bytes: 0,
            r2t_end_bytes: 0,
            tx_refs: 0,
            pending: None,
            data_error: None,
            deadline: None,
            timed_out: false,
            kind: CommandKind {
                admin: false,
                opcode: 0,
                fctype: 0,
            },
        }
    }

    /// Data bytes `start..start + len` of the command's buffer (absolute positions).
    pub fn bytes(&self, start: usize, len: usize) -> Option<&[u8]> {
        self.data
            .buf
            .as_ref()?
            .bytes()
            .get(start..start.checked_add(len)?)
    }
    pub fn bytes_mut(&mut self, start: usize, len: usize) -> Option<&mut [u8]> {
        self.data
            .buf
            .as_mut()?
            .bytes_mut()
            .get_mut(start..start.checked_add(len)?)
    }

    /// The submission again, to re-send or fail it with its buffer.
    pub fn into_submission(self) -> Submission {
        Submission {
            cmd: self.cmd,
            data: self.data,
            timeout_ms: self.timeout_ms,
            retry: self.retry,
            retries_left: self.retries_left,
            init: self.init,
        }
    }
}

/// All slots of a queue, indexed by CID.
pub(crate) struct Slots {
    slots: Vec<Slot>,
    active: usize,
}

impl Slots {
    pub fn new(depth: u16) -> Slots {
        Slots {
            slots: (0..depth).map(|_| Slot::empty()).collect(),
            active: 0,
        }
    }

    /// Marks `cid` busy and returns its slot; None if it is out of range or busy.
    pub fn claim(&mut self, cid: u16) -> Option<&mut Slot> {
        let s = self.slots.get_mut(usize::from(cid)).filter(|s| !s.busy)?;
        s.busy = true;
        self.active += 1;
        Some(s)
    }

    /// The slot of an outstanding command.
    pub fn busy_mut(&mut self, cid: u16) -> Option<&mut Slot> {
        self.slots.get_mut(usize::from(cid)).filter(|s| s.busy)
    }

    pub fn get(&self, cid: u16) -> Option<&Slot> {
        self.slots.get(usize::from(cid))
    }

    /// Frees `cid`, returning what it held.
    pub fn release(&mut self, cid: u16) -> Option<Slot> {
        let s = self.slots.get_mut(usize::from(cid)).filter(|s| s.busy)?;
        self.active -= 1;
        Some(std::mem::replace(s, Slot::empty()))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u16, &mut Slot)> {
        self.slots
            .iter_mut()
            .enumerate()
            .filter(|(_, s)| s.busy)
            .map(|(i, s)| (i as u16, s))
    }

    /// Every busy CID (for giving them back when the connection ends).
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
    fn claim_release() {
        let mut s = Slots::new(3);
        assert!(s.claim(0).is_some());
        assert!(s.claim(2).is_some());
        assert!(s.claim(2).is_none());
        assert!(s.claim(3).is_none());
        assert_eq!(s.active, 2);
        assert!(s.release(2).is_some());
        assert!(s.release(2).is_none());
        assert!(s.busy_mut(2).is_none());
        assert!(s.busy_mut(0).is_some());
        assert_eq!(s.busy_cids(), vec![0]);
        assert_eq!(s.active, 1);
    }
}
