//! Steady-state reads and writes allocate nothing on the host side.
//!
//! How the count is kept honest: a counting global allocator charges each allocation to
//! the thread that makes it, by a thread-local role. The host (initiator) runs on a tokio
//! runtime of its own whose threads (workers, I/O driver, blocking pool) are all marked
//! "host" at start; the target (crates/nvmf-target, same process) runs on another runtime
//! whose threads are marked "target". The measured window opens after every worker has
//! its buffers and closes before any of them exits, so it holds nothing but I/O: queue
//! choice, command submission, the socket driver tasks, completions and wake-ups. The
//! target's count is reported, not asserted (it boxes one future per command today).
//! The same holds for the commands of a Key Value namespace, single path and multipath.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use blockdev::{BlockDevice, IO_FUTURE_INLINE_BYTES, IoBuf, RamDevice, WriteFlags};
use common::host;
use nvmf_host::{
    AnyKvNamespace, ConnectOptions, Controller, KvNamespace, MultipathKvNamespace,
    MultipathOptions, RemoteNamespace, StoreMode,
};
use nvmf_target::{
    KvNamespaceConfig, MemKvBackend, NamespaceConfig, SubsystemConfig, Target, TargetConfig,
};
use testkit::alloc::{CountingAllocator, Tag, allocations, set_thread_tag};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Whose allocations a thread's are.
const HOST: Tag = Tag::A;
const TARGET: Tag = Tag::B;

/// The tests of this binary run one at a time: the counters are per tag, not per test.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const NQN: &str = "nqn.2026-01.io.ferrobay.test:host-noalloc";
const KV_NSID: u32 = 2;
const WORKERS: u64 = 8;
const IOS_PER_WORKER: u64 = 2_000;

/// Starts the target on its own runtime (threads marked "target") with two listeners;
/// returns their addresses.
fn start_target() -> (SocketAddr, SocketAddr, std::sync::mpsc::Sender<()>) {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        set_thread_tag(TARGET);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .on_thread_start(|| set_thread_tag(TARGET))
            .build()
            .unwrap();
        rt.block_on(async move {
            let target = Target::new(TargetConfig::default()).unwrap();
            target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
            let dev = Arc::new(RamDevice::new("ram1", 64 << 20));
            target
                .add_namespace(NQN, NamespaceConfig::whole_device(1, dev))
                .unwrap();
            // A Key Value namespace beside it (the store's own allocations are the
            // target's).
            let kv = Arc::new(MemKvBackend::new(256 << 20, 1 << 20));
            target
                .add_kv_namespace(NQN, KvNamespaceConfig::new(KV_NSID, kv, 1 << 20))
                .unwrap();
            let l = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
            let l2 = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
            addr_tx.send((l.local_addr(), l2.local_addr())).unwrap();
            tokio::task::spawn_blocking(move || stop_rx.recv())
                .await
                .ok();
        });
    });
    let (a, b) = addr_rx.recv().unwrap();
    (a, b, stop_tx)
}

/// Allocations counted in one measured window.
#[derive(Debug, Clone, Copy)]
struct Counted {
    host: u64,
    target: u64,
    ios: u64,
}

/// Runs `WORKERS` tasks of reads and writes (4 KiB in-capsule writes, 64 KiB R2T writes,
/// 4 KiB and 64 KiB reads) and counts the allocations made while all of them do I/O and
/// nothing else. With `dev`, through the `BlockDevice` trait; else through
/// `RemoteNamespace`'s own methods.
async fn run(ns: &Arc<RemoteNamespace>, dev: Option<Arc<dyn BlockDevice>>) -> Counted {
    // ready: every worker has its buffers; go: the window opens; done: it closes.
    let ready = Arc::new(tokio::sync::Barrier::new(WORKERS as usize + 1));
    let go = Arc::new(tokio::sync::Barrier::new(WORKERS as usize + 1));
    let done = Arc::new(tokio::sync::Barrier::new(WORKERS as usize + 1));
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let (ns, dev) = (ns.clone(), dev.clone());
        let (ready, go, done) = (ready.clone(), go.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut small = IoBuf::new_zeroed(4096);
            let mut big = IoBuf::new_zeroed(65536);
            ready.wait().await;
            go.wait().await;
            for i in 0..IOS_PER_WORKER {
                let off = (w * 64 + i % 64) * 65536;
                let fua = i % 7 == 0;
                if let Some(dev) = &dev {
                    if i % 2 == 0 {
                        small = dev.write(off, small, WriteFlags { fua }).await.unwrap();
                        big = dev.read(off, big).await.unwrap();
                    } else {
                        big = dev.write(off, big, WriteFlags { fua }).await.unwrap();
                        small = dev.read(off, small).await.unwrap();
                    }
                } else if i % 2 == 0 {
                    small = ns.write_at(off, small, fua).await.unwrap();
                    big = ns.read_at(off, big).await.unwrap();
                } else {
                    big = ns.write_at(off, big, fua).await.unwrap();
                    small = ns.read_at(off, small).await.unwrap();
                }
            }
            done.wait().await;
            drop((small, big));
        }));
    }
    ready.wait().await;
    let (host0, target0) = (allocations(HOST), allocations(TARGET));
    go.wait().await;
    done.wait().await;
    let c = Counted {
        host: allocations(HOST) - host0,
        target: allocations(TARGET) - target0,
        ios: WORKERS * IOS_PER_WORKER * 2,
    };
    for t in tasks {
        t.await.unwrap();
    }
    c
}

/// Warms up (queues, task slots, socket buffers, scheduler queues), then measures.
async fn measure(what: &str, ns: &Arc<RemoteNamespace>, dev: Option<Arc<dyn BlockDevice>>) {
    run(ns, dev.clone()).await;
    run(ns, dev.clone()).await;
    let c = run(ns, dev).await;
    println!(
        "{what}: {} I/Os, host allocations {}, target allocations {} ({:.2} per I/O)",
        c.ios,
        c.host,
        c.target,
        c.target as f64 / c.ios as f64
    );
    assert_eq!(
        c.host, 0,
        "{what}: the host allocated during {} I/Os",
        c.ios
    );
}

/// Runs `WORKERS` tasks of KV commands (4 KiB in-capsule Stores, 64 KiB Stores with
/// R2T, Retrieves into the same buffers, short Retrieves, Exist, Delete, List into a
/// 256-byte buffer; some of them answer Key Does Not Exist or Key Exists) and counts the
/// allocations made while all of them do nothing else. Every task has its commands
/// in flight at once with the others: the queues are pipelined.
async fn run_kv(ns: &Arc<AnyKvNamespace>) -> Counted {
    let ready = Arc::new(tokio::sync::Barrier::new(WORKERS as usize + 1));
    let go = Arc::new(tokio::sync::Barrier::new(WORKERS as usize + 1));
    let done = Arc::new(tokio::sync::Barrier::new(WORKERS as usize + 1));
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let ns = ns.clone();
        let (ready, go, done) = (ready.clone(), go.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut small = IoBuf::new_zeroed(4096);
            let mut big = IoBuf::new_zeroed(65536);
            let mut head = IoBuf::new_zeroed(512);
            let mut list = IoBuf::new_zeroed(256);
            let keys: Vec<[u8; 16]> = (0..64u64)
                .map(|i| {
                    let mut k = [0u8; 16];
                    k[..8].copy_from_slice(&w.to_be_bytes());
                    k[8..].copy_from_slice(&i.to_be_bytes());
                    k
                })
                .collect();
            ready.wait().await;
            go.wait().await;
            for i in 0..IOS_PER_WORKER / 4 {
                let k = &keys[(i % 64) as usize];
                let r;
                if i % 2 == 0 {
                    (r, small) = ns.store(k, small, StoreMode::Always).await;
                    r.unwrap();
                    let r2;
                    (r2, big) = ns.retrieve(k, big).await;
                    assert_eq!(r2.unwrap(), 4096);
                } else {
                    (r, big) = ns.store(k, big, StoreMode::Always).await;
                    r.unwrap();
                    let r2;
                    (r2, head) = ns.retrieve(k, head).await;
                    assert_eq!(r2.unwrap(), 65536, "a short buffer gets the whole size");
                }
                assert!(ns.exist(k).await.unwrap());
                let r3;
                (r3, small) = ns.store(k, small, StoreMode::OnlyIfAbsent).await;
                assert!(matches!(r3, Err(nvmf_host::KvError::KeyExists)));
                if i % 8 == 7 {
                    ns.delete(k).await.unwrap();
                    let r4;
                    (r4, small) = ns.retrieve(k, small).await;
                    assert!(matches!(r4, Err(nvmf_host::KvError::KeyNotFound)));
                    let r5;
                    (r5, list) = ns.list_into(Some(&k[..]), list).await;
                    r5.unwrap();
                }
            }
            done.wait().await;
            drop((small, big, head, list));
        }));
    }
    ready.wait().await;
    let (host0, target0) = (allocations(HOST), allocations(TARGET));
    go.wait().await;
    done.wait().await;
    let c = Counted {
        host: allocations(HOST) - host0,
        target: allocations(TARGET) - target0,
        ios: WORKERS * (IOS_PER_WORKER / 4) * 4,
    };
    for t in tasks {
        t.await.unwrap();
    }
    c
}

async fn measure_kv(what: &str, ns: &Arc<AnyKvNamespace>) {
    run_kv(ns).await;
    run_kv(ns).await;
    let c = run_kv(ns).await;
    println!(
        "{what}: at least {} KV commands, host allocations {}, target allocations {}",
        c.ios, c.host, c.target
    );
    assert_eq!(
        c.host, 0,
        "{what}: the host allocated during {} KV commands",
        c.ios
    );
}

/// Starts the target and runs `body` with its two listeners' addresses and the
/// connect options of the measurements, on a host runtime whose threads count as
/// `HOST`; one test at a time.
fn with_target<Fut: std::future::Future<Output = ()>>(
    body: impl FnOnce(SocketAddr, SocketAddr, ConnectOptions) -> Fut,
) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (addr, addr2, stop) = start_target();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(|| set_thread_tag(HOST))
        .build()
        .unwrap();
    let o = ConnectOptions {
        io_queues: 2,
        queue_size: 32,
        // No keep-alive traffic during the measurement.
        kato_ms: 60_000,
        ..ConnectOptions::default()
    };
    rt.block_on(body(addr, addr2, o));
    let _ = stop.send(());
}

#[test]
fn steady_state_kv_commands_allocate_nothing() {
    with_target(|addr, addr2, o| async move {
        let c = Controller::connect(addr, NQN, &host(), &o).await.unwrap();
        let ns = Arc::new(AnyKvNamespace::Single(
            KvNamespace::open(&c, KV_NSID).await.unwrap(),
        ));
        measure_kv("KvNamespace", &ns).await;
        let mp = MultipathKvNamespace::connect(
            vec![addr.into(), addr2.into()],
            NQN,
            Some(KV_NSID),
            &host(),
            &o,
            MultipathOptions::default(),
        )
        .await
        .unwrap();
        measure_kv(
            "MultipathKvNamespace",
            &Arc::new(AnyKvNamespace::Multipath(mp)),
        )
        .await;
    });
}

#[test]
fn steady_state_io_allocates_nothing() {
    with_target(|addr, addr2, o| async move {
        let c = Controller::connect(addr, NQN, &host(), &o).await.unwrap();
        let ns = Arc::new(c.namespace(1).await.unwrap());
        measure("RemoteNamespace::read_at/write_at", &ns, None).await;

        // Through the BlockDevice trait: the IoFuture holds the future inline.
        let dev: Arc<dyn BlockDevice> = ns.clone();
        for f in [
            dev.read(0, IoBuf::new_zeroed(4096)),
            dev.write(0, IoBuf::new_zeroed(4096), WriteFlags::default()),
        ] {
            assert!(
                f.is_inline(),
                "{f:?} does not fit {IO_FUTURE_INLINE_BYTES} bytes"
            );
        }
        measure("RemoteNamespace as BlockDevice", &ns, Some(dev)).await;

        // A multipath namespace over two listeners: the same, path choice included.
        let mp: Arc<dyn BlockDevice> = Arc::new(
            nvmf_host::MultipathNamespace::connect(
                &[addr, addr2],
                NQN,
                1,
                &host(),
                &o,
                nvmf_host::MultipathOptions::default(),
            )
            .await
            .unwrap(),
        );
        for f in [
            mp.read(0, IoBuf::new_zeroed(4096)),
            mp.write(0, IoBuf::new_zeroed(4096), WriteFlags::default()),
        ] {
            assert!(
                f.is_inline(),
                "{f:?} does not fit {IO_FUTURE_INLINE_BYTES} bytes"
            );
        }
        measure("MultipathNamespace as BlockDevice", &ns, Some(mp)).await;
    });
}
