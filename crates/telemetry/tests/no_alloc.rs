//! Metering costs no allocation per I/O: a RAM drive wrapped twice (a drive meter and a
//! namespace meter on top, as the storage node does) allocates nothing per read or write
//! (the meters ride in the RAM device's own inline future as observers). A counting
//! global allocator counts the allocations of this test's runtime thread.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::sync::Arc;

use blockdev::{BlockDevice, IoBuf, RamDevice, WriteFlags};
use telemetry::{MeteredDevice, OpClass};
use testkit::alloc::{CountingAllocator, Tag, allocations, set_thread_tag};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const IOS: u64 = 2_000;

async fn pass(dev: &dyn BlockDevice, mut buf: IoBuf) -> IoBuf {
    for i in 0..IOS {
        let off = (i % 256) * 4096;
        buf = dev.write(off, buf, WriteFlags::default()).await.unwrap();
        buf = dev.read(off, buf).await.unwrap();
    }
    buf
}

#[test]
fn two_meters_allocate_nothing_per_io() {
    let ram: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("ram", 4 << 20));
    let drive = Arc::new(MeteredDevice::new(ram));
    let ns = MeteredDevice::new(drive.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = rt.block_on(async {
        let f = ns.read(0, IoBuf::new_zeroed(4096));
        assert!(f.is_inline(), "{f:?} is boxed");
        drop(f);
        let buf = pass(&ns, IoBuf::new_zeroed(4096)).await;
        set_thread_tag(Tag::A);
        let before = allocations(Tag::A);
        let buf = pass(&ns, buf).await;
        let n = allocations(Tag::A) - before;
        set_thread_tag(Tag::NONE);
        drop(buf);
        n
    });
    assert_eq!(n, 0, "allocations in {} metered I/Os", 2 * IOS);
    let s = drive.telemetry().snapshot();
    assert_eq!(s.ops(OpClass::Write), 2 * IOS);
    assert_eq!(ns.telemetry().snapshot().ops(OpClass::Read), 2 * IOS);
}
