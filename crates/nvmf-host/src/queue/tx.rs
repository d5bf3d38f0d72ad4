//! The transmit queue: PDU headers plus references to data that stays in the command's
//! own buffer, written with vectored writes (no copy of payload data).

use std::collections::VecDeque;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::queue::stream::QueueStream;
use nvme_proto::tcp::{DIGEST_BYTES, EncodedHeader};
use tokio::io::AsyncWrite;

use super::slots::Slots;

/// Data of a PDU: `len` bytes at `offset` in the buffer of command `cid`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DataRef {
    pub cid: u16,
    pub offset: usize,
    pub len: usize,
}

/// One PDU to send.
pub(crate) struct TxItem {
    pub hdr: EncodedHeader,
    pub data: Option<DataRef>,
    pub ddgst: Option<[u8; DIGEST_BYTES]>,
    /// Bytes of this PDU already written.
    pub sent: usize,
}

impl TxItem {
    fn total(&self) -> usize {
        self.hdr.as_bytes().len()
            + self.data.map_or(0, |d| d.len)
            + self.ddgst.map_or(0, |d| d.len())
    }
}

/// Most iovecs per write (Linux allows 1024; a few dozen cover many small PDUs).
const MAX_IOVECS: usize = 64;

pub(crate) struct TxQueue {
    items: VecDeque<TxItem>,
}

impl TxQueue {
    pub fn new(capacity: usize) -> Self {
        TxQueue {
            items: VecDeque::with_capacity(capacity),
        }
    }
    pub fn push(&mut self, item: TxItem) {
        self.items.push_back(item);
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Writes as much as the socket takes in one call. Returns the bytes written, and
    /// calls `sent` with the CID of every data-carrying PDU that is now fully out.
    pub fn poll_write(
        &mut self,
        io: &mut QueueStream,
        slots: &Slots,
        cx: &mut Context<'_>,
        mut sent: impl FnMut(u16),
    ) -> Poll<std::io::Result<usize>> {
        let empty: &[u8] = &[];
        let mut iov = [IoSlice::new(empty); MAX_IOVECS];
        let mut n = 0;
        'items: for item in &self.items {
            let mut skip = item.sent;
            let hdr = item.hdr.as_bytes();
            let data: &[u8] = match item.data {
                Some(d) => slots
                    .get(d.cid)
                    .and_then(|s| s.bytes(d.offset, d.len))
                    .unwrap_or(empty),
                None => empty,
            };
            let dg: &[u8] = item.ddgst.as_ref().map_or(empty, |d| &d[..]);
            for part in [hdr, data, dg] {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                if n == MAX_IOVECS {
                    break 'items;
                }
                iov[n] = IoSlice::new(&part[skip..]);
                skip = 0;
                n += 1;
            }
        }
        if n == 0 {
            return Poll::Ready(Ok(0));
        }
        let written = match Pin::new(io).poll_write_vectored(cx, &iov[..n]) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Ready(Ok(0)) => {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            Poll::Ready(Ok(w)) => w,
        };
        let mut left = written;
        while left > 0 {
            let Some(front) = self.items.front_mut() else {
                break;
            };
            let rest = front.total() - front.sent;
            if left < rest {
                front.sent += left;
                break;
            }
            left -= rest;
            if let Some(done) = self.items.pop_front()
                && let Some(d) = done.data
            {
                sent(d.cid);
            }
        }
        Poll::Ready(Ok(written))
    }
}
