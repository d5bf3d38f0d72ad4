//! A queue's byte stream: plain TCP, or TLS 1.3 with an NVMe/TCP PSK (the handshake runs
//! right after TCP connect, before ICReq).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub(crate) enum QueueStream {
    Tcp(TcpStream),
    Tls(Box<tls_psk::TlsStream<TcpStream>>),
}

impl AsyncRead for QueueStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for QueueStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write(cx, data),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Tcp(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The TLS handshake on a fresh TCP connection, within `timeout`.
pub(crate) async fn tls_connect(
    tcp: TcpStream,
    psk: &tls_psk::Psk,
    timeout: std::time::Duration,
) -> Result<QueueStream, String> {
    let config = tls_psk::ClientConfig::new(psk.clone());
    match tokio::time::timeout(timeout, tls_psk::connect(tcp, config)).await {
        Ok(Ok(s)) => Ok(QueueStream::Tls(Box::new(s))),
        Ok(Err(e)) => Err(describe(&e)),
        Err(_) => Err(format!(
            "TLS handshake timed out after {} ms",
            timeout.as_millis()
        )),
    }
}

fn describe(e: &io::Error) -> String {
    use tls_psk::{AlertDescription, TlsError};
    match tls_psk::tls_error(e) {
        Some(TlsError::PeerAlert(
            AlertDescription::UnknownPskIdentity | AlertDescription::DecryptError,
        )) => format!(
            "TLS handshake refused: the target does not accept this host's PSK (wrong key, or none configured for this host and subsystem) ({e})"
        ),
        Some(_) => format!("TLS handshake: {e}"),
        None => format!("TLS handshake: {e} (is the target's listener TLS-enabled?)"),
    }
}
