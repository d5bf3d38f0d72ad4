//! Recovery against the real target (crates/nvmf-target) in-process: a command stuck on
//! the target's device (timeout, Abort, reset, retry), a target restart under load, and
//! preempt-and-abort fencing (a fenced host's writes fail; they are never re-sent).

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use blockdev::{
    BlockDevice, BlockError, FaultAction, FaultOps, FaultRule, FaultyDevice, IoBuf, RamDevice,
    WriteFlags,
};
use common::{host, pattern};
use nvme_proto::reservation::{ReservationType, cptpl, racqa, rrega};
use nvmf_host::{ConnectOptions, Controller, HostIdentity};
use nvmf_target::{NamespaceConfig, ReservationState, SubsystemConfig, Target, TargetConfig};

const LIMIT: Duration = Duration::from_secs(60);
const NQN: &str = "nqn.2026-01.io.ferrobay.test:host-recovery";

fn opts() -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 32,
        kato_ms: 2000,
        io_timeout_ms: 5_000,
        admin_timeout_ms: 2_000,
        reconnect_delay_ms: 20,
        reconnect_delay_max_ms: 200,
        ctrl_loss_tmo_ms: Some(20_000),
        ..ConnectOptions::default()
    }
}

fn target_with(dev: Arc<dyn BlockDevice>, reservations: bool) -> Target {
    let target = Target::new(TargetConfig::default()).unwrap();
    target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
    let mut nc = NamespaceConfig::whole_device(1, dev);
    if reservations {
        nc.reservations = Some(Arc::new(ReservationState::default()));
    }
    target.add_namespace(NQN, nc).unwrap();
    target
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_stuck_on_the_device_is_aborted_reset_and_retried() {
    tokio::time::timeout(LIMIT, async {
        let ram: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("ram1", 16 << 20));
        let faulty = Arc::new(FaultyDevice::new(ram));
        let faults = faulty.handle();
        let target = target_with(faulty, false);
        let l = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let o = ConnectOptions {
            io_timeout_ms: 400,
            ..opts()
        };
        let c = Controller::connect(l.local_addr(), NQN, &host(), &o)
            .await
            .unwrap();
        let ns = c.namespace(1).await.unwrap();
        let d = pattern(8192, 4);
        ns.write(0, IoBuf::from_slice(&d), WriteFlags::default())
            .await
            .unwrap();
        // The next read sits on the device for 3 s: far past the 400 ms timeout.
        let rule = faults.add(
            FaultRule::new(FaultOps::READ, FaultAction::Delay(Duration::from_secs(3))).times(1),
        );
        let start = std::time::Instant::now();
        let got = ns.read(0, IoBuf::new_zeroed(8192)).await.unwrap();
        assert!(got[..] == d[..]);
        assert_eq!(faults.hits(rule), 1);
        eprintln!("stuck read took {:?}", start.elapsed());
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        let st = c.status();
        assert_eq!(st.generation, 2, "one reset: {st:?}");
        let why = st.last_error.unwrap_or_default();
        // The target cannot abort a command already on the device: it says so, the host
        // resets the controller and sends the read again.
        assert!(why.contains("Read (CID"), "{why}");
        assert!(
            why.contains("timed out after 400 ms; Abort did not abort it"),
            "{why}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_continues_across_a_target_restart() {
    tokio::time::timeout(LIMIT, async {
        let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("ram1", 16 << 20));
        let t1 = target_with(dev.clone(), false);
        let l = t1.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr();
        let c = Controller::connect(addr, NQN, &host(), &opts())
            .await
            .unwrap();
        let ns = Arc::new(c.namespace(1).await.unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..4u64)
            .map(|w| {
                let (ns, stop, done) = (ns.clone(), stop.clone(), done.clone());
                tokio::spawn(async move {
                    let mut last = Vec::new();
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let off = w * (1 << 20) + (i % 64) * 4096;
                        let data = pattern(4096, w * 1_000_000 + i);
                        ns.write(off, IoBuf::from_slice(&data), WriteFlags::default())
                            .await
                            .unwrap();
                        let got = ns.read(off, IoBuf::new_zeroed(4096)).await.unwrap();
                        assert!(got[..] == data[..], "worker {w} iteration {i}");
                        last.push((off, data));
                        if last.len() > 64 {
                            last.remove(0);
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                        i += 1;
                    }
                    last
                })
            })
            .collect();
        let wait_for = |n: u64| {
            let done = done.clone();
            async move {
                let target = done.load(Ordering::Relaxed) + n;
                while done.load(Ordering::Relaxed) < target {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        wait_for(200).await;
        // The target process goes away (every connection closes) and comes back on the
        // same port with the same storage.
        t1.shutdown(Duration::from_secs(5)).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!c.status().is_live());
        let t2 = target_with(dev.clone(), false);
        let mut l2 = None;
        for _ in 0..100 {
            if let Ok(l) = t2.listen(addr).await {
                l2 = Some(l);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(l2.is_some(), "listen again on {addr}");
        wait_for(200).await;
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            for (off, data) in w.await.unwrap() {
                let got = ns.read(off, IoBuf::new_zeroed(4096)).await.unwrap();
                assert!(got[..] == data[..]);
            }
        }
        assert!(c.status().generation >= 2);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempt_and_abort_fences_the_old_holder_and_nothing_is_resent() {
    tokio::time::timeout(LIMIT, async {
        let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("ram1", 16 << 20));
        let target = target_with(dev, true);
        let l = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let a_id = HostIdentity::from_uuid([0xA1; 16]);
        let b_id = HostIdentity::from_uuid([0xB2; 16]);
        let ca = Controller::connect(l.local_addr(), NQN, &a_id, &opts())
            .await
            .unwrap();
        let cb = Controller::connect(l.local_addr(), NQN, &b_id, &opts())
            .await
            .unwrap();
        let na = Arc::new(ca.namespace(1).await.unwrap());
        let nb = cb.namespace(1).await.unwrap();
        let we = ReservationType::WriteExclusive;
        na.reservation_register(rrega::REGISTER, 0, 0xA, false, cptpl::NO_CHANGE)
            .await
            .unwrap();
        na.reservation_acquire(racqa::ACQUIRE, we, 0xA, 0, false)
            .await
            .unwrap();
        nb.reservation_register(rrega::REGISTER, 0, 0xB, false, cptpl::NO_CHANGE)
            .await
            .unwrap();
        // Host A keeps writing its pattern over the first 256 KiB.
        let ok = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = (0..8u64)
            .map(|w| {
                let (na, ok) = (na.clone(), ok.clone());
                tokio::spawn(async move {
                    let data = pattern(32768, 0xA);
                    loop {
                        match na
                            .write(w * 32768, IoBuf::from_slice(&data), WriteFlags::default())
                            .await
                        {
                            Ok(_) => {
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => return e,
                        }
                    }
                })
            })
            .collect();
        while ok.load(Ordering::Relaxed) < 100 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // Host B takes the reservation over and aborts A's commands.
        nb.reservation_acquire(racqa::PREEMPT_AND_ABORT, we, 0xB, 0xA, false)
            .await
            .unwrap();
        let b_data = pattern(256 << 10, 0xB);
        nb.write(0, IoBuf::from_slice(&b_data), WriteFlags::default())
            .await
            .unwrap();
        // Every writer of A stops with a fencing status, not a transport error or a hang.
        for w in writers {
            let e = w.await.unwrap();
            assert!(
                matches!(e, BlockError::ReservationConflict),
                "reservation conflict or aborted by preempt-and-abort: {e}"
            );
        }
        // Nothing A had in flight landed after B's write.
        let got = nb.read(0, IoBuf::new_zeroed(256 << 10)).await.unwrap();
        assert!(got[..] == b_data[..], "B's data intact after the fence");
        assert!(ca.status().is_live(), "A's controller itself is fine");
        assert_eq!(ca.status().generation, 1, "no reconnect, nothing re-sent");
    })
    .await
    .unwrap();
}
