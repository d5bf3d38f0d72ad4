//! Seam for Key Value namespaces: what stores the keys and values behind a KV namespace.
//!
//! The target decodes Store, Retrieve, List, Delete, Exist and Flush (`cmd/kv.rs`),
//! checks them against the namespace's KV format and hands them to a [`KvBackend`]
//! installed with [`crate::Target::add_kv_namespace`]. The storage node implements it
//! with its log-structured engine on a drive extent; [`MemKvBackend`] is a trivially
//! correct `BTreeMap` for tests and fuzzing. nvmf-target knows nothing of either.
//!
//! Errors are [`KvBackendError`]s, each mapped to the status the KV command set defines
//! ([`KvBackendError::status`]).

use std::future::Future;
use std::pin::Pin;

use blockdev::IoBuf;
use nvme_proto::Status;
use nvme_proto::kv::{KvKey, StoreMode};

/// A backend operation in flight. Boxed: one allocation per KV command, like the
/// command future the target builds around it anyway.
pub type KvFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, KvBackendError>> + Send + 'a>>;

/// A backend operation on a transfer buffer, which comes back with the result.
pub type KvBufFuture<'a, T> =
    Pin<Box<dyn Future<Output = (Result<T, KvBackendError>, Option<IoBuf>)> + Send + 'a>>;

/// Why a backend operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvBackendError {
    /// Retrieve, Exist or an overwrite-only Store of an absent key; Delete of one.
    #[error("key does not exist")]
    KeyNotFound,
    /// A create-only Store of a present key.
    #[error("key exists")]
    KeyExists,
    #[error("invalid key size")]
    InvalidKeySize,
    #[error("invalid value size")]
    InvalidValueSize,
    /// No room for the value, or the namespace holds the most keys it can.
    #[error("capacity exceeded: {0}")]
    CapacityExceeded(String),
    /// The value cannot be read back intact (checksum or media error).
    #[error("unrecovered error: {0}")]
    Unrecovered(String),
    /// The store cannot serve now (closed, being opened, stopped after a device error);
    /// the host may retry later or elsewhere.
    #[error("not ready: {0}")]
    NotReady(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl KvBackendError {
    /// The completion status of a command that failed with this error.
    pub fn status(&self) -> Status {
        match self {
            KvBackendError::KeyNotFound => Status::KV_KEY_DOES_NOT_EXIST.dnr(),
            KvBackendError::KeyExists => Status::KV_KEY_EXISTS.dnr(),
            KvBackendError::InvalidKeySize => Status::KV_INVALID_KEY_SIZE.dnr(),
            KvBackendError::InvalidValueSize => Status::KV_INVALID_VALUE_SIZE.dnr(),
            KvBackendError::CapacityExceeded(_) => Status::CAPACITY_EXCEEDED.dnr(),
            KvBackendError::Unrecovered(_) => Status::KV_UNRECOVERED_ERROR.dnr(),
            KvBackendError::NotReady(_) => Status::NAMESPACE_NOT_READY,
            KvBackendError::Internal(_) => Status::INTERNAL_ERROR,
        }
    }

    /// Whether the error counts as a media error (SMART, namespace counters).
    pub fn is_media(&self) -> bool {
        matches!(self, KvBackendError::Unrecovered(_))
    }
}

/// What a Retrieve copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvRetrieved {
    /// Size of the whole stored value (completion DW0).
    pub value_bytes: u32,
    /// Bytes copied into the caller's buffer: min(value, buffer).
    pub copied_bytes: usize,
}

/// Capacity and key counts of a KV namespace, as Identify (CNS 05h) and the node's
/// health report show them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KvUsage {
    /// Bytes of values (with per-value overhead) the namespace accepts: Identify NSZE.
    pub capacity_bytes: u64,
    /// Bytes the stored values take now: Identify NUSE.
    pub used_bytes: u64,
    pub key_count: u64,
    /// Most keys the namespace holds (Identify MNKS; 0: not reported).
    pub max_keys: u64,
}

/// The store behind one KV namespace. Store, Retrieve, Delete and Flush may wait for
/// the device; Exist, List and usage answer from memory and must not block.
///
/// Keys are 1 to 16 bytes (the target checks before calling); values 1 byte to the
/// namespace's maximum value size.
pub trait KvBackend: Send + Sync + 'static {
    /// Stores `value` under `key` as `mode` allows; durable when it resolves `Ok`.
    fn store<'a>(&'a self, key: &'a [u8], value: &'a [u8], mode: StoreMode) -> KvFuture<'a, ()>;
    /// Copies the first min(value, `out.len()`) bytes of `key`'s value into `out`.
    fn retrieve<'a>(&'a self, key: &'a [u8], out: &'a mut [u8]) -> KvFuture<'a, KvRetrieved>;
    /// [`KvBackend::store`] of the whole received buffer, which the backend may keep
    /// until it answers (to write the value from it) and gives back with the result
    /// (`None` only if a failed device write kept it).
    fn store_buf<'a>(
        &'a self,
        key: &'a [u8],
        value: IoBuf,
        mode: StoreMode,
    ) -> KvBufFuture<'a, ()> {
        Box::pin(async move {
            let r = self.store(key, &value, mode).await;
            (r, Some(value))
        })
    }
    /// [`KvBackend::retrieve`] into the buffer that is sent to the host, given back with
    /// the result: the first min(value, `buf.len()`) bytes of the value, then zeros to
    /// its length (on success).
    fn retrieve_buf<'a>(&'a self, key: &'a [u8], buf: IoBuf) -> KvBufFuture<'a, KvRetrieved> {
        Box::pin(async move {
            let mut buf = buf;
            let r = self.retrieve(key, &mut buf).await;
            if let Ok(got) = &r {
                let copied = got.copied_bytes.min(buf.len());
                buf[copied..].fill(0);
            }
            (r, Some(buf))
        })
    }
    /// Removes `key`; [`KvBackendError::KeyNotFound`] if it has no value.
    fn delete<'a>(&'a self, key: &'a [u8]) -> KvFuture<'a, ()>;
    /// Waits until everything acknowledged is durable (Flush).
    fn flush(&self) -> KvFuture<'_, ()>;
    /// Whether `key` has a value.
    fn exists(&self, key: &[u8]) -> Result<bool, KvBackendError>;
    /// Up to `max` keys in order, from `from` (inclusive) or from the first key (`None`).
    fn list(&self, from: Option<&[u8]>, max: usize) -> Result<Vec<KvKey>, KvBackendError>;
    fn usage(&self) -> KvUsage;
    /// Whether the namespace can serve commands (Identify CNS 08h NSTAT). A store that
    /// could not be opened is exported as not ready rather than hidden.
    fn is_ready(&self) -> bool {
        true
    }
}
