//! Live nodes: a node's [`NodeRecord`] lives under a lease the node keeps alive, so it
//! vanishes when the node dies. Processor slots are claimed once per name, for good.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use meta::schema::{NODES, get_json, list_json, node_key, put_json};
use meta::{
    Expect, KeeperConfig, LeaseId, LeaseKeeper, LeaseState, MetaStore, SystemClock, Txn, TxnOutcome,
};
use tokio::sync::watch;

use crate::error::ControlError;
use crate::records::{
    MAX_PROCESSOR_SLOTS, NodeRecord, PROCESSOR_SLOT_HOLDERS, PROCESSOR_SLOTS,
    processor_slot_holder_key, processor_slot_key,
};

/// Rounds of read-then-claim before giving up on a contended slot.
const SLOT_ATTEMPTS: usize = 32;

/// A node's registration: its lease (kept alive in the background) and its record under
/// it. Dropping it stops the renewals (the record goes when the lease expires);
/// [`Registration::stop`] removes it at once.
pub struct Registration {
    keeper: LeaseKeeper,
    record: NodeRecord,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("node", &self.record.name)
            .field("lease", &self.keeper.lease_id())
            .finish()
    }
}

/// Grants a lease of `ttl`, keeps it alive and puts `record` under it at
/// `/ferrobay/nodes/<name>` (replacing an older record of the same name).
pub async fn register_node(
    store: Arc<dyn MetaStore>,
    record: NodeRecord,
    ttl: Duration,
) -> Result<Registration, ControlError> {
    let key = node_key(&record.name)?;
    check_beside_live_nodes(store.as_ref(), &record).await?;
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let keeper = LeaseKeeper::grant(
        store.clone(),
        ttl_ms,
        Arc::new(SystemClock::new()),
        KeeperConfig::default(),
    )
    .await?;
    if let Err(e) = put_json(store.as_ref(), &key, &record, Some(keeper.lease_id())).await {
        if let Err(e2) = keeper.revoke().await {
            tracing::warn!(node = %record.name, "revoking the lease of a failed registration: {e2}");
        }
        return Err(e.into());
    }
    Ok(Registration { keeper, record })
}

impl Registration {
    /// Rewrites the record under the same lease (the node's exports changed).
    pub async fn update(
        &mut self,
        store: &dyn MetaStore,
        record: NodeRecord,
    ) -> Result<(), ControlError> {
        let key = node_key(&record.name)?;
        put_json(store, &key, &record, Some(self.keeper.lease_id())).await?;
        self.record = record;
        Ok(())
    }

    pub fn lease_id(&self) -> LeaseId {
        self.keeper.lease_id()
    }

    pub fn record(&self) -> &NodeRecord {
        &self.record
    }

    /// The keeper (e.g. to attach other keys to the same lease).
    pub fn keeper(&self) -> &LeaseKeeper {
        &self.keeper
    }

    /// Lease state changes: `Lost` means the record may be gone and the node must act as
    /// unregistered (register again with a new lease).
    pub fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.keeper.subscribe()
    }

    pub fn is_valid(&self) -> bool {
        self.keeper.is_valid()
    }

    /// Revokes the lease: the record (and every other key under the lease) goes at once.
    /// A store that cannot be reached only delays that to the lease's expiry, so this
    /// logs instead of failing.
    pub async fn stop(self) {
        let node = self.record.name.clone();
        if let Err(e) = self.keeper.revoke().await {
            tracing::warn!(%node, "revoking the registration lease: {e} (it expires on its own)");
        }
    }
}

/// The slot of processor node `name`: the one it had, or the smallest free one below
/// [`MAX_PROCESSOR_SLOTS`] (claimed by compare-and-swap, so two nodes never share one).
pub async fn claim_processor_slot(store: &dyn MetaStore, name: &str) -> Result<u16, ControlError> {
    let key = processor_slot_key(name)?;
    for _ in 0..SLOT_ATTEMPTS {
        if let Some(v) = get_json::<u16, _>(store, &key).await? {
            return Ok(v.value);
        }
        let listing = list_json::<u16, _>(store, PROCESSOR_SLOTS).await?;
        let mut used: BTreeSet<u16> = listing.items.iter().map(|(_, v)| v.value).collect();
        let holders = store.list(PROCESSOR_SLOT_HOLDERS).await?;
        used.extend(holders.kvs.iter().filter_map(|kv| {
            kv.key
                .strip_prefix(PROCESSOR_SLOT_HOLDERS)?
                .parse::<u16>()
                .ok()
        }));
        let Some(slot) = (0..MAX_PROCESSOR_SLOTS).find(|s| !used.contains(s)) else {
            return Err(ControlError::Conflict(format!(
                "all {MAX_PROCESSOR_SLOTS} processor slots are taken"
            )));
        };
        // The name's key and the slot's holder key, both absent: two names racing for the
        // same free slot cannot both win.
        let holder = processor_slot_holder_key(slot);
        let txn = Txn::new()
            .when(key.as_str(), Expect::Absent)
            .when(holder.as_str(), Expect::Absent)
            .put(key.as_str(), meta::schema::encode_json(&slot)?, None)
            .put(holder.as_str(), meta::schema::encode_json(&name)?, None);
        if let TxnOutcome::Committed { .. } = store.txn(txn).await? {
            return Ok(slot);
        }
        // Someone claimed a slot (maybe this name, from another process): look again.
    }
    Err(ControlError::Conflict(format!(
        "could not claim a processor slot for {name}: the slot keys kept changing"
    )))
}

/// Refuses `record`'s build when a live node runs a build it cannot work beside (an
/// incompatible mix of versions during an upgrade, docs/upgrade.md). Its own earlier
/// record (the same name) does not count: that is the build it replaces.
pub async fn check_beside_live_nodes(
    store: &dyn MetaStore,
    record: &NodeRecord,
) -> Result<(), ControlError> {
    let mine = record.build();
    for other in list_nodes(store).await? {
        if other.name == record.name {
            continue;
        }
        if let Some(why) = mine.refusal_beside(&other.name, &other.build()) {
            return Err(ControlError::Incompatible(why));
        }
    }
    Ok(())
}

/// Every live node, sorted by name.
pub async fn list_nodes(store: &dyn MetaStore) -> Result<Vec<NodeRecord>, ControlError> {
    let mut nodes: Vec<NodeRecord> = list_json::<NodeRecord, _>(store, NODES)
        .await?
        .items
        .into_iter()
        .map(|(_, v)| v.value)
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(nodes)
}

/// One live node, if registered.
pub async fn get_node(
    store: &dyn MetaStore,
    name: &str,
) -> Result<Option<NodeRecord>, ControlError> {
    Ok(get_json::<NodeRecord, _>(store, &node_key(name)?)
        .await?
        .map(|v| v.value))
}

/// Runs until `stop`, registering the node again whenever its lease is lost (the store
/// was out of reach for longer than the TTL, so the record is gone) and rewriting its
/// record whenever `feed` says the node's exports changed. Returns the registration held
/// at the end, if any.
pub async fn stay_registered(
    store: Arc<dyn MetaStore>,
    mut reg: Registration,
    ttl: Duration,
    mut feed: RecordFeed,
    stop: impl std::future::Future<Output = ()>,
) -> Option<Registration> {
    const RETRY: Duration = Duration::from_millis(500);
    tokio::pin!(stop);
    // A record the store has not taken yet (it was out of reach): tried again every RETRY.
    let mut unpublished: Option<NodeRecord> = None;
    loop {
        tokio::select! {
            () = &mut stop => return Some(reg),
            reason = meta::wait_lost(reg.subscribe()) => {
                tracing::warn!(?reason, "registration lease lost; registering again");
            }
            record = feed.changed() => {
                unpublished = publish_record(store.as_ref(), &mut reg, record).await;
                continue;
            }
            () = tokio::time::sleep(RETRY), if unpublished.is_some() => {
                if let Some(record) = unpublished.take() {
                    unpublished = publish_record(store.as_ref(), &mut reg, record).await;
                }
                continue;
            }
        }
        let record = feed.current();
        unpublished = None;
        drop(reg);
        reg = loop {
            tokio::select! {
                () = &mut stop => return None,
                () = tokio::time::sleep(RETRY) => {}
            }
            match register_node(store.clone(), feed.current(), ttl).await {
                Ok(r) => break r,
                Err(e) => tracing::warn!("registering again: {e}"),
            }
        };
        tracing::info!(node = %record.name, "registered again in the metadata store");
    }
}

/// Rewrites the record; on failure hands it back to be tried again.
pub(crate) async fn publish_record(
    store: &dyn MetaStore,
    reg: &mut Registration,
    record: NodeRecord,
) -> Option<NodeRecord> {
    if *reg.record() == record {
        return None;
    }
    match reg.update(store, record.clone()).await {
        Ok(()) => {
            tracing::debug!(node = %record.name, subsystems = record.subsystems.len(), "node record updated");
            None
        }
        Err(e) => {
            tracing::warn!(node = %record.name, "updating the node record: {e} (trying again)");
            Some(record)
        }
    }
}

/// How long a burst of export changes (a processor node adding every volume at start) is
/// gathered into one record update.
const FEED_SETTLE: Duration = Duration::from_millis(50);

/// Where a node's record comes from: built afresh on demand, with a signal when it may
/// have changed (the node target's discovery generation: subsystems, access lists,
/// listeners).
pub struct RecordFeed {
    build: Box<dyn Fn() -> NodeRecord + Send + Sync>,
    changes: Option<watch::Receiver<u64>>,
    /// A change was seen but not yet returned (the settle wait was cancelled).
    pending: bool,
}

impl RecordFeed {
    /// A record that never changes.
    pub fn fixed(record: NodeRecord) -> RecordFeed {
        RecordFeed {
            build: Box::new(move || record.clone()),
            changes: None,
            pending: false,
        }
    }

    /// `build` again whenever `target`'s exports change.
    pub fn following(
        target: &nvmf_target::Target,
        build: impl Fn() -> NodeRecord + Send + Sync + 'static,
    ) -> RecordFeed {
        let mut changes = target.discovery_changes();
        changes.borrow_and_update();
        RecordFeed {
            build: Box::new(build),
            changes: Some(changes),
            pending: false,
        }
    }

    /// The record as of now.
    pub fn current(&self) -> NodeRecord {
        (self.build)()
    }

    /// Waits for a change (pending forever for a fixed record or once the target is
    /// gone), lets a burst settle, and returns the record as of then. Cancel safe: a
    /// change seen by a cancelled call is returned by the next one.
    pub async fn changed(&mut self) -> NodeRecord {
        let Some(rx) = self.changes.as_mut() else {
            return std::future::pending().await;
        };
        if !self.pending {
            if rx.changed().await.is_err() {
                self.changes = None;
                return std::future::pending().await;
            }
            self.pending = true;
        }
        tokio::time::sleep(FEED_SETTLE).await;
        rx.borrow_and_update();
        self.pending = false;
        self.current()
    }
}

/// A registration kept alive and current in the background ([`stay_registered`] on a
/// task) until [`LiveRegistration::stop`].
pub struct LiveRegistration {
    node: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Option<Registration>>,
}

impl LiveRegistration {
    /// Registers the feed's current record under a lease of `ttl` and keeps it so.
    pub async fn start(
        store: Arc<dyn MetaStore>,
        feed: RecordFeed,
        ttl: Duration,
    ) -> Result<LiveRegistration, ControlError> {
        let record = feed.current();
        let node = record.name.clone();
        let reg = register_node(store.clone(), record, ttl).await?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(stay_registered(store, reg, ttl, feed, async move {
            let _ = stop_rx.await;
        }));
        Ok(LiveRegistration {
            node,
            stop: Some(stop_tx),
            task,
        })
    }

    /// Stops the renewals and revokes the lease: the record goes at once.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match (&mut self.task).await {
            Ok(Some(reg)) => reg.stop().await,
            Ok(None) => {}
            Err(e) => tracing::warn!(node = %self.node, "registration task: {e}"),
        }
    }
}

impl Drop for LiveRegistration {
    fn drop(&mut self) {
        // Not stopped: like a crash, the lease expires on its own.
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::NodeRole;
    use meta::{EmbeddedOptions, EmbeddedStore};

    fn record(name: &str) -> NodeRecord {
        NodeRecord::new(
            name,
            NodeRole::Processor,
            vec!["127.0.0.1:4420".parse().expect("addr")],
        )
    }

    #[tokio::test]
    async fn register_list_stop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn MetaStore> = Arc::new(
            EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
                .await
                .expect("open"),
        );
        let a = register_node(store.clone(), record("a"), Duration::from_secs(5))
            .await
            .expect("register a");
        let b = register_node(store.clone(), record("b"), Duration::from_secs(5))
            .await
            .expect("register b");
        assert_ne!(a.lease_id(), b.lease_id());
        assert!(a.is_valid());
        let names: Vec<String> = list_nodes(store.as_ref())
            .await
            .expect("list")
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
        let mut rx = a.subscribe();
        a.stop().await;
        assert!(matches!(*rx.borrow_and_update(), LeaseState::Lost(_)));
        assert!(get_node(store.as_ref(), "a").await.expect("get").is_none());
        assert!(get_node(store.as_ref(), "b").await.expect("get").is_some());
        b.stop().await;
        assert!(list_nodes(store.as_ref()).await.expect("list").is_empty());
    }

    #[tokio::test]
    async fn slots_are_smallest_free_and_stable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
            .await
            .expect("open");
        assert_eq!(claim_processor_slot(&store, "p1").await.expect("p1"), 0);
        assert_eq!(claim_processor_slot(&store, "p2").await.expect("p2"), 1);
        assert_eq!(claim_processor_slot(&store, "p1").await.expect("p1"), 0);
        // Concurrent claims by different names never share a slot.
        let store = Arc::new(store);
        let tasks: Vec<_> = (3..9)
            .map(|i| {
                let s = store.clone();
                tokio::spawn(
                    async move { claim_processor_slot(s.as_ref(), &format!("p{i}")).await },
                )
            })
            .collect();
        let mut slots = BTreeSet::new();
        for t in tasks {
            let s = t.await.expect("join").expect("claim");
            assert!(slots.insert(s), "slot {s} twice: {slots:?}");
        }
        assert_eq!(slots, (2..8).collect());
        assert!(
            claim_processor_slot(store.as_ref(), "bad/name")
                .await
                .is_err()
        );
    }
}
