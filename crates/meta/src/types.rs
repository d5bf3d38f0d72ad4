//! Plain data exchanged with a [`crate::MetaStore`].

use serde::{Deserialize, Serialize};

/// A store revision. Every change (a committed transaction that changed at least one key)
/// gets the next revision; revisions never go back and are never reused, not even across
/// restarts. `0` never names a change.
pub type Revision = u64;

/// Longest key accepted (bytes).
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value accepted (bytes); etcd refuses requests above ~1.5 MiB by default.
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;
/// Most operations (and most compares) in one transaction; etcd's default limit is 128.
pub const MAX_TXN_OPS: usize = 64;

const _: () = assert!(MAX_KEY_BYTES + MAX_VALUE_BYTES < 3 * 1024 * 1024 / 2);

/// A lease: keys attached to it are deleted when it expires or is revoked.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LeaseId(pub i64);

impl std::fmt::Display for LeaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// A granted lease and the TTL the store actually granted (etcd rounds up to whole
/// seconds and enforces a minimum).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub id: LeaseId,
    pub ttl_ms: u64,
}

/// A stored key and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Vec<u8>,
    /// Revision of the last change of this key (what compare-and-swap compares).
    pub mod_revision: Revision,
    /// Revision at which the key was created (since it last did not exist).
    pub create_revision: Revision,
    pub lease: Option<LeaseId>,
}

/// The keys under a prefix, and the store revision they were read at: watch from
/// `revision + 1` to see every later change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    pub kvs: Vec<KeyValue>,
    pub revision: Revision,
}

/// What a compare expects of a key.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The key does not exist.
    Absent,
    /// The key exists and was last changed at this revision.
    ModRevision(Revision),
}

/// One condition of a [`Txn`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    pub key: String,
    pub expect: Expect,
}

/// One write of a [`Txn`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOp {
    Put {
        key: String,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    },
    Delete {
        key: String,
    },
}

impl TxnOp {
    pub fn key(&self) -> &str {
        match self {
            TxnOp::Put { key, .. } | TxnOp::Delete { key } => key,
        }
    }
}

/// An atomic transaction: if every compare holds, every op is applied at one new revision;
/// otherwise nothing is applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Txn {
    pub compares: Vec<Compare>,
    pub ops: Vec<TxnOp>,
}

impl Txn {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn when(mut self, key: impl Into<String>, expect: Expect) -> Self {
        self.compares.push(Compare {
            key: key.into(),
            expect,
        });
        self
    }

    pub fn put(mut self, key: impl Into<String>, value: Vec<u8>, lease: Option<LeaseId>) -> Self {
        self.ops.push(TxnOp::Put {
            key: key.into(),
            value,
            lease,
        });
        self
    }

    pub fn delete(mut self, key: impl Into<String>) -> Self {
        self.ops.push(TxnOp::Delete { key: key.into() });
        self
    }

    /// Checks the limits both backends enforce, so that they refuse the same requests.
    pub fn validate(&self) -> Result<(), crate::MetaError> {
        if self.ops.len() > MAX_TXN_OPS || self.compares.len() > MAX_TXN_OPS {
            return Err(crate::MetaError::Invalid(format!(
                "a transaction holds at most {MAX_TXN_OPS} compares and {MAX_TXN_OPS} ops"
            )));
        }
        for c in &self.compares {
            validate_key(&c.key)?;
        }
        let mut seen = std::collections::HashSet::new();
        for op in &self.ops {
            validate_key(op.key())?;
            if !seen.insert(op.key()) {
                return Err(crate::MetaError::Invalid(format!(
                    "key {:?} is written twice in one transaction",
                    op.key()
                )));
            }
            if let TxnOp::Put { value, .. } = op
                && value.len() > MAX_VALUE_BYTES
            {
                return Err(crate::MetaError::Invalid(format!(
                    "value of {:?} is {} bytes, at most {MAX_VALUE_BYTES}",
                    op.key(),
                    value.len()
                )));
            }
        }
        Ok(())
    }
}

/// Checks a key: non-empty, at most [`MAX_KEY_BYTES`], no NUL.
pub fn validate_key(key: &str) -> Result<(), crate::MetaError> {
    validate_prefix(key)?;
    if key.is_empty() {
        return Err(crate::MetaError::Invalid("empty key".into()));
    }
    Ok(())
}

/// Checks a list/watch prefix: like a key, but may be empty (all keys).
pub fn validate_prefix(prefix: &str) -> Result<(), crate::MetaError> {
    if prefix.len() > MAX_KEY_BYTES {
        return Err(crate::MetaError::Invalid(format!(
            "key of {} bytes, at most {MAX_KEY_BYTES}",
            prefix.len()
        )));
    }
    if prefix.contains('\0') {
        return Err(crate::MetaError::Invalid("key contains NUL".into()));
    }
    Ok(())
}

/// Result of [`crate::MetaStore::txn`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Every compare held and the ops were applied. `revision` is the new revision, or the
    /// current one when nothing changed (only deletes of absent keys).
    Committed { revision: Revision, deleted: u64 },
    /// A compare failed; nothing was applied. `current` holds the current state of each
    /// compared key, in the order of the compares.
    Failed { current: Vec<Option<KeyValue>> },
}

/// Result of [`crate::MetaStore::compare_and_swap`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CasOutcome {
    Swapped {
        revision: Revision,
    },
    /// The key was not as expected; this is its current state.
    Conflict {
        current: Option<KeyValue>,
    },
}

/// One change seen by a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    Put(KeyValue),
    Delete { key: String },
}

impl WatchEvent {
    pub fn key(&self) -> &str {
        match self {
            WatchEvent::Put(kv) => &kv.key,
            WatchEvent::Delete { key } => key,
        }
    }
}

/// All the watched changes of one revision (a transaction may change several keys). A
/// consumer that has handled a batch resumes a broken watch from `revision + 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchBatch {
    pub revision: Revision,
    pub events: Vec<WatchEvent>,
}
