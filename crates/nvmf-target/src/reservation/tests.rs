//! Transitions of NVMe base 2.0 section 8.19, the access matrix, Report's byte layout,
//! PTPL persistence and the fencing scenario of issue 5.

#![allow(clippy::unwrap_used)]

mod harness;
mod persistence;
mod props;

use harness::*;
use nvme_proto::log::reservation::notification_type as notice;
use nvme_proto::opcode::io;
use nvme_proto::reservation::{ReservationStatus, cptpl, racqa, rrega, rrela};

use super::*;

const CONFLICT: Status = Status::RESERVATION_CONFLICT.dnr();
const INVALID: Status = Status::INVALID_FIELD.dnr();

// ---- Register -------------------------------------------------------------------------

#[test]
fn register_same_key_succeeds_other_key_conflicts() {
    let t = T::new();
    assert_eq!(t.register(A, 0xA), Ok(none()));
    assert_eq!(t.generation(), 1);
    // Same key again: success, and it is a Register that completed (generation moves).
    assert_eq!(t.register(A, 0xA), Ok(none()));
    assert_eq!(t.generation(), 2);
    assert_eq!(t.register(A, 0xB), Err(CONFLICT));
    assert_eq!(t.generation(), 2);
    assert_eq!(t.keys(), vec![(A, 0xA)]);
    // IEKEY does not let Register change a key (only CRKEY checks are ignored).
    assert_eq!(t.reg(A, rrega::REGISTER, true, 0, 0, 0xB), Err(CONFLICT));
    // Key 0 is a key like any other.
    assert_eq!(t.register(B, 0), Ok(none()));
    assert_eq!(t.keys(), vec![(A, 0xA), (B, 0)]);
}

#[test]
fn all_controllers_of_a_host_share_its_registration() {
    let t = T::new();
    t.register(A, 0xA).unwrap();
    // Another controller (cntlid 2) of host A: already registered, may acquire with the key.
    let other_ctrl = HostRef {
        hostid: A,
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:a",
        cntlid: 2,
    };
    let cmd = acquire_cmd(racqa::ACQUIRE, 1);
    assert!(
        t.s.acquire(&other_ctrl, &cmd, &acquire_data(0xA, 0))
            .is_ok()
    );
    assert!(t.s.check_access(&other_ctrl, io::WRITE).is_ok());
    assert!(t.can(A, io::WRITE));
    assert_eq!(t.report().registrants.len(), 1);
}

#[test]
fn unregister_checks_key_unless_iekey() {
    let t = T::new();
    assert_eq!(
        t.reg(A, rrega::UNREGISTER, false, 0, 0xA, 0),
        Err(CONFLICT),
        "not registered"
    );
    t.register(A, 0xA).unwrap();
    assert_eq!(t.reg(A, rrega::UNREGISTER, false, 0, 0xB, 0), Err(CONFLICT));
    assert_eq!(t.generation(), 1);
    assert_eq!(t.reg(A, rrega::UNREGISTER, false, 0, 0xA, 0), Ok(none()));
    assert_eq!(t.generation(), 2);
    assert!(t.keys().is_empty());
    t.register(A, 0xA).unwrap();
    assert_eq!(t.reg(A, rrega::UNREGISTER, true, 0, 0x999, 0), Ok(none()));
    assert!(t.keys().is_empty());
    assert_eq!(t.generation(), 4);
}

#[test]
fn replace_checks_key_unless_iekey() {
    let t = T::new();
    assert_eq!(
        t.reg(A, rrega::REPLACE, false, 0, 0, 0xB),
        Err(CONFLICT),
        "not registered"
    );
    assert_eq!(
        t.reg(A, rrega::REPLACE, true, 0, 0, 0xB),
        Err(CONFLICT),
        "IEKEY does not register"
    );
    t.register(A, 0xA).unwrap();
    assert_eq!(t.reg(A, rrega::REPLACE, false, 0, 0xC, 0xB), Err(CONFLICT));
    assert_eq!(t.reg(A, rrega::REPLACE, false, 0, 0xA, 0xB), Ok(none()));
    assert_eq!(t.keys(), vec![(A, 0xB)]);
    assert_eq!(t.reg(A, rrega::REPLACE, true, 0, 0x1234, 0xC), Ok(none()));
    assert_eq!(t.keys(), vec![(A, 0xC)]);
    assert_eq!(t.generation(), 3);
    // The holder replacing its key keeps the reservation under the new key.
    t.acq(A, racqa::ACQUIRE, 1, 0xC, 0).unwrap();
    t.reg(A, rrega::REPLACE, false, 0, 0xC, 0xD).unwrap();
    assert_eq!(t.holder(), Some(A));
    assert_eq!(
        t.acq(A, racqa::ACQUIRE, 1, 0xC, 0),
        Err(CONFLICT),
        "old key"
    );
    assert_eq!(t.acq(A, racqa::ACQUIRE, 1, 0xD, 0), Ok(none()));
}

#[test]
fn register_reserved_fields() {
    let t = T::new();
    for a in 3..8 {
        assert_eq!(t.reg(A, a, false, 0, 0, 1), Err(INVALID), "rrega {a}");
    }
    assert_eq!(
        t.reg(A, rrega::REGISTER, false, 1, 0, 1),
        Err(INVALID),
        "cptpl 1 is reserved"
    );
    assert_eq!(t.generation(), 0);
    assert!(t.keys().is_empty());
}

#[test]
fn short_data_is_refused() {
    let t = T::new();
    let c = register_cmd(rrega::REGISTER, false, 0);
    assert_eq!(
        t.s.register(&host(A), &c, &[0; 15]),
        Err(Status::DATA_SGL_LENGTH_INVALID.dnr())
    );
    let c = acquire_cmd(racqa::ACQUIRE, 1);
    assert_eq!(
        t.s.acquire(&host(A), &c, &[0; 8]),
        Err(Status::DATA_SGL_LENGTH_INVALID.dnr())
    );
    let c = release_cmd(rrela::RELEASE, 1);
    assert_eq!(
        t.s.release(&host(A), &c, &[0; 7]),
        Err(Status::DATA_SGL_LENGTH_INVALID.dnr())
    );
}

#[test]
fn registrants_are_bounded() {
    let t = T::new();
    for i in 0..MAX_REGISTRANTS {
        let mut h = [0u8; 16];
        h[..8].copy_from_slice(&(i as u64).to_le_bytes());
        t.register(h, 1).unwrap();
    }
    assert_eq!(t.register([0xFF; 16], 1), Err(Status::INTERNAL_ERROR.dnr()));
    assert_eq!(t.keys().len(), MAX_REGISTRANTS);
}

#[test]
fn unregistering_the_holder_releases() {
    for rtype in 1..=4u8 {
        let t = T::new();
        t.register(A, 0xA).unwrap();
        t.register(B, 0xB).unwrap();
        t.register(C, 0xC).unwrap();
        t.acq(A, racqa::ACQUIRE, rtype, 0xA, 0).unwrap();
        let eff = t.reg(A, rrega::UNREGISTER, false, 0, 0xA, 0).unwrap();
        assert_eq!(t.rtype(), 0, "type {rtype}");
        // Only the registrants-only types tell the others their access went away.
        let want = if rtype >= 3 {
            vec![
                (B, notice::RESERVATION_RELEASED),
                (C, notice::RESERVATION_RELEASED),
            ]
        } else {
            vec![]
        };
        assert_eq!(eff.notify, want, "type {rtype}");
        assert!(eff.aborted_hosts.is_empty());
    }
    // Unregistering a registrant that is not the holder changes nothing else.
    let t = T::new();
    t.register(A, 0xA).unwrap();
    t.register(B, 0xB).unwrap();
    t.acq(A, racqa::ACQUIRE, 3, 0xA, 0).unwrap();
    assert_eq!(t.reg(B, rrega::UNREGISTER, false, 0, 0xB, 0), Ok(none()));
    assert_eq!((t.rtype(), t.holder()), (3, Some(A)));
}

#[test]
fn all_registrants_reservation_ends_with_its_last_registrant() {
    for rtype in 5..=6u8 {
        let t = T::new();
        t.register(A, 0xA).unwrap();
        t.register(B, 0xB).unwrap();
        t.acq(A, racqa::ACQUIRE, rtype, 0xA, 0).unwrap();
        assert_eq!(t.reg(A, rrega::UNREGISTER, false, 0, 0xA, 0), Ok(none()));
        assert_eq!(t.rtype(), rtype, "B still holds it");
        assert!(t.report().registrants[0].rcsts & 1 == 1);
        assert_eq!(t.reg(B, rrega::UNREGISTER, false, 0, 0xB, 0), Ok(none()));
        assert_eq!(t.rtype(), 0);
        assert!(t.can(C, io::WRITE));
    }
}

// ---- Acquire --------------------------------------------------------------------------

#[test]
fn acquire_needs_a_registration_and_its_key() {
    let t = T::new();
    assert_eq!(t.acq(A, racqa::ACQUIRE, 1, 0xA, 0), Err(CONFLICT));
    t.register(A, 0xA).unwrap();
    assert_eq!(t.acq(A, racqa::ACQUIRE, 1, 0xB, 0), Err(CONFLICT));
    assert_eq!(t.rtype(), 0);
}

#[test]
fn acquire_reserved_fields() {
    let t = T::new();
    t.register(A, 0xA).unwrap();
    for bad in [0u8, 7, 0xFF] {
        assert_eq!(
            t.acq(A, racqa::ACQUIRE, bad, 0xA, 0),
            Err(INVALID),
            "rtype {bad}"
        );
    }
    for a in 3..8 {
        assert_eq!(t.acq(A, a, 1, 0xA, 0), Err(INVALID), "racqa {a}");
    }
    // IEKEY is invalid in Acquire since NVMe 1.3, even with the right key.
    let c = ReservationAcquire {
        racqa: racqa::ACQUIRE,
        iekey: true,
        rtype: 1,
    }
    .to_command(1, 1);
    assert_eq!(
        t.s.acquire(&host(A), &c, &acquire_data(0xA, 0)),
        Err(INVALID)
    );
    assert_eq!((t.rtype(), t.generation()), (0, 1));
}

#[test]
fn acquire_by_holder_and_others() {
    for rtype in 1..=4u8 {
        let t = T::new();
        t.register(A, 0xA).unwrap();
        t.register(B, 0xB).unwrap();
        let g = t.generation();
        assert_eq!(t.acq(A, racqa::ACQUIRE, rtype, 0xA, 0), Ok(none()));
        assert_eq!((t.rtype(), t.holder()), (rtype, Some(A)));
        // Acquire does not move the generation.
        assert_eq!(t.generation(), g);
        // The holder again, same type: success; another type: conflict.
        assert_eq!(t.acq(A, racqa::ACQUIRE, rtype, 0xA, 0), Ok(none()));
        let other = if rtype == 1 { 2 } else { 1 };
        assert_eq!(t.acq(A, racqa::ACQUIRE, other, 0xA, 0), Err(CONFLICT));
        // Another registrant, any type: conflict.
        assert_eq!(t.acq(B, racqa::ACQUIRE, rtype, 0xB, 0), Err(CONFLICT));
        assert_eq!(t.acq(B, racqa::ACQUIRE, other, 0xB, 0), Err(CONFLICT));
        assert_eq!((t.rtype(), t.holder()), (rtype, Some(A)));
    }
}

#[test]
fn acquire_all_registrants() {
    for rtype in 5..=6u8 {
        let t = T::new();
        t.register(A, 0xA).unwrap();
        t.register(B, 0xB).unwrap();
        t.acq(A, racqa::ACQUIRE, rtype, 0xA, 0).unwrap();
        // Every registrant holds it: acquiring the same type is a no-op success.
        assert_eq!(t.acq(B, racqa::ACQUIRE, rtype, 0xB, 0), Ok(none()));
        assert_eq!(t.acq(B, racqa::ACQUIRE, 1, 0xB, 0), Err(CONFLICT));
        let r = t.report();
        assert!(r.registrants.iter().all(|e| e.rcsts == 1));
        assert_eq!(t.holder(), None);
        // A host registering later holds it too.
        t.register(C, 0xC).unwrap();
        assert_eq!(t.report().registrants[2].rcsts, 1);
    }
}

// ---- Preempt --------------------------------------------------------------------------

#[test]
fn preempt_without_reservation_unregisters_prkey() {
    let t = T::new();
    t.register(A, 0xA).unwrap();
    t.register(B, 0xB).unwrap();
    t.register(C, 0xB).unwrap();
    let g = t.generation();
    assert_eq!(
        t.acq(A, racqa::PREEMPT, 1, 0xA, 0x77),
        Err(CONFLICT),
        "no registrant has PRKEY"
    );
    assert_eq!(t.generation(), g);
    let eff = t.acq(A, racqa::PREEMPT, 1, 0xA, 0xB).unwrap();
    assert_eq!(
        eff.notify,
        vec![
            (B, notice::REGISTRATION_PREEMPTED),
            (C, notice::REGISTRATION_PREEMPTED)
        ]
    );
    assert!(eff.aborted_hosts.is_empty());
    assert_eq!(t.keys(), vec![(A, 0xA)]);
    // Nothing was held, so nothing is acquired.
    assert_eq!(t.rtype(), 0);
    assert_eq!(t.generation(), g + 1);
    // PRKEY equal to the issuer's own key unregisters the issuer, without a notice.
    let eff = t.acq(A, racqa::PREEMPT, 1, 0xA, 0xA).unwrap();
    assert_eq!(eff, none());
    assert!(t.keys().is_empty());
}

#[test]
fn preempting_the_holder() {
    for old in 1..=4u8 {
        for new in 1..=6u8 {
            let t = T::new();
            t.register(A, 0xA).unwrap();
            t.register(D, 0xA).unwrap(); // shares the holder's key
            t.register(B, 0xB).unwrap();
            t.register(C, 0xC).unwrap();
            t.acq(A, racqa::ACQUIRE, old, 0xA, 0).unwrap();
            let g = t.generation();
            let eff = t.acq(B, racqa::PREEMPT, new, 0xB, 0xA).unwrap();
            assert_eq!(t.keys(), vec![(B, 0xB), (C, 0xC)], "{old}->{new}");
            assert_eq!(t.rtype(), new);
            assert!(t.s.machine().is_holder(&B));
            let mut want = Vec::new();
            if old != new {
                want.push((C, notice::RESERVATION_RELEASED));
            }
            want.push((A, notice::REGISTRATION_PREEMPTED));
            want.push((D, notice::REGISTRATION_PREEMPTED));
            assert_eq!(eff.notify, want, "{old}->{new}");
            assert!(eff.aborted_hosts.is_empty());
            assert_eq!(t.generation(), g + 1);
        }
    }
}

#[test]
fn holder_preempting_itself_changes_the_type() {
    let t = T::new();
    t.register(A, 0xA).unwrap();
    t.register(B, 0xB).unwrap();
    t.acq(A, racqa::ACQUIRE, 1, 0xA, 0).unwrap();
    let eff = t.acq(A, racqa::PREEMPT, 3, 0xA, 0xA).unwrap();
    assert_eq!(eff.notify, vec![(B, notice::RESERVATION_RELEASED)]);
    assert_eq!((t.rtype(), t.holder()), (3, Some(A)));
    assert_eq!(t.keys(), vec![(A, 0xA), (B, 0xB)]);
    // Same type again: nothing to tell anyone, but it is a preempt (generation moves).
    let g = t.generation();
    assert_eq!(t.acq(A, racqa::PREEMPT, 3, 0xA, 0xA), Ok(none()));
    assert_eq!(t.generation(), g + 1);
    // To an all-registrants type: B becomes a holder too.
    t.acq(A, racqa::PREEMPT, 5, 0xA, 0xA).unwrap();
    assert!(t.s.machine().is_holder(&B));
}

#[test]
fn preempt_other_registrants_keeps_the_reservation() {
    let t = T::new();
    t.register(A, 0xA).unwrap();
    t.register(B, 0xB).unwrap();
    t.register(C, 0xC).unwrap();
    t.acq(A, racqa::ACQUIRE, 4, 0xA, 0).unwrap();
    // PRKEY is neither the holder's nor any registrant's: conflict.
    assert_eq!(t.acq(B, racqa::PREEMPT, 4, 0xB, 0x99), Err(CONFLICT));
    // PRKEY 0 that is not the holder's key: invalid field.
    assert_eq!(t.acq(B, racqa::PREEMPT, 4, 0xB, 0), Err(INVALID));
    let g = t.generation();
    let eff = t.acq(B, racqa::PREEMPT, 4, 0xB, 0xC).unwrap();
    assert_eq!(eff.notify, vec![(C, notice::REGISTRATION_PREEMPTED)]);
    assert_eq!((t.rtype(), t.holder()), (4, Some(A)));
    assert_eq!(t.keys(), vec![(A, 0xA), (B, 0xB)]);
    assert_eq!(t.generation(), g + 1);
    // The holder preempting another registrant's key keeps its reservation and type.
    t.register(C, 0xC).unwrap();
    t.acq(A, racqa::PREEMPT, 1, 0xA, 0xC).unwrap();
    assert_eq!((t.rtype(), t.holder()), (4, Some(A)));
}

#[test]
fn preempt_all_registrants() {
    for held in 5..=6u8 {
        // PRKEY 0: everybody else goes, the issuer holds RTYPE (any type).
        for new in 1..=6u8 {
            let t = T::new();
            t.register(A, 0xA).unwrap();
            t.register(B, 0xB).unwrap();
            t.register(C, 0xC).unwrap();
            t.acq(A, racqa::ACQUIRE, held, 0xA, 0).unwrap();
            let eff = t.acq(B, racqa::PREEMPT_AND_ABORT, new, 0xB, 0).unwrap();
            assert_eq!(t.keys(), vec![(B, 0xB)]);
            assert_eq!(t.rtype(), new);
            assert!(t.s.machine().is_holder(&B));
            assert_eq!(
                eff.notify,
                vec![
                    (A, notice::REGISTRATION_PREEMPTED),
                    (C, notice::REGISTRATION_PREEMPTED)
                ]
            );
            assert_eq!(eff.aborted_hosts, vec![A, C]);
        }
        // PRKEY non-zero: the registrants with that key go; the reservation stays.
        let t = T::new();
        t.register(A, 0xA).unwrap();
        t.register(B, 0xB).unwrap();
        t.register(C, 0xC).unwrap();
        t.acq(A, racqa::ACQUIRE, held, 0xA, 0).unwrap();
        assert_eq!(t.acq(B, racqa::PREEMPT, 1, 0xB, 0x99), Err(CONFLICT));
        let eff = t.acq(B, racqa::PREEMPT, 1, 0xB, 0xA).unwrap();
        assert_eq!(eff.notify, vec![(A, notice::REGISTRATION_PREEMPTED)]);
        assert_eq!(t.rtype(), held, "type unchanged");
        assert_eq!(t.keys(), vec![(B, 0xB), (C, 0xC)]);
    }
}

#[test]
fn preempt_and_abort_lists_the_preempted_hosts() {
    let t = T::new();
    t.register(A, 0xA).unwrap();
    t.register(B, 0xB).unwrap();
    t.register(C, 0xA).unwrap();
    t.acq(A, racqa::ACQUIRE, 3, 0xA, 0).unwrap();
    let eff = t.acq(B, racqa::PREEMPT_AND_ABORT, 3, 0xB, 0xA).unwrap();
    assert_eq!(eff.aborted_hosts, vec![A, C]);
    assert_eq!(
        eff.notify,
        vec![
            (A, notice::REGISTRATION_PREEMPTED),
            (C, notice::REGISTRATION_PREEMPTED)
        ]
    );
    // A failed preempt-and-abort aborts nothing.
    assert_eq!(
        t.acq(B, racqa::PREEMPT_AND_ABORT, 3, 0xB, 0x99),
        Err(CONFLICT)
    );
    // The issuer never aborts itself.
    let eff = t.acq(B, racqa::PREEMPT_AND_ABORT, 3, 0xB, 0xB).unwrap();
    assert!(eff.aborted_hosts.is_empty());
}

// ---- Release --------------------------------------------------------------------------

#[test]
fn release_key_checks_and_reserved_fields() {
    let t = T::new();
    assert_eq!(
        t.rel(A, rrela::RELEASE, 1, 0xA),
        Err(CONFLICT),
        "not registered"
    );
    t.register(A, 0xA).unwrap();
    assert_eq!(t.rel(A, rrela::RELEASE, 1, 0xB), Err(CONFLICT));
    for a in 2..8 {
        assert_eq!(t.rel(A, a, 1, 0xA), Err(INVALID), "rrela {a}");
    }
    let c = ReservationRelease {
        rrela: rrela::RELEASE,
        iekey: true,
        rtype: 1,
    }
    .to_command(1, 1);
    assert_eq!(
        t.s.release(&host(A), &c, &0xAu64.to_le_bytes()),
        Err(INVALID)
    );
    // Nothing held: success, no effect.
    assert_eq!(t.rel(A, rrela::RELEASE, 1, 0xA), Ok(none()));
}

#[test]
fn release_by_holder() {
    for rtype in 1..=6u8 {
        let t = T::new();
        t.register(A, 0xA).unwrap();
        t.register(B, 0xB).unwrap();
        t.acq(A, racqa::ACQUIRE, rtype, 0xA, 0).unwrap();
        let g = t.generation();
        // The wrong type: invalid field, still held.
        let wrong = if rtype == 6 { 1 } else { rtype + 1 };
        assert_eq!(
            t.rel(A, rrela::RELEASE, wrong, 0xA),
            Err(INVALID),
            "type {rtype}"
        );
        assert_eq!(t.rtype(), rtype);
        let eff = t.rel(A, rrela::RELEASE, rtype, 0xA).unwrap();
        assert_eq!(t.rtype(), 0);
        let want = if rtype >= 3 {
            vec![(B, notice::RESERVATION_RELEASED)]
        } else {
            vec![]
        };
        assert_eq!(eff.notify, want, "type {rtype}");
        assert_eq!(t.keys(), vec![(A, 0xA), (B, 0xB)], "registrations stay");
        assert_eq!(t.generation(), g, "release does not move the generation");
    }
}

#[test]
fn release_by_non_holder_is_a_no_op() {
    for rtype in 1..=4u8 {
        let t = T::new();
        t.register(A, 0xA).unwrap();
        t.register(B, 0xB).unwrap();
        t.acq(A, racqa::ACQUIRE, rtype, 0xA, 0).unwrap();
        assert_eq!(t.rel(B, rrela::RELEASE, rtype, 0xB), Ok(none()));
        // Even with a wrong type: B does not hold it, so there is nothing to check.
        assert_eq!(t.rel(B, rrela::RELEASE, 6, 0xB), Ok(none()));
        assert_eq!((t.rtype(), t.holder()), (rtype, Some(A)));
    }
    // All registrants: any registrant's release ends it for everybody.
    let t = T::new();
    t.register(A, 0xA).unwrap();
    t.register(B, 0xB).unwrap();
    t.register(C, 0xC).unwrap();
    t.acq(A, racqa::ACQUIRE, 6, 0xA, 0).unwrap();
    let eff = t.rel(B, rrela::RELEASE, 6, 0xB).unwrap();
    assert_eq!(t.rtype(), 0);
    assert_eq!(
        eff.notify,
        vec![
            (A, notice::RESERVATION_RELEASED),
            (C, notice::RESERVATION_RELEASED)
        ]
    );
}

#[test]
fn clear_drops_everything() {
    let t = T::new();
    t.register(A, 0xA).unwrap();
    t.register(B, 0xB).unwrap();
    t.register(C, 0xC).unwrap();
    t.acq(A, racqa::ACQUIRE, 2, 0xA, 0).unwrap();
    let g = t.generation();
    // Any registrant may clear (B is not the holder); RTYPE does not matter.
    let eff = t.rel(B, rrela::CLEAR, 0, 0xB).unwrap();
    assert_eq!(
        eff.notify,
        vec![
            (A, notice::RESERVATION_PREEMPTED),
            (C, notice::RESERVATION_PREEMPTED)
        ]
    );
    assert!(eff.aborted_hosts.is_empty());
    assert!(t.keys().is_empty());
    assert_eq!(t.rtype(), 0);
    assert_eq!(t.generation(), g + 1);
    assert!(t.can(D, io::READ) && t.can(D, io::WRITE));
    // A non-registrant may not.
    assert_eq!(t.rel(B, rrela::CLEAR, 0, 0xB), Err(CONFLICT));
}

// ---- Access ---------------------------------------------------------------------------

/// NVMe base 2.0, "Command Behavior in the Presence of a Reservation": per type, whether
/// (holder, registrant, non-registrant) may (read, write).
const MATRIX: [(u8, [[bool; 2]; 3]); 6] = [
    (1, [[true, true], [true, false], [true, false]]),
    (2, [[true, true], [false, false], [false, false]]),
    (3, [[true, true], [true, true], [true, false]]),
    (4, [[true, true], [true, true], [false, false]]),
    (5, [[true, true], [true, true], [true, false]]),
    (6, [[true, true], [true, true], [false, false]]),
];

const READS: [u8; 3] = [io::READ, io::COMPARE, io::VERIFY];
const WRITES: [u8; 5] = [
    io::WRITE,
    io::WRITE_ZEROES,
    io::DATASET_MANAGEMENT,
    io::FLUSH,
    io::WRITE_UNCORRECTABLE,
];

#[test]
fn access_matrix() {
    for (rtype, rows) in MATRIX {
        let t = T::new();
        t.register(A, 0xA).unwrap();
        t.register(B, 0xB).unwrap();
        t.acq(A, racqa::ACQUIRE, rtype, 0xA, 0).unwrap();
        // A holds it, B is a registrant, C is neither.
        for (who, [read, write]) in [A, B, C].into_iter().zip(rows) {
            for op in READS {
                assert_eq!(
                    t.can(who, op),
                    read,
                    "type {rtype} host {:x} op {op:#x}",
                    who[0]
                );
            }
            for op in WRITES {
                assert_eq!(
                    t.can(who, op),
                    write,
                    "type {rtype} host {:x} op {op:#x}",
                    who[0]
                );
            }
            for op in [io::RESERVATION_REPORT, io::RESERVATION_REGISTER, 0x80] {
                assert!(t.can(who, op), "unrestricted {op:#x}");
            }
        }
        let st = t.s.check_access(&host(C), io::WRITE).unwrap_err();
        assert_eq!(st, CONFLICT);
    }
}

#[test]
fn registrations_alone_restrict_nothing() {
    let t = T::new();
    assert!(t.can(A, io::WRITE));
    t.register(A, 0xA).unwrap();
    t.register(B, 0xB).unwrap();
    for who in [A, B, C] {
        assert!(t.can(who, io::WRITE) && t.can(who, io::READ));
    }
    assert!(!t.s.held.load(Ordering::Relaxed));
}

/// Issue 5: processor node A owns a volume with Write Exclusive - Registrants Only on each
/// member; standby B fences it with preempt-and-abort on A's key.
#[test]
fn fencing_with_preempt_and_abort() {
    const KEY_A: u64 = 0xA11C_E000_0000_0001;
    const KEY_B: u64 = 0xB0B0_0000_0000_0002;
    let t = T::new();
    t.register(A, KEY_A).unwrap();
    t.acq(A, racqa::ACQUIRE, 3, KEY_A, 0).unwrap();
    t.register(B, KEY_B).unwrap();
    assert!(t.can(A, io::WRITE));
    assert!(
        !t.can(C, io::WRITE),
        "an unregistered host is fenced off already"
    );

    let eff = t.acq(B, racqa::PREEMPT_AND_ABORT, 3, KEY_B, KEY_A).unwrap();
    assert_eq!(
        eff.aborted_hosts,
        vec![A],
        "the target aborts A's outstanding commands"
    );
    assert_eq!(eff.notify, vec![(A, notice::REGISTRATION_PREEMPTED)]);

    for op in WRITES {
        assert_eq!(
            t.s.check_access(&host(A), op),
            Err(CONFLICT),
            "A's op {op:#x}"
        );
        assert_eq!(t.s.check_access(&host(B), op), Ok(()), "B's op {op:#x}");
    }
    // Write exclusive: the fenced host may still read.
    assert!(t.can(A, io::READ));
    // A's old key is worthless: it can neither take the reservation back nor release it.
    assert_eq!(t.acq(A, racqa::PREEMPT, 3, KEY_A, KEY_B), Err(CONFLICT));
    assert_eq!(t.rel(A, rrela::CLEAR, 0, KEY_A), Err(CONFLICT));
    let r = t.report();
    assert_eq!(r.rtype, 3);
    assert_eq!(r.registrants.len(), 1);
    assert_eq!((r.registrants[0].hostid, r.registrants[0].rcsts), (B, 1));
}

// ---- Report ---------------------------------------------------------------------------

#[test]
fn report_byte_layout() {
    let t = T::new();
    t.register(A, 0x0102_0304_0506_0708).unwrap();
    t.register(B, 0xB).unwrap();
    t.acq(A, racqa::ACQUIRE, 4, 0x0102_0304_0506_0708, 0)
        .unwrap();
    let b = t.report_bytes(4096, true, 4096).unwrap();
    assert_eq!(b.len(), 4096, "zero-padded to what the host asked for");
    // Header: GEN 2, RTYPE 4, REGCTL 2, PTPLS 0, then reserved up to byte 64.
    assert_eq!(&b[..10], &[2, 0, 0, 0, 4, 2, 0, 0, 0, 0]);
    assert!(b[10..64].iter().all(|&x| x == 0));
    // Entry 0 (A, holder): CNTLID FFFFh, RCSTS 1, RKEY at 8, HOSTID at 16.
    let e = &b[64..128];
    assert_eq!(&e[..3], &[0xFF, 0xFF, 1]);
    assert!(e[3..8].iter().all(|&x| x == 0));
    assert_eq!(&e[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(&e[16..32], &A);
    assert!(e[32..64].iter().all(|&x| x == 0));
    // Entry 1 (B, registrant).
    let e = &b[128..192];
    assert_eq!(&e[..3], &[0xFF, 0xFF, 0]);
    assert_eq!(&e[8..16], &0xBu64.to_le_bytes());
    assert_eq!(&e[16..32], &B);
    assert!(b[192..].iter().all(|&x| x == 0));
}

#[test]
fn report_truncates_to_the_buffer() {
    let t = T::new();
    t.register(A, 0xA).unwrap();
    t.register(B, 0xB).unwrap();
    t.reg(A, rrega::REGISTER, false, cptpl::NO_CHANGE, 0, 0xA)
        .unwrap();
    let full = t.report_bytes(4096, true, 4096).unwrap();
    // NUMD asks for 100 bytes (25 dwords): the header and half of entry 0.
    let b = t.report_bytes(100, true, 4096).unwrap();
    assert_eq!(b.len(), 100);
    assert_eq!(&b[..], &full[..100]);
    assert_eq!(
        b[5], 2,
        "REGCTL counts every registrant even if they do not fit"
    );
    // The transfer is smaller than NUMD: the transfer wins.
    let b = t.report_bytes(4096, true, 16).unwrap();
    assert_eq!(&b[..], &full[..16]);
    assert!(t.report_bytes(4096, true, 0).unwrap().is_empty());
}

#[test]
fn report_compact_form_is_refused_for_128_bit_host_ids() {
    let t = T::new();
    t.register(A, 0xA).unwrap();
    assert_eq!(
        t.report_bytes(4096, false, 4096),
        Err(Status::HOST_ID_INCONSISTENT_FORMAT.dnr())
    );
    // A host that is not registered may still report.
    assert!(t.s.report(&host(D), &report_cmd(4096, true), 4096).is_ok());
}

#[test]
fn report_decodes_with_nvme_proto() {
    let t = T::new();
    t.register(A, 0xA).unwrap();
    t.register(B, 0xB).unwrap();
    t.acq(B, racqa::ACQUIRE, 5, 0xB, 0).unwrap();
    let b = t.report_bytes(4096, true, 4096).unwrap();
    let r = ReservationStatus::decode(&b, true).unwrap();
    assert_eq!(r, t.s.status());
    assert_eq!((r.generation, r.rtype, r.ptpls), (2, 5, false));
    assert!(
        r.registrants
            .iter()
            .all(|e| e.rcsts == 1 && e.cntlid == 0xFFFF)
    );
}

#[test]
fn rescap_advertises_ptpl_only_with_a_store() {
    assert_eq!(ReservationState::default().capabilities(), 0xFE);
    let store: Arc<dyn ReservationStore> = Arc::new(|_: &ReservationSnapshot| Ok(()));
    assert_eq!(
        ReservationState::new(Some(store), None).capabilities(),
        0xFF
    );
}

#[test]
fn generation_wraps() {
    let snap = ReservationSnapshot {
        generation: u32::MAX,
        ptpl: true,
        ..Default::default()
    };
    let t = T::with(ReservationState::new(
        Some(Arc::new(MemStore::default())),
        Some(snap),
    ));
    assert_eq!(t.generation(), u32::MAX);
    t.register(A, 1).unwrap();
    assert_eq!(t.generation(), 0);
}
