//! A TLS connection over a tokio byte stream (AsyncRead + AsyncWrite).
//!
//! Writes are encrypted into the connection's bounded outgoing buffer and pushed to the
//! transport as far as it takes them; `poll_flush` pushes the rest. Reads also push pending
//! output (KeyUpdate answers), so a reader never waits on bytes stuck in the buffer.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::config::{ClientConfig, ServerConfig};
use crate::conn::{Connection, OUTGOING_CAP};
use crate::error::TlsError;
use crate::record::{HEADER_LEN, MAX_CIPHERTEXT};

pub struct TlsStream<S> {
    io: S,
    conn: Connection,
    buf: Box<[u8]>,
    /// Gathers vectored writes.
    scratch: Vec<u8>,
    eof: bool,
    shutdown: bool,
}

/// Runs the client handshake on `io`.
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
    io: S,
    config: ClientConfig,
) -> Result<TlsStream<S>, io::Error> {
    let conn = Connection::client(config).map_err(to_io)?;
    TlsStream::handshake(io, conn).await
}

/// Runs the server handshake on `io`.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    io: S,
    config: Arc<ServerConfig>,
) -> Result<TlsStream<S>, io::Error> {
    TlsStream::handshake(io, Connection::server(config)).await
}

/// A TLS error as an I/O error (its kind: InvalidData, or UnexpectedEof for a truncation); the
/// TlsError is its source, see `tls_error`.
pub fn to_io(e: TlsError) -> io::Error {
    let kind = if e == TlsError::UnexpectedEof {
        io::ErrorKind::UnexpectedEof
    } else {
        io::ErrorKind::InvalidData
    };
    io::Error::new(kind, e)
}

/// The TLS error inside an I/O error, if it is one.
pub fn tls_error(e: &io::Error) -> Option<&TlsError> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<TlsError>())
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream<S> {
    async fn handshake(mut io: S, mut conn: Connection) -> Result<Self, io::Error> {
        let mut buf = vec![0u8; HEADER_LEN + MAX_CIPHERTEXT].into_boxed_slice();
        loop {
            if !conn.outgoing().is_empty() {
                io.write_all(conn.outgoing()).await?;
                let n = conn.outgoing().len();
                conn.consume_outgoing(n);
                io.flush().await?;
            }
            if let Some(e) = conn.error() {
                return Err(to_io(e.clone()));
            }
            if !conn.is_handshaking() {
                break;
            }
            let want = conn.incoming_space().min(buf.len());
            let n = io.read(&mut buf[..want]).await?;
            if n == 0 {
                return Err(to_io(TlsError::UnexpectedEof));
            }
            conn.feed(&buf[..n]);
            // An error leaves its alert in outgoing: sent at the top of the loop.
            let _ = conn.process();
        }
        Ok(Self {
            io,
            conn,
            buf,
            scratch: Vec::new(),
            eof: false,
            shutdown: false,
        })
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// Moves this side's sending key forward, asking the peer to do the same; sent with the
    /// next write or flush.
    pub fn key_update(&mut self) -> Result<(), io::Error> {
        self.conn.key_update(true).map_err(to_io)
    }

    /// Writes pending output until done or the transport is full.
    fn poll_push(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.conn.outgoing().is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, self.conn.outgoing()))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.conn.consume_outgoing(n);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            // Best effort: answers (KeyUpdate) and alerts go out while reading.
            if let Poll::Ready(Err(e)) = this.poll_push(cx) {
                return Poll::Ready(Err(e));
            }
            let n = this.conn.read(out.initialize_unfilled());
            if n > 0 {
                out.advance(n);
                return Poll::Ready(Ok(()));
            }
            if let Some(e) = this.conn.error() {
                return Poll::Ready(Err(to_io(e.clone())));
            }
            if this.conn.peer_closed() {
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Err(to_io(TlsError::UnexpectedEof)));
            }
            let want = this.conn.incoming_space().min(this.buf.len());
            let mut rb = ReadBuf::new(&mut this.buf[..want]);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut rb))?;
            let got = rb.filled().len();
            if got == 0 {
                this.eof = true;
            } else {
                let (conn, buf) = (&mut this.conn, &this.buf);
                conn.feed(&buf[..got]);
            }
            // Errors are sticky in the connection and reported above.
            let _ = this.conn.process();
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.conn.outgoing().len() >= OUTGOING_CAP {
            ready!(this.poll_push(cx))?;
        }
        let n = this.conn.write(data).map_err(to_io)?;
        if let Poll::Ready(Err(e)) = this.poll_push(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    /// Gathers the slices into records of up to 16 KiB (a PDU header and its data travel in
    /// one record instead of one record each).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.conn.outgoing().len() >= OUTGOING_CAP {
            ready!(this.poll_push(cx))?;
        }
        let room = OUTGOING_CAP
            .saturating_sub(this.conn.outgoing().len())
            .max(1);
        this.scratch.clear();
        for b in bufs {
            let take = b.len().min(room - this.scratch.len());
            this.scratch.extend_from_slice(&b[..take]);
            if this.scratch.len() == room {
                break;
            }
        }
        let n = this.conn.write(&this.scratch).map_err(to_io)?;
        if let Poll::Ready(Err(e)) = this.poll_push(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_push(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.shutdown {
            this.shutdown = true;
            this.conn.close();
        }
        ready!(this.poll_push(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
