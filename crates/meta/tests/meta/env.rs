//! One test environment per backend, so that the same cases run against each.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use futures::StreamExt;
use meta::testing::EtcdServer;
use meta::{
    Clock, EmbeddedOptions, EmbeddedStore, EtcdOptions, KeyValue, Lease, LeaseId, Listing,
    ManualClock, MetaError, MetaFuture, MetaStore, Revision, SystemClock, Txn, TxnOutcome,
    WatchBatch, WatchStream,
};

/// Longest real wait for anything a test expects to happen.
pub const PATIENCE: Duration = Duration::from_secs(20);
/// Virtual time per step when a manual clock is advanced.
const MANUAL_STEP: Duration = Duration::from_millis(20);
/// Real time given to tasks between manual steps.
const MANUAL_STEP_REAL: Duration = Duration::from_millis(3);

pub struct Env {
    pub store: Arc<dyn MetaStore>,
    pub clock: Arc<dyn Clock>,
    manual: Option<Arc<ManualClock>>,
    pub etcd: Option<EtcdServer>,
    _dir: Option<tempfile::TempDir>,
    /// A lease TTL this backend grants exactly and that leaves the keeper room to work.
    pub ttl_ms: u64,
}

impl Env {
    pub async fn embedded_manual() -> Self {
        let manual = Arc::new(ManualClock::new());
        let mut env = Self::embedded(manual.clone(), 3000).await;
        env.manual = Some(manual);
        env
    }

    pub async fn embedded_system() -> Self {
        Self::embedded(Arc::new(SystemClock::new()), 1000).await
    }

    async fn embedded(clock: Arc<dyn Clock>, ttl_ms: u64) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = EmbeddedOptions {
            clock: clock.clone(),
            ..EmbeddedOptions::default()
        };
        let store = EmbeddedStore::open(dir.path(), options)
            .await
            .expect("open embedded store");
        Self {
            store: Arc::new(store),
            clock,
            manual: None,
            etcd: None,
            _dir: Some(dir),
            ttl_ms,
        }
    }

    pub async fn etcd() -> Self {
        let server = EtcdServer::start().await.unwrap_or_else(|e| {
            panic!("cannot start the test etcd server: {e}");
        });
        let store = server.store(etcd_options()).await.expect("connect to etcd");
        Self {
            store: Arc::new(store),
            clock: Arc::new(SystemClock::new()),
            manual: None,
            etcd: Some(server),
            _dir: None,
            ttl_ms: 2000,
        }
    }

    /// Another client of the same store, as another node would have (etcd: a separate
    /// connection; embedded: the same process-wide store).
    pub async fn client(&self) -> Arc<dyn MetaStore> {
        match &self.etcd {
            Some(server) => Arc::new(server.store(etcd_options()).await.expect("connect")),
            None => self.store.clone(),
        }
    }

    /// Lets `d` of clock time pass: in steps on a manual clock (giving tasks real time to
    /// react after each), or really.
    pub async fn pass(&self, d: Duration) {
        match &self.manual {
            Some(clock) => {
                let mut left = d;
                while !left.is_zero() {
                    let step = left.min(MANUAL_STEP);
                    clock.advance(step);
                    left -= step;
                    tokio::time::sleep(MANUAL_STEP_REAL).await;
                }
            }
            None => tokio::time::sleep(d).await,
        }
    }

    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

pub fn etcd_options() -> EtcdOptions {
    EtcdOptions {
        request_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_millis(500),
        reconnect_max: Duration::from_millis(200),
    }
}

/// The next batch of a watch, failing the test after [`PATIENCE`].
pub async fn next_batch(stream: &mut WatchStream) -> WatchBatch {
    match tokio::time::timeout(PATIENCE, stream.next()).await {
        Ok(Some(Ok(batch))) => batch,
        Ok(Some(Err(e))) => panic!("watch failed: {e}"),
        Ok(None) => panic!("watch ended"),
        Err(_) => panic!("no watch event within {PATIENCE:?}"),
    }
}

/// Asserts that nothing arrives on the watch for a short while.
pub async fn assert_quiet(stream: &mut WatchStream) {
    if let Ok(item) = tokio::time::timeout(Duration::from_millis(300), stream.next()).await {
        panic!("unexpected watch item: {item:?}");
    }
}

pub fn committed_revision(outcome: TxnOutcome) -> Revision {
    match outcome {
        TxnOutcome::Committed { revision, .. } => revision,
        TxnOutcome::Failed { current } => panic!("txn failed: {current:?}"),
    }
}

/// A store as seen from a node whose link can be cut: once cut, every call fails at once
/// (`Fail`) or never returns (`Hang`), like a refused or a black-holed connection.
pub struct Partitionable {
    inner: Arc<dyn MetaStore>,
    mode: AtomicU8,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Link {
    Up = 0,
    Fail = 1,
    Hang = 2,
}

impl Partitionable {
    pub fn new(inner: Arc<dyn MetaStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            mode: AtomicU8::new(Link::Up as u8),
        })
    }

    pub fn set(&self, link: Link) {
        self.mode.store(link as u8, Ordering::SeqCst);
    }

    fn gate<'a, T: Send + 'a>(&self, call: MetaFuture<'a, T>) -> MetaFuture<'a, T> {
        match self.mode.load(Ordering::SeqCst) {
            0 => call,
            1 => Box::pin(async { Err(MetaError::Unavailable("link cut".into())) }),
            _ => Box::pin(std::future::pending()),
        }
    }
}

impl MetaStore for Partitionable {
    fn get<'a>(&'a self, key: &'a str) -> MetaFuture<'a, Option<KeyValue>> {
        self.gate(self.inner.get(key))
    }
    fn list<'a>(&'a self, prefix: &'a str) -> MetaFuture<'a, Listing> {
        self.gate(self.inner.list(prefix))
    }
    fn txn(&self, txn: Txn) -> MetaFuture<'_, TxnOutcome> {
        self.gate(self.inner.txn(txn))
    }
    fn watch<'a>(&'a self, prefix: &'a str, from: Revision) -> MetaFuture<'a, WatchStream> {
        self.gate(self.inner.watch(prefix, from))
    }
    fn compact(&self, revision: Revision) -> MetaFuture<'_, ()> {
        self.gate(self.inner.compact(revision))
    }
    fn grant_lease(&self, ttl_ms: u64) -> MetaFuture<'_, Lease> {
        self.gate(self.inner.grant_lease(ttl_ms))
    }
    fn keep_alive(&self, lease: LeaseId) -> MetaFuture<'_, u64> {
        self.gate(self.inner.keep_alive(lease))
    }
    fn revoke_lease(&self, lease: LeaseId) -> MetaFuture<'_, bool> {
        self.gate(self.inner.revoke_lease(lease))
    }
}

/// A loopback TCP proxy whose link can be cut (open connections reset, new ones refused)
/// and restored, to break a client's connections while the server stays up.
pub struct Proxy {
    pub addr: std::net::SocketAddr,
    up: Arc<std::sync::atomic::AtomicBool>,
    conns: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let up = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let conns: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let accept = {
            let (up, conns) = (up.clone(), conns.clone());
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if !up.load(Ordering::SeqCst) {
                        continue; // dropped: refused
                    }
                    let conn = tokio::spawn(async move {
                        if let Ok(mut server) = tokio::net::TcpStream::connect(target).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    conns.lock().expect("conns").push(conn);
                }
            })
        };
        Self {
            addr,
            up,
            conns,
            accept,
        }
    }

    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for conn in self.conns.lock().expect("conns").drain(..) {
            conn.abort();
        }
    }

    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}
