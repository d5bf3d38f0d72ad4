//! Property test: random command sequences from a few hosts keep the state consistent,
//! fail atomically, move the generation exactly when the spec says, agree with the access
//! rules as Report shows them, and survive a restart through the snapshot.

use std::collections::BTreeSet;

use nvme_proto::opcode::io as op;
use nvme_proto::reservation::{RegisterData, ReservationStatus, ReservationType, racqa, rrela};
use proptest::prelude::*;

use super::super::*;
use super::harness::*;

const HOSTS: [[u8; 16]; 4] = [A, B, C, D];

#[derive(Clone, Debug)]
enum Op {
    Register {
        host: usize,
        rrega: u8,
        iekey: bool,
        cptpl: u8,
        crkey: u64,
        nrkey: u64,
    },
    Acquire {
        host: usize,
        racqa: u8,
        rtype: u8,
        crkey: u64,
        prkey: u64,
    },
    Release {
        host: usize,
        rrela: u8,
        rtype: u8,
        crkey: u64,
    },
    SetPtpl {
        on: bool,
    },
    FailSaves {
        fail: bool,
    },
}

/// Keys from a small set so that checks match often; a few reserved values for the fields.
fn key() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(1), Just(2), Just(3)]
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..4usize, prop_oneof![3 => 0u8..3, 1 => 0u8..8], any::<bool>(), prop_oneof![4 => Just(0u8), 1 => 0u8..4], key(), key())
            .prop_map(|(host, rrega, iekey, cptpl, crkey, nrkey)| Op::Register { host, rrega, iekey, cptpl, crkey, nrkey }),
        4 => (0..4usize, prop_oneof![3 => 0u8..3, 1 => 0u8..8], prop_oneof![5 => 1u8..7, 1 => 0u8..9], key(), key())
            .prop_map(|(host, racqa, rtype, crkey, prkey)| Op::Acquire { host, racqa, rtype, crkey, prkey }),
        2 => (0..4usize, prop_oneof![3 => 0u8..2, 1 => 0u8..8], 0u8..8, key())
            .prop_map(|(host, rrela, rtype, crkey)| Op::Release { host, rrela, rtype, crkey }),
        1 => any::<bool>().prop_map(|on| Op::SetPtpl { on }),
        1 => any::<bool>().prop_map(|fail| Op::FailSaves { fail }),
    ]
}

fn run(t: &T, store: &MemStore, o: &Op) -> Option<Result<ResvEffects, Status>> {
    Some(match *o {
        Op::Register {
            host: h,
            rrega,
            iekey,
            cptpl,
            crkey,
            nrkey,
        } => {
            let data = RegisterData { crkey, nrkey }.to_bytes();
            t.s.register(&host(HOSTS[h]), &register_cmd(rrega, iekey, cptpl), &data)
        }
        Op::Acquire {
            host: h,
            racqa,
            rtype,
            crkey,
            prkey,
        } => t.acq(HOSTS[h], racqa, rtype, crkey, prkey),
        Op::Release {
            host: h,
            rrela,
            rtype,
            crkey,
        } => t.rel(HOSTS[h], rrela, rtype, crkey),
        Op::SetPtpl { on } => {
            t.s.set_persist_through_power_loss(on)
                .map(|()| ResvEffects::default())
        }
        Op::FailSaves { fail } => {
            store.fail.store(fail, Ordering::Relaxed);
            return None;
        }
    })
}

/// Whether a successful `o` must move the generation by one (and others must not).
fn moves_generation(o: &Op) -> bool {
    match *o {
        Op::Register { .. } => true,
        Op::Acquire { racqa: a, .. } => a == racqa::PREEMPT || a == racqa::PREEMPT_AND_ABORT,
        Op::Release { rrela: a, .. } => a == rrela::CLEAR,
        _ => false,
    }
}

fn issuer(o: &Op) -> Option<[u8; 16]> {
    match *o {
        Op::Register { host, .. } | Op::Acquire { host, .. } | Op::Release { host, .. } => {
            Some(HOSTS[host])
        }
        _ => None,
    }
}

/// Consistency of one state, and agreement of check_access with Report.
fn check_state(t: &T) -> Result<ReservationStatus, TestCaseError> {
    let r = t.report();
    let hosts: BTreeSet<_> = r.registrants.iter().map(|e| e.hostid).collect();
    prop_assert_eq!(hosts.len(), r.registrants.len(), "unique registrants");
    let holders: Vec<_> = r.registrants.iter().filter(|e| e.rcsts & 1 == 1).collect();
    match ReservationType::from_u8(r.rtype) {
        None => {
            prop_assert_eq!(r.rtype, 0);
            prop_assert!(holders.is_empty());
        }
        Some(t) if t.all_registrants() => {
            prop_assert!(
                !r.registrants.is_empty(),
                "all-registrants needs registrants"
            );
            prop_assert_eq!(holders.len(), r.registrants.len());
        }
        Some(_) => prop_assert_eq!(holders.len(), 1, "one holder, and it is registered"),
    }
    for h in HOSTS {
        let entry = r.registrants.iter().find(|e| e.hostid == h);
        let registrant = entry.is_some();
        let holder = entry.is_some_and(|e| e.rcsts & 1 == 1);
        for (code, write) in [
            (op::READ, false),
            (op::WRITE, true),
            (op::FLUSH, true),
            (op::COMPARE, false),
        ] {
            let want = ReservationType::from_u8(r.rtype)
                .is_none_or(|t| t.allows(write, registrant, holder));
            prop_assert_eq!(t.can(h, code), want, "access of {:x} op {:#x}", h[0], code);
        }
        prop_assert!(t.can(h, op::RESERVATION_REPORT));
    }
    Ok(r)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_command_sequences(ops in proptest::collection::vec(any_op(), 1..40)) {
        let store = Arc::new(MemStore::default());
        let dyn_store: Arc<dyn ReservationStore> = store.clone();
        let t = T::with(ReservationState::new(Some(dyn_store), None));
        for o in &ops {
            let before = t.s.snapshot();
            let saves = store.count();
            let Some(res) = run(&t, &store, o) else { continue };
            let after = t.s.snapshot();
            match res {
                Err(_) => {
                    prop_assert_eq!(&after, &before, "a failed command changes nothing: {:?}", o);
                    prop_assert_eq!(store.count(), saves);
                }
                Ok(eff) => {
                    let g = if moves_generation(o) { before.generation.wrapping_add(1) } else { before.generation };
                    prop_assert_eq!(after.generation, g, "generation after {:?}", o);
                    // Saved exactly when something changed and PTPL is or was on.
                    let want_save = after != before && (after.ptpl || before.ptpl);
                    prop_assert_eq!(store.count(), saves + usize::from(want_save), "saves after {:?}", o);
                    if want_save {
                        let want = if after.ptpl { after.clone() } else { ReservationSnapshot::default() };
                        prop_assert_eq!(store.last(), Some(want));
                    }
                    let me = issuer(o);
                    for (h, kind) in &eff.notify {
                        prop_assert!(Some(*h) != me, "no notice to the issuer");
                        prop_assert!((1..=3).contains(kind));
                        prop_assert!(before.registrants.iter().any(|r| r.hostid == *h), "notices go to registrants");
                    }
                    let aborting = matches!(o, Op::Acquire { racqa: a, .. } if *a == racqa::PREEMPT_AND_ABORT);
                    if !aborting {
                        prop_assert!(eff.aborted_hosts.is_empty());
                    }
                    for h in &eff.aborted_hosts {
                        prop_assert!(Some(*h) != me);
                        prop_assert!(!after.registrants.iter().any(|r| r.hostid == *h), "aborted hosts are unregistered");
                    }
                }
            }
            let report = check_state(&t)?;
            prop_assert_eq!(report.ptpls, after.ptpl);
        }
        // A restart from what the store holds gives the same state when PTPL is on.
        store.fail.store(false, Ordering::Relaxed);
        let dyn_store: Arc<dyn ReservationStore> = store.clone();
        let t2 = T::with(ReservationState::new(Some(dyn_store), store.last()));
        if t.s.persist_through_power_loss() {
            prop_assert_eq!(t2.s.snapshot(), t.s.snapshot());
            prop_assert_eq!(t2.report_bytes(8192, true, 8192), t.report_bytes(8192, true, 8192));
            for h in HOSTS {
                for code in [op::READ, op::WRITE] {
                    prop_assert_eq!(t2.can(h, code), t.can(h, code));
                }
            }
        } else {
            prop_assert_eq!(t2.s.snapshot(), ReservationSnapshot::default());
        }
        check_state(&t2)?;
    }

    #[test]
    fn arbitrary_snapshots_restore_to_consistent_states(
        generation: u32, ptpl: bool, rtype in 0u8..9, holder in proptest::option::of(0..4usize),
        regs in proptest::collection::vec((0..4usize, key()), 0..8),
    ) {
        let snap = ReservationSnapshot {
            generation,
            ptpl,
            rtype,
            holder: holder.map(|i| HOSTS[i]),
            registrants: regs.iter().map(|&(h, key)| RegistrantSnapshot { hostid: HOSTS[h], key }).collect(),
        };
        let store: Arc<dyn ReservationStore> = Arc::new(MemStore::default());
        let t = T::with(ReservationState::new(Some(store), Some(snap)));
        check_state(&t)?;
        // A clean snapshot of the restored state restores to itself.
        let s = t.s.snapshot();
        let store: Arc<dyn ReservationStore> = Arc::new(MemStore::default());
        prop_assert_eq!(ReservationState::new(Some(store), Some(s.clone())).snapshot(), s);
    }
}
