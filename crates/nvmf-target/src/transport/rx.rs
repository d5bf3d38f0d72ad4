//! Receive buffer: bytes read from the socket, parsed into PDUs in place.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

pub(crate) struct RxBuf {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl RxBuf {
    /// `capacity` must hold the largest PDU the connection accepts.
    pub fn new(capacity: usize) -> Self {
        RxBuf {
            buf: vec![0u8; capacity].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads more bytes, first moving pending bytes to the front when the tail is short.
    /// Ready(Ok(0)) means end of stream (or no room, which callers prevent by sizing).
    pub fn poll_fill<S: AsyncRead + Unpin>(
        &mut self,
        io: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<usize>> {
        if self.buf.len() - self.end < self.buf.len() / 4 && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let spare = &mut self.buf[self.end..];
        if spare.is_empty() {
            return Poll::Ready(Err(std::io::Error::other("receive buffer full")));
        }
        let mut rb = ReadBuf::new(spare);
        match Pin::new(io).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                self.end += n;
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Enlarges the buffer to `capacity` bytes, keeping the pending bytes (no-op when it
    /// is that large already).
    pub fn grow(&mut self, capacity: usize) {
        if capacity <= self.buf.len() {
            return;
        }
        let mut b = vec![0u8; capacity].into_boxed_slice();
        let n = self.end - self.start;
        b[..n].copy_from_slice(&self.buf[self.start..self.end]);
        self.buf = b;
        self.start = 0;
        self.end = n;
    }

    /// Whether a PDU of `total` bytes can fit once pending bytes are compacted.
    pub fn fits(&self, total: usize) -> bool {
        total <= self.buf.len()
    }

    /// Makes sure `total` bytes from `start` fit without wrapping: compacts if needed.
    pub fn make_room(&mut self, total: usize) {
        if self.start + total > self.buf.len() && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grow_keeps_pending_bytes() {
        let mut rx = RxBuf::new(8);
        rx.buf.copy_from_slice(b"abcdefgh");
        rx.end = 8;
        rx.consume(3);
        rx.grow(64);
        assert_eq!(rx.buf.len(), 64);
        assert_eq!(rx.data(), b"defgh");
        rx.grow(16);
        assert_eq!(rx.buf.len(), 64, "never shrinks");
    }
}
