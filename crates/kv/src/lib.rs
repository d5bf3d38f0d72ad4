//! Log-structured key-value engine over any [`blockdev::BlockDevice`]: the storage of an
//! NVMe Key Value namespace (Store, Retrieve, Delete, Exist, List) and of the S3
//! gateway's object shards. It knows nothing about NVMe or S3.
//!
//! - Keys are 1 to 16 bytes, values 1 byte to the format's maximum (default 2 MiB).
//! - Values are appended to a log in large sequential writes; concurrent stores share
//!   one write and one flush (group commit) and are durable when acknowledged.
//! - An in-memory index (key -> location, length, checksum, sequence) answers Exist and
//!   List and locates values; a Retrieve is one device read, checked against the
//!   value's crc32c. Checkpoints of the index plus log replay rebuild it at open.
//! - A throttled background compactor reclaims overwritten and deleted values.
//!
//! The on-disk format, recovery, group commit, compaction and limits are in `docs/kv.md`.

mod buffers;
mod bytes;
mod checkpoint;
pub mod clock;
mod committer;
mod compactor;
mod engine;
mod error;
mod format;
mod inner;
mod key;
mod options;
mod recovery;
mod state;
mod stats;

pub use clock::{Clock, ManualClock, TokioClock};
pub use compactor::CompactionReport;
pub use engine::{FormatInfo, Kv, RESERVE_SEGMENTS, Retrieved};
pub use error::{ErrorKind, KvError};
pub use format::{FORMAT_VERSION, FormatOptions, MAX_VALUE_BYTES_LIMIT};
pub use inner::StoreMode;
pub use key::{Key, MAX_KEY_BYTES};
pub use options::{CompactionOptions, Options};
pub use recovery::RecoveryReport;
pub use stats::{BATCH_SIZE_BUCKETS, Stats, Usage};

/// Bytes of index memory per key, measured (see `tests/memory.rs`): a `BTreeMap` of
/// 17-byte keys and 24-byte entries. The test fails if it grows past this.
pub const INDEX_BYTES_PER_KEY_BOUND: usize = 80;

/// Counts heap bytes in use, for the index memory test.
#[cfg(test)]
mod test_alloc {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicIsize, Ordering};

    static IN_USE: AtomicIsize = AtomicIsize::new(0);

    struct Counting;

    // SAFETY: defers every call to the system allocator unchanged; only counts sizes.
    #[allow(unsafe_code)]
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            IN_USE.fetch_add(layout.size() as isize, Ordering::Relaxed);
            // SAFETY: same contract as our caller's.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            IN_USE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
            // SAFETY: same contract as our caller's.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;

    /// Bytes allocated and not yet freed, by this whole test process (run the test that
    /// reads it alone in its phase: other tests allocate concurrently, which only adds
    /// noise it tolerates when measured over a million keys).
    pub fn allocated_bytes() -> isize {
        IN_USE.load(Ordering::Relaxed)
    }
}
