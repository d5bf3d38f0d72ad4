//! Object pools: the Key Value namespaces S3 gateways keep object shards in. `create`
//! makes one KV namespace on each storage node named (Namespace Management over the
//! fabric, CSI 01h) and records them under `/ferrobay/object-pools/<name>`; `add` grows
//! a pool the same way. Gateways follow the record ([`follow_pool`]). The failure domain
//! of a namespace is its storage node. Namespaces are never removed from a record: the
//! shard maps of stored objects name them.

use std::collections::HashSet;
use std::time::Duration;

use meta::schema::{encode_json, get_json, list_json};
use meta::{Expect, MetaError, MetaStore, Txn, TxnOutcome};
use nvmf_host::HostIdentity;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::nsmgmt::{self, AllocatedNamespace, NamespaceKind};
use super::{now_unix_ms, storage_nodes};
use crate::error::ControlError;
use crate::records::{
    KvNamespaceRecord, NodeRecord, OBJECT_POOLS, ObjectPoolRecord, object_pool_key,
};

/// The pool `ferrobay s3 pool create` and `ferrobay s3 run --meta` use by default.
pub const DEFAULT_POOL: &str = "default";
/// The smallest KV namespace a pool takes (the KV engine needs 8 log segments).
pub const MIN_NAMESPACE_BYTES: u64 = 64 << 20;
/// Rounds of read-modify-write of a pool record before giving up.
const CAS_ATTEMPTS: usize = 16;

/// `ferrobay s3 pool create` / `add`: one new KV namespace of `size_bytes` on each of
/// `storage_nodes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolNamespaces {
    pub pool: String,
    pub storage_nodes: Vec<String>,
    pub size_bytes: u64,
}

fn check(req: &PoolNamespaces) -> Result<(), ControlError> {
    meta::schema::validate_name(&req.pool)?;
    if req.storage_nodes.is_empty() {
        return Err(ControlError::Invalid(
            "give the storage nodes to make KV namespaces on (--storage-nodes n1,n2,n3)".into(),
        ));
    }
    let mut seen = HashSet::new();
    for n in &req.storage_nodes {
        if !seen.insert(n.as_str()) {
            return Err(ControlError::Invalid(format!(
                "{n} is listed twice: one namespace per storage node (failure domain)"
            )));
        }
    }
    if req.size_bytes < MIN_NAMESPACE_BYTES {
        return Err(ControlError::Invalid(format!(
            "namespace size {} bytes is below the {} MiB a KV namespace needs",
            req.size_bytes,
            MIN_NAMESPACE_BYTES >> 20
        )));
    }
    Ok(())
}

/// The store id of a namespace: `<node>/<drive>/<nsid>` (the drive from the node's
/// subsystem NQN `...:<node>:<drive>`).
fn store_id(node: &str, ns: &AllocatedNamespace) -> String {
    let drive = ns
        .subnqn
        .rsplit_once(&format!(":{node}:"))
        .map_or(ns.subnqn.as_str(), |(_, d)| d);
    format!("{node}/{drive}/{}", ns.nsid)
}

fn record_of(node: &NodeRecord, ns: &AllocatedNamespace) -> KvNamespaceRecord {
    KvNamespaceRecord {
        id: store_id(&node.name, ns),
        url: ns.url(),
        storage_node: Some(node.name.clone()),
        failure_domain: node.name.clone(),
        size_bytes: ns.size_bytes,
        added_unix_ms: now_unix_ms(),
    }
}

/// Makes the namespaces; on any failure deletes the ones made so far.
async fn allocate_all(
    store: &dyn MetaStore,
    nodes: &[NodeRecord],
    size_bytes: u64,
    host: &HostIdentity,
) -> Result<Vec<(NodeRecord, AllocatedNamespace)>, ControlError> {
    let mut made: Vec<(NodeRecord, AllocatedNamespace)> = Vec::new();
    for node in nodes {
        match nsmgmt::allocate(store, node, NamespaceKind::KeyValue, size_bytes, host).await {
            Ok(ns) => made.push((node.clone(), ns)),
            Err(e) => {
                release_all(&made, host).await;
                return Err(e);
            }
        }
    }
    Ok(made)
}

async fn release_all(made: &[(NodeRecord, AllocatedNamespace)], host: &HostIdentity) {
    for (node, ns) in made {
        nsmgmt::release(node, ns, host).await;
    }
}

/// Creates pool `req.pool` with one KV namespace on each storage node. A failure leaves
/// nothing behind (the namespaces made are deleted again).
pub async fn create_pool(
    store: &dyn MetaStore,
    req: &PoolNamespaces,
    host: &HostIdentity,
) -> Result<ObjectPoolRecord, ControlError> {
    check(req)?;
    let key = object_pool_key(&req.pool)?;
    if store.get(&key).await?.is_some() {
        return Err(pool_exists(&req.pool));
    }
    let nodes = storage_nodes(store, &req.storage_nodes).await?;
    let made = allocate_all(store, &nodes, req.size_bytes, host).await?;
    let record = ObjectPoolRecord {
        name: req.pool.clone(),
        namespaces: made.iter().map(|(n, ns)| record_of(n, ns)).collect(),
        created_unix_ms: now_unix_ms(),
    };
    let txn = Txn::new().when(key.as_str(), Expect::Absent).put(
        key.as_str(),
        encode_json(&record)?,
        None,
    );
    let committed = match store.txn(txn).await {
        Ok(TxnOutcome::Committed { .. }) => Ok(()),
        Ok(TxnOutcome::Failed { .. }) => Err(pool_exists(&req.pool)),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = committed {
        release_all(&made, host).await;
        return Err(e);
    }
    tracing::info!(pool = %record.name, namespaces = record.namespaces.len(), "object pool created");
    Ok(record)
}

fn pool_exists(name: &str) -> ControlError {
    ControlError::Conflict(format!("an object pool named {name:?} exists already"))
}

fn no_pool(name: &str) -> ControlError {
    ControlError::NotFound(format!(
        "no object pool named {name:?} (create it with `ferrobay s3 pool create`)"
    ))
}

/// Adds one KV namespace on each storage node to an existing pool (gateways following
/// the pool start placing new objects on them). A failure leaves the pool as it was.
pub async fn add_to_pool(
    store: &dyn MetaStore,
    req: &PoolNamespaces,
    host: &HostIdentity,
) -> Result<ObjectPoolRecord, ControlError> {
    check(req)?;
    let key = object_pool_key(&req.pool)?;
    if store.get(&key).await?.is_none() {
        return Err(no_pool(&req.pool));
    }
    let nodes = storage_nodes(store, &req.storage_nodes).await?;
    let made = allocate_all(store, &nodes, req.size_bytes, host).await?;
    let added: Vec<KvNamespaceRecord> = made.iter().map(|(n, ns)| record_of(n, ns)).collect();
    let r = append(store, &key, &req.pool, &added).await;
    if r.is_err() {
        release_all(&made, host).await;
    }
    r
}

async fn append(
    store: &dyn MetaStore,
    key: &str,
    pool: &str,
    added: &[KvNamespaceRecord],
) -> Result<ObjectPoolRecord, ControlError> {
    for _ in 0..CAS_ATTEMPTS {
        let Some(current) = get_json::<ObjectPoolRecord, _>(store, key).await? else {
            return Err(no_pool(pool));
        };
        let mut record = current.value;
        for ns in added {
            if record.namespaces.iter().any(|n| n.id == ns.id) {
                return Err(ControlError::Conflict(format!(
                    "pool {pool} already has a namespace {}",
                    ns.id
                )));
            }
        }
        record.namespaces.extend(added.iter().cloned());
        let txn = Txn::new()
            .when(key, Expect::ModRevision(current.revision))
            .put(key, encode_json(&record)?, None);
        if let TxnOutcome::Committed { .. } = store.txn(txn).await? {
            tracing::info!(pool, added = added.len(), "object pool grown");
            return Ok(record);
        }
    }
    Err(ControlError::Conflict(format!(
        "pool {pool} kept changing while namespaces were added: try again"
    )))
}

/// One pool's record, if it exists.
pub async fn get_pool(
    store: &dyn MetaStore,
    name: &str,
) -> Result<Option<ObjectPoolRecord>, ControlError> {
    Ok(
        get_json::<ObjectPoolRecord, _>(store, &object_pool_key(name)?)
            .await?
            .map(|v| v.value),
    )
}

/// Every pool, sorted by name.
pub async fn list_pools(store: &dyn MetaStore) -> Result<Vec<ObjectPoolRecord>, ControlError> {
    let mut v: Vec<ObjectPoolRecord> = list_json::<ObjectPoolRecord, _>(store, OBJECT_POOLS)
        .await?
        .items
        .into_iter()
        .map(|(_, v)| v.value)
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(v)
}

/// How long [`follow_pool`] waits before it reads the record again after the store
/// failed.
const FOLLOW_RETRY: Duration = Duration::from_secs(1);

/// Follows a pool's record: the receiver holds the current record (`None` while there
/// is none) and changes with every update, until the receiver is dropped. Store errors
/// are logged and retried; a watch that falls behind the history reads the record again.
pub async fn follow_pool(
    store: std::sync::Arc<dyn MetaStore>,
    name: &str,
) -> Result<watch::Receiver<Option<ObjectPoolRecord>>, ControlError> {
    let key = object_pool_key(name)?;
    let first = get_json::<ObjectPoolRecord, _>(store.as_ref(), &key).await?;
    let revision = first.as_ref().map_or(0, |v| v.revision);
    let (tx, rx) = watch::channel(first.map(|v| v.value));
    tokio::spawn(follow_loop(store, key, revision, tx));
    Ok(rx)
}

async fn follow_loop(
    store: std::sync::Arc<dyn MetaStore>,
    key: String,
    mut seen_revision: u64,
    tx: watch::Sender<Option<ObjectPoolRecord>>,
) {
    use futures::StreamExt;
    loop {
        if tx.is_closed() {
            return;
        }
        // Read, then watch from the next revision: no change falls between.
        let read = async {
            let listing = store.list(&key).await?;
            let rev = listing.revision;
            let kv = listing.kvs.into_iter().find(|kv| kv.key == key);
            Ok::<_, MetaError>((rev, kv))
        }
        .await;
        let (rev, kv) = match read {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(%key, "reading the object pool: {e}; retrying");
                tokio::time::sleep(FOLLOW_RETRY).await;
                continue;
            }
        };
        let mod_rev = kv.as_ref().map_or(0, |kv| kv.mod_revision);
        if mod_rev != seen_revision {
            seen_revision = mod_rev;
            let value = match kv
                .as_ref()
                .map(meta::schema::decode_json::<ObjectPoolRecord>)
            {
                Some(Ok(v)) => Some(v.value),
                Some(Err(e)) => {
                    tracing::error!(%key, "object pool record unreadable: {e}; keeping the last one");
                    tx.borrow().clone()
                }
                None => None,
            };
            tx.send_replace(value);
        }
        let mut watch = match store.watch(&key, rev + 1).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(%key, "watching the object pool: {e}; retrying");
                tokio::time::sleep(FOLLOW_RETRY).await;
                continue;
            }
        };
        loop {
            tokio::select! {
                () = tx.closed() => return,
                item = watch.next() => match item {
                    // Any change of the key: read it again (one code path for put,
                    // delete and a compacted history).
                    Some(Ok(batch)) if batch.events.iter().any(|e| e.key() == key) => break,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::debug!(%key, "pool watch: {e}; reading again");
                        break;
                    }
                    None => {
                        tokio::time::sleep(FOLLOW_RETRY).await;
                        break;
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked() {
        let ok = PoolNamespaces {
            pool: "default".into(),
            storage_nodes: vec!["n1".into(), "n2".into()],
            size_bytes: 1 << 30,
        };
        check(&ok).expect("valid");
        let twice = PoolNamespaces {
            storage_nodes: vec!["n1".into(), "n1".into()],
            ..ok.clone()
        };
        assert!(check(&twice).unwrap_err().to_string().contains("twice"));
        let small = PoolNamespaces {
            size_bytes: 1 << 20,
            ..ok.clone()
        };
        assert!(check(&small).unwrap_err().to_string().contains("64 MiB"));
        let none = PoolNamespaces {
            storage_nodes: vec![],
            ..ok.clone()
        };
        assert!(check(&none).is_err());
        let bad = PoolNamespaces {
            pool: "a/b".into(),
            ..ok
        };
        assert!(check(&bad).is_err());
    }

    #[test]
    fn store_ids_name_node_drive_and_nsid() {
        let ns = AllocatedNamespace {
            node: "n1".into(),
            addrs: vec!["127.0.0.1:4420".parse().expect("addr")],
            subnqn: "nqn.2026-01.io.ferrobay:n1:d0".into(),
            nsid: 3,
            size_bytes: 1 << 30,
        };
        assert_eq!(store_id("n1", &ns), "n1/d0/3");
    }

    #[tokio::test]
    async fn followers_see_every_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: std::sync::Arc<dyn MetaStore> = std::sync::Arc::new(
            meta::EmbeddedStore::open(dir.path(), meta::EmbeddedOptions::default())
                .await
                .expect("open"),
        );
        let mut rx = follow_pool(store.clone(), "p").await.expect("follow");
        assert!(rx.borrow().is_none());
        let mut record = ObjectPoolRecord {
            name: "p".into(),
            namespaces: vec![],
            created_unix_ms: 1,
        };
        let key = object_pool_key("p").expect("key");
        store
            .put(&key, encode_json(&record).expect("json"))
            .await
            .expect("put");
        tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .expect("in time")
            .expect("changed");
        assert_eq!(rx.borrow_and_update().as_ref(), Some(&record));
        record.namespaces.push(KvNamespaceRecord {
            id: "n1/d0/1".into(),
            url: "nvme+tcp://127.0.0.1:4420/nqn.2026-01.io.ferrobay:n1:d0/1".into(),
            storage_node: Some("n1".into()),
            failure_domain: "n1".into(),
            size_bytes: 1 << 30,
            added_unix_ms: 2,
        });
        store
            .put(&key, encode_json(&record).expect("json"))
            .await
            .expect("put");
        tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .expect("in time")
            .expect("changed");
        assert_eq!(rx.borrow_and_update().as_ref(), Some(&record));
        store.delete(&key).await.expect("delete");
        tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .expect("in time")
            .expect("changed");
        assert!(rx.borrow().is_none());
    }
}
