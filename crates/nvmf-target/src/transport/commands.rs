//! The commands outstanding on one queue: which CIDs are in use, the slot of each command
//! (its SQE, transfer length and state) and how many count against the queue depth.
//!
//! A slot number doubles as the R2T transfer tag (TTAG), so a slot is never reused while
//! its command can still receive data.

use blockdev::IoBuf;
use nvme_proto::opcode::admin;
use nvme_proto::{Command, Status};

/// Write data a command is waiting for (solicited with R2T).
pub(crate) struct Incoming {
    pub buf: IoBuf,
    pub received: u32,
    pub total: u32,
    pub r2t_sent: bool,
    /// Complete with this status instead of executing once all data is in (digest error,
    /// abort after the R2T went out).
    pub failed: Option<Status>,
}

pub(crate) enum SlotState {
    Free,
    AwaitData(Incoming),
    /// Over a QoS limit: waiting in the throttle queue with its data (entry `seq`).
    Throttled {
        data: Option<IoBuf>,
        seq: u64,
    },
    Running,
    /// An Asynchronous Event Request the host gave up on: it sent a new command with the
    /// same CID (SPDK cancels its AERs locally at detach and reuses their CIDs for the
    /// shutdown). Its completion, if it ever comes, is dropped.
    Retired,
}

pub(crate) struct Slot {
    pub cmd: Command,
    /// Transfer length the host's SGL asks for (C2H) or sends (H2C).
    pub xfer_len: u32,
    pub state: SlotState,
    /// Ends a running AER early (see [`SlotState::Retired`]).
    pub cancel: Option<tokio::sync::oneshot::Sender<()>>,
}

/// What freeing a slot found.
pub(crate) enum Freed {
    /// A retired AER: its CID and queue-depth share went back to the host when it was
    /// retired; nothing is sent for it.
    Retired,
    /// A live command; its CID is free again. `incoming` is write data it still waited for.
    Live {
        cmd: Command,
        xfer_len: u32,
        incoming: Option<Incoming>,
        /// Write data of a command that was still in the throttle queue.
        throttled_data: Option<IoBuf>,
    },
}

/// The 65536 command identifiers of a queue, one bit each.
struct CidSet {
    /// Empty until the connection is established ([`CommandTable::enable`]).
    bits: Box<[u64]>,
}

const CID_WORDS: usize = (u16::MAX as usize + 1) / 64;

impl CidSet {
    fn contains(&self, cid: u16) -> bool {
        self.bits
            .get(usize::from(cid >> 6))
            .is_some_and(|w| w & (1u64 << (cid & 63)) != 0)
    }

    fn set(&mut self, cid: u16, on: bool) {
        if let Some(w) = self.bits.get_mut(usize::from(cid >> 6)) {
            if on {
                *w |= 1u64 << (cid & 63);
            } else {
                *w &= !(1u64 << (cid & 63));
            }
        }
    }
}

pub(crate) struct CommandTable {
    slots: Vec<Slot>,
    free_slots: Vec<u16>,
    cids: CidSet,
    /// Commands counted against the queue depth.
    outstanding: u32,
    /// Asynchronous Event Requests among the running commands.
    aers_running: usize,
}

fn not_started(state: &SlotState) -> bool {
    matches!(state, SlotState::AwaitData(_) | SlotState::Throttled { .. })
}

pub(crate) fn is_aer(cmd: &Command) -> bool {
    cmd.opcode() == admin::ASYNC_EVENT_REQUEST
}

impl CommandTable {
    /// A table that holds nothing until [`CommandTable::enable`] (a connection that never
    /// completes ICReq costs no CID bitmap).
    pub fn new() -> Self {
        CommandTable {
            slots: Vec::new(),
            free_slots: Vec::new(),
            cids: CidSet {
                bits: Box::default(),
            },
            outstanding: 0,
            aers_running: 0,
        }
    }

    /// Allocates the CID bitmap (at ICReq).
    pub fn enable(&mut self) {
        if self.cids.bits.is_empty() {
            self.cids.bits = vec![0u64; CID_WORDS].into_boxed_slice();
        }
    }

    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    pub fn aers_running(&self) -> usize {
        self.aers_running
    }

    pub fn cid_in_use(&self, cid: u16) -> bool {
        self.cids.contains(cid)
    }

    pub fn get(&self, slot: u16) -> Option<&Slot> {
        self.slots.get(usize::from(slot))
    }

    pub fn get_mut(&mut self, slot: u16) -> Option<&mut Slot> {
        self.slots.get_mut(usize::from(slot))
    }

    /// Takes `cmd` in: its CID becomes busy, it counts against the queue depth, and it
    /// gets a slot (returned) in the running state.
    pub fn admit(&mut self, cmd: Command, xfer_len: u32) -> u16 {
        debug_assert!(
            !self.cids.bits.is_empty(),
            "commands arrive only after ICReq"
        );
        self.cids.set(cmd.cid(), true);
        self.outstanding += 1;
        let s = Slot {
            cmd,
            xfer_len,
            state: SlotState::Running,
            cancel: None,
        };
        match self.free_slots.pop() {
            Some(i) => {
                self.slots[usize::from(i)] = s;
                i
            }
            None => {
                self.slots.push(s);
                (self.slots.len() - 1) as u16
            }
        }
    }

    /// Frees `slot` once its command completed (or was dropped as a retired AER).
    pub fn free(&mut self, slot: u16) -> Option<Freed> {
        let s = self.slots.get_mut(usize::from(slot))?;
        if matches!(s.state, SlotState::Retired) {
            s.state = SlotState::Free;
            self.free_slots.push(slot);
            return Some(Freed::Retired);
        }
        let (incoming, throttled_data) = match std::mem::replace(&mut s.state, SlotState::Free) {
            SlotState::AwaitData(inc) => (Some(inc), None),
            SlotState::Throttled { data, .. } => (None, data),
            _ => (None, None),
        };
        let (cmd, xfer_len) = (s.cmd, s.xfer_len);
        self.free_slots.push(slot);
        self.cids.set(cmd.cid(), false);
        self.outstanding = self.outstanding.saturating_sub(1);
        Some(Freed::Live {
            cmd,
            xfer_len,
            incoming,
            throttled_data,
        })
    }

    /// An AER started running (it may wait forever; the connection does not wait for it
    /// after the host closed).
    pub fn aer_started(&mut self) {
        self.aers_running += 1;
    }

    /// The future of the command in `slot` finished.
    pub fn future_done(&mut self, slot: u16) {
        if self.get(slot).is_some_and(|s| is_aer(&s.cmd)) {
            self.aers_running = self.aers_running.saturating_sub(1);
        }
    }

    /// The host reused the CID of a running AER: the AER is forgotten (as the host already
    /// did), its CID is free again and it no longer counts against the queue depth.
    /// `false` if `cid` is not a running AER.
    pub fn retire_aer(&mut self, cid: u16) -> bool {
        let Some(s) = self.slots.iter_mut().find(|s| {
            matches!(s.state, SlotState::Running) && s.cmd.cid() == cid && is_aer(&s.cmd)
        }) else {
            return false;
        };
        s.state = SlotState::Retired;
        if let Some(c) = s.cancel.take() {
            let _ = c.send(());
        }
        self.cids.set(cid, false);
        self.outstanding = self.outstanding.saturating_sub(1);
        true
    }

    /// Slots of commands on namespace `nsid` that have not started: waiting for their
    /// data or in the throttle queue.
    pub fn not_started_on(&self, nsid: u32) -> Vec<u16> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| not_started(&s.state) && s.cmd.nsid() == nsid)
            .map(|(i, _)| i as u16)
            .collect()
    }

    /// The slot of command `cid` if it has not started (see [`CommandTable::not_started_on`]).
    pub fn not_started_with_cid(&self, cid: u16) -> Option<u16> {
        if !self.cid_in_use(cid) {
            return None;
        }
        self.slots
            .iter()
            .position(|s| s.cmd.cid() == cid && not_started(&s.state))
            .map(|i| i as u16)
    }

    /// Takes the data of the throttled command in `slot` if entry `seq` is still its own
    /// (a command aborted meanwhile leaves a stale entry behind); it is running from now.
    pub fn release_throttled(&mut self, slot: u16, seq: u64) -> Option<Option<IoBuf>> {
        let s = self.slots.get_mut(usize::from(slot))?;
        match &s.state {
            SlotState::Throttled { seq: own, .. } if *own == seq => {}
            _ => return None,
        }
        match std::mem::replace(&mut s.state, SlotState::Running) {
            SlotState::Throttled { data, .. } => Some(data),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(opcode: u8, cid: u16) -> Command {
        Command::new(opcode, cid, 1)
    }

    #[test]
    fn admit_free_reuses_slots_and_cids() {
        let mut t = CommandTable::new();
        t.enable();
        let a = t.admit(cmd(0x02, 7), 4096);
        assert!(t.cid_in_use(7));
        assert_eq!(t.outstanding(), 1);
        assert!(matches!(t.free(a), Some(Freed::Live { .. })));
        assert!(!t.cid_in_use(7));
        assert_eq!(t.outstanding(), 0);
        let b = t.admit(cmd(0x02, 9), 4096);
        assert_eq!(a, b, "a freed slot is reused");
    }

    #[test]
    fn retired_aer_gives_back_its_cid_at_once() {
        let mut t = CommandTable::new();
        t.enable();
        let s = t.admit(cmd(admin::ASYNC_EVENT_REQUEST, 3), 0);
        t.aer_started();
        assert!(t.retire_aer(3));
        assert!(!t.cid_in_use(3));
        assert_eq!(t.outstanding(), 0);
        t.future_done(s);
        assert_eq!(t.aers_running(), 0);
        assert!(matches!(t.free(s), Some(Freed::Retired)));
        assert!(!t.retire_aer(3), "only a running AER can be retired");
    }
}
