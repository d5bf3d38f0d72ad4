//! NVMe reservations of one namespace: registrants, the holder and its type, the access
//! rules on the I/O path, Reservation Report, and Persist Through Power Loss.
//!
//! [`ReservationState`] implements [`Reservations`]; the target keeps one per namespace.
//! Registrations belong to hosts (the 128-bit host identifier of Connect): every
//! controller of a host shares its registration. With PTPL on, every change is handed to a
//! [`ReservationStore`] and becomes visible only once the store has saved it.

mod access;
mod machine;
mod snapshot;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use nvme_proto::reservation::{
    AcquireData, RegisterData, ReleaseData, ReservationAcquire, ReservationRegister,
    ReservationRelease, ReservationReport, ReservationStatus,
};
use nvme_proto::{Command, Status};

use crate::resv_api::{HostRef, Reservations, ResvEffects};
use crate::sync::{lock, read, write};
use access::classify;
use machine::{AcquireArgs, Machine, RegisterArgs, ReleaseArgs};

pub use machine::MAX_REGISTRANTS;
pub use snapshot::{RegistrantSnapshot, ReservationSnapshot, ReservationStore};

/// RESCAP (Identify Namespace byte 31): types 1..=6 (bits 1..6) and IEKEY handled as in
/// NVMe 1.3 and later (bit 7); bit 0 (PTPL) only with a store.
const RESCAP_TYPES_AND_IEKEY: u8 = 0xFE;
const RESCAP_PTPL: u8 = 0x01;

/// The reservation state machine of one namespace.
pub struct ReservationState {
    store: Option<Arc<dyn ReservationStore>>,
    /// Serializes the commands that change the state (held across the store's save).
    cmd_lock: Mutex<()>,
    /// The committed state, read by the I/O path and by Report.
    committed: RwLock<Arc<Machine>>,
    /// Fast path: no reservation held means no I/O can conflict.
    held: AtomicBool,
}

impl std::fmt::Debug for ReservationState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReservationState")
            .field("state", &self.snapshot())
            .field("store", &self.store.is_some())
            .finish()
    }
}

impl Default for ReservationState {
    /// No store (PTPL not supported), nothing registered.
    fn default() -> Self {
        ReservationState::new(None, None)
    }
}

impl ReservationState {
    /// A namespace's reservations. `store`: where the state goes while PTPL is on (without
    /// a store PTPL cannot be turned on). `restored`: the last snapshot saved before a
    /// restart; one with `ptpl == false` restores nothing, as after a power loss.
    /// Inconsistent snapshots (holder not registered, unknown type, duplicates) are
    /// repaired and logged.
    pub fn new(
        store: Option<Arc<dyn ReservationStore>>,
        restored: Option<ReservationSnapshot>,
    ) -> Self {
        let m = match &restored {
            None => Machine::default(),
            Some(s) => {
                let (m, problems) = Machine::restore(s);
                for p in problems {
                    tracing::warn!(problem = p, "restored reservation state repaired");
                }
                m
            }
        };
        let m = if store.is_none() && m.ptpl {
            // Without a store the state cannot keep persisting: keep it, but PTPL off.
            tracing::warn!("reservation state restored without a store: PTPL turned off");
            Machine { ptpl: false, ..m }
        } else {
            m
        };
        ReservationState {
            store,
            cmd_lock: Mutex::new(()),
            held: AtomicBool::new(m.held.is_some()),
            committed: RwLock::new(Arc::new(m)),
        }
    }

    /// The current state (also what the store last saved, while PTPL is on).
    pub fn snapshot(&self) -> ReservationSnapshot {
        read(&self.committed).snapshot()
    }

    /// The Reservation Status data structure's content (what Report encodes).
    pub fn status(&self) -> ReservationStatus {
        read(&self.committed).status()
    }

    /// Whether Persist Through Power Loss is on.
    pub fn ptpl(&self) -> bool {
        read(&self.committed).ptpl
    }

    /// Set Features Reservation Persistence: turning PTPL on saves the whole state,
    /// turning it off saves an empty one (nothing will survive a restart).
    pub fn set_ptpl(&self, on: bool) -> Result<(), Status> {
        if on && self.store.is_none() {
            return Err(Status::INVALID_FIELD.dnr());
        }
        self.update(|m| {
            m.set_ptpl(on);
            Ok(())
        })
    }

    #[cfg(test)]
    fn machine(&self) -> Arc<Machine> {
        read(&self.committed).clone()
    }

    /// Runs `op` on a copy of the state; commits the copy if `op` succeeds and, when PTPL
    /// is or was on, the store saved it.
    fn update<T>(&self, op: impl FnOnce(&mut Machine) -> Result<T, Status>) -> Result<T, Status> {
        let _serial = lock(&self.cmd_lock);
        let cur = read(&self.committed).clone();
        let mut next = (*cur).clone();
        let out = op(&mut next)?;
        if next == *cur {
            return Ok(out);
        }
        if next.ptpl || cur.ptpl {
            let Some(store) = &self.store else {
                return Err(Status::INTERNAL_ERROR);
            };
            let snap = if next.ptpl {
                next.snapshot()
            } else {
                ReservationSnapshot::default()
            };
            if let Err(e) = store.save(&snap) {
                tracing::error!(error = %e, "saving reservation state failed: command fails");
                return Err(Status::INTERNAL_ERROR);
            }
        }
        let held = next.held.is_some();
        *write(&self.committed) = Arc::new(next);
        self.held.store(held, Ordering::Release);
        Ok(out)
    }
}

impl Reservations for ReservationState {
    fn check_access(&self, host: &HostRef<'_>, opcode: u8) -> Result<(), Status> {
        if !self.held.load(Ordering::Acquire) {
            return Ok(());
        }
        if read(&self.committed).allows(&host.hostid, classify(opcode)) {
            Ok(())
        } else {
            Err(Status::RESERVATION_CONFLICT.dnr())
        }
    }

    fn register(
        &self,
        host: &HostRef<'_>,
        cmd: &Command,
        data: &[u8],
    ) -> Result<ResvEffects, Status> {
        let c = ReservationRegister::from_command(cmd);
        let d = RegisterData::decode(data).map_err(|_| Status::DATA_SGL_LENGTH_INVALID.dnr())?;
        let args = RegisterArgs {
            rrega: c.rrega,
            iekey: c.iekey,
            cptpl: c.cptpl,
            crkey: d.crkey,
            nrkey: d.nrkey,
        };
        let capable = self.store.is_some();
        self.update(|m| m.register(&host.hostid, args, capable))
    }

    fn acquire(
        &self,
        host: &HostRef<'_>,
        cmd: &Command,
        data: &[u8],
    ) -> Result<ResvEffects, Status> {
        let c = ReservationAcquire::from_command(cmd);
        let d = AcquireData::decode(data).map_err(|_| Status::DATA_SGL_LENGTH_INVALID.dnr())?;
        let args = AcquireArgs {
            racqa: c.racqa,
            iekey: c.iekey,
            rtype: c.rtype,
            crkey: d.crkey,
            prkey: d.prkey,
        };
        self.update(|m| m.acquire(&host.hostid, args))
    }

    fn release(
        &self,
        host: &HostRef<'_>,
        cmd: &Command,
        data: &[u8],
    ) -> Result<ResvEffects, Status> {
        let c = ReservationRelease::from_command(cmd);
        let d = ReleaseData::decode(data).map_err(|_| Status::DATA_SGL_LENGTH_INVALID.dnr())?;
        let args = ReleaseArgs {
            rrela: c.rrela,
            iekey: c.iekey,
            rtype: c.rtype,
            crkey: d.crkey,
        };
        self.update(|m| m.release(&host.hostid, args))
    }

    /// The extended structure (EDS = 1), zero-padded to the smaller of NUMD and
    /// `max_bytes` and truncated to it. Host IDs on fabrics are 128-bit, so the 24-byte
    /// form (EDS = 0) is refused with Host Identifier Inconsistent Format.
    fn report(
        &self,
        _host: &HostRef<'_>,
        cmd: &Command,
        max_bytes: usize,
    ) -> Result<Vec<u8>, Status> {
        let r = ReservationReport::from_command(cmd);
        if !r.eds {
            return Err(Status::HOST_ID_INCONSISTENT_FORMAT.dnr());
        }
        let len = usize::try_from(r.len_bytes())
            .unwrap_or(usize::MAX)
            .min(max_bytes);
        let status = self.status();
        // `max_bytes` is the command's validated transfer length: it bounds the allocation.
        let mut out = vec![0u8; len];
        status.encode(true, &mut out);
        Ok(out)
    }

    fn capabilities(&self) -> u8 {
        RESCAP_TYPES_AND_IEKEY | if self.store.is_some() { RESCAP_PTPL } else { 0 }
    }

    fn persist_through_power_loss(&self) -> bool {
        self.ptpl()
    }

    fn set_persist_through_power_loss(&self, ptpl: bool) -> Result<(), Status> {
        self.set_ptpl(ptpl)
    }
}
