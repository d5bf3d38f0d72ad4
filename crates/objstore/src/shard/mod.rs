//! One KV namespace as the data path sees it: the [`ShardStore`] trait.
//!
//! The trait mirrors the NVMe Key Value command set (Store, Retrieve, Delete, Exist, List)
//! with 16-byte keys and values of at most [`MAX_VALUE_BYTES`], so that a local KV engine
//! and a remote KV namespace over NVMe/TCP plug in behind it unchanged. Errors are the KV
//! statuses a caller has to tell apart ([`ShardError`]). Every store belongs to one
//! failure domain (a storage node); placement never puts two shards of a stripe into one.
//!
//! Implementations here: [`MemShardStore`] (RAM), [`DirShardStore`] (a directory of files,
//! durable), [`NvmeKvShardStore`] (a remote NVMe KV namespace over NVMe/TCP),
//! [`FaultyShardStore`] (wraps any store to inject down / slow / corrupt),
//! [`LazyShardStore`] (connects another store in the background: unavailable until then).

pub(crate) mod buffers;
mod dir;
mod faulty;
mod lazy;
mod mem;
mod nvme;

pub use dir::DirShardStore;
pub use faulty::{Faults, FaultyShardStore};
pub use lazy::{ConnectFn, ConnectFuture, LazyShardStore};
pub use mem::MemShardStore;
pub use nvme::{NvmeKvShardStore, NvmeKvShardStoreOptions};

use std::fmt;

use async_trait::async_trait;
use blockdev::IoBuf;
use bytes::Bytes;

/// A key of a KV namespace: 16 bytes (the NVMe KV maximum), here always a hash.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardKey(pub [u8; 16]);

impl ShardKey {
    /// The smallest key (where a full listing starts).
    pub const MIN: ShardKey = ShardKey([0; 16]);

    /// The key right after this one, or None for the largest key.
    pub fn successor(&self) -> Option<ShardKey> {
        let mut k = self.0;
        for byte in k.iter_mut().rev() {
            if *byte == 0xff {
                *byte = 0;
            } else {
                *byte += 1;
                return Some(ShardKey(k));
            }
        }
        None
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for ShardKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// The largest value one store accepts (NVMe KV namespaces report their own maximum;
/// 2 MiB is what the data path is built for: shards never exceed it). The smallest is 1
/// byte, as in the NVMe KV command set (a shard always has its header).
pub const MAX_VALUE_BYTES: usize = 2 << 20;

/// Store's condition on the key's existence (the KV Store command's options).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoreMode {
    /// Create or replace.
    #[default]
    Upsert,
    /// Fail with [`ShardError::KeyExists`] if the key exists.
    OnlyIfAbsent,
    /// Fail with [`ShardError::KeyNotFound`] if the key does not exist.
    OnlyIfExists,
}

/// Why a store operation failed; the variants follow the NVMe KV statuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("key does not exist")]
    KeyNotFound,
    #[error("key exists")]
    KeyExists,
    #[error("capacity exceeded")]
    CapacityExceeded,
    #[error("value of {bytes} bytes exceeds the {MAX_VALUE_BYTES}-byte limit")]
    ValueTooLarge { bytes: usize },
    /// A value of 0 bytes: KV values are 1 byte or more (Invalid Value Size in NVMe).
    #[error("an empty value cannot be stored (values are 1 to {MAX_VALUE_BYTES} bytes)")]
    EmptyValue,
    /// The medium failed (NVMe Unrecovered Read Error and the like).
    #[error("unrecovered error: {0}")]
    Unrecovered(String),
    /// The namespace cannot be reached (node down, path lost, timed out).
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl ShardError {
    /// Whether the store as a whole is unreachable (as opposed to this one key failing).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, ShardError::Unavailable(_))
    }
}

/// One KV namespace. All methods may be called concurrently.
#[async_trait]
pub trait ShardStore: Send + Sync + 'static {
    /// Stable name of this store, recorded in shard maps (e.g. `node1/kv0`).
    fn id(&self) -> &str;

    /// The failure domain (storage node) this store lives in.
    fn failure_domain(&self) -> &str;

    /// Stores `value` under `key`; `1 <= value.len() <= MAX_VALUE_BYTES`. Durable on
    /// return.
    async fn store(&self, key: ShardKey, value: Bytes, mode: StoreMode) -> Result<(), ShardError>;

    /// Copies the value of `key` into `buf` (at most `buf.len()` bytes) and returns the
    /// value's full size, which may exceed `buf.len()` (then only a prefix was copied).
    async fn retrieve(&self, key: ShardKey, buf: &mut [u8]) -> Result<usize, ShardError>;

    /// [`store`](Self::store) of a value in an I/O buffer the store may keep or hand on
    /// as it is (the data path builds shard values in place): stores whose transport
    /// takes I/O buffers send it without a copy.
    async fn store_buf(
        &self,
        key: ShardKey,
        value: IoBuf,
        mode: StoreMode,
    ) -> Result<(), ShardError> {
        self.store(key, buffers::into_bytes(value), mode).await
    }

    /// The value of `key` as [`Bytes`] (at most `max` bytes of it), and the value's full
    /// size, as [`retrieve`](Self::retrieve) tells. Stores that receive into I/O buffers
    /// hand that buffer out without a copy.
    async fn retrieve_value(
        &self,
        key: ShardKey,
        max: usize,
    ) -> Result<(Bytes, usize), ShardError> {
        let mut buf = buffers::take(max);
        let size = self.retrieve(key, &mut buf).await?;
        buf.set_len(size.min(max));
        Ok((buffers::into_bytes(buf), size))
    }

    /// Removes `key`; [`ShardError::KeyNotFound`] if it was not there.
    async fn delete(&self, key: ShardKey) -> Result<(), ShardError>;

    /// Whether `key` exists.
    async fn exist(&self, key: ShardKey) -> Result<bool, ShardError>;

    /// Up to `max` keys `>= from`, in ascending order.
    async fn list(&self, from: ShardKey, max: usize) -> Result<Vec<ShardKey>, ShardError>;
}

pub(crate) fn check_value_size(value: &[u8]) -> Result<(), ShardError> {
    if value.is_empty() {
        return Err(ShardError::EmptyValue);
    }
    if value.len() > MAX_VALUE_BYTES {
        return Err(ShardError::ValueTooLarge { bytes: value.len() });
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod contract;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successor_carries() {
        let mut k = [0u8; 16];
        k[15] = 0xff;
        let mut want = [0u8; 16];
        want[14] = 1;
        assert_eq!(ShardKey(k).successor(), Some(ShardKey(want)));
        assert_eq!(ShardKey([0xff; 16]).successor(), None);
    }
}
