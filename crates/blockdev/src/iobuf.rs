//! An owned, page-aligned byte buffer for O_DIRECT and io_uring.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::IO_ALIGN_BYTES;

/// Owned, [`IO_ALIGN_BYTES`]-aligned byte buffer usable for O_DIRECT.
///
/// Owned so that a buffer handed to io_uring can never be freed or reused while the kernel
/// writes into it: backends take the `IoBuf` by value and hand it back on completion.
///
/// The capacity is `len` rounded up to a multiple of [`IO_ALIGN_BYTES`]. The whole capacity
/// is zeroed at allocation, so every byte is always initialised; [`IoBuf::set_len`] keeps
/// whatever the bytes held before (zero if never written).
pub struct IoBuf {
    ptr: NonNull<u8>,
    len: usize,
    capacity: usize,
}

/// Used only for an aligned dangling pointer when the capacity is zero.
#[repr(C, align(4096))]
struct Page([u8; IO_ALIGN_BYTES]);
const _: () = assert!(std::mem::align_of::<Page>() == IO_ALIGN_BYTES);

// SAFETY: IoBuf owns its allocation exclusively (like Vec<u8>); &IoBuf only gives &[u8].
#[allow(unsafe_code)]
unsafe impl Send for IoBuf {}
// SAFETY: shared access is read-only through &[u8].
#[allow(unsafe_code)]
unsafe impl Sync for IoBuf {}

impl IoBuf {
    /// A zero-filled buffer of `len` bytes (capacity rounded up to [`IO_ALIGN_BYTES`]).
    pub fn new_zeroed(len: usize) -> IoBuf {
        let capacity = len
            .checked_next_multiple_of(IO_ALIGN_BYTES)
            .expect("IoBuf length overflows usize");
        if capacity == 0 {
            return IoBuf {
                ptr: NonNull::<Page>::dangling().cast(),
                len: 0,
                capacity: 0,
            };
        }
        let layout = Self::layout(capacity);
        let ptr = Self::alloc_zeroed(layout);
        IoBuf { ptr, len, capacity }
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

    fn alloc_zeroed(layout: Layout) -> NonNull<u8> {
        // SAFETY: layout has non-zero size (capacity > 0 checked by callers).
        #[allow(unsafe_code)]
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        match NonNull::new(raw) {
            Some(ptr) => ptr,
            None => alloc::handle_alloc_error(layout),
        }
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if self.capacity != 0 {
            // SAFETY: ptr was allocated by alloc_zeroed with exactly this layout.
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
}
