//! Receive side: a staging buffer for headers and small data, and the PDU parsing state.

/// Staging buffer size. Headers are at most a few hundred bytes; larger data bypasses the
/// buffer and lands directly in the command's buffer.
pub(crate) const RX_BUF_BYTES: usize = 64 * 1024;
/// Data larger than this is read straight into the destination when the staging buffer is
/// empty (below it, one read that also picks up the next headers is cheaper).
pub(crate) const DIRECT_READ_MIN_BYTES: usize = 8 * 1024;

/// Bytes received but not yet parsed: `data[start..end]`.
pub(crate) struct RxBuf {
    data: Box<[u8]>,
    start: usize,
    end: usize,
}

impl RxBuf {
    pub fn new() -> Self {
        RxBuf {
            data: vec![0u8; RX_BUF_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }
    pub fn avail(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }
    pub fn len(&self) -> usize {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
    /// Free space to read into, moving unparsed bytes to the front when the tail is short.
    pub fn spare(&mut self) -> &mut [u8] {
        if self.end == self.data.len() || (self.start > 0 && self.data.len() - self.end < 512) {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.data[self.end..]
    }
    pub fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.data.len());
    }
}

/// Where the receive side is in the byte stream.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RxState {
    /// Waiting for a PDU header.
    Header,
    /// Receiving C2HData payload into command `cid`'s buffer at `pos`.
    Data {
        cid: u16,
        pos: usize,
        remaining: usize,
        pdu_len: u32,
        crc: u32,
        ddgst: bool,
        success: bool,
    },
    /// Waiting for the 4-byte data digest of a C2HData PDU.
    Digest { cid: u16, crc: u32, success: bool },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compaction_keeps_bytes() {
        let mut b = RxBuf::new();
        let s = b.spare();
        s[..10].copy_from_slice(b"0123456789");
        b.filled(10);
        b.consume(4);
        assert_eq!(b.avail(), b"456789");
        // Fill to the end so the next spare() must compact.
        let n = b.spare().len();
        b.filled(n);
        assert_eq!(b.len(), RX_BUF_BYTES - 4);
        b.consume(RX_BUF_BYTES - 10);
        assert_eq!(b.len(), 6);
        assert!(b.spare().len() >= RX_BUF_BYTES - 6);
        b.consume(6);
        assert!(b.is_empty());
    }
}
