//! Buffers the command path reuses instead of allocating per command:
//! - aligned Retrieve read buffers and the value buffers of `Kv::store` (which copies the
//!   caller's slice once into one; `Kv::store_buf` takes the caller's buffer and needs
//!   none), up to 64 KiB: many commands are in flight at once, so one cached buffer per
//!   thread was rarely free;
//! - large ones (above 64 KiB), bounded in bytes (an [`IoBufPool`]): a fresh megabyte per
//!   Store or half megabyte per Retrieve of an object shard cost page faults, page
//!   clearing and unmapping (measured: about a fifth of the CPU of 1 MiB Stores over
//!   NVMe/TCP, and of a storage node's CPU under 1 MiB S3 GETs).
//!
//! Both pools are bounded (count and bytes); what does not fit is freed.

use std::sync::Mutex;

use blockdev::{IoBuf, IoBufPool};

/// Buffers up to this size are kept by count.
const READ_POOL_MAX_BUFFER_BYTES: usize = 64 << 10;
/// Small buffers kept.
const READ_POOL_MAX_BUFFERS: usize = 128;
/// Bytes of large buffers kept.
const LARGE_READ_POOL_MAX_BYTES: usize = 32 << 20;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) struct Buffers {
    reads: Mutex<Vec<IoBuf>>,
    large_reads: IoBufPool,
}

impl Default for Buffers {
    fn default() -> Buffers {
        Buffers {
            reads: Mutex::default(),
            large_reads: IoBufPool::new(LARGE_READ_POOL_MAX_BYTES),
        }
    }
}

impl Buffers {
    /// A copy of `value` in a reused aligned buffer (given back with
    /// [`Buffers::give_back_read`]).
    pub fn value_copy(&self, value: &[u8]) -> IoBuf {
        let mut b = self.read_buffer(value.len());
        b.copy_from_slice(value);
        b
    }

    /// An aligned buffer of `len` bytes for a device read (its content is not zeroed
    /// when reused: the read overwrites it).
    pub fn read_buffer(&self, len: usize) -> IoBuf {
        if len > READ_POOL_MAX_BUFFER_BYTES {
            return self
                .large_reads
                .take(len)
                .unwrap_or_else(|| IoBuf::new_zeroed(len));
        }
        let reused = {
            let mut pool = lock(&self.reads);
            pool.iter()
                .position(|b| b.capacity() >= len)
                .map(|i| pool.swap_remove(i))
        };
        if let Some(mut b) = reused {
            b.set_len(len);
            return b;
        }
        IoBuf::new_zeroed(len)
    }

    pub fn give_back_read(&self, b: IoBuf) {
        if b.capacity() > READ_POOL_MAX_BUFFER_BYTES {
            self.large_reads.give_back(b);
            return;
        }
        let mut pool = lock(&self.reads);
        if pool.len() < READ_POOL_MAX_BUFFERS {
            pool.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_reuse_and_stay_bounded() {
        let b = Buffers::default();
        let big = vec![7u8; 1 << 20];
        let v = b.value_copy(&big);
        assert_eq!(&v[..], &big[..]);
        let ptr = v.as_ptr();
        b.give_back_read(v);
        let again = b.value_copy(&[9u8; 700_000]);
        assert_eq!(again.as_ptr(), ptr, "the 1 MiB buffer is reused");
        assert_eq!(&again[..], &[9u8; 700_000][..]);
        drop(again);
        assert_eq!(&b.value_copy(b"small")[..], b"small");
        let r = b.read_buffer(8192);
        assert_eq!(r.len(), 8192);
        b.give_back_read(r);
        assert_eq!(b.read_buffer(4608).len(), 4608, "reused at another length");
        for _ in 0..1000 {
            b.give_back_read(IoBuf::new_zeroed(4096));
        }
        assert_eq!(lock(&b.reads).len(), READ_POOL_MAX_BUFFERS);
        b.give_back_read(IoBuf::new_zeroed(1 << 20));
        assert_eq!(lock(&b.reads).len(), READ_POOL_MAX_BUFFERS);
        // Large read buffers: reused at a fitting size, bounded in bytes.
        assert_eq!(b.large_reads.len(), 1);
        let big = b.read_buffer(600 << 10);
        assert_eq!((big.len(), big.capacity()), (600 << 10, 1 << 20));
        assert!(b.large_reads.is_empty());
        b.give_back_read(big);
        assert_eq!(
            b.read_buffer(100 << 10).capacity(),
            100 << 10,
            "not the 1 MiB one"
        );
        // (Its byte bound is not filled here: the index memory test counts this
        // process's allocations, and tens of megabytes coming and going upset it.)
    }
}
