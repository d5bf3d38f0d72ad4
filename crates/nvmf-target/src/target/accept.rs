//! The accept loop of a listener: one connection task per accepted socket that the
//! connection limits admit (`admission`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::target::{ListenerInfo, Target};

impl Target {
    pub(super) async fn accept_loop(self, listener: TcpListener, info: Arc<ListenerInfo>) {
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
                    tokio::spawn(async move {
                        crate::transport::conn::serve(inner.clone(), sock, li, local, h.clone())
                            .await;
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
