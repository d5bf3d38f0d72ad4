//! Errors of the KV engine. Each command error maps to one NVMe Key Value status
//! (see `docs/kv.md`, "Errors"); [`KvError::kind`] gives that mapping without this crate
//! knowing NVMe.

use blockdev::BlockError;

use crate::key::MAX_KEY_BYTES;

/// Why a command (or opening a store) failed.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    #[error("invalid key size: {len} bytes (keys are 1 to {MAX_KEY_BYTES} bytes)")]
    InvalidKeySize { len: usize },
    #[error("invalid value size: {len} bytes (values are 1 to {max_bytes} bytes)")]
    InvalidValueSize { len: usize, max_bytes: u32 },
    #[error("key does not exist")]
    KeyNotFound,
    #[error("key exists")]
    KeyExists,
    /// No room for the value, or the key count is at the format's maximum.
    #[error("capacity exceeded: {0}")]
    CapacityExceeded(String),
    /// The value could not be read back intact: its checksum does not match or the
    /// device reported an unrecovered (media) error. Never returns wrong bytes.
    #[error("unrecovered error reading the value at log address {addr}: {reason}")]
    Unrecovered { addr: u64, reason: String },
    /// Any other device error (I/O error, timeout, closed device).
    #[error("device error: {0}")]
    Device(#[source] BlockError),
    /// A log write or flush failed earlier; the store stopped accepting changes (reads
    /// still work). Reopen it to continue from what is durable.
    #[error("store stopped after a device error ({0}); reopen it to continue")]
    Failed(String),
    #[error("store is closed")]
    Closed,
    /// The device holds no KV store (no valid superblock).
    #[error("not a KV store: {0}")]
    NotFormatted(String),
    /// The store's metadata is unusable (no valid checkpoint, impossible fields).
    #[error("corrupt KV store: {0}")]
    Corrupt(String),
    /// Format or open options that cannot work on this device.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
}

/// The NVMe Key Value status a [`KvError`] stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// KV status 86h.
    InvalidKeySize,
    /// KV status 85h.
    InvalidValueSize,
    /// KV status 87h.
    KeyNotFound,
    /// KV status 89h.
    KeyExists,
    /// KV status 81h.
    CapacityExceeded,
    /// KV status 88h.
    Unrecovered,
    /// Everything else: a generic internal/data transfer error.
    Internal,
}

impl KvError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            KvError::InvalidKeySize { .. } => ErrorKind::InvalidKeySize,
            KvError::InvalidValueSize { .. } => ErrorKind::InvalidValueSize,
            KvError::KeyNotFound => ErrorKind::KeyNotFound,
            KvError::KeyExists => ErrorKind::KeyExists,
            KvError::CapacityExceeded(_) => ErrorKind::CapacityExceeded,
            KvError::Unrecovered { .. } => ErrorKind::Unrecovered,
            KvError::Device(_)
            | KvError::Failed(_)
            | KvError::Closed
            | KvError::NotFormatted(_)
            | KvError::Corrupt(_)
            | KvError::InvalidOptions(_) => ErrorKind::Internal,
        }
    }
}

impl From<BlockError> for KvError {
    fn from(err: BlockError) -> KvError {
        KvError::Device(err)
    }
}
