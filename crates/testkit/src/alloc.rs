//! A counting global allocator for tests that claim "no allocation per I/O" or measure
//! memory: it forwards to the system allocator and counts
//!
//! - allocations (alloc, alloc_zeroed, realloc) made on threads that carry a [`Tag`]
//!   ([`set_thread_tag`]), per tag: a test marks the threads whose allocations its claim
//!   is about (its runtime's workers, a host vs a target runtime), others are not counted;
//! - live heap bytes over all threads ([`live_bytes`]).
//!
//! A test binary installs it once:
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: testkit::alloc::CountingAllocator = testkit::alloc::CountingAllocator;
//! ```
//!
//! Without that, the counters stay at zero.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Which counter a thread's allocations go to. `Tag::NONE` (the default): not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag(u8);

impl Tag {
    pub const NONE: Tag = Tag(0);
    pub const A: Tag = Tag(1);
    pub const B: Tag = Tag(2);
    pub const C: Tag = Tag(3);
}

const TAGS: usize = 4;

static ALLOCATIONS: [AtomicU64; TAGS] = [const { AtomicU64::new(0) }; TAGS];
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

thread_local! {
    static THREAD_TAG: Cell<u8> = const { Cell::new(0) };
}

/// Counts this thread's allocations under `tag` from now on (`Tag::NONE`: stop counting).
pub fn set_thread_tag(tag: Tag) {
    THREAD_TAG.with(|t| t.set(tag.0));
}

/// Allocations counted under `tag` since the process started.
pub fn allocations(tag: Tag) -> u64 {
    ALLOCATIONS[usize::from(tag.0)].load(Ordering::SeqCst)
}

/// Heap bytes allocated and not yet freed, over all threads, since the process started.
pub fn live_bytes() -> i64 {
    LIVE_BYTES.load(Ordering::SeqCst)
}

fn count_one() {
    // try_with: during thread teardown the thread-local may be gone; nothing is counted.
    let tag = THREAD_TAG.try_with(Cell::get).unwrap_or(0);
    if tag != 0 {
        ALLOCATIONS[usize::from(tag)].fetch_add(1, Ordering::Relaxed);
    }
}

fn size_i64(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// The allocator; see the module doc.
pub struct CountingAllocator;

// SAFETY: every call forwards to the system allocator with the same arguments; the
// counters are relaxed atomics and the thread-local a const-initialised Cell (no
// allocation, no re-entry).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract is passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(size_i64(layout.size()), Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(size_i64(layout.size()), Ordering::Relaxed);
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(
                size_i64(new_size) - size_i64(layout.size()),
                Ordering::Relaxed,
            );
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(size_i64(layout.size()), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}
