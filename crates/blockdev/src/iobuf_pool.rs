//! Free I/O buffers kept for reuse, bounded in bytes: allocating, zeroing and page-faulting
//! in a fresh half megabyte per command costs a large share of the CPU of large reads and
//! writes (measured in the KV engine and the S3 data path, see their pools). What does not
//! fit the bound is freed.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::IoBuf;

pub struct IoBufPool {
    free: Mutex<Vec<IoBuf>>,
    max_total_bytes: usize,
}

impl IoBufPool {
    /// A pool that keeps at most `max_total_bytes` of free buffers.
    pub const fn new(max_total_bytes: usize) -> IoBufPool {
        IoBufPool {
            free: Mutex::new(Vec::new()),
            max_total_bytes,
        }
    }

    fn free(&self) -> MutexGuard<'_, Vec<IoBuf>> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A kept buffer of `len` bytes (content unspecified: the caller overwrites it), or
    /// None. Not one of more than twice `len`: a small request does not pin a big buffer.
    pub fn take(&self, len: usize) -> Option<IoBuf> {
        let mut b = {
            let mut f = self.free();
            let i = f
                .iter()
                .position(|b| b.capacity() >= len && b.capacity() / 2 <= len)?;
            f.swap_remove(i)
        };
        b.set_len(len);
        Some(b)
    }

    /// Keeps `b` for a later [`take`](Self::take) if the pool has room for it.
    pub fn give_back(&self, b: IoBuf) {
        let mut f = self.free();
        let held: usize = f.iter().map(IoBuf::capacity).sum();
        if held + b.capacity() <= self.max_total_bytes {
            f.push(b);
        }
    }

    /// Buffers kept now.
    pub fn len(&self) -> usize {
        self.free().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_a_fitting_buffer_and_stays_bounded() {
        let pool = IoBufPool::new(3 << 20);
        assert!(pool.take(4096).is_none(), "empty");
        pool.give_back(IoBuf::new_zeroed(1 << 20));
        assert!(
            pool.take(400 << 10).is_none(),
            "more than twice the size asked for"
        );
        let b = pool.take(600 << 10).expect("fits");
        assert_eq!((b.len(), b.capacity()), (600 << 10, 1 << 20));
        assert!(pool.is_empty());
        for _ in 0..5 {
            pool.give_back(IoBuf::new_zeroed(1 << 20));
        }
        assert_eq!(pool.len(), 3, "bounded in bytes");
    }
}
