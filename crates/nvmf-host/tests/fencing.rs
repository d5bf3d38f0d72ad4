//! Fencing as a `BlockDevice` user sees it, against the real target in-process: a
//! Reservation Conflict (and a command aborted by preempt-and-abort) is
//! `BlockError::ReservationConflict`, final on a namespace and on a multipath namespace
//! (no failover, no re-send); a namespace the target says is not served there (device
//! `BlockError::Unavailable` -> ANA Inaccessible) is `BlockError::Unavailable` on one
//! path, and fails over to a path that serves it on a multipath namespace.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use blockdev::{
    BlockDevice, BlockError, DeviceInfo, DeviceStats, IoBuf, IoFuture, RamDevice, WriteFlags,
};
use common::pattern;
use nvme_proto::reservation::{ReservationType, cptpl, racqa, rrega};
use nvmf_host::{ConnectOptions, Controller, HostIdentity, MultipathNamespace, MultipathOptions};
use nvmf_target::{
    ListenerHandle, NamespaceConfig, ReservationState, SubsystemConfig, Target, TargetConfig,
};

const LIMIT: Duration = Duration::from_secs(60);
const NQN: &str = "nqn.2026-01.io.ferrobay.test:host-fencing";
const KEY_A: u64 = 0xA;
const KEY_B: u64 = 0xB;

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

fn host_a() -> HostIdentity {
    HostIdentity::from_uuid([0xA1; 16])
}
fn host_b() -> HostIdentity {
    HostIdentity::from_uuid([0xB2; 16])
}

/// A target with one reservation-capable RAM namespace, listening twice on 127.0.0.1.
async fn reservation_target() -> (Target, ListenerHandle, ListenerHandle) {
    let target = Target::new(TargetConfig::default()).unwrap();
    target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
    let dev = Arc::new(RamDevice::new("ram-fence", 16 << 20));
    let mut nc = NamespaceConfig::whole_device(1, dev);
    nc.reservations = Some(Arc::new(ReservationState::default()));
    target.add_namespace(NQN, nc).unwrap();
    let l1 = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let l2 = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    (target, l1, l2)
}

fn is_conflict<T: std::fmt::Debug>(r: &Result<T, BlockError>) -> bool {
    matches!(r, Err(BlockError::ReservationConflict))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflict_and_preempt_and_abort_are_reservation_conflict_errors() {
    tokio::time::timeout(LIMIT, async {
        let (_target, l, _) = reservation_target().await;
        let ca = Controller::connect(l.local_addr(), NQN, &host_a(), &opts())
            .await
            .unwrap();
        let cb = Controller::connect(l.local_addr(), NQN, &host_b(), &opts())
            .await
            .unwrap();
        let na = ca.namespace(1).await.unwrap();
        let nb = cb.namespace(1).await.unwrap();
        let we = ReservationType::WriteExclusive;
        na.reservation_register(rrega::REGISTER, 0, KEY_A, false, cptpl::NO_CHANGE)
            .await
            .unwrap();
        na.reservation_acquire(racqa::ACQUIRE, we, KEY_A, 0, false)
            .await
            .unwrap();
        nb.reservation_register(rrega::REGISTER, 0, KEY_B, false, cptpl::NO_CHANGE)
            .await
            .unwrap();
        let data = pattern(8192, 1);
        na.write(0, IoBuf::from_slice(&data), WriteFlags::default())
            .await
            .unwrap();

        // B is fenced from every modifying command, at once (nothing retried), and may
        // still read under Write Exclusive.
        let start = Instant::now();
        let r = nb
            .write(0, IoBuf::new_zeroed(4096), WriteFlags { fua: true })
            .await;
        assert!(is_conflict(&r), "{r:?}");
        assert!(is_conflict(&nb.flush().await));
        assert!(is_conflict(&nb.write_zeroes(0, 4096).await));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "a conflict is final, not retried: {:?}",
            start.elapsed()
        );
        let got = nb.read(0, IoBuf::new_zeroed(8192)).await.unwrap();
        assert!(got[..] == data[..], "B's refused writes changed nothing");

        // B takes over: A's next write and flush are refused the same way.
        nb.reservation_acquire(racqa::PREEMPT_AND_ABORT, we, KEY_B, KEY_A, false)
            .await
            .unwrap();
        let r = na
            .write(0, IoBuf::new_zeroed(4096), WriteFlags::default())
            .await;
        assert!(is_conflict(&r), "{r:?}");
        assert!(is_conflict(&na.flush().await));
        // A large write split into several commands is one conflict, too.
        let big = na.info().max_io_bytes as usize * 3;
        let r = na
            .write(0, IoBuf::new_zeroed(big), WriteFlags::default())
            .await;
        assert!(is_conflict(&r), "{r:?}");
        nb.write(
            0,
            IoBuf::from_slice(&pattern(4096, 2)),
            WriteFlags::default(),
        )
        .await
        .unwrap();
        // Neither controller reconnected: nothing was re-sent after a reset.
        assert_eq!(ca.status().generation, 1);
        assert_eq!(cb.status().generation, 1);
        assert!(ca.status().is_live());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipath_does_not_fail_a_conflict_over() {
    tokio::time::timeout(LIMIT, async {
        let (_target, l1, l2) = reservation_target().await;
        let addrs = [l1.local_addr(), l2.local_addr()];
        let mp_opts = MultipathOptions {
            no_path_timeout_ms: 5_000,
            ..MultipathOptions::default()
        };
        let ma = MultipathNamespace::connect(&addrs, NQN, 1, &host_a(), &opts(), mp_opts.clone())
            .await
            .unwrap();
        let mb = MultipathNamespace::connect(&addrs, NQN, 1, &host_b(), &opts(), mp_opts)
            .await
            .unwrap();
        assert_eq!(ma.paths().len(), 2);
        // Reservations are per host: register through one controller of each host.
        let cb = Controller::connect(l1.local_addr(), NQN, &host_b(), &opts())
            .await
            .unwrap();
        let ca = Controller::connect(l1.local_addr(), NQN, &host_a(), &opts())
            .await
            .unwrap();
        let ra = ca.namespace(1).await.unwrap();
        let rb = cb.namespace(1).await.unwrap();
        let we = ReservationType::WriteExclusive;
        ra.reservation_register(rrega::REGISTER, 0, KEY_A, false, cptpl::NO_CHANGE)
            .await
            .unwrap();
        ra.reservation_acquire(racqa::ACQUIRE, we, KEY_A, 0, false)
            .await
            .unwrap();
        rb.reservation_register(rrega::REGISTER, 0, KEY_B, false, cptpl::NO_CHANGE)
            .await
            .unwrap();
        ma.write(
            0,
            IoBuf::from_slice(&pattern(4096, 3)),
            WriteFlags::default(),
        )
        .await
        .unwrap();

        let start = Instant::now();
        let r = mb
            .write(0, IoBuf::new_zeroed(4096), WriteFlags::default())
            .await;
        assert!(is_conflict(&r), "{r:?}");
        assert!(is_conflict(&mb.flush().await));
        assert!(start.elapsed() < Duration::from_secs(2));
        // No path was given up on: a conflict is not a path error.
        assert!(mb.paths().iter().all(|p| p.usable), "{:?}", mb.paths());

        rb.reservation_acquire(racqa::PREEMPT_AND_ABORT, we, KEY_B, KEY_A, false)
            .await
            .unwrap();
        let r = ma
            .write(0, IoBuf::new_zeroed(4096), WriteFlags::default())
            .await;
        assert!(is_conflict(&r), "{r:?}");
        assert!(ma.paths().iter().all(|p| p.usable), "{:?}", ma.paths());
        mb.write(
            0,
            IoBuf::from_slice(&pattern(4096, 4)),
            WriteFlags::default(),
        )
        .await
        .unwrap();
    })
    .await
    .unwrap();
}

/// Passes I/O to `inner`, or fails it with `BlockError::Unavailable` while `off` is set
/// (a node that does not serve the volume now).
struct MaybeServed {
    inner: Arc<RamDevice>,
    info: DeviceInfo,
    off: AtomicBool,
}

impl MaybeServed {
    fn check(&self) -> Result<(), BlockError> {
        if self.off.load(Ordering::Acquire) {
            Err(BlockError::Unavailable("not owned by this node".into()))
        } else {
            Ok(())
        }
    }
}

impl BlockDevice for MaybeServed {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            self.check()?;
            self.inner.read(offset_bytes, buf).await
        })
    }
    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            self.check()?;
            self.inner.write(offset_bytes, buf, flags).await
        })
    }
    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check()?;
            self.inner.flush().await
        })
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check()?;
            self.inner.write_zeroes(offset_bytes, len_bytes).await
        })
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check()?;
            self.inner.discard(offset_bytes, len_bytes).await
        })
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}

/// A target (one "processor node") exporting `ram` as namespace 1 with the given IDs.
async fn node(
    ram: &Arc<RamDevice>,
    off: bool,
    ids: &NamespaceConfig,
) -> (Target, ListenerHandle, Arc<MaybeServed>) {
    let dev = Arc::new(MaybeServed {
        inner: ram.clone(),
        info: ram.info().clone(),
        off: AtomicBool::new(off),
    });
    let target = Target::new(TargetConfig::default()).unwrap();
    target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
    let mut nc = NamespaceConfig::whole_device(1, dev.clone());
    // Identical on every node, as multipath requires.
    nc.nguid = ids.nguid;
    nc.eui64 = ids.eui64;
    nc.uuid = ids.uuid;
    target.add_namespace(NQN, nc).unwrap();
    let l = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    (target, l, dev)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_is_a_path_error_that_multipath_fails_over() {
    tokio::time::timeout(LIMIT, async {
        let ram = Arc::new(RamDevice::new("ram-shared", 8 << 20));
        let ids = NamespaceConfig::whole_device(1, ram.clone());
        let (_t1, l1, d1) = node(&ram, true, &ids).await;
        let (_t2, l2, _d2) = node(&ram, false, &ids).await;

        // One path to the node that does not serve it: Unavailable, with the reason.
        let c1 = Controller::connect(l1.local_addr(), NQN, &host_a(), &opts())
            .await
            .unwrap();
        let n1 = c1.namespace(1).await.unwrap();
        match n1
            .write(0, IoBuf::new_zeroed(4096), WriteFlags::default())
            .await
        {
            Err(BlockError::Unavailable(msg)) => {
                assert!(msg.contains("SCT 3"), "{msg}")
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        assert!(matches!(
            n1.read(0, IoBuf::new_zeroed(4096)).await,
            Err(BlockError::Unavailable(_))
        ));

        // Both nodes through multipath, the one that does not serve it first: the I/O
        // moves to the other path and succeeds.
        let mp = MultipathNamespace::connect(
            &[l1.local_addr(), l2.local_addr()],
            NQN,
            1,
            &host_a(),
            &opts(),
            MultipathOptions {
                no_path_timeout_ms: 5_000,
                ..MultipathOptions::default()
            },
        )
        .await
        .unwrap();
        let data = pattern(16384, 5);
        mp.write(4096, IoBuf::from_slice(&data), WriteFlags::default())
            .await
            .unwrap();
        let got = mp.read(4096, IoBuf::new_zeroed(16384)).await.unwrap();
        assert!(got[..] == data[..]);
        let paths = mp.paths();
        assert_eq!(paths[0].ios, 0, "{paths:?}");
        assert!(paths[1].ios >= 2, "{paths:?}");
        // Served again by the first node (after a takeover): a direct path works.
        d1.off.store(false, Ordering::Release);
        n1.write(0, IoBuf::from_slice(&data[..4096]), WriteFlags::default())
            .await
            .unwrap();
    })
    .await
    .unwrap();
}
