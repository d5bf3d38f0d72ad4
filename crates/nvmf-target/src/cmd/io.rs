//! I/O queue commands: the namespace is looked up (through a per-connection cache), its
//! ANA state on this port is checked, and the command goes to the namespace's I/O command
//! set, which decides what the opcode means (`nvm` or `kv`: the Key Value command set
//! reuses NVM's opcode numbers for other commands, e.g. 01h is Write or Store).
//!
//! QoS: a namespace with limits for this host (or caps) has a gate in the cache entry; a
//! command over a limit is handed back as [`Dispatch::Throttled`] before anything else
//! happens to it (reservation check, device I/O) and runs again when its turn comes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use blockdev::IoBuf;
use nvme_proto::opcode::io;
use nvme_proto::{Command, Status};

use crate::cmd::context::QueueContext;
use crate::cmd::{Dispatch, Outcome, kv, nvm};
use crate::namespace::{CommandSet, Namespace};
use crate::qos::gate::QosGate;

/// NSIDs up to this are cached in a vector; larger ones are looked up every time.
const NS_CACHE_SLOTS: usize = 1024;

/// An active namespace with this connection's host's in-flight counter on it and the QoS
/// gate its commands pass (`None`: no limit applies, nothing to do per command).
#[derive(Clone)]
pub(crate) struct ActiveNs {
    pub ns: Arc<Namespace>,
    pub inflight: Arc<AtomicU64>,
    pub qos: Option<Arc<QosGate>>,
}

/// Per-connection cache of active namespaces, invalidated by the subsystem's generation.
#[derive(Default)]
pub(crate) struct NsCache {
    generation: u64,
    slots: Vec<Option<Option<ActiveNs>>>,
}

impl QueueContext {
    /// The active namespace `nsid` of this queue's controller (attached to its host, of a
    /// command set the controller was enabled with).
    pub(crate) fn active_ns(&mut self, nsid: u32) -> Option<Arc<Namespace>> {
        self.active_ns_io(nsid).map(|a| a.ns)
    }

    /// [`QueueContext::active_ns`] with the host's in-flight counter (for the I/O path).
    pub(crate) fn active_ns_io(&mut self, nsid: u32) -> Option<ActiveNs> {
        let q = self.queue.as_ref()?;
        let subsys = &q.ctrl.subsys;
        let generation = subsys.ns_generation.load(Ordering::Acquire);
        let cache = &mut self.ns_cache;
        if cache.generation != generation {
            cache.generation = generation;
            cache.slots.clear();
        }
        let idx = nsid as usize;
        if idx < NS_CACHE_SLOTS
            && let Some(Some(hit)) = cache.slots.get(idx)
        {
            return hit.clone();
        }
        let found = subsys
            .namespace(nsid)
            .filter(|ns| q.ctrl.is_active(ns))
            .map(|ns| ActiveNs {
                inflight: ns.inflight.counter(&q.ctrl.hostid),
                qos: self.target.qos.gate(&subsys.nqn, nsid, &q.ctrl.hostnqn),
                ns,
            });
        if idx < NS_CACHE_SLOTS {
            if cache.slots.len() <= idx {
                cache.slots.resize(idx + 1, None);
            }
            cache.slots[idx] = Some(found.clone());
        }
        found
    }

    /// Runs an I/O command; `qos_released`: it already waited its turn (not charged again).
    pub(crate) fn exec_io(
        &mut self,
        cmd: &Command,
        data: Option<IoBuf>,
        xfer_len: u32,
        qos_released: bool,
    ) -> Dispatch {
        let nsid = cmd.nsid();
        let op = cmd.opcode();
        let Some(active) = self.active_ns_io(nsid) else {
            if let Some(b) = data {
                self.pool.put(b);
            }
            let st = if op == io::FABRICS || !(nvm::known_opcode(op) || kv::known_opcode(op)) {
                Status::INVALID_OPCODE.dnr()
            } else {
                Status::INVALID_NAMESPACE.dnr()
            };
            return Dispatch::Now(Outcome {
                err_nsid: nsid,
                ..Outcome::status(st).with_loc(4)
            });
        };
        let Some(q) = &self.queue else {
            return Status::COMMAND_SEQUENCE_ERROR.into();
        };
        // Every I/O command, reservations included, follows the ANA state of the
        // namespace's group on this controller's port (as Linux nvmet does).
        if let Err(st) = q.ctrl.listener.ana.check_io(active.ns.ana_group) {
            if let Some(b) = data {
                self.pool.put(b);
            }
            return Dispatch::Now(Outcome {
                err_nsid: nsid,
                err_lba: cmd.slba(),
                ..Outcome::status(st).with_loc(0)
            });
        }
        if !qos_released
            && let Some(gate) = &active.qos
            && charged(op)
        {
            let a = gate.admit(u64::from(xfer_len));
            if a.waits() {
                gate.queued(&a);
                return Dispatch::Throttled {
                    data,
                    start_ns: a.start_ns,
                    gate: gate.clone(),
                };
            }
        }
        match &active.ns.command_set {
            CommandSet::Nvm(blk) => {
                let blk = blk.clone();
                self.exec_nvm(cmd, active, blk, data, xfer_len)
            }
            CommandSet::Kv(media) => {
                let media = media.clone();
                self.exec_kv(cmd, active, media, data, xfer_len)
            }
        }
    }
}

/// Whether QoS limits count a command: every I/O command but the reservation commands
/// (control, not load: a new owner's preempt must not wait behind a throttled queue).
fn charged(op: u8) -> bool {
    !matches!(
        op,
        io::RESERVATION_REGISTER
            | io::RESERVATION_ACQUIRE
            | io::RESERVATION_RELEASE
            | io::RESERVATION_REPORT
    )
}
