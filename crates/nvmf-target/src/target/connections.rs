//! The registry of live connections: each connection task registers its handle, so
//! shutdown can close them all and the metrics can list them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::sync::lock;
use crate::target::{ListenerInfo, ListenerOptions, Target, TargetInner};
use crate::transport::handle::ConnHandle;

/// Live connections by ID.
pub(crate) struct ConnRegistry {
    conns: Mutex<HashMap<u64, Arc<ConnHandle>>>,
    next_id: AtomicU64,
    live: AtomicUsize,
    /// Notified when the last connection is gone.
    gone: Notify,
}

impl Default for ConnRegistry {
    fn default() -> Self {
        ConnRegistry {
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            live: AtomicUsize::new(0),
            gone: Notify::new(),
        }
    }
}

impl ConnRegistry {
    /// The handles of every live connection.
    pub fn handles(&self) -> Vec<Arc<ConnHandle>> {
        lock(&self.conns).values().cloned().collect()
    }

    /// Calls `f` on every live connection's handle (under the registry's lock).
    pub fn for_each(&self, mut f: impl FnMut(&ConnHandle)) {
        for c in lock(&self.conns).values() {
            f(c);
        }
    }

    pub fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// Resolves once no connection is left.
    async fn all_gone(&self) {
        loop {
            let gone = self.gone.notified();
            if self.live() == 0 {
                return;
            }
            gone.await;
        }
    }
}

impl TargetInner {
    pub fn register_conn(&self, peer: String, local: String) -> Arc<ConnHandle> {
        let r = &self.conns;
        let id = r.next_id.fetch_add(1, Ordering::Relaxed);
        let h = Arc::new(ConnHandle::new(id, peer, local));
        lock(&r.conns).insert(id, h.clone());
        r.live.fetch_add(1, Ordering::AcqRel);
        h
    }

    pub fn unregister_conn(&self, h: &ConnHandle) {
        let r = &self.conns;
        lock(&r.conns).remove(&h.id);
        let busy = h.counters.busy_us.load(Ordering::Relaxed);
        self.health
            .closed_busy_us
            .fetch_add(busy, Ordering::Relaxed);
        if r.live.fetch_sub(1, Ordering::AcqRel) == 1 {
            r.gone.notify_waiters();
        }
    }
}

impl Target {
    /// connection tasks to end.
    pub async fn shutdown(&self, timeout: Duration) {
        self.inner.shutting_down.store(true, Ordering::Release);
        if let Some(t) = lock(&self.inner.qos_controller).take() {
            t.abort();
        }
        let ls: Vec<_> = lock(&self.inner.listeners).drain(..).collect();
        for l in ls {
            l.stopped.store(true, Ordering::Release);
            l.stop.notify_one();
        }
        for c in self.inner.conns.handles() {
            c.kill();
        }
        let _ = tokio::time::timeout(timeout, self.inner.conns.all_gone()).await;
    }

    /// Closes every open connection now, without a word to the hosts and without waiting
    /// for the connection tasks to end: what the process dying does to them (their hosts
    /// see the TCP connection end). Listeners stay open.
    pub fn close_connections(&self) {
        for c in self.inner.conns.handles() {
            c.kill();
        }
    }

    /// Number of open connections.
    pub fn connection_count(&self) -> usize {
        self.inner.conns.live()
    }

    /// Serves one connection over any byte stream (used by tests and fuzzing).
    pub async fn serve_stream<S>(&self, stream: S, local: SocketAddr)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let info = Arc::new(ListenerInfo::new(0, local, ListenerOptions::default()));
        let h = self.inner.register_conn("stream".into(), local.to_string());
        crate::transport::conn::serve(self.inner.clone(), stream, info, local, h.clone()).await;
        self.inner.unregister_conn(&h);
    }
}
