//! An S3 gateway on an object pool of the cluster: the shard stores are the pool's KV
//! namespaces (`/ferrobay/object-pools/<pool>`, [`crate::provision::objpool`]), each
//! connected in the background (a storage node that is down counts as an unavailable
//! store, and its shards are healed when it returns), and the gateway follows the
//! record: namespaces added to the pool become stores of the running gateway.
//!
//! How a namespace is reached is the [`KvConnector`]'s business (NVMe/TCP KV in
//! production, anything implementing `ShardStore` in tests).

use std::collections::BTreeMap;
use std::sync::Arc;

use meta::MetaStore;
use objstore::gateway::{Gateway, GatewayConfig, GatewayError, replace_stores};
use objstore::index::Index;
use objstore::objects::ObjectLayer;
use objstore::shard::{ConnectFuture, LazyShardStore, NvmeKvShardStore, ShardStore};
use tokio::sync::watch;

use crate::error::ControlError;
use crate::provision::objpool::follow_pool;
use crate::records::{KvNamespaceRecord, ObjectPoolRecord};

/// Opens the shard store of one KV namespace (one attempt; retried with backoff).
pub trait KvConnector: Send + Sync + 'static {
    fn connect(&self, ns: &KvNamespaceRecord) -> ConnectFuture;
}

/// Connects KV namespaces over NVMe/TCP under one host identity (objstore's
/// `NvmeKvShardStore`, default options: a store whose node is down answers Unavailable
/// within about 0.5 s).
pub struct NvmeKvConnector {
    host: nvmf_host::HostIdentity,
}

impl NvmeKvConnector {
    pub fn new(host: nvmf_host::HostIdentity) -> NvmeKvConnector {
        NvmeKvConnector { host }
    }
}

impl KvConnector for NvmeKvConnector {
    fn connect(&self, ns: &KvNamespaceRecord) -> ConnectFuture {
        let (url, id, domain, host) = (
            ns.url.clone(),
            ns.id.clone(),
            ns.failure_domain.clone(),
            self.host.clone(),
        );
        Box::pin(async move {
            let parsed = nvmf_host::NvmeTcpUrl::parse(&url).map_err(|e| e.to_string())?;
            let store = NvmeKvShardStore::connect(&parsed, id, domain, &host, Default::default())
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            Ok(Arc::new(store) as Arc<dyn ShardStore>)
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PoolGatewayError {
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error(
        "no object pool named {0:?} in the metadata store (create it with \
         `ferrobay s3 pool create --storage-nodes ...`)"
    )]
    NoPool(String),
    #[error("object pool {pool}: {source}")]
    Gateway { pool: String, source: GatewayError },
}

/// A running gateway on a pool. Stop it with [`PoolGateway::shutdown`].
pub struct PoolGateway {
    gateway: Gateway,
    pool: String,
    follower: tokio::task::JoinHandle<()>,
    stores: watch::Receiver<usize>,
}

/// The stores of a pool record, reusing the ones already made (by namespace id).
fn stores_for(
    record: &ObjectPoolRecord,
    made: &mut BTreeMap<String, Arc<LazyShardStore>>,
    connector: &Arc<dyn KvConnector>,
) -> Vec<Arc<dyn ShardStore>> {
    for ns in &record.namespaces {
        if made.contains_key(&ns.id) {
            continue;
        }
        let (c, n) = (connector.clone(), ns.clone());
        let store = LazyShardStore::connect(
            ns.id.clone(),
            ns.failure_domain.clone(),
            Box::new(move || c.connect(&n)),
        );
        made.insert(ns.id.clone(), Arc::new(store));
    }
    // Namespaces that left the record stay: shard maps may still name them.
    made.values()
        .map(|s| s.clone() as Arc<dyn ShardStore>)
        .collect()
}

/// The pool's stores, connected (each waited for briefly, then left connecting in the
/// background), without a gateway: for tools that read the stores (`ferrobay s3 check`).
pub async fn connect_pool_stores(
    meta: Arc<dyn MetaStore>,
    pool: &str,
    connector: Arc<dyn KvConnector>,
) -> Result<Vec<Arc<dyn ShardStore>>, PoolGatewayError> {
    let record = crate::provision::objpool::get_pool(meta.as_ref(), pool)
        .await?
        .ok_or_else(|| PoolGatewayError::NoPool(pool.to_string()))?;
    let mut made = BTreeMap::new();
    let stores = stores_for(&record, &mut made, &connector);
    wait_connected(&made).await;
    Ok(stores)
}

impl PoolGateway {
    /// Reads pool `pool`, connects its namespaces (in the background) and starts the
    /// gateway; then follows the pool record until shutdown.
    pub async fn start(
        meta: Arc<dyn MetaStore>,
        pool: &str,
        config: GatewayConfig,
        index: Index,
        connector: Arc<dyn KvConnector>,
    ) -> Result<PoolGateway, PoolGatewayError> {
        let mut records = follow_pool(meta, pool).await?;
        let Some(record) = records.borrow_and_update().clone() else {
            return Err(PoolGatewayError::NoPool(pool.to_string()));
        };
        let mut made = BTreeMap::new();
        let stores = stores_for(&record, &mut made, &connector);
        wait_connected(&made).await;
        let (count_tx, count_rx) = watch::channel(stores.len());
        let gateway = Gateway::start(config, index, stores)
            .await
            .map_err(|source| PoolGatewayError::Gateway {
                pool: pool.to_string(),
                source,
            })?;
        tracing::info!(
            pool,
            namespaces = record.namespaces.len(),
            "S3 gateway on object pool"
        );
        let follower = tokio::spawn(follow(
            gateway.layer().clone(),
            pool.to_string(),
            records,
            made,
            connector,
            count_tx,
        ));
        Ok(PoolGateway {
            gateway,
            pool: pool.to_string(),
            follower,
            stores: count_rx,
        })
    }

    pub fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    pub fn pool(&self) -> &str {
        &self.pool
    }

    /// How many shard stores the gateway uses now, and its changes.
    pub fn store_count(&self) -> watch::Receiver<usize> {
        self.stores.clone()
    }

    pub async fn shutdown(self) {
        self.follower.abort();
        self.gateway.shutdown().await;
    }
}

/// Gives the stores a moment to connect before the gateway serves (so that the first
/// requests do not find every store unavailable); a store that does not come in time
/// goes on connecting in the background.
async fn wait_connected(made: &BTreeMap<String, Arc<LazyShardStore>>) {
    let deadline = tokio::time::Instant::now() + FIRST_CONNECT_WAIT;
    for (id, store) in made {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !store.wait_connected(left).await {
            tracing::warn!(store = %id, "shard store not connected yet; serving without it meanwhile");
        }
    }
}

/// How long [`PoolGateway::start`] waits for the stores' first connections.
const FIRST_CONNECT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

async fn follow(
    layer: Arc<ObjectLayer>,
    pool: String,
    mut records: watch::Receiver<Option<ObjectPoolRecord>>,
    mut made: BTreeMap<String, Arc<LazyShardStore>>,
    connector: Arc<dyn KvConnector>,
    count: watch::Sender<usize>,
) {
    while records.changed().await.is_ok() {
        let Some(record) = records.borrow_and_update().clone() else {
            tracing::warn!(%pool, "the object pool's record is gone; keeping its stores");
            continue;
        };
        let before = made.len();
        let stores = stores_for(&record, &mut made, &connector);
        if made.len() == before {
            continue;
        }
        let n = stores.len();
        match replace_stores(&layer, stores) {
            Ok(()) => {
                tracing::info!(%pool, stores = n, added = n - before, "object pool changed: stores updated");
                count.send_replace(n);
            }
            Err(e) => tracing::error!(%pool, "object pool changed, stores not updated: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use meta::schema::encode_json;
    use objstore::s3::Credentials;
    use objstore::shard::{MemShardStore, ShardKey};

    use crate::records::object_pool_key;

    /// Namespaces are RAM stores made on first connect, kept by id.
    #[derive(Default)]
    struct MemConnector {
        stores: std::sync::Mutex<BTreeMap<String, Arc<MemShardStore>>>,
    }

    impl KvConnector for MemConnector {
        fn connect(&self, ns: &KvNamespaceRecord) -> ConnectFuture {
            let store = self
                .stores
                .lock()
                .expect("lock")
                .entry(ns.id.clone())
                .or_insert_with(|| Arc::new(MemShardStore::new(&ns.id, &ns.failure_domain)))
                .clone();
            Box::pin(async move { Ok(store as Arc<dyn ShardStore>) })
        }
    }

    fn ns(node: &str, nsid: u32) -> KvNamespaceRecord {
        KvNamespaceRecord {
            id: format!("{node}/d0/{nsid}"),
            url: format!("nvme+tcp://127.0.0.1:4420/nqn.2026-01.io.ferrobay:{node}:d0/{nsid}"),
            storage_node: Some(node.into()),
            failure_domain: node.into(),
            size_bytes: 1 << 30,
            added_unix_ms: 1,
        }
    }

    #[tokio::test]
    async fn follows_the_pool_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let meta: Arc<dyn MetaStore> = Arc::new(
            meta::EmbeddedStore::open(&dir.path().join("meta"), meta::EmbeddedOptions::default())
                .await
                .expect("open"),
        );
        let index = Index::open(&format!("sqlite:{}", dir.path().join("i.db").display()))
            .await
            .expect("index");
        let config = GatewayConfig::new(
            "127.0.0.1:0".parse().expect("addr"),
            Credentials {
                access_key: "k".into(),
                secret_key: "secret-key".into(),
            },
        );
        let connector = Arc::new(MemConnector::default());
        let missing = PoolGateway::start(
            meta.clone(),
            "default",
            config.clone(),
            index.clone(),
            connector.clone(),
        )
        .await
        .err()
        .expect("no pool yet");
        assert!(missing.to_string().contains("s3 pool create"), "{missing}");

        let key = object_pool_key("default").expect("key");
        let mut record = ObjectPoolRecord {
            name: "default".into(),
            namespaces: vec![ns("n1", 1), ns("n2", 1)],
            created_unix_ms: 1,
        };
        meta.put(&key, encode_json(&record).expect("json"))
            .await
            .expect("put");
        // 2+1 needs three failure domains.
        let short = PoolGateway::start(
            meta.clone(),
            "default",
            config.clone(),
            index.clone(),
            connector.clone(),
        )
        .await
        .err()
        .expect("two domains");
        assert!(short.to_string().contains("failure domains"), "{short}");

        record.namespaces.push(ns("n3", 1));
        meta.put(&key, encode_json(&record).expect("json"))
            .await
            .expect("put");
        let gw = PoolGateway::start(meta.clone(), "default", config, index, connector.clone())
            .await
            .expect("start");
        let mut count = gw.store_count();
        assert_eq!(*count.borrow_and_update(), 3);
        // A written piece lands on the pool's stores.
        let layer = gw.gateway().layer().clone();
        let mut w = layer
            .data()
            .writer(objstore::layout::Geometry { data: 2, parity: 1 })
            .expect("writer");
        w.write_stripe(&[7u8; 5000]).await.expect("write");
        let stored: usize = {
            let stores: Vec<_> = connector
                .stores
                .lock()
                .expect("lock")
                .values()
                .cloned()
                .collect();
            let mut n = 0;
            for s in stores {
                n += s.list(ShardKey::MIN, 100).await.expect("list").len();
            }
            n
        };
        assert_eq!(stored, 3);

        record.namespaces.push(ns("n4", 1));
        meta.put(&key, encode_json(&record).expect("json"))
            .await
            .expect("put");
        tokio::time::timeout(Duration::from_secs(5), count.changed())
            .await
            .expect("in time")
            .expect("changed");
        assert_eq!(*count.borrow(), 4);
        assert_eq!(layer.data().stores().len(), 4);
        assert!(layer.data().stores().get("n4/d0/1").is_some());
        gw.shutdown().await;
    }
}
