//! Steady-state reads and writes allocate nothing on the host side: a counting global
//! allocator counts allocations made on the host runtime's threads, while the target
//! (crates/nvmf-target) runs on a runtime of its own whose allocations are not counted.

#![allow(clippy::unwrap_used)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use blockdev::{BlockDevice, IoBuf, RamDevice, WriteFlags};
use common::host;
use nvmf_host::{ConnectOptions, Controller, RemoteNamespace};
use nvmf_target::{NamespaceConfig, SubsystemConfig, Target, TargetConfig};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if COUNTED.try_with(Cell::get).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call forwards to the system allocator with the same arguments; the
// counter is a relaxed atomic and the thread-local a const-initialised Cell (no
// allocation, no re-entry).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const NQN: &str = "nqn.2026-01.io.ferrobay.test:host-noalloc";
const WORKERS: u64 = 8;
const IOS_PER_WORKER: u64 = 2_000;

/// Starts the target on its own runtime (thread) with two listeners; returns their
/// addresses.
fn start_target() -> (
    std::net::SocketAddr,
    std::net::SocketAddr,
    std::sync::mpsc::Sender<()>,
) {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let target = Target::new(TargetConfig::default()).unwrap();
            target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
            let dev = Arc::new(RamDevice::new("ram1", 64 << 20));
            target
                .add_namespace(NQN, NamespaceConfig::whole_device(1, dev))
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

/// Runs `WORKERS` tasks of reads and writes (4 KiB in-capsule writes, 64 KiB R2T writes,
/// 4 KiB and 64 KiB reads) and returns the allocations counted during the run. With
/// `dev`, through the `BlockDevice` trait; else through `RemoteNamespace`'s own methods.
async fn run(ns: &Arc<RemoteNamespace>, dev: Option<Arc<dyn BlockDevice>>) -> u64 {
    let barrier = Arc::new(tokio::sync::Barrier::new(WORKERS as usize + 1));
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let (ns, barrier, dev) = (ns.clone(), barrier.clone(), dev.clone());
        tasks.push(tokio::spawn(async move {
            let mut small = IoBuf::new_zeroed(4096);
            let mut big = IoBuf::new_zeroed(65536);
            barrier.wait().await;
            for i in 0..IOS_PER_WORKER {
                let off = (w * 64 + i % 64) * 65536;
                if let Some(dev) = &dev {
                    small = dev.write(off, small, WriteFlags::default()).await.unwrap();
                    big = dev.read(off, big).await.unwrap();
                } else if i % 2 == 0 {
                    small = ns.write_at(off, small, false).await.unwrap();
                    big = ns.read_at(off, big).await.unwrap();
                } else {
                    big = ns.write_at(off, big, false).await.unwrap();
                    small = ns.read_at(off, small).await.unwrap();
                }
            }
        }));
    }
    // Warm-up happened in earlier runs; count from the moment all workers start.
    let before = ALLOCS.load(Ordering::Relaxed);
    barrier.wait().await;
    for t in tasks {
        t.await.unwrap();
    }
    ALLOCS.load(Ordering::Relaxed) - before
}

#[test]
fn steady_state_io_allocates_nothing() {
    let (addr, addr2, stop) = start_target();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(|| COUNTED.with(|c| c.set(true)))
        .build()
        .unwrap();
    rt.block_on(async move {
        let o = ConnectOptions {
            io_queues: 2,
            queue_size: 32,
            // No keep-alive traffic during the measurement.
            kato_ms: 60_000,
            ..ConnectOptions::default()
        };
        let c = Controller::connect(addr, NQN, &host(), &o).await.unwrap();
        let ns = Arc::new(c.namespace(1).await.unwrap());
        // Warm up: queues, task slots, socket buffers, scheduler queues.
        run(&ns, None).await;
        run(&ns, None).await;
        let ios = WORKERS * IOS_PER_WORKER * 2;
        let n = run(&ns, None).await;
        println!("{n} allocations for {ios} I/Os through read_at/write_at");
        // The spawned workers and the barrier allocate a few times per run.
        assert!(
            n <= 4 * WORKERS,
            "{n} allocations for {ios} I/Os through RemoteNamespace::read_at/write_at"
        );
        // Through the BlockDevice trait, the boxed future is the one allocation.
        let dev: Arc<dyn BlockDevice> = ns.clone();
        let n = run(&ns, Some(dev)).await;
        assert!(
            n <= ios + 4 * WORKERS,
            "{n} allocations for {ios} I/Os through BlockDevice"
        );
        println!("{n} allocations for {ios} I/Os through BlockDevice");
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
        run(&ns, Some(mp.clone())).await;
        let n = run(&ns, Some(mp)).await;
        assert!(
            n <= ios + 4 * WORKERS,
            "{n} allocations for {ios} I/Os through MultipathNamespace"
        );
        println!("{n} allocations for {ios} I/Os through MultipathNamespace");
    });
    let _ = stop.send(());
}
