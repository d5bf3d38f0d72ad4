//! The local backends' `IoFuture`s are stored inline (no box per call): RAM and null
//! allocate nothing per I/O; the io_uring file engine allocates exactly one thing per
//! I/O, its reply channel (a `tokio::sync::oneshot`, see file/uring.rs), and nothing
//! else. A counting global allocator counts allocations made on the threads of the
//! test's own runtime (a current-thread runtime: the caller, its tasks and its I/O
//! driver); threads the backend runs on its own (io_uring's completion thread) are not
//! counted and are not part of the claim.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use blockdev::{
    BlockDevice, FileDevice, IoBuf, IoEngine, NullDevice, OpenOptions, RamDevice, WriteFlags,
};
use testkit::alloc::{CountingAllocator, Tag, allocations, set_thread_tag};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const IOS: u64 = 2_000;

/// One pass: `IOS` writes (FUA every 7th) and `IOS` reads of 4 KiB, four in flight at
/// once (their futures inline in this frame); the buffers go round.
async fn pass(dev: &dyn BlockDevice, bufs: [IoBuf; 4]) -> [IoBuf; 4] {
    let [mut a, mut b, mut c, mut d] = bufs;
    for i in 0..IOS / 4 {
        let off = |k: u64| ((i * 4 + k) % 256) * 4096;
        let w = WriteFlags { fua: i % 7 == 0 };
        let r = tokio::join!(
            dev.write(off(0), a, w),
            dev.write(off(1), b, w),
            dev.write(off(2), c, w),
            dev.write(off(3), d, w),
        );
        (a, b, c, d) = (r.0.unwrap(), r.1.unwrap(), r.2.unwrap(), r.3.unwrap());
        let r = tokio::join!(
            dev.read(off(0), a),
            dev.read(off(1), b),
            dev.read(off(2), c),
            dev.read(off(3), d),
        );
        (a, b, c, d) = (r.0.unwrap(), r.1.unwrap(), r.2.unwrap(), r.3.unwrap());
    }
    [a, b, c, d]
}

/// Allocations counted on this thread during one pass after two warm-up passes.
fn count(dev: &dyn BlockDevice) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for f in [
            dev.read(0, IoBuf::new_zeroed(4096)),
            dev.write(0, IoBuf::new_zeroed(4096), WriteFlags::default()),
        ] {
            assert!(f.is_inline(), "{}: {f:?} is boxed", dev.info().name);
        }
        let bufs = std::array::from_fn(|_| IoBuf::new_zeroed(4096));
        let bufs = pass(dev, pass(dev, bufs).await).await;
        set_thread_tag(Tag::A);
        let before = allocations(Tag::A);
        let bufs = pass(dev, bufs).await;
        let n = allocations(Tag::A) - before;
        set_thread_tag(Tag::NONE);
        drop(bufs);
        n
    })
}

#[test]
fn ram_and_null_io_allocates_nothing() {
    let ram = RamDevice::new("ram0", 4 << 20);
    assert_eq!(count(&ram), 0, "RamDevice allocated");
    let null = NullDevice::new("null0", 4 << 20);
    assert_eq!(count(&null), 0, "NullDevice allocated");
}

#[test]
fn uring_file_io_allocates_only_its_reply_channel() {
    let dir = tempfile::Builder::new()
        .prefix("blockdev-noalloc-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let opts = OpenOptions {
        create_size_bytes: Some(4 << 20),
        engine: IoEngine::Uring,
        ..Default::default()
    };
    let file = FileDevice::open(dir.path().join("f.img"), opts).unwrap();
    assert_eq!(file.engine(), IoEngine::Uring);
    let n = count(&file);
    println!(
        "FileDevice (io_uring): {n} allocations for {} I/Os",
        2 * IOS
    );
    // One oneshot channel per I/O (file/uring.rs); the future itself is inline.
    assert_eq!(
        n,
        2 * IOS,
        "FileDevice (io_uring) allocations per I/O changed"
    );
}
