//! Multipath against the real target (crates/nvmf-target) in-process: one subsystem on
//! two listeners, each path through a TCP forwarder the test can cut (the network path
//! dies: every connection drops and the port refuses new ones) and restore.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use blockdev::{BlockDevice, IoBuf, RamDevice, WriteFlags};
use common::{host, pattern};
use nvme_proto::log::ana_state;
use nvmf_host::namespace::host_error;
use nvmf_host::{
    ConnectOptions, ControllerState, HostError, MultipathNamespace, MultipathOptions, PathInfo,
};
use nvmf_target::{
    AnaState, ListenerHandle, NamespaceConfig, SubsystemConfig, Target, TargetConfig,
};
use testkit::proxy::Proxy;

const LIMIT: Duration = Duration::from_secs(60);
const NQN: &str = "nqn.2026-01.io.ferrobay.test:host-multipath";
const SIZE: u64 = 64 << 20;
const BLOCK: usize = 4096;

struct Setup {
    _target: Target,
    /// The namespace as configured (its identifiers).
    ns: NamespaceConfig,
    l1: ListenerHandle,
    l2: ListenerHandle,
    p1: Proxy,
    p2: Proxy,
}

async fn setup() -> Setup {
    let target = Target::new(TargetConfig::default()).unwrap();
    target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
    let dev = Arc::new(RamDevice::new("ram1", SIZE));
    let ns = NamespaceConfig::whole_device(1, dev);
    target.add_namespace(NQN, ns.clone()).unwrap();
    let l1 = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let l2 = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let p1 = Proxy::start(l1.local_addr()).await;
    let p2 = Proxy::start(l2.local_addr()).await;
    Setup {
        _target: target,
        ns,
        l1,
        l2,
        p1,
        p2,
    }
}

/// Another target with the same subsystem NQN and NSID but another namespace behind
/// them (`edit` sets its identifiers): what a path may find when it comes back.
struct Impostor {
    _target: Target,
    dev: Arc<RamDevice>,
    listener: ListenerHandle,
}

async fn impostor(edit: impl FnOnce(&mut NamespaceConfig)) -> Impostor {
    let target = Target::new(TargetConfig::default()).unwrap();
    target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
    let dev = Arc::new(RamDevice::new("impostor", SIZE));
    let mut ns = NamespaceConfig::whole_device(1, dev.clone());
    edit(&mut ns);
    target.add_namespace(NQN, ns).unwrap();
    let listener = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    Impostor {
        _target: target,
        dev,
        listener,
    }
}

/// A port nothing listens on (bound, then closed).
async fn refused_addr() -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

fn opts() -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 64,
        kato_ms: 1000,
        io_timeout_ms: 5_000,
        admin_timeout_ms: 2_000,
        connect_timeout_ms: 2_000,
        reconnect_delay_ms: 50,
        reconnect_delay_max_ms: 200,
        ctrl_loss_tmo_ms: None,
        ..ConnectOptions::default()
    }
}

async fn open(s: &Setup, mp: MultipathOptions) -> Arc<MultipathNamespace> {
    Arc::new(
        MultipathNamespace::connect(&[s.p1.addr, s.p2.addr], NQN, 1, &host(), &opts(), mp)
            .await
            .unwrap(),
    )
}

fn path(mp: &MultipathNamespace, i: usize) -> PathInfo {
    mp.paths()[i].clone()
}

/// Waits (polling) until `f` holds for the paths.
async fn until(mp: &MultipathNamespace, what: &str, f: impl Fn(&[PathInfo]) -> bool) {
    for _ in 0..1000 {
        if f(&mp.paths()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}: {:?}", mp.paths());
}

/// Writers that each own a 1 MiB region: write a block, read it back, compare; at the
/// end every block is read and checked against the last generation written.
struct Workload {
    stop: Arc<AtomicBool>,
    errors: Arc<AtomicU64>,
    ios: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<Vec<u64>>>,
}

const WORKERS: u64 = 8;
const REGION: u64 = 1 << 20;

fn seed(worker: u64, block: u64, generation: u64) -> u64 {
    (worker << 40) ^ (block << 20) ^ generation
}

fn start_workload(mp: &Arc<MultipathNamespace>) -> Workload {
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let ios = Arc::new(AtomicU64::new(0));
    let tasks = (0..WORKERS)
        .map(|w| {
            let (mp, stop, errors, ios) = (mp.clone(), stop.clone(), errors.clone(), ios.clone());
            tokio::spawn(async move {
                let blocks = REGION / BLOCK as u64;
                let mut gens = vec![0u64; blocks as usize];
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let b = (i * 7 + w) % blocks;
                    i += 1;
                    let g = gens[b as usize] + 1;
                    let off = w * REGION + b * BLOCK as u64;
                    let data = pattern(BLOCK, seed(w, b, g));
                    match mp
                        .write(off, IoBuf::from_slice(&data), WriteFlags::default())
                        .await
                    {
                        Ok(_) => gens[b as usize] = g,
                        Err(e) => {
                            eprintln!("write error: {e}");
                            errors.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                    match mp.read(off, IoBuf::new_zeroed(BLOCK)).await {
                        Ok(got) if got[..] == data[..] => {}
                        Ok(_) => {
                            eprintln!("mismatch at {off}");
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            eprintln!("read error: {e}");
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    ios.fetch_add(2, Ordering::Relaxed);
                }
                gens
            })
        })
        .collect();
    Workload {
        stop,
        errors,
        ios,
        tasks,
    }
}

impl Workload {
    /// Stops the writers and checks every block they wrote.
    async fn finish(self, mp: &MultipathNamespace) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let mut checked = 0;
        for (w, t) in self.tasks.into_iter().enumerate() {
            let gens = t.await.unwrap();
            for (b, &g) in gens.iter().enumerate() {
                let off = w as u64 * REGION + (b * BLOCK) as u64;
                let got = mp.read(off, IoBuf::new_zeroed(BLOCK)).await.unwrap();
                let want = if g == 0 {
                    vec![0u8; BLOCK]
                } else {
                    pattern(BLOCK, seed(w as u64, b as u64, g))
                };
                assert!(got[..] == want[..], "verify: worker {w} block {b} gen {g}");
                checked += 1;
            }
        }
        assert_eq!(
            self.errors.load(Ordering::Relaxed),
            0,
            "I/O errors during the run"
        );
        checked
    }

    async fn progress(&self, n: u64) {
        let target = self.ios.load(Ordering::Relaxed) + n;
        while self.ios.load(Ordering::Relaxed) < target {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_a_path_mid_workload_fails_over_with_zero_errors() {
    tokio::time::timeout(LIMIT, async {
        let s = setup().await;
        let mp = open(&s, MultipathOptions::default()).await;
        assert_eq!(mp.paths().len(), 2);
        let w = start_workload(&mp);
        w.progress(400).await;
        let before = mp.paths();
        assert!(before[0].ios > 0, "the first path takes I/O: {before:?}");
        assert_eq!(before[1].ios, 0, "{before:?}");

        // The network path to listener 1 dies: every connection and the port.
        s.p1.cut();
        until(&mp, "path 1 down", |p| p[0].state != ControllerState::Live).await;
        let at_cut = mp.paths();
        w.progress(400).await;
        let after_cut = mp.paths();
        assert!(
            after_cut[1].ios > at_cut[1].ios + 100,
            "I/O moved to path 2: {after_cut:?}"
        );

        // The path comes back: its controller reconnects and I/O returns to it.
        s.p1.restore().await;
        until(&mp, "path 1 live", |p| p[0].state == ControllerState::Live).await;
        let back = mp.paths();
        w.progress(400).await;
        let end = mp.paths();
        assert!(
            end[0].ios > back[0].ios + 100,
            "I/O back on path 1: {end:?}"
        );
        assert!(
            end[0].cntlid != before[0].cntlid,
            "a new controller on path 1"
        );
        let checked = w.finish(&mp).await;
        assert_eq!(checked, WORKERS * REGION / BLOCK as u64);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ana_state_decides_the_path_and_a_flip_moves_io() {
    tokio::time::timeout(LIMIT, async {
        let s = setup().await;
        s.l2.set_ana_state(1, AnaState::NonOptimized).unwrap();
        let mp = open(&s, MultipathOptions::default()).await;
        // Path 2 would be first with "first" policy if ANA did not rank: list it first.
        let p = mp.paths();
        assert_eq!(p[0].ana_state, ana_state::OPTIMIZED, "{p:?}");
        assert_eq!(p[1].ana_state, ana_state::NON_OPTIMIZED, "{p:?}");
        let w = start_workload(&mp);
        w.progress(200).await;
        let p = mp.paths();
        assert!(p[0].ios > 0 && p[1].ios == 0, "optimized path only: {p:?}");

        // Flip: listener 1 non-optimized, listener 2 optimized.
        s.l1.set_ana_state(1, AnaState::NonOptimized).unwrap();
        s.l2.set_ana_state(1, AnaState::Optimized).unwrap();
        until(&mp, "ANA flip seen", |p| {
            p[0].ana_state == ana_state::NON_OPTIMIZED && p[1].ana_state == ana_state::OPTIMIZED
        })
        .await;
        let at_flip = mp.paths();
        w.progress(200).await;
        let p = mp.paths();
        assert!(p[1].ios > at_flip[1].ios + 100, "I/O on path 2: {p:?}");
        assert!(p[0].ios <= at_flip[0].ios + 16, "path 1 idle: {p:?}");

        // Inaccessible without waiting for the event: I/O that still reaches path 2 gets
        // an ANA status and moves to path 1 (non-optimized) without an error.
        s.l2.set_ana_state(1, AnaState::Inaccessible).unwrap();
        w.progress(200).await;
        until(&mp, "path 2 inaccessible", |p| {
            p[1].ana_state == ana_state::INACCESSIBLE
        })
        .await;
        let at = mp.paths();
        w.progress(200).await;
        let p = mp.paths();
        assert!(p[0].ios > at[0].ios + 100, "I/O on path 1: {p:?}");
        assert_eq!(
            p[1].ios, at[1].ios,
            "nothing on an inaccessible path: {p:?}"
        );
        w.finish(&mp).await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_waits_through_an_ana_transition() {
    tokio::time::timeout(LIMIT, async {
        let s = setup().await;
        let mp = open(&s, MultipathOptions::default()).await;
        let d = pattern(BLOCK, 1);
        mp.write(0, IoBuf::from_slice(&d), WriteFlags::default())
            .await
            .unwrap();
        s.l1.set_ana_state(1, AnaState::Change).unwrap();
        s.l2.set_ana_state(1, AnaState::Inaccessible).unwrap();
        until(&mp, "both paths unusable", |p| {
            p[0].ana_state == ana_state::CHANGE && p[1].ana_state == ana_state::INACCESSIBLE
        })
        .await;
        let reader = {
            let mp = mp.clone();
            tokio::spawn(async move { mp.read(0, IoBuf::new_zeroed(BLOCK)).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!reader.is_finished(), "the read waits for the transition");
        s.l1.set_ana_state(1, AnaState::Optimized).unwrap();
        let got = reader.await.unwrap().unwrap();
        assert!(got[..] == d[..]);
        assert_eq!(path(&mp, 0).ios, 2, "the write and the read, on path 1");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_usable_path_fails_after_the_no_path_timeout() {
    tokio::time::timeout(LIMIT, async {
        let s = setup().await;
        let mp = open(
            &s,
            MultipathOptions {
                no_path_timeout_ms: 500,
                ..MultipathOptions::default()
            },
        )
        .await;
        s.p1.cut();
        s.p2.cut();
        let start = std::time::Instant::now();
        let e = mp.read(0, IoBuf::new_zeroed(BLOCK)).await.unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(450));
        assert!(
            matches!(host_error(&e), Some(HostError::NoPath { .. })),
            "{e}"
        );
        let text = e.to_string();
        assert!(text.contains("no usable path after"), "{text}");
        assert!(text.contains("down (reconnecting)"), "{text}");
        // Having waited it out once, the next I/O fails at once (no_path_retry).
        let again = std::time::Instant::now();
        let e = mp.read(0, IoBuf::new_zeroed(BLOCK)).await.unwrap_err();
        assert!(
            matches!(host_error(&e), Some(HostError::NoPath { .. })),
            "{e}"
        );
        assert!(
            again.elapsed() < Duration::from_millis(250),
            "the second I/O waited {:?}",
            again.elapsed()
        );
        // A path coming back serves I/O again, once it has reconnected (until then I/O
        // still fails at once).
        s.p2.restore().await;
        until(&mp, "path 2 back", |p| p.iter().any(|p| p.usable)).await;
        mp.read(0, IoBuf::new_zeroed(BLOCK)).await.unwrap();
        assert_eq!(path(&mp, 1).state, ControllerState::Live);
        // And the no-path timeout applies afresh: a later loss waits again.
        s.p2.cut();
        let later = std::time::Instant::now();
        mp.read(0, IoBuf::new_zeroed(BLOCK)).await.unwrap_err();
        assert!(later.elapsed() >= Duration::from_millis(450));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_with_two_addresses_opens_a_multipath_device() {
    tokio::time::timeout(LIMIT, async {
        let s = setup().await;
        let url = format!(
            "nvme+tcp://{},{}/{NQN}/1?queues=1&ctrl_loss_tmo=-1",
            s.p1.addr, s.p2.addr
        );
        let u = nvmf_host::NvmeTcpUrl::parse(&url).unwrap();
        let dev = u.open_device(&host(), &opts()).await.unwrap();
        assert_eq!(dev.info().name, format!("nvme+tcp-multipath://{NQN}/1"));
        let d = pattern(BLOCK, 9);
        dev.write(0, IoBuf::from_slice(&d), WriteFlags::default())
            .await
            .unwrap();
        s.p1.cut();
        let got = dev.read(0, IoBuf::new_zeroed(BLOCK)).await.unwrap();
        assert!(got[..] == d[..], "read through the second path");
        // One address: a plain namespace.
        let single = nvmf_host::NvmeTcpUrl::parse(&format!("nvme+tcp://{}/{NQN}/1", s.p2.addr))
            .unwrap()
            .open_device(&host(), &opts())
            .await
            .unwrap();
        assert!(single.info().name.starts_with("nvme+tcp://"));
    })
    .await
    .unwrap();
}

/// Issue 9.4: the first path is down when the namespace is opened. It opens on the
/// second, connects the first in the background when it comes back, and when the second
/// dies I/O carries on through the first without an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_down_at_open_joins_when_it_returns_and_takes_over() {
    tokio::time::timeout(LIMIT, async {
        let s = setup().await;
        s.p1.cut();
        let mp = Arc::new(
            MultipathNamespace::connect(
                &[s.p1.addr, s.p2.addr],
                NQN,
                1,
                &host(),
                &opts(),
                MultipathOptions {
                    no_path_timeout_ms: 10_000,
                    ..MultipathOptions::default()
                },
            )
            .await
            .unwrap(),
        );
        let p = mp.paths();
        assert_eq!(p.len(), 1, "only the second path connected: {p:?}");
        assert_eq!(p[0].addr, s.p2.addr);
        let pending = mp.pending_paths();
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert!(pending[0].addr.is(s.p1.addr), "{pending:?}");
        let w = start_workload(&mp);
        w.progress(200).await;

        // The first path comes back: it joins without anyone asking.
        s.p1.restore().await;
        until(&mp, "path 1 joined", |p| {
            p.iter()
                .any(|p| p.addr == s.p1.addr && p.state == ControllerState::Live)
        })
        .await;
        // The second path dies: every I/O from now on goes through the first.
        s.p2.cut();
        until(&mp, "path 2 down", |p| {
            p.iter()
                .any(|p| p.addr == s.p2.addr && p.state != ControllerState::Live)
        })
        .await;
        let at_cut = mp.paths();
        w.progress(400).await;
        let end = mp.paths();
        let ios = |p: &[PathInfo]| p.iter().find(|p| p.addr == s.p1.addr).unwrap().ios;
        assert!(
            ios(&end) > ios(&at_cut) + 100,
            "I/O through path 1: {end:?}"
        );
        let checked = w.finish(&mp).await;
        assert_eq!(checked, WORKERS * REGION / BLOCK as u64);
    })
    .await
    .unwrap();
}

/// Issue 9.4 as tools see it: a two-address URL opens although its first address
/// refuses connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_opens_when_its_first_address_refuses() {
    tokio::time::timeout(LIMIT, async {
        let s = setup().await;
        s.p1.cut();
        let url = format!("nvme+tcp://{},{}/{NQN}/1", s.p1.addr, s.p2.addr);
        let dev = nvmf_host::NvmeTcpUrl::parse(&url)
            .unwrap()
            .open_device(&host(), &opts())
            .await
            .unwrap();
        let d = pattern(BLOCK, 11);
        dev.write(0, IoBuf::from_slice(&d), WriteFlags::default())
            .await
            .unwrap();
        let got = dev.read(0, IoBuf::new_zeroed(BLOCK)).await.unwrap();
        assert!(got[..] == d[..]);
    })
    .await
    .unwrap();
}

/// A path that joins late keeps to its ANA state: inaccessible, it takes no I/O; once
/// optimized (and first in the URL), it takes the I/O.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_path_is_used_by_its_ana_state() {
    tokio::time::timeout(LIMIT, async {
        let s = setup().await;
        s.p1.cut();
        let mp = open(&s, MultipathOptions::default()).await;
        let w = start_workload(&mp);
        s.l1.set_ana_state(1, AnaState::Inaccessible).unwrap();
        s.p1.restore().await;
        until(&mp, "path 1 joined", |p| p.len() == 2).await;
        assert!(mp.pending_paths().is_empty());
        let joined = mp.paths();
        assert_eq!(joined[0].addr, s.p1.addr, "in URL order: {joined:?}");
        assert_eq!(joined[0].ana_state, ana_state::INACCESSIBLE, "{joined:?}");
        w.progress(300).await;
        let p = mp.paths();
        assert_eq!(p[0].ios, 0, "nothing on an inaccessible path: {p:?}");
        assert!(!p[0].usable, "{p:?}");

        s.l1.set_ana_state(1, AnaState::Optimized).unwrap();
        until(&mp, "path 1 usable", |p| p[0].usable).await;
        let at = mp.paths();
        w.progress(300).await;
        let p = mp.paths();
        assert!(p[0].ios > at[0].ios + 100, "I/O on the first path: {p:?}");
        w.finish(&mp).await;
    })
    .await
    .unwrap();
}

/// No path connects at open: one error naming every address once, with its cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_path_connecting_at_open_names_each_path_and_cause_once() {
    tokio::time::timeout(LIMIT, async {
        let (a, b) = (refused_addr().await, refused_addr().await);
        let e = MultipathNamespace::connect(
            &[a, b],
            NQN,
            1,
            &host(),
            &opts(),
            MultipathOptions::default(),
        )
        .await
        .unwrap_err();
        match &e {
            HostError::NoPathConnects { causes, .. } => {
                assert_eq!(causes.len(), 2, "{causes:?}");
            }
            other => panic!("expected NoPathConnects, got {other:?}"),
        }
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("no path to namespace 1 of {NQN} connects: {a}: ")),
            "{text}"
        );
        for addr in [a, b] {
            assert_eq!(text.matches(&addr.to_string()).count(), 1, "{text}");
        }
        assert_eq!(text.matches("refused").count(), 2, "{text}");
        assert!(!text.contains('\n'), "{text}");
    })
    .await
    .unwrap();
}

/// A path whose address now leads to another namespace under the same NQN and NSID
/// (only its UUID differs) is dropped when it reconnects and never used; it is retried,
/// and joins again once the right namespace answers there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_reconnecting_to_another_namespace_is_not_used() {
    tokio::time::timeout(LIMIT, async {
        let s = setup().await;
        let (nguid, eui64) = (s.ns.nguid, s.ns.eui64);
        let other = impostor(|ns| {
            ns.nguid = nguid;
            ns.eui64 = eui64;
            ns.uuid = [0x5a; 16];
        })
        .await;
        // Path 1 non-optimized: path 2 takes the I/O whenever it is usable.
        s.l1.set_ana_state(1, AnaState::NonOptimized).unwrap();
        let mp = open(&s, MultipathOptions::default()).await;
        until(&mp, "path 1 non-optimized", |p| {
            p[0].ana_state == ana_state::NON_OPTIMIZED
        })
        .await;
        let d = pattern(BLOCK, 3);
        mp.write(0, IoBuf::from_slice(&d), WriteFlags::default())
            .await
            .unwrap();
        assert_eq!(path(&mp, 1).ios, 1, "{:?}", mp.paths());

        // The network path to listener 2 drops and comes back at the impostor.
        s.p2.set_upstream(other.listener.local_addr());
        s.p2.cut();
        s.p2.restore().await;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let pending = mp.pending_paths();
            if let Some(p) = pending.iter().find(|p| p.addr.is(s.p2.addr)) {
                assert!(p.last_error.contains("UUID"), "{p:?}");
                if p.attempts >= 3 {
                    break;
                }
            }
            assert!(std::time::Instant::now() < deadline, "{mp:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let p = mp.paths();
        assert_eq!(p.len(), 1, "path 2 is out: {p:?}");
        for i in 0..64u64 {
            let d = pattern(BLOCK, 100 + i);
            mp.write(
                i * BLOCK as u64,
                IoBuf::from_slice(&d),
                WriteFlags::default(),
            )
            .await
            .unwrap();
            let got = mp
                .read(i * BLOCK as u64, IoBuf::new_zeroed(BLOCK))
                .await
                .unwrap();
            assert!(got[..] == d[..]);
        }
        let untouched = other
            .dev
            .read(0, IoBuf::new_zeroed(64 * BLOCK))
            .await
            .unwrap();
        assert!(
            untouched.iter().all(|&b| b == 0),
            "no I/O reached the other namespace"
        );

        // The right namespace answers there again: the path joins and takes the I/O.
        s.p2.set_upstream(s.l2.local_addr());
        s.p2.cut();
        s.p2.restore().await;
        until(&mp, "path 2 back", |p| p.len() == 2 && p[1].usable).await;
        assert!(mp.pending_paths().is_empty());
        mp.read(0, IoBuf::new_zeroed(BLOCK)).await.unwrap();
        assert_eq!(path(&mp, 1).ios, 1, "the new path 2 took the read");
    })
    .await
    .unwrap();
}

/// A path that is down at open and comes back with another namespace (another NGUID)
/// does not join.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_of_another_namespace_does_not_join() {
    tokio::time::timeout(LIMIT, async {
        let s = setup().await;
        let other = impostor(|_| {}).await;
        s.p2.cut();
        s.p2.set_upstream(other.listener.local_addr());
        let mp = open(&s, MultipathOptions::default()).await;
        s.p2.restore().await;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let pending = mp.pending_paths();
            assert_eq!(pending.len(), 1, "{pending:?}");
            if pending[0].last_error.contains("NGUID") && pending[0].attempts >= 3 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{mp:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(mp.paths().len(), 1, "{mp:?}");
    })
    .await
    .unwrap();
}

/// A path that never comes back is retried with backoff (not in a tight loop), and the
/// retries stop, with every task of the namespace, when it is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_back_off_and_end_with_the_namespace() {
    tokio::time::timeout(LIMIT, async {
        let s = setup().await;
        // A port that accepts and hangs up at once: each connect attempt is counted.
        let attempts = Arc::new(AtomicU64::new(0));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead = l.local_addr().unwrap();
        let _acceptor = {
            let attempts = attempts.clone();
            tokio::spawn(async move {
                while let Ok((sock, _)) = l.accept().await {
                    attempts.fetch_add(1, Ordering::Relaxed);
                    drop(sock);
                }
            })
        };
        let metrics = tokio::runtime::Handle::current().metrics();
        let baseline = metrics.num_alive_tasks();
        let mp = MultipathNamespace::connect(
            &[dead, s.p2.addr],
            NQN,
            1,
            &host(),
            &opts(),
            MultipathOptions::default(),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Delays of 50 ms doubling to 200 ms: about 9 attempts in 1.5 s.
        let n = attempts.load(Ordering::Relaxed);
        assert!((4..=14).contains(&n), "{n} connect attempts in 1.5 s");
        let pending = mp.pending_paths();
        assert!(pending[0].attempts >= 4, "{pending:?}");
        assert!(pending[0].last_error.contains("ICResp"), "{pending:?}");
        drop(mp);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let at_drop = attempts.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(
            attempts.load(Ordering::Relaxed),
            at_drop,
            "retries after drop"
        );
        for _ in 0..500 {
            if metrics.num_alive_tasks() <= baseline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "{} tasks alive after the drop, {baseline} before the open",
            metrics.num_alive_tasks()
        );
    })
    .await
    .unwrap();
}

/// With a controller-loss timeout of 0 (never reconnect), a path down at open is not
/// retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_retries_with_a_zero_controller_loss_timeout() {
    tokio::time::timeout(LIMIT, async {
        let s = setup().await;
        let dead = refused_addr().await;
        let o = ConnectOptions {
            ctrl_loss_tmo_ms: Some(0),
            ..opts()
        };
        let mp = MultipathNamespace::connect(
            &[dead, s.p2.addr],
            NQN,
            1,
            &host(),
            &o,
            MultipathOptions::default(),
        )
        .await
        .unwrap();
        assert_eq!(mp.paths().len(), 1);
        assert!(mp.pending_paths().is_empty(), "{mp:?}");
    })
    .await
    .unwrap();
}
