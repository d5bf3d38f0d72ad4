//! An owned, page-aligned byte buffer for O_DIRECT and io_uring.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::IO_ALIGN_BYTES;

/// Owned, [`IO_ALIGN_BYTES`]-aligned byte buffer usable for O_DIRECT.
///
/// Owned so that a buffer handed to io_uring can never be freed or reused while the kernel
/// writes into it: backends take the `IoBuf` by value and hand it back on completion.
///
/// The capacity is `len` rounded up to a multiple of [`IO_ALIGN_BYTES`]. The whole capacity
/// is zeroed at allocation, so every byte is always initialised; [`IoBuf::set_len`] keeps
/// whatever the bytes held before (zero if never written).
///
/// [`IoBuf::split_off`] cuts a buffer at an aligned offset into two buffers over disjoint
/// parts of the same allocation (each still owned exclusively, each aligned), so that
/// several devices can fill one caller's buffer concurrently; [`IoBuf::unsplit`] joins
/// adjacent parts back without copying.
pub struct IoBuf {
    /// First byte of this buffer's part of the allocation.
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes of the allocation from `ptr` that belong to this buffer.
    capacity: usize,
    /// `None`: this buffer owns the whole allocation (`ptr`, `capacity`) and frees it.
    /// `Some`: the allocation was split; it is freed when its last part is dropped.
    shared: Option<Arc<Allocation>>,
}

/// An allocation shared by the parts of a split [`IoBuf`].
struct Allocation {
    ptr: NonNull<u8>,
    capacity: usize,
}

// SAFETY: the allocation is plain memory; each part of it is reached only through the one
// `IoBuf` it belongs to (disjoint ranges), and `Allocation` itself only frees it.
#[allow(unsafe_code)]
unsafe impl Send for Allocation {}
// SAFETY: `&Allocation` gives no access to the bytes.
#[allow(unsafe_code)]
unsafe impl Sync for Allocation {}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: allocated by IoBuf::try_new_zeroed with exactly this layout
        // (capacity > 0: only non-empty buffers are split), freed once, when the last part
        // is gone.
        #[allow(unsafe_code)]
        unsafe {
            alloc::dealloc(self.ptr.as_ptr(), IoBuf::layout(self.capacity))
        }
    }
}

/// Used only for an aligned dangling pointer when the capacity is zero.
#[repr(C, align(4096))]
struct Page([u8; IO_ALIGN_BYTES]);
const _: () = assert!(std::mem::align_of::<Page>() == IO_ALIGN_BYTES);

// SAFETY: IoBuf owns its bytes exclusively (like Vec<u8>; a split part its disjoint
// range); &IoBuf only gives &[u8].
#[allow(unsafe_code)]
unsafe impl Send for IoBuf {}
// SAFETY: shared access is read-only through &[u8].
#[allow(unsafe_code)]
unsafe impl Sync for IoBuf {}

impl IoBuf {
    /// A zero-filled buffer of `len` bytes (capacity rounded up to [`IO_ALIGN_BYTES`]).
    pub fn new_zeroed(len: usize) -> IoBuf {
        Self::try_new_zeroed(len).unwrap_or_else(|| {
            let capacity = len
                .checked_next_multiple_of(IO_ALIGN_BYTES)
                .expect("IoBuf length overflows usize");
            alloc::handle_alloc_error(Self::layout(capacity))
        })
    }

    /// As [`IoBuf::new_zeroed`], but `None` when the memory cannot be had (for memory a
    /// caller can do without: a RAM drive's chunk is an I/O error, not an abort), a
    /// length too large for any allocation included.
    pub fn try_new_zeroed(len: usize) -> Option<IoBuf> {
        let capacity = len.checked_next_multiple_of(IO_ALIGN_BYTES)?;
        if capacity == 0 {
            return Some(IoBuf {
                ptr: NonNull::<Page>::dangling().cast(),
                len: 0,
                capacity: 0,
                shared: None,
            });
        }
        let layout = Layout::from_size_align(capacity, IO_ALIGN_BYTES).ok()?;
        // SAFETY: layout has non-zero size (capacity > 0 checked above).
        #[allow(unsafe_code)]
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        Some(IoBuf {
            ptr: NonNull::new(raw)?,
            len,
            capacity,
            shared: None,
        })
    }

    /// Splits the buffer at `at`: `self` keeps bytes `[0, at)` (length and capacity `at`),
    /// the returned buffer holds `[at, len)` with the rest of the capacity. No byte is
    /// copied; both stay aligned. Panics unless `at` is a multiple of [`IO_ALIGN_BYTES`]
    /// and at most `len` (a caller's bug, like slicing out of range).
    pub fn split_off(&mut self, at: usize) -> IoBuf {
        assert!(
            at.is_multiple_of(IO_ALIGN_BYTES) && at <= self.len,
            "IoBuf::split_off({at}) of a {}-byte buffer: not an aligned offset within it",
            self.len
        );
        if at == self.capacity {
            // Nothing of the allocation is left for the tail.
            return IoBuf::new_zeroed(0);
        }
        let shared = self
            .shared
            .get_or_insert_with(|| {
                Arc::new(Allocation {
                    ptr: self.ptr,
                    capacity: self.capacity,
                })
            })
            .clone();
        // SAFETY: at < capacity, so the pointer stays inside this buffer's part.
        #[allow(unsafe_code)]
        let tail_ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(at)) };
        let tail = IoBuf {
            ptr: tail_ptr,
            len: self.len - at,
            capacity: self.capacity - at,
            shared: Some(shared),
        };
        self.len = at;
        self.capacity = at;
        tail
    }

    /// Joins `next` back onto the end of `self`: it must be the part split off right
    /// after `self`'s (same allocation, adjacent), and `self` must be full (`len ==
    /// capacity`). Otherwise `next` comes back unchanged.
    pub fn unsplit(&mut self, next: IoBuf) -> Result<(), IoBuf> {
        let same = match (&self.shared, &next.shared) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        let adjacent = self.ptr.as_ptr().wrapping_add(self.capacity) == next.ptr.as_ptr();
        if next.capacity == 0 {
            return Ok(());
        }
        if !same || !adjacent || self.len != self.capacity {
            return Err(next);
        }
        self.len += next.len;
        self.capacity += next.capacity;
        // `next`'s range is now `self`'s; dropping it only releases its share.
        drop(next);
        Ok(())
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> IoBuf {
        let mut buf = IoBuf::new_zeroed(data.len());
        buf.as_mut_slice().copy_from_slice(data);
        buf
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Sets the length. Bytes that come into view keep their previous content (zero if they
    /// were never written since allocation). Panics if `len > capacity()`.
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity,
            "IoBuf::set_len({len}) above capacity {}",
            self.capacity
        );
        self.len = len;
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for `capacity >= len` initialised bytes (zeroed at allocation),
        // or dangling-but-aligned with len == 0; we own the allocation.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr(), self.len)
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice, and &mut self guarantees exclusive access.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len)
        }
    }

    /// Raw pointer to the first byte, for handing to the kernel. Valid for `capacity()` bytes
    /// while `self` is alive and not moved out of its owner's control.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn layout(capacity: usize) -> Layout {
        Layout::from_size_align(capacity, IO_ALIGN_BYTES).expect("IoBuf layout")
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        // A part of a split allocation: the last part's `Arc` frees it.
        if self.capacity != 0 && self.shared.is_none() {
            // SAFETY: ptr was allocated by try_new_zeroed with exactly this layout.
            #[allow(unsafe_code)]
            unsafe {
                alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.capacity))
            }
        }
    }
}

impl Clone for IoBuf {
    fn clone(&self) -> IoBuf {
        IoBuf::from_slice(self.as_slice())
    }
}

impl PartialEq for IoBuf {
    fn eq(&self, other: &IoBuf) -> bool {
        self.as_slice() == other.as_slice()
    }
}
impl Eq for IoBuf {}

impl Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl AsRef<[u8]> for IoBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for IoBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl From<&[u8]> for IoBuf {
    fn from(data: &[u8]) -> IoBuf {
        IoBuf::from_slice(data)
    }
}

impl fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = &self.as_slice()[..self.len.min(16)];
        f.debug_struct("IoBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .field("head", &head)
            .finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn try_new_zeroed_is_aligned_or_none() {
        let buf = IoBuf::try_new_zeroed(1 << 20).expect("1 MiB");
        assert_eq!(buf.as_slice().as_ptr() as usize % IO_ALIGN_BYTES, 0);
        assert!(buf.iter().all(|&b| b == 0));
        assert!(
            IoBuf::try_new_zeroed(usize::MAX).is_none(),
            "length overflows"
        );
        assert!(
            IoBuf::try_new_zeroed(1 << 62).is_none(),
            "more than any machine has"
        );
        assert!(
            IoBuf::try_new_zeroed(usize::MAX - 8191).is_none(),
            "beyond what a layout can describe"
        );
    }

    #[test]
    fn alignment_capacity_and_zeroing() {
        for len in [0usize, 1, 511, 512, 4096, 4097, 1 << 20] {
            let buf = IoBuf::new_zeroed(len);
            assert_eq!(buf.len(), len);
            assert_eq!(buf.capacity() % IO_ALIGN_BYTES, 0);
            assert!(buf.capacity() >= len && buf.capacity() < len + IO_ALIGN_BYTES);
            assert_eq!(buf.as_slice().as_ptr() as usize % IO_ALIGN_BYTES, 0);
            assert!(buf.iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn set_len_keeps_previous_content() {
        let mut buf = IoBuf::from_slice(&[7u8; 100]);
        buf.set_len(10);
        assert_eq!(buf.len(), 10);
        buf.set_len(200);
        assert_eq!(&buf[..100], &[7u8; 100][..]);
        assert!(buf[100..].iter().all(|&b| b == 0));
        buf.set_len(4096);
        assert_eq!(buf.len(), 4096);
    }

    #[test]
    #[should_panic(expected = "above capacity")]
    fn set_len_above_capacity_panics() {
        IoBuf::new_zeroed(1).set_len(4097);
    }

    #[test]
    fn clone_and_eq() {
        let a = IoBuf::from_slice(b"hello");
        let b = a.clone();
        assert_eq!(a, b);
        assert_ne!(a.as_ptr(), b.as_ptr());
        assert_eq!(&*b, b"hello");
        assert!(format!("{a:?}").contains("len: 5"));
    }

    #[test]
    fn split_parts_fill_independently_and_join_back() {
        let page = IO_ALIGN_BYTES;
        let mut buf = IoBuf::new_zeroed(5 * page + 100);
        let base = buf.as_ptr();
        let mut rest = buf.split_off(2 * page);
        let tail = rest.split_off(page);
        assert_eq!((buf.len(), buf.capacity()), (2 * page, 2 * page));
        assert_eq!((rest.len(), rest.capacity()), (page, page));
        assert_eq!((tail.len(), tail.capacity()), (2 * page + 100, 3 * page));
        for (part, fill) in [(&mut buf, 1u8), (&mut rest, 2)] {
            part.fill(fill);
            assert_eq!(part.as_ptr() as usize % IO_ALIGN_BYTES, 0);
        }
        let mut tail = tail;
        tail.fill(3);
        // Joined out of order: refused, nothing lost.
        let tail = buf.unsplit(tail).unwrap_err();
        buf.unsplit(rest).unwrap();
        buf.unsplit(tail).unwrap();
        assert_eq!(buf.as_ptr(), base);
        assert_eq!((buf.len(), buf.capacity()), (5 * page + 100, 6 * page));
        assert!(buf[..2 * page].iter().all(|&b| b == 1));
        assert!(buf[2 * page..3 * page].iter().all(|&b| b == 2));
        assert!(buf[3 * page..].iter().all(|&b| b == 3));
        // The joined buffer splits again and behaves as before.
        let t = buf.split_off(page);
        assert_eq!(t[0], 1);
        buf.unsplit(t).unwrap();
        assert_eq!(buf.len(), 5 * page + 100);
    }

    #[test]
    fn parts_of_another_buffer_or_not_full_are_refused() {
        let page = IO_ALIGN_BYTES;
        let mut a = IoBuf::new_zeroed(2 * page);
        let a2 = a.split_off(page);
        let mut b = IoBuf::new_zeroed(2 * page);
        let b2 = b.split_off(page);
        let b2 = a.unsplit(b2).unwrap_err();
        a.set_len(10);
        let a2 = a.unsplit(a2).unwrap_err();
        a.set_len(page);
        a.unsplit(a2).unwrap();
        b.unsplit(b2).unwrap();
        assert_eq!((a.len(), b.len()), (2 * page, 2 * page));
        // An unsplit buffer takes nothing.
        let mut c = IoBuf::new_zeroed(page);
        assert!(c.unsplit(IoBuf::new_zeroed(page)).is_err());
    }

    #[test]
    fn parts_dropped_in_any_order_free_once() {
        let page = IO_ALIGN_BYTES;
        for order in [[0usize, 1, 2], [2, 1, 0], [1, 0, 2], [1, 2, 0]] {
            let mut a = IoBuf::new_zeroed(3 * page);
            let mut b = a.split_off(page);
            let c = b.split_off(page);
            let mut parts = [Some(a), Some(b), Some(c)];
            for i in order {
                let mut p = parts[i].take().unwrap();
                p.fill(9);
                drop(p);
            }
        }
        // Splitting at the very end leaves an empty tail that joins back as a no-op.
        let mut d = IoBuf::new_zeroed(page);
        let e = d.split_off(page);
        assert_eq!((e.len(), e.capacity()), (0, 0));
        d.unsplit(e).unwrap();
        assert_eq!(d.len(), page);
    }

    #[test]
    #[should_panic(expected = "not an aligned offset")]
    fn split_off_unaligned_panics() {
        IoBuf::new_zeroed(2 * IO_ALIGN_BYTES).split_off(100);
    }
}
