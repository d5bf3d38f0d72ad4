//! Data buffers of commands: a caller's owned [`IoBuf`], or one window of a buffer split
//! into disjoint windows so that several commands (an I/O larger than MDTS) move their
//! parts of it at the same time, without copying.

use std::ptr::NonNull;
use std::sync::Arc;

use blockdev::IoBuf;

/// A buffer shared by the windows [`SplitBuf::split`] hands out. The windows never
/// overlap, and the buffer itself is only reachable again through
/// [`SplitBuf::into_inner`] once every window is gone, so each window is the only access
/// to its bytes.
pub(crate) struct SplitBuf {
    /// Kept only to own (and eventually free or return) the allocation.
    buf: IoBuf,
    base: NonNull<u8>,
}

// SAFETY: the allocation is owned by `buf` (Send); `base` points into it and is only
// dereferenced through windows, each the sole access to its disjoint range.
#[allow(unsafe_code)]
unsafe impl Send for SplitBuf {}
// SAFETY: `&SplitBuf` gives no access to the bytes; only `Window`s (not `Clone`, one per
// disjoint range) do, so shared references never alias a mutable one.
#[allow(unsafe_code)]
unsafe impl Sync for SplitBuf {}

impl SplitBuf {
    /// Splits `buf` into windows of `chunk_bytes` (the last one shorter).
    pub fn split(mut buf: IoBuf, chunk_bytes: usize) -> (Arc<SplitBuf>, Vec<Window>) {
        let len = buf.len();
        let base = NonNull::new(buf.as_mut_slice().as_mut_ptr()).unwrap_or(NonNull::dangling());
        let owner = Arc::new(SplitBuf { buf, base });
        let chunk = chunk_bytes.max(1);
        let mut windows = Vec::with_capacity(len.div_ceil(chunk));
        let mut offset = 0;
        while offset < len {
            let n = chunk.min(len - offset);
            windows.push(Window {
                owner: owner.clone(),
                offset,
                len: n,
            });
            offset += n;
        }
        (owner, windows)
    }

    /// The buffer back, once no window exists any more.
    pub fn into_inner(this: Arc<SplitBuf>) -> Result<IoBuf, Arc<SplitBuf>> {
        Arc::try_unwrap(this).map(|s| s.buf)
    }
}

/// `len` bytes at `offset` of a [`SplitBuf`]: the only handle to those bytes.
pub(crate) struct Window {
    owner: Arc<SplitBuf>,
    offset: usize,
    len: usize,
}

impl Window {
    pub fn offset(&self) -> usize {
        self.offset
    }
    pub fn len(&self) -> usize {
        self.len
    }

    #[allow(unsafe_code)]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: offset + len lies inside the buffer (split() built it so); the range is
        // disjoint from every other window and the buffer is not otherwise accessed while
        // this window (holding an Arc) exists.
        unsafe { std::slice::from_raw_parts(self.owner.base.as_ptr().add(self.offset), self.len) }
    }

    #[allow(unsafe_code)]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice; `&mut self` makes this the only live access to the range.
        unsafe {
            std::slice::from_raw_parts_mut(self.owner.base.as_ptr().add(self.offset), self.len)
        }
    }
}

/// The buffer a command carries.
pub(crate) enum DataBuf {
    Owned(IoBuf),
    Window(Window),
}

impl DataBuf {
    pub fn bytes(&self) -> &[u8] {
        match self {
            DataBuf::Owned(b) => b,
            DataBuf::Window(w) => w.as_slice(),
        }
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            DataBuf::Owned(b) => b,
            DataBuf::Window(w) => w.as_mut_slice(),
        }
    }
    pub fn into_owned(self) -> Option<IoBuf> {
        match self {
            DataBuf::Owned(b) => Some(b),
            DataBuf::Window(_) => None,
        }
    }
}

/// Which way a command's data moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    None,
    ToController,
    FromController,
}

/// A command's data: `buf.bytes()[offset..offset + len]` moving in `dir`.
pub(crate) struct Data {
    pub buf: Option<DataBuf>,
    pub offset: usize,
    pub len: usize,
    pub dir: Dir,
}

impl Data {
    pub const NONE: Data = Data {
        buf: None,
        offset: 0,
        len: 0,
        dir: Dir::None,
    };

    pub fn window(w: Window, dir: Dir) -> Data {
        let len = w.len();
        Data {
            buf: Some(DataBuf::Window(w)),
            offset: 0,
            len,
            dir,
        }
    }

    pub fn owned(buf: IoBuf, offset: usize, len: usize, dir: Dir) -> Data {
        Data {
            buf: Some(DataBuf::Owned(buf)),
            offset,
            len,
            dir,
        }
    }

    /// Checks the window against the buffer and the 32-bit transfer length.
    pub fn check(&self) -> Result<(), String> {
        let have = self.buf.as_ref().map_or(0, |b| b.bytes().len());
        let end = self.offset.checked_add(self.len);
        if end.is_none_or(|e| e > have) {
            return Err(format!(
                "payload window {}+{} outside a buffer of {have} bytes",
                self.offset, self.len
            ));
        }
        if u32::try_from(self.len).is_err() {
            return Err(format!("payload of {} bytes exceeds 4 GiB", self.len));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_disjoint_and_give_the_buffer_back() {
        let buf = IoBuf::from_slice(&(0..=255u8).cycle().take(10_000).collect::<Vec<_>>());
        let (owner, mut ws) = SplitBuf::split(buf, 4096);
        assert_eq!(ws.len(), 3);
        assert_eq!(
            ws.iter().map(|w| (w.offset(), w.len())).collect::<Vec<_>>(),
            vec![(0, 4096), (4096, 4096), (8192, 1808)]
        );
        assert_eq!(ws[1].as_slice()[0], (4096 % 256) as u8);
        ws[2].as_mut_slice().fill(7);
        let owner = SplitBuf::into_inner(owner).expect_err("windows still alive");
        drop(ws);
        let back = SplitBuf::into_inner(owner).ok().expect("all windows gone");
        assert_eq!(back.len(), 10_000);
        assert_eq!(back[8191], (8191 % 256) as u8);
        assert!(back[8192..].iter().all(|&b| b == 7));
        let (o, ws) = SplitBuf::split(IoBuf::new_zeroed(0), 4096);
        assert!(ws.is_empty());
        assert!(SplitBuf::into_inner(o).is_ok());
    }
}
