//! The store trait. Object-safe (boxed futures, like `blockdev::BlockDevice`) because the
//! control plane holds one `Arc<dyn MetaStore>` chosen at start-up from the command line;
//! a generic parameter would spread the backend type through every caller.

use std::future::Future;
use std::pin::Pin;

use futures::Stream;

use crate::error::MetaError;
use crate::types::{CasOutcome, Expect, KeyValue, Lease, LeaseId, Listing, Revision, Txn};
use crate::types::{TxnOutcome, WatchBatch};

// The control plane holds `Arc<dyn MetaStore>`: keep the trait dyn-compatible.
const _: Option<&dyn MetaStore> = None;

/// The future every store operation returns.
pub type MetaFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, MetaError>> + Send + 'a>>;

/// Batches of changes in revision order. It ends only after an error item: `Compacted`
/// (re-list, then watch again) or `Closed`; transient connection failures are retried
/// inside, resuming from the last delivered revision + 1, so no change is lost or repeated.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchBatch, MetaError>> + Send>>;

/// A transactional key/value store with revisions, watches and leases.
///
/// Keys are UTF-8 strings (at most [`crate::MAX_KEY_BYTES`], no NUL), values bytes (at most
/// [`crate::MAX_VALUE_BYTES`]). All writes go through [`MetaStore::txn`]; the provided
/// methods are shorthands for the usual transactions.
pub trait MetaStore: Send + Sync + 'static {
    /// The key's value and revisions, if it exists.
    fn get<'a>(&'a self, key: &'a str) -> MetaFuture<'a, Option<KeyValue>>;

    /// Every key starting with `prefix` ("" = all keys), sorted by key, read at one revision.
    fn list<'a>(&'a self, prefix: &'a str) -> MetaFuture<'a, Listing>;

    /// Applies `txn` atomically (see [`Txn`]).
    fn txn(&self, txn: Txn) -> MetaFuture<'_, TxnOutcome>;

    /// Changes of keys starting with `prefix` at revisions `>= from_revision`, in order.
    /// `from_revision == 0` means "changes after now". When this future resolves the watch
    /// is established: every later change will be delivered. A `from_revision` older than
    /// the retained history yields [`MetaError::Compacted`] (as the first item or here).
    fn watch<'a>(&'a self, prefix: &'a str, from_revision: Revision)
    -> MetaFuture<'a, WatchStream>;

    /// Drops the history of revisions before `revision`: watches from older revisions fail
    /// with [`MetaError::Compacted`]. Compacting an already compacted revision is a no-op.
    fn compact(&self, revision: Revision) -> MetaFuture<'_, ()>;

    /// Grants a lease of about `ttl_ms`; the returned [`Lease::ttl_ms`] is what the store
    /// granted (etcd: whole seconds, at least its minimum TTL).
    fn grant_lease(&self, ttl_ms: u64) -> MetaFuture<'_, Lease>;

    /// Renews the lease to its full TTL and returns that TTL (ms). The renewal took effect
    /// at some point after this call was made. [`MetaError::LeaseNotFound`] once expired.
    fn keep_alive(&self, lease: LeaseId) -> MetaFuture<'_, u64>;

    /// Revokes the lease and deletes its keys. `false` if it did not exist (any more).
    fn revoke_lease(&self, lease: LeaseId) -> MetaFuture<'_, bool>;

    /// Writes `key` (no lease) and returns the new revision.
    fn put<'a>(&'a self, key: &'a str, value: Vec<u8>) -> MetaFuture<'a, Revision> {
        self.put_opt_lease(key, value, None)
    }

    /// Writes `key` attached to `lease`: it vanishes when the lease ends.
    fn put_with_lease<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> MetaFuture<'a, Revision> {
        self.put_opt_lease(key, value, Some(lease))
    }

    /// Writes `key`, attached to `lease` if given.
    fn put_opt_lease<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> MetaFuture<'a, Revision> {
        Box::pin(async move {
            match self.txn(Txn::new().put(key, value, lease)).await? {
                TxnOutcome::Committed { revision, .. } => Ok(revision),
                TxnOutcome::Failed { .. } => Err(MetaError::Backend(
                    "unconditional put reported a failed compare".into(),
                )),
            }
        })
    }

    /// Deletes `key`; the revision of the deletion, or `None` if it did not exist.
    fn delete<'a>(&'a self, key: &'a str) -> MetaFuture<'a, Option<Revision>> {
        Box::pin(async move {
            match self.txn(Txn::new().delete(key)).await? {
                TxnOutcome::Committed { revision, deleted } => {
                    Ok((deleted > 0).then_some(revision))
                }
                TxnOutcome::Failed { .. } => Err(MetaError::Backend(
                    "unconditional delete reported a failed compare".into(),
                )),
            }
        })
    }

    /// Writes `key` only if it is as `expect`ed (absent, or last changed at that revision).
    /// This is how ownership and placement change safely: read, decide, swap; on conflict
    /// re-read and decide again.
    fn compare_and_swap<'a>(
        &'a self,
        key: &'a str,
        expect: Expect,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> MetaFuture<'a, CasOutcome> {
        Box::pin(async move {
            let txn = Txn::new().when(key, expect).put(key, value, lease);
            Ok(cas_outcome(self.txn(txn).await?))
        })
    }

    /// Deletes `key` only if it was last changed at `mod_revision`.
    fn compare_and_delete<'a>(
        &'a self,
        key: &'a str,
        mod_revision: Revision,
    ) -> MetaFuture<'a, CasOutcome> {
        Box::pin(async move {
            let txn = Txn::new()
                .when(key, Expect::ModRevision(mod_revision))
                .delete(key);
            Ok(cas_outcome(self.txn(txn).await?))
        })
    }
}

fn cas_outcome(outcome: TxnOutcome) -> CasOutcome {
    match outcome {
        TxnOutcome::Committed { revision, .. } => CasOutcome::Swapped { revision },
        TxnOutcome::Failed { current } => CasOutcome::Conflict {
            current: current.into_iter().next().flatten(),
        },
    }
}
