//! Send queue: PDU headers, digests and data buffers written with one vectored write per
//! batch. Data buffers are referenced, not copied, and go back to the connection's pool
//! once sent.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use blockdev::IoBuf;
use tokio::io::AsyncWrite;

use crate::pool::BufPool;

const INLINE_BYTES: usize = 64;
const MAX_IOV: usize = 64;

enum Seg {
    Inline {
        b: [u8; INLINE_BYTES],
        len: u8,
        pos: u8,
    },
    Owned {
        v: Vec<u8>,
        pos: usize,
    },
    Buf {
        id: u32,
        start: u32,
        end: u32,
    },
}

struct Held {
    buf: Option<IoBuf>,
    refs: u32,
}

pub(crate) struct TxQueue {
    segs: VecDeque<Seg>,
    held: Vec<Held>,
    free_held: Vec<u32>,
    queued_bytes: usize,
}

impl TxQueue {
    pub fn new() -> Self {
        TxQueue {
            segs: VecDeque::new(),
            held: Vec::new(),
            free_held: Vec::new(),
            queued_bytes: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Queues a copy of small bytes (headers, digests).
    pub fn push_bytes(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.queued_bytes += bytes.len();
        if bytes.len() <= INLINE_BYTES {
            let mut b = [0u8; INLINE_BYTES];
            b[..bytes.len()].copy_from_slice(bytes);
            self.segs.push_back(Seg::Inline {
                b,
                len: bytes.len() as u8,
                pos: 0,
            });
        } else {
            self.segs.push_back(Seg::Owned {
                v: bytes.to_vec(),
                pos: 0,
            });
        }
    }

    pub fn push_vec(&mut self, v: Vec<u8>) {
        if v.is_empty() {
            return;
        }
        self.queued_bytes += v.len();
        self.segs.push_back(Seg::Owned { v, pos: 0 });
    }

    /// Takes ownership of `buf` for sending; returns a handle for [`TxQueue::push_buf_range`].
    /// The buffer goes back to the pool after the last range referencing it is sent.
    pub fn hold(&mut self, buf: IoBuf) -> u32 {
        let h = Held {
            buf: Some(buf),
            refs: 1,
        };
        match self.free_held.pop() {
            Some(id) => {
                self.held[id as usize] = h;
                id
            }
            None => {
                self.held.push(h);
                (self.held.len() - 1) as u32
            }
        }
    }

    pub fn held_slice(&self, id: u32, start: usize, end: usize) -> &[u8] {
        self.held
            .get(id as usize)
            .and_then(|h| h.buf.as_ref())
            .and_then(|b| b.get(start..end))
            .unwrap_or(&[])
    }

    pub fn push_buf_range(&mut self, id: u32, start: usize, end: usize) {
        if end <= start {
            return;
        }
        if let Some(h) = self.held.get_mut(id as usize) {
            h.refs += 1;
            self.queued_bytes += end - start;
            self.segs.push_back(Seg::Buf {
                id,
                start: start as u32,
                end: end as u32,
            });
        }
    }

    /// Drops the holder's own reference taken by [`TxQueue::hold`].
    pub fn release(&mut self, id: u32, pool: &mut BufPool) {
        self.unref(id, pool);
    }

    fn unref(&mut self, id: u32, pool: &mut BufPool) {
        let Some(h) = self.held.get_mut(id as usize) else {
            return;
        };
        h.refs = h.refs.saturating_sub(1);
        if h.refs == 0 {
            if let Some(b) = h.buf.take() {
                pool.put(b);
            }
            self.free_held.push(id);
        }
    }

    /// Writes queued bytes until done or the socket would block.
    pub fn poll_flush<S: AsyncWrite + Unpin>(
        &mut self,
        io: &mut S,
        cx: &mut Context<'_>,
        pool: &mut BufPool,
    ) -> Poll<std::io::Result<()>> {
        while !self.segs.is_empty() {
            let n = {
                let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
                let mut k = 0;
                for s in self.segs.iter().take(MAX_IOV) {
                    let bytes: &[u8] = match s {
                        Seg::Inline { b, len, pos } => &b[*pos as usize..*len as usize],
                        Seg::Owned { v, pos } => &v[*pos..],
                        Seg::Buf { id, start, end } => self
                            .held
                            .get(*id as usize)
                            .and_then(|h| h.buf.as_ref())
                            .and_then(|b| b.get(*start as usize..*end as usize))
                            .unwrap_or(&[]),
                    };
                    iov[k] = IoSlice::new(bytes);
                    k += 1;
                }
                match Pin::new(&mut *io).poll_write_vectored(cx, &iov[..k]) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                    }
                    Poll::Ready(Ok(n)) => n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            };
            self.advance(n, pool);
        }
        Poll::Ready(Ok(()))
    }

    fn advance(&mut self, mut n: usize, pool: &mut BufPool) {
        self.queued_bytes = self.queued_bytes.saturating_sub(n);
        while n > 0 {
            let Some(front) = self.segs.front_mut() else {
                return;
            };
            let (left, done_id) = match front {
                Seg::Inline { len, pos, .. } => {
                    let left = (*len - *pos) as usize;
                    let take = left.min(n);
                    *pos += take as u8;
                    n -= take;
                    (left - take, None)
                }
                Seg::Owned { v, pos } => {
                    let left = v.len() - *pos;
                    let take = left.min(n);
                    *pos += take;
                    n -= take;
                    (left - take, None)
                }
                Seg::Buf { id, start, end } => {
                    let left = (*end - *start) as usize;
                    let take = left.min(n);
                    *start += take as u32;
                    n -= take;
                    (left - take, Some(*id))
                }
            };
            if left == 0 {
                self.segs.pop_front();
                if let Some(id) = done_id {
                    self.unref(id, pool);
                }
            }
        }
        // Drop empty segments at the front (zero-length slices never occur, but be safe).
        while let Some(Seg::Inline { len, pos, .. }) = self.segs.front() {
            if len == pos {
                self.segs.pop_front();
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_everything_in_order() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let mut q = TxQueue::new();
        let mut pool = BufPool::new();
        q.push_bytes(b"hdr1");
        let id = q.hold(IoBuf::from_slice(&[7u8; 300]));
        q.push_buf_range(id, 0, 100);
        q.push_bytes(&[1u8; 100]);
        q.push_buf_range(id, 100, 300);
        q.release(id, &mut pool);
        let expect: Vec<u8> = b"hdr1"
            .iter()
            .copied()
            .chain([7u8; 100])
            .chain([1u8; 100])
            .chain([7u8; 200])
            .collect();
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; expect.len()];
            tokio::io::AsyncReadExt::read_exact(&mut b, &mut got)
                .await
                .unwrap();
            assert_eq!(got, expect);
        });
        std::future::poll_fn(|cx| q.poll_flush(&mut a, cx, &mut pool))
            .await
            .unwrap();
        reader.await.unwrap();
        assert!(q.is_empty());
        assert_eq!(q.queued_bytes(), 0);
        // The buffer went back to the pool.
        assert_eq!(pool.get(4096).len(), 4096);
    }
}
