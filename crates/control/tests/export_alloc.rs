//! The export layer costs no allocation per I/O: a read or write through a processor
//! node's `ExportDevice` allocates what the volume engine's own read or write does
//! (measured on the bare volume in the same run), nothing more — the export's in-flight
//! accounting and error renaming ride in the volume's future; and a small read allocates
//! at most once (the volume engine's future). A counting global allocator counts this
//! test's runtime thread.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::sync::Arc;

use blockdev::{BlockDevice, IoBuf, RamDevice, WriteFlags};
use control::processor::ExportDevice;
use testkit::alloc::{CountingAllocator, Tag, allocations, set_thread_tag};
use volume::{LevelSpec, Volume, VolumeConfig};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const IOS: u64 = 1_000;

async fn pass(dev: &dyn BlockDevice, mut buf: IoBuf, writes: bool) -> IoBuf {
    for i in 0..IOS {
        // 4 KiB inside one 64 KiB stripe unit: one member read, one member write + parity.
        let off = (i % 64) * 4096;
        if writes {
            buf = dev.write(off, buf, WriteFlags::default()).await.unwrap();
        }
        buf = dev.read(off, buf).await.unwrap();
    }
    buf
}

/// Allocations of one `pass` over `dev` (after a warm-up pass).
async fn counted(dev: &dyn BlockDevice, writes: bool) -> u64 {
    let buf = pass(dev, IoBuf::new_zeroed(4096), writes).await;
    set_thread_tag(Tag::A);
    let before = allocations(Tag::A);
    let buf = pass(dev, buf, writes).await;
    let n = allocations(Tag::A) - before;
    set_thread_tag(Tag::NONE);
    drop(buf);
    n
}

#[test]
fn the_export_layer_adds_no_allocation_per_io() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (bare, exported, stats) = rt.block_on(async {
        let members: Vec<Arc<dyn BlockDevice>> = (0..3)
            .map(|i| Arc::new(RamDevice::with_block_size(format!("m{i}"), 16 << 20, 4096)) as _)
            .collect();
        let mut cfg = VolumeConfig::new("raid5".parse::<LevelSpec>().unwrap());
        cfg.assume_clean = true;
        cfg.journal_bytes = 1 << 20;
        cfg.region_bytes = 1 << 20;
        let vol = Arc::new(Volume::create("v", cfg, members, vec![]).await.unwrap());
        let export = ExportDevice::new("v", vol.size_bytes(), 4096);
        export.attach(vol.clone());
        let bare = counted(vol.as_ref(), true).await;
        let exported = counted(&export, true).await;
        // A small read: the volume engine's one future, nothing else on the way.
        let reads = counted(&export, false).await;
        assert!(
            reads <= IOS,
            "{reads} allocations in {IOS} reads through the export"
        );
        assert_eq!(export.inflight(), 0, "every I/O left the volume");
        (bare, exported, export.stats())
    });
    eprintln!(
        "allocations in {} I/Os: bare volume {bare}, through the export {exported}",
        2 * IOS
    );
    assert!(
        exported <= bare,
        "{exported} allocations through the export against {bare} on the bare volume in {} I/Os",
        2 * IOS
    );
    // Both passes counted (the accounting rides in the volume's future).
    assert_eq!(stats.read_ops, 4 * IOS);
    assert_eq!(stats.write_ops, 2 * IOS);
}
