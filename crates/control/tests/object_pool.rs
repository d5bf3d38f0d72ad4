//! Object pools against real parts: storage nodes in this process on loopback with
//! sparse-file drives, the embedded store; KV namespaces made over NVMe/TCP (Namespace
//! Management, CSI 01h), used through objstore's NVMe/TCP KV shard store, and an S3
//! gateway on the pool that follows it when it grows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use control::ControlError;
use control::pool_gateway::{NvmeKvConnector, PoolGateway};
use control::provision::objpool::{PoolNamespaces, add_to_pool, create_pool, list_pools};
use control::records::s3_hostnqn;
use control::registration::Registration;
use meta::MetaStore;
use nvmf_host::HostIdentity;
use objstore::gateway::GatewayConfig;
use objstore::index::Index;
use objstore::s3::Credentials;
use objstore::shard::{NvmeKvShardStore, ShardError, ShardKey, ShardStore, StoreMode};
use storage_node::StorageNode;

use common::{embedded_store, local0, register_storage_node, start_node};

const MIB: u64 = 1 << 20;

fn host() -> HostIdentity {
    HostIdentity::from_hostnqn(&s3_hostnqn("test")).unwrap()
}

struct Cluster {
    store: Arc<dyn MetaStore>,
    nodes: Vec<(StorageNode, Registration)>,
    dir: tempfile::TempDir,
}

/// Storage nodes `n1..=count`, one 512 MiB sparse-file drive each, no namespace on it
/// (as `node run --meta` brings new drives up), registered.
async fn cluster(count: usize) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let store = embedded_store(&dir.path().join("meta")).await;
    // The nodes take the cluster's API token, as `node run --meta` does.
    let token = control::auth::cluster_token(store.as_ref()).await.unwrap();
    let mut nodes = Vec::new();
    for i in 1..=count {
        let name = format!("n{i}");
        let node = start_node(&name, &dir.path().join(&name), 512, &token).await;
        let reg = register_storage_node(&store, &name, &node).await;
        nodes.push((node, reg));
    }
    Cluster { store, nodes, dir }
}

fn req(pool: &str, nodes: &[&str]) -> PoolNamespaces {
    PoolNamespaces {
        pool: pool.into(),
        storage_nodes: nodes.iter().map(|s| s.to_string()).collect(),
        size_bytes: 64 * MIB,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_of_kv_namespaces_serve_shards_and_gateways_follow_them() {
    let c = cluster(3).await;
    let rec = create_pool(
        c.store.as_ref(),
        &req("default", &["n1", "n2", "n3"]),
        &host(),
    )
    .await
    .unwrap();
    let ids: Vec<&str> = rec.namespaces.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["n1/d0/1", "n2/d0/1", "n3/d0/1"]);
    assert!(
        rec.namespaces
            .iter()
            .all(|n| n.failure_domain == n.storage_node.clone().unwrap())
    );
    // The node made a KV namespace of the size asked for.
    let views = c.nodes[0].0.list_namespaces();
    assert_eq!(views.len(), 1);
    assert_eq!(
        (views[0].kind.as_str(), views[0].size_bytes),
        ("kv", 64 * MIB)
    );

    // Refused with the reason, nothing made: a pool that exists, a node that does not.
    let e = create_pool(c.store.as_ref(), &req("default", &["n1"]), &host())
        .await
        .unwrap_err();
    assert!(matches!(e, ControlError::Conflict(_)), "{e}");
    let e = create_pool(c.store.as_ref(), &req("other", &["n1", "n9"]), &host())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("n9"), "{e}");
    assert_eq!(
        c.nodes[0].0.list_namespaces().len(),
        1,
        "n1's namespace was deleted again"
    );
    let e = add_to_pool(c.store.as_ref(), &req("nope", &["n1"]), &host())
        .await
        .unwrap_err();
    assert!(matches!(e, ControlError::NotFound(_)), "{e}");

    // The shard store over NVMe/TCP keeps the KV contract.
    let ns = &rec.namespaces[0];
    let url = nvmf_host::NvmeTcpUrl::parse(&ns.url).unwrap();
    let s = NvmeKvShardStore::connect(
        &url,
        &ns.id,
        &ns.failure_domain,
        &host(),
        Default::default(),
    )
    .await
    .unwrap();
    let k = |b: u8| ShardKey([b; 16]);
    let value = Bytes::from((0..(1 << 20) + 48).map(|i| i as u8).collect::<Vec<u8>>());
    s.store(k(1), value.clone(), StoreMode::OnlyIfAbsent)
        .await
        .unwrap();
    assert_eq!(
        s.store(k(1), value.clone(), StoreMode::OnlyIfAbsent).await,
        Err(ShardError::KeyExists)
    );
    assert_eq!(
        s.store(k(2), value.clone(), StoreMode::OnlyIfExists).await,
        Err(ShardError::KeyNotFound)
    );
    let mut buf = vec![0u8; value.len()];
    assert_eq!(s.retrieve(k(1), &mut buf).await.unwrap(), value.len());
    assert_eq!(buf, value);
    let mut small = [0u8; 10];
    assert_eq!(s.retrieve(k(1), &mut small).await.unwrap(), value.len());
    assert_eq!(small[..], value[..10]);
    assert!(s.exist(k(1)).await.unwrap());
    assert!(!s.exist(k(2)).await.unwrap());
    s.store(k(3), Bytes::from_static(b"x"), StoreMode::Upsert)
        .await
        .unwrap();
    assert_eq!(s.list(ShardKey::MIN, 10).await.unwrap(), [k(1), k(3)]);
    assert_eq!(s.list(k(2), 10).await.unwrap(), [k(3)]);
    assert_eq!(s.list(ShardKey::MIN, 1).await.unwrap(), [k(1)]);
    s.delete(k(1)).await.unwrap();
    assert_eq!(s.delete(k(1)).await, Err(ShardError::KeyNotFound));
    assert_eq!(
        s.retrieve(k(1), &mut small).await,
        Err(ShardError::KeyNotFound)
    );
    s.delete(k(3)).await.unwrap();
    // A namespace that is not a KV one is refused.
    let bad = format!("{}/7", ns.url.rsplit_once('/').unwrap().0);
    let bad = nvmf_host::NvmeTcpUrl::parse(&bad).unwrap();
    let refused = NvmeKvShardStore::connect(&bad, "x", "n1", &host(), Default::default()).await;
    assert!(refused.is_err(), "namespace 7 does not exist");
    drop(s);

    // A gateway on the pool: objects round-trip, and it follows the pool as it grows.
    let index = Index::open(&format!("sqlite:{}", c.dir.path().join("i.db").display()))
        .await
        .unwrap();
    let config = GatewayConfig::new(
        local0(),
        Credentials {
            access_key: "root".into(),
            secret_key: "root-secret".into(),
        },
    );
    let gw = PoolGateway::start(
        c.store.clone(),
        "default",
        config,
        index,
        Arc::new(NvmeKvConnector::new(host())),
    )
    .await
    .unwrap();
    let s3 = testkit::s3::S3Client::new(gw.gateway().local_addr(), "root", "root-secret");
    assert_eq!(s3.create_bucket("bkt").await.status, 200);
    let body: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(s3.put("bkt", "obj", &body).await.status, 200);
    let got = s3.get("bkt", "obj").await;
    assert_eq!((got.status, got.complete), (200, true));
    assert!(got.body == body, "bytes differ");

    let mut count = gw.store_count();
    let grown = add_to_pool(
        c.store.as_ref(),
        &req("default", &["n1", "n2", "n3"]),
        &host(),
    )
    .await
    .unwrap();
    assert_eq!(grown.namespaces.len(), 6);
    tokio::time::timeout(Duration::from_secs(10), count.wait_for(|n| *n == 6))
        .await
        .expect("the gateway follows the pool")
        .unwrap();
    assert_eq!(list_pools(c.store.as_ref()).await.unwrap().len(), 1);
    let got = s3.get("bkt", "obj").await;
    assert!(got.status == 200 && got.body == body);
    gw.shutdown().await;
    for (node, reg) in c.nodes {
        reg.stop().await;
        node.shutdown().await.unwrap();
    }
}
