//! Fault injection around any store: down (every call is Unavailable), slow (a delay
//! before every call), corrupt (retrieved values get one byte flipped). The faults are
//! switched at run time through a shared [`Faults`] handle, e.g. to kill a store in the
//! middle of a load.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use blockdev::IoBuf;
use bytes::Bytes;

use super::{ShardError, ShardKey, ShardStore, StoreMode};

/// The switches of one [`FaultyShardStore`].
#[derive(Default, Debug)]
pub struct Faults {
    down: AtomicBool,
    corrupt_reads: AtomicBool,
    delay_ms: AtomicU64,
    calls: AtomicU64,
}

impl Faults {
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    pub fn set_corrupt_reads(&self, corrupt: bool) {
        self.corrupt_reads.store(corrupt, Ordering::SeqCst);
    }

    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(
            delay.as_millis().try_into().unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    /// Calls that reached the store (including refused ones).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

pub struct FaultyShardStore {
    inner: Arc<dyn ShardStore>,
    faults: Arc<Faults>,
}

impl FaultyShardStore {
    pub fn new(inner: Arc<dyn ShardStore>) -> Self {
        FaultyShardStore {
            inner,
            faults: Arc::new(Faults::default()),
        }
    }

    pub fn faults(&self) -> Arc<Faults> {
        self.faults.clone()
    }

    /// The wrapped store, reachable around the faults (to inspect or damage it).
    pub fn inner(&self) -> &Arc<dyn ShardStore> {
        &self.inner
    }

    async fn enter(&self) -> Result<(), ShardError> {
        self.faults.calls.fetch_add(1, Ordering::SeqCst);
        let delay_ms = self.faults.delay_ms.load(Ordering::SeqCst);
        if delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
        if self.faults.is_down() {
            return Err(ShardError::Unavailable(format!(
                "shard store {} is down (injected)",
                self.inner.id()
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl ShardStore for FaultyShardStore {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn failure_domain(&self) -> &str {
        self.inner.failure_domain()
    }

    async fn store(&self, key: ShardKey, value: Bytes, mode: StoreMode) -> Result<(), ShardError> {
        self.enter().await?;
        self.inner.store(key, value, mode).await
    }

    async fn retrieve(&self, key: ShardKey, buf: &mut [u8]) -> Result<usize, ShardError> {
        self.enter().await?;
        let size = self.inner.retrieve(key, buf).await?;
        let copied = size.min(buf.len());
        if self.faults.corrupt_reads.load(Ordering::SeqCst) && copied > 0 {
            buf[copied / 2] ^= 0x5a;
        }
        Ok(size)
    }

    async fn store_buf(
        &self,
        key: ShardKey,
        value: IoBuf,
        mode: StoreMode,
    ) -> Result<(), ShardError> {
        self.enter().await?;
        self.inner.store_buf(key, value, mode).await
    }

    async fn retrieve_value(
        &self,
        key: ShardKey,
        max: usize,
    ) -> Result<(Bytes, usize), ShardError> {
        self.enter().await?;
        let (value, size) = self.inner.retrieve_value(key, max).await?;
        if self.faults.corrupt_reads.load(Ordering::SeqCst) && !value.is_empty() {
            let mut bad = value.to_vec();
            let at = bad.len() / 2;
            bad[at] ^= 0x5a;
            return Ok((Bytes::from(bad), size));
        }
        Ok((value, size))
    }

    async fn delete(&self, key: ShardKey) -> Result<(), ShardError> {
        self.enter().await?;
        self.inner.delete(key).await
    }

    async fn exist(&self, key: ShardKey) -> Result<bool, ShardError> {
        self.enter().await?;
        self.inner.exist(key).await
    }

    async fn list(&self, from: ShardKey, max: usize) -> Result<Vec<ShardKey>, ShardError> {
        self.enter().await?;
        self.inner.list(from, max).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::MemShardStore;

    #[tokio::test]
    async fn down_refuses_and_corrupt_flips_a_byte() {
        let store = FaultyShardStore::new(Arc::new(MemShardStore::new("m", "d")));
        let faults = store.faults();
        let k = ShardKey([3; 16]);
        store
            .store(k, Bytes::from_static(b"abcd"), StoreMode::Upsert)
            .await
            .expect("store");
        faults.set_down(true);
        assert!(matches!(
            store.exist(k).await,
            Err(ShardError::Unavailable(_))
        ));
        faults.set_down(false);
        faults.set_corrupt_reads(true);
        let mut buf = [0u8; 4];
        assert_eq!(store.retrieve(k, &mut buf).await, Ok(4));
        assert_ne!(&buf, b"abcd");
        faults.set_corrupt_reads(false);
        assert_eq!(store.retrieve(k, &mut buf).await, Ok(4));
        assert_eq!(&buf, b"abcd");
    }
}
