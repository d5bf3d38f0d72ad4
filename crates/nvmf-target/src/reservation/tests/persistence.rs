//! Persist Through Power Loss: CPTPL, the Reservation Persistence feature, saving before
//! completion, failed saves, and restarts from the saved snapshot.

use std::io;

use nvme_proto::opcode::io as op;
use nvme_proto::reservation::{cptpl, racqa, rrega, rrela};

use super::super::*;
use super::harness::*;

/// One command of a scripted sequence.
type Step = Box<dyn Fn(&T) -> Result<ResvEffects, Status>>;

fn with_store() -> (T, Arc<MemStore>) {
    let store = Arc::new(MemStore::default());
    let dyn_store: Arc<dyn ReservationStore> = store.clone();
    (T::with(ReservationState::new(Some(dyn_store), None)), store)
}

fn restart(store: &Arc<MemStore>) -> T {
    let dyn_store: Arc<dyn ReservationStore> = store.clone();
    T::with(ReservationState::new(Some(dyn_store), store.last()))
}

#[test]
fn cptpl_without_a_store_is_invalid() {
    let t = T::new();
    assert_eq!(
        t.reg(A, rrega::REGISTER, false, cptpl::PERSIST, 0, 1),
        Err(Status::INVALID_FIELD.dnr())
    );
    assert!(t.keys().is_empty(), "the failed command registered nothing");
    assert_eq!(
        t.s.set_persist_through_power_loss(true),
        Err(Status::INVALID_FIELD.dnr())
    );
    // Turning it off is always possible.
    assert_eq!(
        t.reg(A, rrega::REGISTER, false, cptpl::CLEAR, 0, 1),
        Ok(none())
    );
    assert_eq!(t.s.set_persist_through_power_loss(false), Ok(()));
}

#[test]
fn every_change_is_saved_before_the_command_completes() {
    let (t, store) = with_store();
    // PTPL off: nothing is saved.
    t.register(A, 0xA).unwrap();
    assert_eq!(store.count(), 0);
    // CPTPL 3 turns it on with this very command: the save has the new registration.
    t.reg(B, rrega::REGISTER, false, cptpl::PERSIST, 0, 0xB)
        .unwrap();
    assert!(t.s.persist_through_power_loss());
    assert!(t.report().ptpls);
    assert_eq!(store.last(), Some(t.s.snapshot()));
    assert_eq!(store.last().unwrap().registrants.len(), 2);
    let mut expect = 1;
    let steps: Vec<Step> = vec![
        Box::new(|t| t.acq(A, racqa::ACQUIRE, 3, 0xA, 0)),
        Box::new(|t| t.reg(A, rrega::REPLACE, false, 0, 0xA, 0xAA)),
        Box::new(|t| t.register(C, 0xC)),
        Box::new(|t| t.acq(B, racqa::PREEMPT_AND_ABORT, 1, 0xB, 0xAA)),
        Box::new(|t| t.reg(C, rrega::UNREGISTER, false, 0, 0xC, 0)),
        Box::new(|t| t.rel(B, rrela::RELEASE, 1, 0xB)),
        Box::new(|t| t.register(A, 0xA)),
        Box::new(|t| t.rel(A, rrela::CLEAR, 0, 0xA)),
    ];
    for (i, step) in steps.iter().enumerate() {
        step(&t).unwrap_or_else(|e| panic!("step {i}: {e}"));
        expect += 1;
        assert_eq!(store.count(), expect, "step {i} saved once");
        assert_eq!(
            store.last(),
            Some(t.s.snapshot()),
            "step {i} saved the new state"
        );
    }
    // Commands that change nothing save nothing.
    t.register(A, 0xA).unwrap();
    expect += 1; // (Register always moves the generation)
    assert_eq!(store.count(), expect);
    assert_eq!(t.rel(A, rrela::RELEASE, 1, 0xA), Ok(none()));
    assert_eq!(
        t.acq(D, racqa::ACQUIRE, 1, 0xD, 0),
        Err(Status::RESERVATION_CONFLICT.dnr())
    );
    assert_eq!(store.count(), expect);
}

#[test]
fn a_failed_save_fails_the_command_and_changes_nothing() {
    let (t, store) = with_store();
    t.reg(A, rrega::REGISTER, false, cptpl::PERSIST, 0, 0xA)
        .unwrap();
    t.acq(A, racqa::ACQUIRE, 1, 0xA, 0).unwrap();
    t.register(B, 0xB).unwrap();
    let before = t.s.snapshot();
    store.fail.store(true, Ordering::Relaxed);
    assert_eq!(
        t.acq(B, racqa::PREEMPT_AND_ABORT, 1, 0xB, 0xA),
        Err(Status::INTERNAL_ERROR)
    );
    assert_eq!(t.register(C, 0xC), Err(Status::INTERNAL_ERROR));
    assert_eq!(
        t.s.set_persist_through_power_loss(false),
        Err(Status::INTERNAL_ERROR)
    );
    assert_eq!(t.s.snapshot(), before);
    // A still holds it: B was not let in.
    assert!(t.can(A, op::WRITE));
    assert!(!t.can(B, op::WRITE));
    store.fail.store(false, Ordering::Relaxed);
    let eff = t.acq(B, racqa::PREEMPT_AND_ABORT, 1, 0xB, 0xA).unwrap();
    assert_eq!(eff.aborted_hosts, vec![A]);
    assert!(!t.can(A, op::WRITE));
}

#[test]
fn state_survives_a_restart() {
    let (t, store) = with_store();
    t.reg(A, rrega::REGISTER, false, cptpl::PERSIST, 0, 0xA)
        .unwrap();
    t.register(B, 0xB).unwrap();
    t.register(C, 0xC).unwrap();
    t.acq(A, racqa::ACQUIRE, 3, 0xA, 0).unwrap();
    t.acq(B, racqa::PREEMPT_AND_ABORT, 3, 0xB, 0xA).unwrap();
    let report = t.report_bytes(4096, true, 4096).unwrap();
    drop(t);

    // Through JSON, as a node state file would keep it.
    let json = serde_json::to_string(&store.last().unwrap()).unwrap();
    let restored: ReservationSnapshot = serde_json::from_str(&json).unwrap();
    let dyn_store: Arc<dyn ReservationStore> = store.clone();
    let t = T::with(ReservationState::new(Some(dyn_store), Some(restored)));
    assert_eq!(t.report_bytes(4096, true, 4096).unwrap(), report);
    assert!(t.s.persist_through_power_loss());
    // The fencing holds across the restart.
    assert!(!t.can(A, op::WRITE));
    assert!(t.can(B, op::WRITE) && t.can(C, op::WRITE));
    assert!(!t.can(D, op::WRITE));
    // And the restored state keeps working and saving.
    let n = store.count();
    t.rel(B, rrela::RELEASE, 3, 0xB).unwrap();
    assert_eq!(store.count(), n + 1);
    assert!(t.can(D, op::WRITE));
}

#[test]
fn without_ptpl_nothing_survives() {
    let (t, store) = with_store();
    t.reg(A, rrega::REGISTER, false, cptpl::PERSIST, 0, 0xA)
        .unwrap();
    t.acq(A, racqa::ACQUIRE, 2, 0xA, 0).unwrap();
    // CPTPL 2: PTPL off, saved as "nothing persists".
    t.reg(A, rrega::REGISTER, false, cptpl::CLEAR, 0, 0xA)
        .unwrap();
    assert!(!t.s.persist_through_power_loss());
    assert_eq!(store.last(), Some(ReservationSnapshot::default()));
    // Later changes are not saved.
    let n = store.count();
    t.register(B, 0xB).unwrap();
    assert_eq!(store.count(), n);
    let t2 = restart(&store);
    assert!(t2.keys().is_empty());
    assert_eq!((t2.rtype(), t2.generation()), (0, 0));
    assert!(t2.can(B, op::WRITE));
    // A snapshot that says PTPL off restores nothing even if it lists registrants.
    let stale = ReservationSnapshot {
        ptpl: false,
        generation: 9,
        rtype: 1,
        holder: Some(A),
        registrants: vec![RegistrantSnapshot { hostid: A, key: 1 }],
    };
    let t3 = T::with(ReservationState::new(None, Some(stale)));
    assert!(t3.keys().is_empty() && t3.can(B, op::WRITE));
}

#[test]
fn reservation_persistence_feature() {
    let (t, store) = with_store();
    t.register(A, 0xA).unwrap();
    assert!(!t.s.persist_through_power_loss());
    assert_eq!(t.s.set_persist_through_power_loss(true), Ok(()));
    assert!(t.s.persist_through_power_loss());
    assert_eq!(store.last().unwrap().registrants.len(), 1);
    assert!(store.last().unwrap().ptpl);
    // Setting what is already set saves nothing.
    let n = store.count();
    assert_eq!(t.s.set_persist_through_power_loss(true), Ok(()));
    assert_eq!(store.count(), n);
    assert_eq!(t.s.set_persist_through_power_loss(false), Ok(()));
    assert_eq!(store.last(), Some(ReservationSnapshot::default()));
    // Turning PTPL on or off is not a Register: the generation stays.
    assert_eq!(t.generation(), 1);
}

#[test]
fn restore_repairs_inconsistent_snapshots() {
    let reg = |h, key| RegistrantSnapshot { hostid: h, key };
    let cases = [
        // Holder not registered: the reservation goes, the registrations stay.
        (
            ReservationSnapshot {
                ptpl: true,
                rtype: 1,
                holder: Some(B),
                registrants: vec![reg(A, 1)],
                generation: 4,
            },
            0,
            1,
        ),
        // Unknown type.
        (
            ReservationSnapshot {
                ptpl: true,
                rtype: 9,
                holder: Some(A),
                registrants: vec![reg(A, 1)],
                generation: 4,
            },
            0,
            1,
        ),
        // Single-holder type without holder.
        (
            ReservationSnapshot {
                ptpl: true,
                rtype: 2,
                holder: None,
                registrants: vec![reg(A, 1)],
                generation: 4,
            },
            0,
            1,
        ),
        // All registrants without registrants.
        (
            ReservationSnapshot {
                ptpl: true,
                rtype: 5,
                holder: None,
                registrants: vec![],
                generation: 4,
            },
            0,
            0,
        ),
        // Duplicate registrant: the first one counts.
        (
            ReservationSnapshot {
                ptpl: true,
                rtype: 5,
                holder: Some(A),
                registrants: vec![reg(A, 1), reg(A, 2)],
                generation: 4,
            },
            5,
            1,
        ),
    ];
    for (i, (snap, rtype, n)) in cases.into_iter().enumerate() {
        let store: Arc<dyn ReservationStore> = Arc::new(MemStore::default());
        let t = T::with(ReservationState::new(Some(store), Some(snap)));
        assert_eq!(t.rtype(), rtype, "case {i}");
        assert_eq!(t.keys().len(), n, "case {i}");
        assert_eq!(t.generation(), 4, "case {i}");
        if n > 0 {
            assert_eq!(t.keys()[0], (A, 1), "case {i}");
        }
    }
}

#[test]
fn restored_ptpl_without_a_store_turns_ptpl_off() {
    let snap = ReservationSnapshot {
        ptpl: true,
        generation: 2,
        rtype: 1,
        holder: Some(A),
        registrants: vec![RegistrantSnapshot { hostid: A, key: 1 }],
    };
    let t = T::with(ReservationState::new(None, Some(snap)));
    assert!(!t.s.persist_through_power_loss());
    assert_eq!(t.rtype(), 1, "the state itself is kept");
    assert!(!t.can(B, op::WRITE));
}

#[test]
fn a_closure_is_a_store() {
    let seen = Arc::new(std::sync::Mutex::new(0u32));
    let seen2 = seen.clone();
    let store: Arc<dyn ReservationStore> =
        Arc::new(move |s: &ReservationSnapshot| -> Result<(), io::Error> {
            *seen2.lock().unwrap() = s.generation;
            Ok(())
        });
    let t = T::with(ReservationState::new(Some(store), None));
    t.reg(A, rrega::REGISTER, false, cptpl::PERSIST, 0, 1)
        .unwrap();
    t.register(B, 2).unwrap();
    assert_eq!(*seen.lock().unwrap(), 2);
}
