//! The reservation state machine proper: pure data and transitions, no locking, no I/O.
//!
//! Semantics of NVMe base 2.0 section 8.19 ("Reservations") and the Reservation Register /
//! Acquire / Release / Report commands, cross-checked with Linux `drivers/nvme/target/pr.c`
//! and SPDK `lib/nvmf`. Every operation either succeeds and returns its effects, or fails
//! with the NVMe status and leaves the state untouched (callers work on a copy).

use nvme_proto::Status;
use nvme_proto::log::reservation::notification_type as notice;
use nvme_proto::reservation::{
    RegisteredController, ReservationStatus, ReservationType, cptpl, racqa, rrega, rrela,
};

use super::access::AccessKind;
use super::snapshot::{RegistrantSnapshot, ReservationSnapshot};
use crate::resv_api::ResvEffects;

pub(crate) type HostId = [u8; 16];

/// At most this many hosts may be registered with one namespace (bounds the state, the
/// report and the persisted snapshot).
pub const MAX_REGISTRANTS: usize = 256;

/// Controller ID reported for registrants: registrations belong to hosts, and controllers
/// are dynamic on fabrics, so the spec's "not known" value (as Linux nvmet reports).
pub(crate) const REPORT_CNTLID: u16 = 0xFFFF;

const CONFLICT: Status = Status::RESERVATION_CONFLICT.dnr();
const INVALID_FIELD: Status = Status::INVALID_FIELD.dnr();

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Registrant {
    pub hostid: HostId,
    pub key: u64,
}

/// A reservation held on the namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// Types 1..=4: one holder.
    Single {
        rtype: ReservationType,
        holder: HostId,
    },
    /// Types 5 and 6: every registrant is a holder.
    AllRegistrants { rtype: ReservationType },
}

impl Held {
    fn new(rtype: ReservationType, holder: HostId) -> Held {
        if rtype.all_registrants() {
            Held::AllRegistrants { rtype }
        } else {
            Held::Single { rtype, holder }
        }
    }
    pub fn rtype(&self) -> ReservationType {
        match *self {
            Held::Single { rtype, .. } | Held::AllRegistrants { rtype } => rtype,
        }
    }
}

/// Decoded fields of a Reservation Register command.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RegisterArgs {
    pub rrega: u8,
    pub iekey: bool,
    pub cptpl: u8,
    pub crkey: u64,
    pub nrkey: u64,
}

/// Decoded fields of a Reservation Acquire command.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AcquireArgs {
    pub racqa: u8,
    pub iekey: bool,
    pub rtype: u8,
    pub crkey: u64,
    pub prkey: u64,
}

/// Decoded fields of a Reservation Release command.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReleaseArgs {
    pub rrela: u8,
    pub iekey: bool,
    pub rtype: u8,
    pub crkey: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Machine {
    pub generation: u32,
    pub ptpl: bool,
    /// In registration order; host IDs are unique.
    pub registrants: Vec<Registrant>,
    pub held: Option<Held>,
}

impl Machine {
    fn find(&self, h: &HostId) -> Option<&Registrant> {
        self.registrants.iter().find(|r| r.hostid == *h)
    }

    pub fn is_registrant(&self, h: &HostId) -> bool {
        self.find(h).is_some()
    }

    /// Whether `h` holds the reservation (every registrant does for types 5 and 6).
    pub fn is_holder(&self, h: &HostId) -> bool {
        match self.held {
            None => false,
            Some(Held::Single { holder, .. }) => holder == *h,
            Some(Held::AllRegistrants { .. }) => self.is_registrant(h),
        }
    }

    /// The access decision for a read or write command of host `h`.
    pub fn allows(&self, h: &HostId, kind: AccessKind) -> bool {
        let Some(held) = self.held else { return true };
        let write = match kind {
            AccessKind::Unrestricted => return true,
            AccessKind::Read => false,
            AccessKind::Write => true,
        };
        held.rtype()
            .allows(write, self.is_registrant(h), self.is_holder(h))
    }

    /// The registrant `h` if its key is `crkey` (or `ignore_key`), else Reservation Conflict.
    fn check_key(&self, h: &HostId, crkey: u64, ignore_key: bool) -> Result<Registrant, Status> {
        match self.find(h) {
            Some(r) if ignore_key || r.key == crkey => Ok(*r),
            _ => Err(CONFLICT),
        }
    }

    fn others(&self, h: &HostId) -> Vec<HostId> {
        self.registrants
            .iter()
            .map(|r| r.hostid)
            .filter(|x| x != h)
            .collect()
    }

    /// Removes registrant `h`; a reservation it held alone is released, an all-registrants
    /// reservation ends with its last registrant. Notifications are the caller's.
    fn drop_registrant(&mut self, h: &HostId) {
        self.registrants.retain(|r| r.hostid != *h);
        match self.held {
            Some(Held::Single { holder, .. }) if holder == *h => self.held = None,
            Some(Held::AllRegistrants { .. }) if self.registrants.is_empty() => self.held = None,
            _ => {}
        }
    }

    /// Unregisters every registrant with key `key` except `keep`; returns their host IDs.
    fn drop_by_key(&mut self, key: u64, keep: Option<&HostId>) -> Vec<HostId> {
        let gone: Vec<HostId> = self
            .registrants
            .iter()
            .filter(|r| r.key == key && Some(&r.hostid) != keep)
            .map(|r| r.hostid)
            .collect();
        for g in &gone {
            self.drop_registrant(g);
        }
        gone
    }

    fn bump_generation(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// Reservation Register: register, unregister or replace `h`'s key, and CPTPL.
    /// `ptpl_capable`: whether CPTPL = 3 (persist) may be honoured.
    pub fn register(
        &mut self,
        h: &HostId,
        a: RegisterArgs,
        ptpl_capable: bool,
    ) -> Result<ResvEffects, Status> {
        let mut eff = ResvEffects::default();
        let new_ptpl = match a.cptpl {
            cptpl::NO_CHANGE => self.ptpl,
            cptpl::CLEAR => false,
            cptpl::PERSIST if ptpl_capable => true,
            _ => return Err(INVALID_FIELD),
        };
        match a.rrega {
            rrega::REGISTER => match self.find(h) {
                // Registering again with the same key succeeds; another key conflicts.
                Some(r) if r.key == a.nrkey => {}
                Some(_) => return Err(CONFLICT),
                None if self.registrants.len() >= MAX_REGISTRANTS => {
                    return Err(Status::INTERNAL_ERROR.dnr());
                }
                None => self.registrants.push(Registrant {
                    hostid: *h,
                    key: a.nrkey,
                }),
            },
            rrega::UNREGISTER => {
                self.check_key(h, a.crkey, a.iekey)?;
                let before = self.held;
                self.drop_registrant(h);
                // The holder of a registrants-only reservation left: the others lose access.
                if let Some(Held::Single { rtype, holder }) = before
                    && holder == *h
                    && matches!(
                        rtype,
                        ReservationType::WriteExclusiveRegistrantsOnly
                            | ReservationType::ExclusiveAccessRegistrantsOnly
                    )
                {
                    notify(&mut eff, &self.others(h), notice::RESERVATION_RELEASED);
                }
            }
            rrega::REPLACE => {
                self.check_key(h, a.crkey, a.iekey)?;
                if let Some(r) = self.registrants.iter_mut().find(|r| r.hostid == *h) {
                    r.key = a.nrkey;
                }
            }
            _ => return Err(INVALID_FIELD),
        }
        self.ptpl = new_ptpl;
        self.bump_generation();
        Ok(eff)
    }

    /// Reservation Acquire: acquire, preempt, or preempt and abort.
    pub fn acquire(&mut self, h: &HostId, a: AcquireArgs) -> Result<ResvEffects, Status> {
        // Since NVMe 1.3, IEKEY in Acquire is invalid (RESCAP bit 7 says so).
        if a.iekey {
            return Err(INVALID_FIELD);
        }
        let rtype = ReservationType::from_u8(a.rtype).ok_or(INVALID_FIELD)?;
        let me = self.check_key(h, a.crkey, false)?;
        match a.racqa {
            racqa::ACQUIRE => match self.held {
                None => {
                    self.held = Some(Held::new(rtype, *h));
                    Ok(ResvEffects::default())
                }
                // The holder acquiring what it holds: success, nothing changes.
                Some(held) if held.rtype() == rtype && self.is_holder(h) => {
                    Ok(ResvEffects::default())
                }
                Some(_) => Err(CONFLICT),
            },
            racqa::PREEMPT | racqa::PREEMPT_AND_ABORT => {
                let abort = a.racqa == racqa::PREEMPT_AND_ABORT;
                let eff = self.preempt(h, me.key, rtype, a.prkey, abort)?;
                self.bump_generation();
                Ok(eff)
            }
            _ => Err(INVALID_FIELD),
        }
    }

    fn preempt(
        &mut self,
        h: &HostId,
        my_key: u64,
        rtype: ReservationType,
        prkey: u64,
        abort: bool,
    ) -> Result<ResvEffects, Status> {
        let mut eff = ResvEffects::default();
        let gone = match self.held {
            // All registrants, PRKEY 0: everyone else goes, the issuer holds RTYPE.
            Some(Held::AllRegistrants { .. }) if prkey == 0 => {
                let gone = self.others(h);
                self.registrants.retain(|r| r.hostid == *h);
                self.held = Some(Held::new(rtype, *h));
                gone
            }
            // Nothing held, or all registrants with a PRKEY: the registrants with PRKEY
            // (the issuer included) are unregistered; the reservation, if any, stays.
            None | Some(Held::AllRegistrants { .. }) => {
                let gone = self.drop_by_key(prkey, None);
                if gone.is_empty() {
                    return Err(CONFLICT);
                }
                gone
            }
            Some(Held::Single { rtype: old, holder }) => {
                let holder_key = self.find(&holder).map(|r| r.key);
                if holder == *h && prkey == my_key {
                    // The holder preempting itself changes the type and keeps everyone.
                    self.held = Some(Held::new(rtype, *h));
                    if old != rtype {
                        notify(&mut eff, &self.others(h), notice::RESERVATION_RELEASED);
                    }
                    Vec::new()
                } else if Some(prkey) == holder_key {
                    // The holder is preempted: registrants with its key go, the issuer holds.
                    let gone = self.drop_by_key(prkey, Some(h));
                    self.held = Some(Held::new(rtype, *h));
                    if old != rtype {
                        notify(&mut eff, &self.others(h), notice::RESERVATION_RELEASED);
                    }
                    gone
                } else if prkey != 0 {
                    let gone = self.drop_by_key(prkey, None);
                    if gone.is_empty() {
                        return Err(CONFLICT);
                    }
                    gone
                } else {
                    return Err(INVALID_FIELD);
                }
            }
        };
        let preempted: Vec<HostId> = gone.into_iter().filter(|g| g != h).collect();
        notify(&mut eff, &preempted, notice::REGISTRATION_PREEMPTED);
        if abort {
            eff.aborted_hosts = preempted;
        }
        Ok(eff)
    }

    /// Reservation Release: release or clear.
    pub fn release(&mut self, h: &HostId, a: ReleaseArgs) -> Result<ResvEffects, Status> {
        if a.iekey {
            return Err(INVALID_FIELD);
        }
        self.check_key(h, a.crkey, false)?;
        let mut eff = ResvEffects::default();
        match a.rrela {
            rrela::RELEASE => {
                let Some(held) = self.held else {
                    return Ok(eff);
                };
                // A registrant that does not hold the reservation: success, no effect.
                if !self.is_holder(h) {
                    return Ok(eff);
                }
                if held.rtype().as_u8() != a.rtype {
                    return Err(INVALID_FIELD);
                }
                self.held = None;
                if held.rtype().registrants_have_access() {
                    notify(&mut eff, &self.others(h), notice::RESERVATION_RELEASED);
                }
            }
            rrela::CLEAR => {
                notify(&mut eff, &self.others(h), notice::RESERVATION_PREEMPTED);
                self.registrants.clear();
                self.held = None;
                self.bump_generation();
            }
            _ => return Err(INVALID_FIELD),
        }
        Ok(eff)
    }

    /// Turns PTPL on or off (Set Features Reservation Persistence).
    pub fn set_ptpl(&mut self, on: bool) {
        self.ptpl = on;
    }

    /// The Reservation Status data structure's content.
    pub fn status(&self) -> ReservationStatus {
        ReservationStatus {
            generation: self.generation,
            rtype: self.held.map_or(0, |h| h.rtype().as_u8()),
            ptpls: self.ptpl,
            registrants: self
                .registrants
                .iter()
                .map(|r| RegisteredController {
                    cntlid: REPORT_CNTLID,
                    rcsts: if self.is_holder(&r.hostid) {
                        RegisteredController::RCSTS_HOLDS_RESERVATION
                    } else {
                        0
                    },
                    hostid: r.hostid,
                    rkey: r.key,
                })
                .collect(),
        }
    }

    pub fn snapshot(&self) -> ReservationSnapshot {
        let (rtype, holder) = match self.held {
            None => (0, None),
            Some(Held::Single { rtype, holder }) => (rtype.as_u8(), Some(holder)),
            Some(Held::AllRegistrants { rtype }) => (rtype.as_u8(), None),
        };
        ReservationSnapshot {
            generation: self.generation,
            ptpl: self.ptpl,
            rtype,
            holder,
            registrants: self
                .registrants
                .iter()
                .map(|r| RegistrantSnapshot {
                    hostid: r.hostid,
                    key: r.key,
                })
                .collect(),
        }
    }

    /// The state a restart leaves: everything when PTPL was on, nothing otherwise.
    /// Snapshots come from disk: inconsistencies are repaired (and reported) rather than
    /// trusted.
    pub fn restore(s: &ReservationSnapshot) -> (Machine, Vec<&'static str>) {
        let mut problems = Vec::new();
        if !s.ptpl {
            return (Machine::default(), problems);
        }
        let mut m = Machine {
            generation: s.generation,
            ptpl: true,
            ..Machine::default()
        };
        for r in &s.registrants {
            if m.is_registrant(&r.hostid) {
                problems.push("duplicate registrant dropped");
            } else if m.registrants.len() >= MAX_REGISTRANTS {
                problems.push("registrants beyond the limit dropped");
                break;
            } else {
                m.registrants.push(Registrant {
                    hostid: r.hostid,
                    key: r.key,
                });
            }
        }
        m.held = match (ReservationType::from_u8(s.rtype), s.holder) {
            (None, _) if s.rtype != 0 => {
                problems.push("unknown reservation type: reservation dropped");
                None
            }
            (None, _) => None,
            (Some(t), _) if t.all_registrants() => {
                if m.registrants.is_empty() {
                    problems.push("all-registrants reservation without registrants dropped");
                    None
                } else {
                    Some(Held::AllRegistrants { rtype: t })
                }
            }
            (Some(t), Some(holder)) if m.is_registrant(&holder) => {
                Some(Held::Single { rtype: t, holder })
            }
            (Some(_), _) => {
                problems.push("reservation without a registered holder dropped");
                None
            }
        };
        (m, problems)
    }
}

fn notify(eff: &mut ResvEffects, hosts: &[HostId], log_type: u8) {
    eff.notify.extend(hosts.iter().map(|h| (*h, log_type)));
}
