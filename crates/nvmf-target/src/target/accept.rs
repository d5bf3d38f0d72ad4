//! The accept loop of a listener: one connection task per accepted socket that the
//! connection limits admit (`admission`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::target::{ListenerInfo, Target};

impl Target {
    pub(super) async fn accept_loop(self, listener: TcpListener, info: Arc<ListenerInfo>) {
        let tls = info
            .opts
            .tls
            .then(|| super::tls::server_config(&self.inner));
        loop {
            let accepted = tokio::select! {
                r = listener.accept() => r,
                _ = info.stop.notified() => return,
            };
            if info.stopped.load(Ordering::Acquire)
                || self.inner.shutting_down.load(Ordering::Acquire)
            {
                return;
            }
            match accepted {
                Ok((sock, peer)) => {
                    let Some(ticket) = self.inner.admit(&info, peer) else {
                        // Over a limit: closed at once, nothing read or allocated.
                        drop(sock);
                        continue;
                    };
                    let _ = sock.set_nodelay(true);
                    let local = sock.local_addr().unwrap_or(info.addr);
                    let h = self
                        .inner
                        .register_conn(peer.to_string(), local.to_string());
                    let inner = self.inner.clone();
                    let li = info.clone();
                    let tls = tls.clone();
                    tokio::spawn(async move {
                        match tls {
                            None => {
                                crate::transport::conn::serve(
                                    inner.clone(),
                                    sock,
                                    li,
                                    local,
                                    h.clone(),
                                )
                                .await
                            }
                            Some(cfg) => {
                                if let Some(stream) = tls_handshake(&inner, sock, cfg, peer).await {
                                    if let Some(id) = super::tls::peer_identity(&stream) {
                                        let _ = h.tls_identity.set(id);
                                    }
                                    crate::transport::conn::serve(
                                        inner.clone(),
                                        stream,
                                        li,
                                        local,
                                        h.clone(),
                                    )
                                    .await
                                }
                            }
                        }
                        inner.unregister_conn(&h);
                        drop(ticket);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    // EMFILE and friends: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// The TLS handshake of a connection to a TLS listener, within the handshake timeout. A
/// failure (no or a wrong PSK, a plain NVMe/TCP host, garbage) is logged and ends only this
/// connection.
async fn tls_handshake(
    inner: &crate::target::TargetInner,
    sock: tokio::net::TcpStream,
    cfg: Arc<tls_psk::ServerConfig>,
    peer: std::net::SocketAddr,
) -> Option<tls_psk::TlsStream<tokio::net::TcpStream>> {
    let timeout = Duration::from_millis(u64::from(inner.config.handshake_timeout_ms));
    match tokio::time::timeout(timeout, tls_psk::accept(sock, cfg)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            tracing::warn!(%peer, error = %e, "TLS handshake refused; the host needs the PSK configured for it (node host allow --tls-psk)");
            None
        }
        Err(_) => {
            tracing::warn!(%peer, timeout_ms = inner.config.handshake_timeout_ms, "TLS handshake timed out");
            None
        }
    }
}
