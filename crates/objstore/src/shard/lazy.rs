//! A store that is connected in the background: [`LazyShardStore`] answers
//! [`ShardError::Unavailable`] until its connect function succeeds once, then forwards
//! every call to the store it got. A gateway starts with the stores of storage nodes that
//! are down (they count as unavailable, like any store that stops answering, and the
//! stripes written meanwhile are healed when they come) instead of refusing to start.
//!
//! Once connected, the inner store keeps itself connected (the NVMe/TCP host reconnects
//! its controllers); this wrapper only bridges the time before the first connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use blockdev::IoBuf;
use bytes::Bytes;

use super::{ShardError, ShardKey, ShardStore, StoreMode};

/// One connection attempt.
pub type ConnectFuture = Pin<Box<dyn Future<Output = Result<Arc<dyn ShardStore>, String>> + Send>>;
/// Makes a connection attempt; called again after each failure.
pub type ConnectFn = Box<dyn Fn() -> ConnectFuture + Send + Sync>;

/// Backoff between attempts: doubles from the first to the last.
const FIRST_RETRY: Duration = Duration::from_millis(200);
const LAST_RETRY: Duration = Duration::from_secs(5);

struct Shared {
    id: String,
    failure_domain: String,
    inner: OnceLock<Arc<dyn ShardStore>>,
    /// Why the last attempt failed (what callers see as the unavailable reason).
    last_error: Mutex<String>,
}

pub struct LazyShardStore {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl LazyShardStore {
    /// Starts connecting in the background (must run inside a tokio runtime). The store
    /// the connect function returns must have this `id` and `failure_domain`.
    pub fn connect(
        id: impl Into<String>,
        failure_domain: impl Into<String>,
        connect: ConnectFn,
    ) -> LazyShardStore {
        let shared = Arc::new(Shared {
            id: id.into(),
            failure_domain: failure_domain.into(),
            inner: OnceLock::new(),
            last_error: Mutex::new("not connected yet".to_string()),
        });
        let task = tokio::spawn(connect_loop(shared.clone(), connect));
        LazyShardStore { shared, task }
    }

    /// Whether the first connection was made.
    pub fn is_connected(&self) -> bool {
        self.shared.inner.get().is_some()
    }

    /// Waits up to `timeout` for the first connection; false if it did not come.
    pub async fn wait_connected(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.is_connected() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    fn inner(&self) -> Result<&Arc<dyn ShardStore>, ShardError> {
        self.shared.inner.get().ok_or_else(|| {
            let why = self
                .shared
                .last_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            ShardError::Unavailable(format!("store {} not connected: {why}", self.shared.id))
        })
    }
}

impl Drop for LazyShardStore {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn connect_loop(shared: Arc<Shared>, connect: ConnectFn) {
    let mut wait = FIRST_RETRY;
    let mut attempts = 0u64;
    loop {
        attempts += 1;
        match connect().await {
            Ok(store) => {
                if store.id() != shared.id || store.failure_domain() != shared.failure_domain {
                    // A wiring error, not a transient one: say so and keep failing calls.
                    let why = format!(
                        "connected to store {} in {}, expected {} in {}",
                        store.id(),
                        store.failure_domain(),
                        shared.id,
                        shared.failure_domain
                    );
                    tracing::error!(store = %shared.id, "{why}");
                    *shared
                        .last_error
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = why;
                    return;
                }
                if attempts > 1 {
                    tracing::info!(store = %shared.id, attempts, "shard store connected");
                }
                let _ = shared.inner.set(store);
                return;
            }
            Err(e) => {
                // The first failure and then every 10th: a node that is down for long
                // does not flood the log.
                if attempts == 1 || attempts.is_multiple_of(10) {
                    tracing::warn!(store = %shared.id, attempts, "connecting shard store: {e}; retrying");
                }
                *shared
                    .last_error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = e;
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(LAST_RETRY);
    }
}

#[async_trait]
impl ShardStore for LazyShardStore {
    fn id(&self) -> &str {
        &self.shared.id
    }

    fn failure_domain(&self) -> &str {
        &self.shared.failure_domain
    }

    async fn store(&self, key: ShardKey, value: Bytes, mode: StoreMode) -> Result<(), ShardError> {
        self.inner()?.store(key, value, mode).await
    }

    async fn retrieve(&self, key: ShardKey, buf: &mut [u8]) -> Result<usize, ShardError> {
        self.inner()?.retrieve(key, buf).await
    }

    async fn store_buf(
        &self,
        key: ShardKey,
        value: IoBuf,
        mode: StoreMode,
    ) -> Result<(), ShardError> {
        self.inner()?.store_buf(key, value, mode).await
    }

    async fn retrieve_value(
        &self,
        key: ShardKey,
        max: usize,
    ) -> Result<(Bytes, usize), ShardError> {
        self.inner()?.retrieve_value(key, max).await
    }

    async fn delete(&self, key: ShardKey) -> Result<(), ShardError> {
        self.inner()?.delete(key).await
    }

    async fn exist(&self, key: ShardKey) -> Result<bool, ShardError> {
        self.inner()?.exist(key).await
    }

    async fn list(&self, from: ShardKey, max: usize) -> Result<Vec<ShardKey>, ShardError> {
        self.inner()?.list(from, max).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::shard::MemShardStore;

    fn key(b: u8) -> ShardKey {
        ShardKey([b; 16])
    }

    #[tokio::test]
    async fn unavailable_with_the_reason_until_connected_then_forwards() {
        let mem = Arc::new(MemShardStore::new("s1", "n1"));
        let attempts = Arc::new(AtomicUsize::new(0));
        let (a, m) = (attempts.clone(), mem.clone());
        let lazy = LazyShardStore::connect(
            "s1",
            "n1",
            Box::new(move || {
                let n = a.fetch_add(1, Ordering::SeqCst);
                let m = m.clone();
                Box::pin(async move {
                    if n < 2 {
                        Err(format!("node down (attempt {n})"))
                    } else {
                        Ok(m as Arc<dyn ShardStore>)
                    }
                })
            }),
        );
        let e = lazy
            .store(key(1), Bytes::from_static(b"v"), StoreMode::Upsert)
            .await
            .expect_err("not connected");
        assert!(e.is_unavailable(), "{e}");
        assert!(lazy.wait_connected(Duration::from_secs(5)).await);
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
        lazy.store(key(1), Bytes::from_static(b"value"), StoreMode::Upsert)
            .await
            .expect("store");
        let mut buf = [0u8; 16];
        assert_eq!(lazy.retrieve(key(1), &mut buf).await.expect("get"), 5);
        assert_eq!(&buf[..5], b"value");
        assert!(mem.exist(key(1)).await.expect("exist"));
        assert_eq!(lazy.list(ShardKey::MIN, 10).await.expect("list"), [key(1)]);
        lazy.delete(key(1)).await.expect("delete");
        assert!(!lazy.exist(key(1)).await.expect("exist"));
    }

    #[tokio::test]
    async fn a_store_of_another_id_is_refused() {
        let lazy = LazyShardStore::connect(
            "s1",
            "n1",
            Box::new(|| {
                Box::pin(async {
                    Ok(Arc::new(MemShardStore::new("s2", "n1")) as Arc<dyn ShardStore>)
                })
            }),
        );
        assert!(!lazy.wait_connected(Duration::from_millis(300)).await);
        let e = lazy.exist(key(1)).await.expect_err("wrong store");
        assert!(e.to_string().contains("expected s1"), "{e}");
    }
}
