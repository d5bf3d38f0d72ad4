//! A KV namespace in RAM: the trivially correct model, and a fast store for tests.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;

use super::{ShardError, ShardKey, ShardStore, StoreMode, check_value_size};

pub struct MemShardStore {
    id: String,
    failure_domain: String,
    capacity_bytes: u64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    values: BTreeMap<ShardKey, Bytes>,
    used_bytes: u64,
}

impl MemShardStore {
    /// An empty store of unlimited capacity.
    pub fn new(id: impl Into<String>, failure_domain: impl Into<String>) -> Self {
        Self::with_capacity(id, failure_domain, u64::MAX)
    }

    /// An empty store that refuses values past `capacity_bytes` in total.
    pub fn with_capacity(
        id: impl Into<String>,
        failure_domain: impl Into<String>,
        capacity_bytes: u64,
    ) -> Self {
        MemShardStore {
            id: id.into(),
            failure_domain: failure_domain.into(),
            capacity_bytes,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Number of keys stored.
    pub fn len(&self) -> usize {
        self.lock().values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map half-updated (each update
        // is one insert/remove plus a counter), so a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl ShardStore for MemShardStore {
    fn id(&self) -> &str {
        &self.id
    }

    fn failure_domain(&self) -> &str {
        &self.failure_domain
    }

    async fn store(&self, key: ShardKey, value: Bytes, mode: StoreMode) -> Result<(), ShardError> {
        check_value_size(&value)?;
        let mut inner = self.lock();
        let old_bytes = inner.values.get(&key).map(|v| v.len() as u64);
        match (mode, old_bytes) {
            (StoreMode::OnlyIfAbsent, Some(_)) => return Err(ShardError::KeyExists),
            (StoreMode::OnlyIfExists, None) => return Err(ShardError::KeyNotFound),
            _ => {}
        }
        let used = inner.used_bytes - old_bytes.unwrap_or(0) + value.len() as u64;
        if used > self.capacity_bytes {
            return Err(ShardError::CapacityExceeded);
        }
        inner.used_bytes = used;
        inner.values.insert(key, value);
        Ok(())
    }

    async fn retrieve(&self, key: ShardKey, buf: &mut [u8]) -> Result<usize, ShardError> {
        let inner = self.lock();
        let value = inner.values.get(&key).ok_or(ShardError::KeyNotFound)?;
        let n = value.len().min(buf.len());
        buf[..n].copy_from_slice(&value[..n]);
        Ok(value.len())
    }

    async fn delete(&self, key: ShardKey) -> Result<(), ShardError> {
        let mut inner = self.lock();
        let value = inner.values.remove(&key).ok_or(ShardError::KeyNotFound)?;
        inner.used_bytes -= value.len() as u64;
        Ok(())
    }

    async fn exist(&self, key: ShardKey) -> Result<bool, ShardError> {
        Ok(self.lock().values.contains_key(&key))
    }

    async fn list(&self, from: ShardKey, max: usize) -> Result<Vec<ShardKey>, ShardError> {
        Ok(self
            .lock()
            .values
            .range(from..)
            .take(max)
            .map(|(k, _)| *k)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::contract;

    #[tokio::test]
    async fn meets_the_contract() {
        contract::check(&MemShardStore::with_capacity("m", "d", 64 << 20)).await;
    }

    #[tokio::test]
    async fn capacity_counts_replaced_values_once() {
        let s = MemShardStore::with_capacity("m", "d", 10);
        let k = ShardKey([1; 16]);
        s.store(k, Bytes::from_static(b"12345678"), StoreMode::Upsert)
            .await
            .expect("fits");
        // Replacing 8 bytes with 9 needs 9, not 17.
        s.store(k, Bytes::from_static(b"123456789"), StoreMode::Upsert)
            .await
            .expect("replace fits");
        let other = ShardKey([2; 16]);
        assert_eq!(
            s.store(other, Bytes::from_static(b"12"), StoreMode::Upsert)
                .await,
            Err(ShardError::CapacityExceeded)
        );
    }
}
