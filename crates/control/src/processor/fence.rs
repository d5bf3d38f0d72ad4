//! Fencing a member: make this node the only writer with an NVMe reservation.
//!
//! Register this node's key (`records::reservation_key`), replacing a registration of
//! our own host ID under another key, then hold Write Exclusive (type 1): acquire it when
//! nobody holds it, keep it when we do, or preempt-and-abort the holder (a previous
//! owner), which drops the holder's registration and aborts its commands still queued on
//! the member. From then on the old owner's writes get Reservation Conflict.

use nvme_proto::identify::controller::bits as cbits;
use nvme_proto::reservation::{ReservationType, racqa, rrega};
use nvme_proto::status::sct;
use nvmf_host::{HostError, RemoteNamespace};

const SC_RESERVATION_CONFLICT: u8 = 0x83;
const RTYPE: ReservationType = ReservationType::WriteExclusive;
/// A holder may change between report and acquire (another node fencing at once).
const ATTEMPTS: usize = 4;

/// How a member was fenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceOutcome {
    /// We hold Write Exclusive; `preempted` is the key of the holder we displaced.
    Reserved { preempted: Option<u64> },
    /// The member's target has no reservations: only superblock generations protect it.
    Unsupported,
}

fn is_conflict(e: &HostError) -> bool {
    e.nvme_status()
        .is_some_and(|s| s.sct == sct::GENERIC && s.sc == SC_RESERVATION_CONFLICT)
}

/// Whether the member's target implements reservations (ONCS bit 5 and a non-zero
/// RESCAP on the namespace).
pub fn supports_reservations(ns: &RemoteNamespace) -> bool {
    ns.controller().id().oncs & cbits::ONCS_RESERVATIONS != 0 && ns.id().rescap != 0
}

/// Registers `key` and takes Write Exclusive on `ns` for this host.
pub async fn fence_member(ns: &RemoteNamespace, key: u64) -> Result<FenceOutcome, HostError> {
    if !supports_reservations(ns) {
        return Ok(FenceOutcome::Unsupported);
    }
    match ns
        .reservation_register(rrega::REGISTER, 0, key, false, 0)
        .await
    {
        Ok(()) => {}
        // Registered under another key (a different build, a key change): replace it.
        Err(e) if is_conflict(&e) => {
            ns.reservation_register(rrega::REPLACE, 0, key, true, 0)
                .await?;
        }
        Err(e) => return Err(e),
    }
    let me = ns.controller().host().hostid;
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let report = ns.reservation_report().await?;
        let holder = report.registrants.iter().find(|r| {
            r.rcsts & nvme_proto::reservation::RegisteredController::RCSTS_HOLDS_RESERVATION != 0
        });
        let result = match holder {
            None if report.rtype == 0 => ns
                .reservation_acquire(racqa::ACQUIRE, RTYPE, key, 0, false)
                .await
                .map(|()| None),
            Some(h) if h.hostid == me => {
                if report.rtype == RTYPE.as_u8() {
                    return Ok(FenceOutcome::Reserved { preempted: None });
                }
                ns.reservation_acquire(racqa::PREEMPT, RTYPE, key, key, false)
                    .await
                    .map(|()| None)
            }
            Some(h) => ns
                .reservation_acquire(racqa::PREEMPT_AND_ABORT, RTYPE, key, h.rkey, false)
                .await
                .map(|()| Some(h.rkey)),
            // Held by all registrants (no single holder): preempt everyone else.
            None => ns
                .reservation_acquire(racqa::PREEMPT_AND_ABORT, RTYPE, key, 0, false)
                .await
                .map(|()| None),
        };
        match result {
            Ok(preempted) => return Ok(FenceOutcome::Reserved { preempted }),
            Err(e) if is_conflict(&e) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| HostError::Usage("reservation kept changing".into())))
}
