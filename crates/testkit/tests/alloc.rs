//! The counting allocator counts what it claims to: tagged threads' allocations per tag,
//! nothing of untagged threads, and live bytes.

use testkit::alloc::{CountingAllocator, Tag, allocations, live_bytes, set_thread_tag};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

// One test: other tests' threads would allocate meanwhile.
#[test]
fn counts_tagged_allocations_and_live_bytes() {
    let (a0, b0) = (allocations(Tag::A), allocations(Tag::B));
    set_thread_tag(Tag::A);
    let v: Vec<Box<u64>> = (0..10).map(Box::new).collect();
    set_thread_tag(Tag::NONE);
    // Ten boxes and the Vec's one buffer (collect knows the length).
    assert_eq!(allocations(Tag::A) - a0, 11);
    std::thread::spawn(|| {
        set_thread_tag(Tag::B);
        // black_box: a release build would otherwise elide the allocation.
        let b = std::hint::black_box(Box::new(1u8));
        drop(b);
    })
    .join()
    .expect("thread");
    assert_eq!(allocations(Tag::B) - b0, 1);
    let untagged = Box::new([0u8; 64]);
    assert_eq!(
        allocations(Tag::A) - a0,
        11,
        "untagged allocations are not counted"
    );
    drop(v);
    let before = live_bytes();
    let big = vec![0u8; 1 << 20];
    assert!(live_bytes() - before >= 1 << 20);
    drop(big);
    assert!(live_bytes() - before < 1 << 20);
    drop(untagged);
}
