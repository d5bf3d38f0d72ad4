//! The one error type of every store operation, whatever the backend.

use crate::types::{LeaseId, Revision};

/// Errors of [`crate::MetaStore`] operations.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// The revision a watch asked for is no longer in the store's history (compacted, or a
    /// watcher fell so far behind that its events were dropped). The caller must re-list
    /// and watch again from the listing's revision + 1.
    #[error(
        "revision {requested} is no longer available (oldest kept: {oldest_available}): re-list and watch again"
    )]
    Compacted {
        requested: Revision,
        oldest_available: Revision,
    },
    /// The lease does not exist: never granted, revoked or expired.
    #[error("lease {0} not found (expired or revoked)")]
    LeaseNotFound(LeaseId),
    /// The store cannot be reached or did not answer in time; the operation may or may not
    /// have been applied.
    #[error("metadata store unavailable: {0}")]
    Unavailable(String),
    /// The request is malformed (empty key, value too large, duplicate keys in a txn, ...).
    #[error("invalid metadata request: {0}")]
    Invalid(String),
    /// Data read from disk or from the server does not decode.
    #[error("corrupt metadata: {0}")]
    Corrupt(String),
    /// The store was closed (dropped) while the operation or watch was pending.
    #[error("metadata store closed")]
    Closed,
    /// The embedded store's database is open in another process (one at a time).
    #[error(
        "{0} is open in another process (the embedded metadata store allows one at a time; a running `ferrobay up` or node holds it: ask that through its API, or stop it first)"
    )]
    InUse(String),
    /// Any other backend failure (I/O, database, server error).
    #[error("metadata backend: {0}")]
    Backend(String),
}
