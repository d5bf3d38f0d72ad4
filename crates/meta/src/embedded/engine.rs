//! The embedded store's synchronous core: redb transactions, the revision counter, leases
//! and their expiry. Every write holds the `state` lock from before its redb transaction
//! until its batch is published, so revisions, commits and history stay in one order.
//! Callers run these methods on tokio's blocking pool.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::{Notify, watch};

use super::codec::Record;
use super::history::History;
use crate::clock::Clock;
use crate::error::MetaError;
use crate::types::{
    Expect, KeyValue, Lease, LeaseId, Listing, Revision, Txn, TxnOp, TxnOutcome, WatchBatch,
    WatchEvent,
};

/// key -> [`Record`].
const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
/// Counters and the format version.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const META_FORMAT: &str = "format";
const META_REVISION: &str = "revision";
const META_NEXT_LEASE: &str = "next_lease";
const FORMAT_VERSION: u64 = 1;

/// The database file inside the data dir.
pub(super) const DB_FILE: &str = "meta.redb";

fn backend(e: impl std::fmt::Display) -> MetaError {
    MetaError::Backend(e.to_string())
}

struct LeaseEntry {
    ttl_ms: u64,
    deadline: Duration,
}

struct State {
    revision: Revision,
    next_lease: i64,
    /// In memory only: at open every lease is treated as expired (monotonic deadlines do
    /// not survive a restart).
    leases: HashMap<LeaseId, LeaseEntry>,
}

pub(super) struct Engine {
    db: Database,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    pub history: Arc<History>,
    pub revision_tx: watch::Sender<Revision>,
    /// Wakes the expiry task when the earliest lease deadline may have moved.
    pub expiry_wake: Arc<Notify>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Lets the expiry task notice that the store is gone.
        self.expiry_wake.notify_one();
    }
}

impl Engine {
    /// Opens (creating if needed) the database in `dir`. Keys attached to leases are
    /// deleted: their leases died with the previous process.
    pub fn open(
        dir: &Path,
        clock: Arc<dyn Clock>,
        history_revisions: usize,
        history_bytes: usize,
    ) -> Result<Self, MetaError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| MetaError::Backend(format!("creating {}: {e}", dir.display())))?;
        let db = Database::create(dir.join(DB_FILE)).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => MetaError::InUse(dir.display().to_string()),
            other => backend(other),
        })?;
        let wtx = db.begin_write().map_err(backend)?;
        let (revision, next_lease) = {
            let mut meta = wtx.open_table(META).map_err(backend)?;
            let mut kv = wtx.open_table(KV).map_err(backend)?;
            let format = meta.get(META_FORMAT).map_err(backend)?.map(|g| g.value());
            match format {
                None => {
                    meta.insert(META_FORMAT, FORMAT_VERSION).map_err(backend)?;
                }
                Some(FORMAT_VERSION) => {}
                Some(other) => {
                    return Err(MetaError::Corrupt(format!(
                        "{}: format version {other}, this build reads {FORMAT_VERSION}",
                        dir.display()
                    )));
                }
            }
            let mut revision = meta
                .get(META_REVISION)
                .map_err(backend)?
                .map_or(0, |g| g.value());
            let next_lease = meta
                .get(META_NEXT_LEASE)
                .map_err(backend)?
                .map_or(1, |g| g.value());
            let mut leased = Vec::new();
            for entry in kv.iter().map_err(backend)? {
                let (k, v) = entry.map_err(backend)?;
                if Record::decode(k.value(), v.value())?.lease.is_some() {
                    leased.push(k.value().to_owned());
                }
            }
            if !leased.is_empty() {
                for key in &leased {
                    kv.remove(key.as_str()).map_err(backend)?;
                }
                revision += 1;
                meta.insert(META_REVISION, revision).map_err(backend)?;
                tracing::info!(
                    keys = leased.len(),
                    "meta: deleted keys of leases from before restart"
                );
            }
            let next_lease = i64::try_from(next_lease)
                .map_err(|_| MetaError::Corrupt("lease counter out of range".into()))?;
            (revision, next_lease)
        };
        wtx.commit().map_err(backend)?;
        Ok(Self {
            db,
            clock,
            state: Mutex::new(State {
                revision,
                next_lease,
                leases: HashMap::new(),
            }),
            history: Arc::new(History::new(revision, history_revisions, history_bytes)),
            revision_tx: watch::Sender::new(revision),
            expiry_wake: Arc::new(Notify::new()),
        })
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>, MetaError> {
        // A panic half-way through a write leaves memory and disk possibly out of step.
        self.state
            .lock()
            .map_err(|_| MetaError::Backend("store state poisoned by an earlier panic".into()))
    }

    fn publish(&self, state: &mut State, revision: Revision, events: Vec<WatchEvent>) {
        state.revision = revision;
        self.history.push(WatchBatch { revision, events });
        self.revision_tx.send_replace(revision);
    }

    pub fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        self.expire_due()?;
        let rtx = self.db.begin_read().map_err(backend)?;
        let kv = rtx.open_table(KV).map_err(backend)?;
        Ok(read_record(&kv, key)?.map(|r| r.into_kv(key)))
    }

    pub fn list(&self, prefix: &str) -> Result<Listing, MetaError> {
        self.expire_due()?;
        let rtx = self.db.begin_read().map_err(backend)?;
        let kv = rtx.open_table(KV).map_err(backend)?;
        let meta = rtx.open_table(META).map_err(backend)?;
        let revision = meta
            .get(META_REVISION)
            .map_err(backend)?
            .map_or(0, |g| g.value());
        let mut kvs = Vec::new();
        for entry in kv.range(prefix..).map_err(backend)? {
            let (k, v) = entry.map_err(backend)?;
            let key = k.value();
            if !key.starts_with(prefix) {
                break;
            }
            kvs.push(Record::decode(key, v.value())?.into_kv(key));
        }
        Ok(Listing { kvs, revision })
    }

    pub fn txn(&self, txn: &Txn) -> Result<TxnOutcome, MetaError> {
        txn.validate()?;
        let mut state = self.lock()?;
        self.expire_due_locked(&mut state)?;
        for op in &txn.ops {
            if let TxnOp::Put {
                lease: Some(lease), ..
            } = op
                && !state.leases.contains_key(lease)
            {
                return Err(MetaError::LeaseNotFound(*lease));
            }
        }
        let new_revision = state.revision + 1;
        let wtx = self.db.begin_write().map_err(backend)?;
        let mut events = Vec::new();
        let mut deleted = 0u64;
        let failed = 'write: {
            let mut kv = wtx.open_table(KV).map_err(backend)?;
            let mut holds = true;
            let mut current = Vec::with_capacity(txn.compares.len());
            for compare in &txn.compares {
                let record = read_record(&kv, &compare.key)?;
                holds &= match (compare.expect, &record) {
                    (Expect::Absent, None) => true,
                    (Expect::ModRevision(rev), Some(r)) => r.mod_revision == rev,
                    _ => false,
                };
                current.push(record.map(|r| r.into_kv(&compare.key)));
            }
            if !holds {
                break 'write Some(current);
            }
            for op in &txn.ops {
                match op {
                    TxnOp::Put { key, value, lease } => {
                        let create_revision =
                            read_record(&kv, key)?.map_or(new_revision, |old| old.create_revision);
                        let record = Record {
                            mod_revision: new_revision,
                            create_revision,
                            lease: *lease,
                            value: value.clone(),
                        };
                        kv.insert(key.as_str(), record.encode().as_slice())
                            .map_err(backend)?;
                        events.push(WatchEvent::Put(record.into_kv(key)));
                    }
                    TxnOp::Delete { key } => {
                        if kv.remove(key.as_str()).map_err(backend)?.is_some() {
                            deleted += 1;
                            events.push(WatchEvent::Delete { key: key.clone() });
                        }
                    }
                }
            }
            None
        };
        if let Some(current) = failed {
            wtx.abort().map_err(backend)?;
            return Ok(TxnOutcome::Failed { current });
        }
        if events.is_empty() {
            // Only deletes of absent keys: no change, no new revision (as etcd does).
            wtx.abort().map_err(backend)?;
            return Ok(TxnOutcome::Committed {
                revision: state.revision,
                deleted: 0,
            });
        }
        set_revision(&wtx, new_revision)?;
        wtx.commit().map_err(backend)?;
        self.publish(&mut state, new_revision, events);
        Ok(TxnOutcome::Committed {
            revision: new_revision,
            deleted,
        })
    }

    pub fn compact(&self, revision: Revision) -> Result<(), MetaError> {
        let _state = self.lock()?;
        self.history.compact(revision)
    }

    pub fn grant_lease(&self, ttl_ms: u64) -> Result<Lease, MetaError> {
        if ttl_ms == 0 {
            return Err(MetaError::Invalid("lease TTL of 0 ms".into()));
        }
        let mut state = self.lock()?;
        self.expire_due_locked(&mut state)?;
        let id = LeaseId(state.next_lease);
        let next = state
            .next_lease
            .checked_add(1)
            .ok_or_else(|| MetaError::Backend("lease ids exhausted".into()))?;
        let wtx = self.db.begin_write().map_err(backend)?;
        {
            let mut meta = wtx.open_table(META).map_err(backend)?;
            meta.insert(META_NEXT_LEASE, next.unsigned_abs())
                .map_err(backend)?;
        }
        wtx.commit().map_err(backend)?;
        state.next_lease = next;
        let deadline = self.clock.now() + Duration::from_millis(ttl_ms);
        state.leases.insert(id, LeaseEntry { ttl_ms, deadline });
        self.expiry_wake.notify_one();
        Ok(Lease { id, ttl_ms })
    }

    pub fn keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError> {
        let mut state = self.lock()?;
        self.expire_due_locked(&mut state)?;
        let now = self.clock.now();
        let entry = state
            .leases
            .get_mut(&lease)
            .ok_or(MetaError::LeaseNotFound(lease))?;
        entry.deadline = now + Duration::from_millis(entry.ttl_ms);
        Ok(entry.ttl_ms)
    }

    pub fn revoke_lease(&self, lease: LeaseId) -> Result<bool, MetaError> {
        let mut state = self.lock()?;
        self.expire_due_locked(&mut state)?;
        if state.leases.remove(&lease).is_none() {
            return Ok(false);
        }
        self.delete_lease_keys(&mut state, &HashSet::from([lease]))?;
        Ok(true)
    }

    /// The earliest lease deadline, for the expiry task.
    pub fn next_deadline(&self) -> Result<Option<Duration>, MetaError> {
        Ok(self.lock()?.leases.values().map(|e| e.deadline).min())
    }

    /// Expires every lease whose deadline has passed, deleting its keys.
    pub fn expire_due(&self) -> Result<(), MetaError> {
        let mut state = self.lock()?;
        self.expire_due_locked(&mut state)
    }

    fn expire_due_locked(&self, state: &mut State) -> Result<(), MetaError> {
        let now = self.clock.now();
        let expired: HashSet<LeaseId> = state
            .leases
            .iter()
            .filter(|(_, e)| e.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        if expired.is_empty() {
            return Ok(());
        }
        for id in &expired {
            state.leases.remove(id);
        }
        tracing::debug!(leases = ?expired, "meta: leases expired");
        self.delete_lease_keys(state, &expired)
    }

    /// Deletes every key attached to one of `leases` at one new revision. Scans all keys:
    /// metadata is small and expiry rare, so no per-lease index is kept in step.
    fn delete_lease_keys(
        &self,
        state: &mut State,
        leases: &HashSet<LeaseId>,
    ) -> Result<(), MetaError> {
        let wtx = self.db.begin_write().map_err(backend)?;
        let mut doomed = Vec::new();
        {
            let mut kv = wtx.open_table(KV).map_err(backend)?;
            for entry in kv.iter().map_err(backend)? {
                let (k, v) = entry.map_err(backend)?;
                let record = Record::decode(k.value(), v.value())?;
                if record.lease.is_some_and(|l| leases.contains(&l)) {
                    doomed.push(k.value().to_owned());
                }
            }
            for key in &doomed {
                kv.remove(key.as_str()).map_err(backend)?;
            }
        }
        if doomed.is_empty() {
            wtx.abort().map_err(backend)?;
            return Ok(());
        }
        let revision = state.revision + 1;
        set_revision(&wtx, revision)?;
        wtx.commit().map_err(backend)?;
        let events = doomed
            .into_iter()
            .map(|key| WatchEvent::Delete { key })
            .collect();
        self.publish(state, revision, events);
        Ok(())
    }
}

fn set_revision(wtx: &redb::WriteTransaction, revision: Revision) -> Result<(), MetaError> {
    let mut meta = wtx.open_table(META).map_err(backend)?;
    meta.insert(META_REVISION, revision).map_err(backend)?;
    Ok(())
}

fn read_record(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> Result<Option<Record>, MetaError> {
    match table.get(key).map_err(backend)? {
        Some(guard) => Ok(Some(Record::decode(key, guard.value())?)),
        None => Ok(None),
    }
}
