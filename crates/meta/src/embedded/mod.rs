//! The embedded backend: one redb database in a data dir, for a single process (any number
//! of tasks). The default store of a one-machine cluster (`ferrobay up`).
//!
//! - Revisions: one global counter, persisted with the data; every change gets the next.
//! - Watches: a bounded in-memory history of the last changes (at most
//!   [`EmbeddedOptions::history_revisions`] revisions and about
//!   [`EmbeddedOptions::history_bytes`]); a watcher that falls behind it gets
//!   [`crate::MetaError::Compacted`].
//!   History does not survive a restart: after one, only new revisions can be watched.
//! - Leases: deadlines on the injected [`Clock`], kept in memory. At open every lease
//!   from before is treated as expired and its keys are deleted (a monotonic deadline
//!   means nothing to the next process, and the owners that held them are gone with it).
//!   Lease ids are never reused.

mod codec;
mod engine;
mod history;

use std::path::Path;
use std::sync::{Arc, Weak};

use tokio::sync::Notify;

use crate::clock::{Clock, SystemClock};
use crate::error::MetaError;
use crate::store::{MetaFuture, MetaStore, WatchStream};
use crate::types::{
    KeyValue, Lease, LeaseId, Listing, Revision, Txn, TxnOutcome, validate_key, validate_prefix,
};
use engine::Engine;

/// How an [`EmbeddedStore`] is opened.
#[derive(Clone)]
pub struct EmbeddedOptions {
    /// Time for lease deadlines.
    pub clock: Arc<dyn Clock>,
    /// Changes kept for watchers that start in the past or fall behind: at most this many
    /// revisions...
    pub history_revisions: usize,
    /// ...and about this many bytes of keys and values.
    pub history_bytes: usize,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock::new()),
            history_revisions: 16 * 1024,
            history_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The embedded store. Cheap to clone (all clones share one database).
#[derive(Clone)]
pub struct EmbeddedStore {
    engine: Arc<Engine>,
}

impl EmbeddedStore {
    /// Opens or creates the store in `dir` (a file `meta.redb` in it). Fails if another
    /// process has it open. Must be called inside a tokio runtime: it spawns the task that
    /// expires leases (it ends when the last clone of the store is dropped).
    pub async fn open(dir: &Path, options: EmbeddedOptions) -> Result<Self, MetaError> {
        let dir = dir.to_owned();
        let clock = options.clock.clone();
        let (revisions, bytes) = (options.history_revisions, options.history_bytes);
        let engine = blocking(move || Engine::open(&dir, clock, revisions, bytes)).await?;
        let engine = Arc::new(engine);
        tokio::spawn(expiry_loop(
            Arc::downgrade(&engine),
            engine.expiry_wake.clone(),
            options.clock,
        ));
        Ok(Self { engine })
    }

    /// Runs `f` on the engine in tokio's blocking pool (redb commits fsync).
    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine) -> Result<T, MetaError> + Send + 'static,
    ) -> MetaFuture<'static, T> {
        let engine = self.engine.clone();
        Box::pin(blocking(move || f(&engine)))
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, MetaError> + Send + 'static,
) -> Result<T, MetaError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| MetaError::Backend(format!("store task failed: {e}")))?
}

/// Deletes the keys of expired leases even when no other operation comes along (watchers
/// must see the deletions). Holds only a weak reference so that it never keeps the store
/// open.
async fn expiry_loop(engine: Weak<Engine>, wake: Arc<Notify>, clock: Arc<dyn Clock>) {
    loop {
        let next = match engine.upgrade() {
            Some(engine) => engine.next_deadline(),
            None => return,
        };
        let next = match next {
            Ok(next) => next,
            Err(e) => {
                tracing::error!("meta: lease expiry stopped: {e}");
                return;
            }
        };
        let sleep = async {
            match next {
                Some(deadline) => clock.sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => {}
            () = wake.notified() => continue,
        }
        let Some(engine) = engine.upgrade() else {
            return;
        };
        if let Err(e) = blocking(move || engine.expire_due()).await {
            tracing::warn!("meta: expiring leases: {e}");
        }
    }
}

impl MetaStore for EmbeddedStore {
    fn get<'a>(&'a self, key: &'a str) -> MetaFuture<'a, Option<KeyValue>> {
        if let Err(e) = validate_key(key) {
            return Box::pin(async move { Err(e) });
        }
        let key = key.to_owned();
        self.run(move |engine| engine.get(&key))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> MetaFuture<'a, Listing> {
        if let Err(e) = validate_prefix(prefix) {
            return Box::pin(async move { Err(e) });
        }
        let prefix = prefix.to_owned();
        self.run(move |engine| engine.list(&prefix))
    }

    fn txn(&self, txn: Txn) -> MetaFuture<'_, TxnOutcome> {
        self.run(move |engine| engine.txn(&txn))
    }

    fn watch<'a>(
        &'a self,
        prefix: &'a str,
        from_revision: Revision,
    ) -> MetaFuture<'a, WatchStream> {
        Box::pin(async move {
            validate_prefix(prefix)?;
            history::watch_stream(
                self.engine.history.clone(),
                self.engine.revision_tx.subscribe(),
                prefix.to_owned(),
                from_revision,
            )
        })
    }

    fn compact(&self, revision: Revision) -> MetaFuture<'_, ()> {
        self.run(move |engine| engine.compact(revision))
    }

    fn grant_lease(&self, ttl_ms: u64) -> MetaFuture<'_, Lease> {
        self.run(move |engine| engine.grant_lease(ttl_ms))
    }

    fn keep_alive(&self, lease: LeaseId) -> MetaFuture<'_, u64> {
        self.run(move |engine| engine.keep_alive(lease))
    }

    fn revoke_lease(&self, lease: LeaseId) -> MetaFuture<'_, bool> {
        self.run(move |engine| engine.revoke_lease(lease))
    }
}
