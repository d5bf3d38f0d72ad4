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
/// was out of reach for longer than the TTL, so the record is gone). Returns the
/// registration held at the end, if any.
pub async fn stay_registered(
    store: Arc<dyn MetaStore>,
    mut reg: Registration,
    ttl: Duration,
    stop: impl std::future::Future<Output = ()>,
) -> Option<Registration> {
    const RETRY: Duration = Duration::from_millis(500);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return Some(reg),
            reason = meta::wait_lost(reg.subscribe()) => {
                tracing::warn!(?reason, "registration lease lost; registering again");
            }
        }
        let record = reg.record().clone();
        drop(reg);
        reg = loop {
            tokio::select! {
                () = &mut stop => return None,
                () = tokio::time::sleep(RETRY) => {}
            }
            match register_node(store.clone(), record.clone(), ttl).await {
                Ok(r) => break r,
                Err(e) => tracing::warn!("registering again: {e}"),
            }
        };
        tracing::info!(node = %record.name, "registered again in the metadata store");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::NodeRole;
    use meta::{EmbeddedOptions, EmbeddedStore};

    fn record(name: &str) -> NodeRecord {
        NodeRecord {
            name: name.into(),
            role: NodeRole::Processor,
            nvme_addrs: vec!["127.0.0.1:4420".parse().expect("addr")],
            api_addr: None,
            slot: None,
            version: "test".into(),
            started_unix_ms: 1,
        }
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
