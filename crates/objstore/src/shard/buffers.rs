//! Shard value buffers reused across Stores and Retrieves instead of allocating (and
//! zeroing, and page-faulting in) a fresh half megabyte per shard. One pool per process,
//! bounded in bytes; a buffer that does not fit is freed.
//!
//! A PUT stripe's shard values are built in place in pooled buffers (header, payload,
//! parity) and handed to the store whole ([`ShardStore::store_buf`]); a Retrieve receives
//! into a pooled buffer that goes out as [`Bytes`] and comes back here when the last
//! slice of it is dropped (after the GET response has sent it).
//!
//! [`ShardStore::store_buf`]: super::ShardStore::store_buf

use blockdev::{IoBuf, IoBufPool};
use bytes::Bytes;

/// Buffers smaller than this are not kept (small values are cheap to allocate).
const MIN_POOLED_BYTES: usize = 64 << 10;
/// Bytes of free buffers kept.
const MAX_POOL_BYTES: usize = 64 << 20;

static FREE: IoBufPool = IoBufPool::new(MAX_POOL_BYTES);

/// A buffer of `len` bytes whose content is unspecified (the caller writes all of it).
pub(crate) fn take(len: usize) -> IoBuf {
    let reused = if len >= MIN_POOLED_BYTES {
        FREE.take(len)
    } else {
        None
    };
    reused.unwrap_or_else(|| IoBuf::new_zeroed(len))
}

/// A buffer is no longer needed.
pub(crate) fn give_back(b: IoBuf) {
    if b.capacity() >= MIN_POOLED_BYTES {
        FREE.give_back(b);
    }
}

/// Owns a pooled buffer inside a [`Bytes`]; gives it back when dropped.
struct Pooled(Option<IoBuf>);

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        self.0.as_ref().map_or(&[], |b| b.as_slice())
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            give_back(b);
        }
    }
}

/// `b` as [`Bytes`] without a copy; the buffer returns to the pool with the last slice.
pub(crate) fn into_bytes(b: IoBuf) -> Bytes {
    Bytes::from_owner(Pooled(Some(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_and_are_reused_at_a_fitting_size() {
        let b = take(300 << 10);
        let cap = b.capacity();
        let bytes = into_bytes(b);
        let slice = bytes.slice(10..20);
        drop(bytes);
        assert_eq!(slice.len(), 10);
        drop(slice);
        // Back in the pool: a take of the same size finds a buffer of that capacity
        // (other tests may take it first; then a fresh one has the same capacity).
        let again = take(300 << 10);
        assert_eq!((again.len(), again.capacity()), (300 << 10, cap));
        // Too small to pin a big buffer, too small to pool at all.
        assert!(take(100 << 10).capacity() < cap);
        assert_eq!(take(100).len(), 100);
    }
}
