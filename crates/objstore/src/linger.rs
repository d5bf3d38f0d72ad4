//! Lingering close for the gateway's connections.
//!
//! A gateway often answers before it has read the request body: a PUT to a bucket that
//! does not exist, an upload part with a bad upload id, a client that waited out its
//! `Expect: 100-continue` and sent the body anyway. hyper then closes the connection. If
//! the rest of the body is still arriving (or sits unread in the socket), closing sends
//! the client a TCP reset, and a reset makes the client's kernel throw away the answer it
//! has not read yet: the client sees the status line but no error body (boto3 reported
//! `(404, '404')` instead of `NoSuchUpload`). So, like nginx's `lingering_close`, shutting
//! the connection down first sends our FIN and then reads and discards what the client
//! still sends, until it closes its side, for at most [`LINGER_MS`] and
//! [`LINGER_MAX_BYTES`].

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How long a closing connection keeps reading what the client still sends.
pub const LINGER_MS: u64 = 2_000;
/// How much a closing connection reads and discards at most.
pub const LINGER_MAX_BYTES: u64 = 8 << 20;

enum Closing {
    Open,
    /// Our FIN is sent; discarding what arrives until EOF, the deadline or the limit.
    Draining {
        deadline: Pin<Box<tokio::time::Sleep>>,
        discarded_bytes: u64,
    },
    Done,
}

/// An I/O stream whose shutdown lingers (see the module documentation).
pub struct LingeringIo<T> {
    inner: T,
    closing: Closing,
}

impl<T> LingeringIo<T> {
    pub fn new(inner: T) -> LingeringIo<T> {
        LingeringIo {
            inner,
            closing: Closing::Open,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for LingeringIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for LingeringIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            match &mut this.closing {
                Closing::Open => {
                    ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
                    this.closing = Closing::Draining {
                        deadline: Box::pin(tokio::time::sleep(Duration::from_millis(LINGER_MS))),
                        discarded_bytes: 0,
                    };
                }
                Closing::Draining {
                    deadline,
                    discarded_bytes,
                } => {
                    if deadline.as_mut().poll(cx).is_ready() || *discarded_bytes >= LINGER_MAX_BYTES
                    {
                        this.closing = Closing::Done;
                        continue;
                    }
                    let mut scratch = [0u8; 8192];
                    let mut buf = ReadBuf::new(&mut scratch);
                    match ready!(Pin::new(&mut this.inner).poll_read(cx, &mut buf)) {
                        Ok(()) if buf.filled().is_empty() => this.closing = Closing::Done,
                        Ok(()) => *discarded_bytes += buf.filled().len() as u64,
                        // The client reset or vanished: nothing left to protect.
                        Err(_) => this.closing = Closing::Done,
                    }
                }
                Closing::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The server answers without reading the request body, then closes; the client is
    /// still sending. With a lingering close the client reads the whole answer.
    #[tokio::test]
    async fn answer_survives_unread_request_bytes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.expect("accept");
            let mut io = LingeringIo::new(socket);
            let mut head = [0u8; 4];
            io.read_exact(&mut head).await.expect("head");
            // Let the rest of the "body" arrive unread, then answer and close.
            tokio::time::sleep(Duration::from_millis(100)).await;
            io.write_all(&[7u8; 64 * 1024]).await.expect("answer");
            io.shutdown().await.expect("shutdown");
        });
        let mut client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        client.write_all(&[1u8; 4]).await.expect("head");
        client.write_all(&[2u8; 32 * 1024]).await.expect("body");
        tokio::time::sleep(Duration::from_millis(300)).await;
        // More body after the server has answered: a plain close would reset here.
        let _ = client.write_all(&[3u8; 1024]).await;
        let mut answer = Vec::new();
        client
            .read_to_end(&mut answer)
            .await
            .expect("the whole answer, no reset");
        assert_eq!(answer.len(), 64 * 1024);
        assert!(answer.iter().all(|b| *b == 7));
        server.await.expect("server");
    }

    /// A client that never closes does not hold the connection beyond the linger time.
    #[tokio::test]
    async fn linger_is_bounded_in_time() {
        let (a, _b) = tokio::io::duplex(1024);
        let mut io = LingeringIo::new(a);
        let started = std::time::Instant::now();
        io.shutdown().await.expect("shutdown");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(LINGER_MS), "{took:?}");
        assert!(took < Duration::from_millis(LINGER_MS + 5_000), "{took:?}");
    }
}
