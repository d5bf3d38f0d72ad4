//! Provisioning against real parts: storage nodes in this process on loopback (port 0)
//! with sparse-file drives, the embedded store in a temp dir (and one test on a real etcd
//! server), namespaces made over NVMe/TCP, the volume assembled by another host.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use control::ControlError;
use control::api::{ApiClient, ApiConfig, ApiServer};
use control::provision::{
    CreateVolume, create_volume, delete_volume, list_volumes, request_move, volume_view,
};
use control::records::{
    HandoffRecord, LogLayout, NodeRecord, NodeRole, VolumeRecord, ana_group_key, handoff_key,
    processor_hostnqn,
};
use control::registration::{Registration, register_node};
use meta::MetaStore;
use meta::schema::get_json;
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl};
use storage_node::api::NamespaceView;
use storage_node::{NodeClient, StorageNode};
use volume::Volume;

use common::{TTL, embedded_store, local0, node_config, register_storage_node};

const MIB: u64 = 1 << 20;

fn provisioner() -> HostIdentity {
    HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:test:provisioner").unwrap()
}

struct Node {
    node: StorageNode,
    reg: Option<Registration>,
}

struct Cluster {
    store: Arc<dyn MetaStore>,
    nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Storage nodes `n0..` with one sparse-file drive each of the given size, their
    /// default whole-drive namespace deleted (as an operator frees a drive for
    /// provisioning), registered in `store` (a new embedded store when `None`).
    async fn start(drive_mib: &[u64], store: Option<Arc<dyn MetaStore>>) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let store = match store {
            Some(s) => s,
            None => embedded_store(&dir.path().join("meta")).await,
        };
        let mut nodes = Vec::new();
        let token = control::auth::cluster_token(store.as_ref()).await.unwrap();
        for (i, mib) in drive_mib.iter().enumerate() {
            let name = format!("n{i}");
            let node = start_node(&name, &dir.path().join(&name), *mib, &token).await;
            let c = NodeClient::new(node.http_addr().unwrap().to_string())
                .with_token(Some(token.as_str().to_string()));
            c.delete_namespace(&format!("nqn.2026-01.io.ferrobay:{name}:d0"), 1)
                .await
                .unwrap();
            let reg = register_storage_node(&store, &name, &node).await;
            nodes.push(Node {
                node,
                reg: Some(reg),
            });
        }
        Cluster {
            store,
            nodes,
            _dir: dir,
        }
    }

    fn client(&self, i: usize) -> NodeClient {
        let node = &self.nodes[i].node;
        NodeClient::new(node.http_addr().unwrap().to_string())
            .with_token(Some(node.api_token().as_str().to_string()))
    }

    async fn namespaces(&self, i: usize) -> Vec<NamespaceView> {
        self.client(i).list_namespaces().await.unwrap()
    }

    async fn namespace_counts(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for i in 0..self.nodes.len() {
            out.push(self.namespaces(i).await.len());
        }
        out
    }

    async fn stop(mut self) {
        for n in &mut self.nodes {
            if let Some(r) = n.reg.take() {
                r.stop().await;
            }
            n.node.shutdown().await.unwrap();
        }
    }
}

/// A storage node whose drive has the default whole-drive namespace (deleted again by
/// [`Cluster::start`]).
async fn start_node(
    name: &str,
    dir: &Path,
    drive_mib: u64,
    token: &httpapi::auth::Token,
) -> StorageNode {
    let mut cfg = node_config(name, dir, drive_mib, token);
    cfg.default_namespace = true;
    StorageNode::start(cfg).await.unwrap()
}

fn raid5(name: &str, size_bytes: u64, nodes: &[&str]) -> CreateVolume {
    CreateVolume {
        name: name.into(),
        level: "raid5".into(),
        size_bytes,
        storage_nodes: nodes.iter().map(|s| s.to_string()).collect(),
        preferred_owner: Some("p1".into()),
        ..CreateVolume::default()
    }
}

/// Opens the members as processor node `p` would (its own host NQN) and assembles.
async fn assemble_as(record: &VolumeRecord, processor: &str) -> Volume {
    let host = HostIdentity::from_hostnqn(&processor_hostnqn(processor)).unwrap();
    let mut devices: Vec<Arc<dyn BlockDevice>> = Vec::new();
    for m in &record.members {
        let url = NvmeTcpUrl::parse(&m.url).unwrap();
        devices.push(
            url.open_device(&host, &ConnectOptions::default())
                .await
                .unwrap(),
        );
    }
    Volume::assemble(devices).await.unwrap()
}

fn assert_invalid(r: Result<VolumeRecord, ControlError>, needle: &str) {
    match r {
        Err(ControlError::Invalid(m)) => {
            assert!(m.contains(needle), "{m:?} lacks {needle:?}");
            assert!(!m.contains('\n'), "{m:?}");
        }
        other => panic!("expected Invalid({needle}), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raid5_across_three_storage_nodes() {
    let c = Cluster::start(&[256, 256, 256], None).await;
    let store = c.store.as_ref();
    let host = provisioner();
    let size = 40 * MIB;
    let record = create_volume(store, &raid5("v1", size, &["n0", "n1", "n2"]), &host)
        .await
        .unwrap();

    assert_eq!(record.name, "v1");
    assert_eq!(record.level, "raid5");
    assert_eq!(record.size_bytes, size);
    assert_eq!(record.stripe_unit_bytes, 64 << 10);
    assert_eq!(record.block_size_bytes, 4096);
    assert_eq!(record.ana_group, 1);
    assert_eq!(record.preferred_owner.as_deref(), Some("p1"));
    assert!(!record.uuid.is_nil());
    assert!(record.spares.is_empty());
    for (i, m) in record.members.iter().enumerate() {
        let name = format!("n{i}");
        assert_eq!(m.storage_node.as_deref(), Some(name.as_str()));
        assert_eq!(m.failure_domain, name);
        let addr = c.nodes[i].node.nvme_addrs()[0];
        let nqn = format!("nqn.2026-01.io.ferrobay:{name}:d0");
        assert!(
            m.url.starts_with(&format!("nvme+tcp://{addr}/{nqn}/")),
            "{}",
            m.url
        );
        // The namespace exists on that node, shared with every host.
        let nsid: u32 = m.url.rsplit('/').next().unwrap().parse().unwrap();
        let nss = c.namespaces(i).await;
        assert_eq!(nss.len(), 1, "{nss:?}");
        let ns = &nss[0];
        assert_eq!((ns.subsystem_nqn.as_str(), ns.nsid), (nqn.as_str(), nsid));
        assert!(ns.attachment.all, "{:?}", ns.attachment);
        assert_eq!(ns.block_size_bytes, 4096);
        // Half of the volume per member (raid5 on 3) plus superblocks and journal.
        assert!(
            ns.size_bytes >= size / 2 && ns.size_bytes <= size / 2 + 16 * MIB,
            "{}",
            ns.size_bytes
        );
    }

    // The store: the record, its ANA group, nobody owning it yet.
    assert_eq!(list_volumes(store).await.unwrap(), vec![record.clone()]);
    let view = volume_view(store, "v1").await.unwrap().unwrap();
    assert_eq!(view.record, record);
    assert!(view.owner.is_none() && view.status.is_none());
    let group = get_json::<String, _>(store, &ana_group_key(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(group.value, "v1");

    // Another host (a processor node) sees the namespaces and assembles the volume clean.
    let vol = assemble_as(&record, "p1").await;
    assert_eq!(vol.uuid(), record.uuid);
    assert!(vol.size_bytes() >= size);
    assert!(vol.status().clean || vol.status().dirty_regions == 0);
    let pattern: Vec<u8> = (0..MIB as usize).map(|i| (i * 7 % 251) as u8).collect();
    let at = size - MIB;
    vol.write(at, IoBuf::from_slice(&pattern), WriteFlags { fua: true })
        .await
        .unwrap();
    vol.stop().await.unwrap();
    drop(vol);
    let vol = assemble_as(&record, "p2").await;
    let back = vol.read(at, IoBuf::new_zeroed(MIB as usize)).await.unwrap();
    assert!(
        back.as_slice() == pattern.as_slice(),
        "data read back differs"
    );
    vol.stop().await.unwrap();
    drop(vol);

    // A second volume gets the next ANA group; the name cannot be taken twice.
    let v2 = create_volume(store, &raid5("v2", 16 * MIB, &["n2", "n0", "n1"]), &host)
        .await
        .unwrap();
    assert_eq!(v2.ana_group, 2);
    assert_eq!(v2.members[0].storage_node.as_deref(), Some("n2"));
    assert_eq!(c.namespace_counts().await, [2, 2, 2]);
    match create_volume(store, &raid5("v2", 16 * MIB, &["n0", "n1", "n2"]), &host).await {
        Err(ControlError::Conflict(m)) => assert!(m.contains("v2"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.namespace_counts().await, [2, 2, 2]);

    // Delete frees the namespaces and the ANA group (reused by the next create).
    let gone = delete_volume(store, "v2", false, &host).await.unwrap();
    assert_eq!(gone.uuid, v2.uuid);
    assert_eq!(c.namespace_counts().await, [1, 1, 1]);
    assert!(store.get(&ana_group_key(2)).await.unwrap().is_none());
    assert!(volume_view(store, "v2").await.unwrap().is_none());
    assert!(matches!(
        delete_volume(store, "v2", false, &host).await,
        Err(ControlError::NotFound(_))
    ));
    let v3 = create_volume(store, &raid5("v3", 16 * MIB, &["n0", "n1", "n2"]), &host)
        .await
        .unwrap();
    assert_eq!(v3.ana_group, 2);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_fail_clearly_and_leave_no_namespaces() {
    // n2's drive is small: a create that needs more fails there, after n0 and n1.
    let c = Cluster::start(&[256, 256, 48], None).await;
    let store = c.store.as_ref();
    let host = provisioner();
    let all = ["n0", "n1", "n2"];

    assert_invalid(
        create_volume(store, &raid5("v", 16 * MIB, &["n0", "n1", "n9"]), &host).await,
        "n9",
    );
    assert_invalid(
        create_volume(store, &raid5("v", 16 * MIB, &["n0", "n0", "n1"]), &host).await,
        "listed twice",
    );
    assert_invalid(
        create_volume(store, &raid5("v", 16 * MIB, &["n0", "n1"]), &host).await,
        "raid5 with 2 member(s)",
    );
    assert_invalid(
        create_volume(store, &raid5("v", 0, &all), &host).await,
        "size",
    );
    assert_invalid(
        create_volume(store, &raid5("bad/name", 16 * MIB, &all), &host).await,
        "bad/name",
    );
    let mut r = raid5("v", 16 * MIB, &all);
    r.level = "raid7".into();
    assert_invalid(create_volume(store, &r, &host).await, "raid7");
    let mut r = raid5("v", 16 * MIB, &all);
    r.members = vec!["nvme+tcp://127.0.0.1:1/nqn.x:y/1".into()];
    assert_invalid(create_volume(store, &r, &host).await, "not both");
    let mut r = raid5("v", 16 * MIB, &[]);
    r.storage_nodes.clear();
    assert_invalid(create_volume(store, &r, &host).await, "storage nodes");
    let mut r = raid5("v", 16 * MIB, &[]);
    r.members = vec![
        "http://x".into(),
        "nvme+tcp://127.0.0.1:1/nqn.x:y/1".into(),
        "z".into(),
    ];
    assert_invalid(create_volume(store, &r, &host).await, "member");
    assert_eq!(c.namespace_counts().await, [0, 0, 0]);

    // n2 has no room: the namespaces made on n0 and n1 are deleted again.
    match create_volume(store, &raid5("big", 160 * MIB, &all), &host).await {
        Err(ControlError::Storage { node, reason }) => {
            assert_eq!(node, "n2");
            assert!(reason.contains("free"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.namespace_counts().await, [0, 0, 0]);
    assert!(list_volumes(store).await.unwrap().is_empty());
    assert!(
        store
            .list("/ferrobay/ana-groups/")
            .await
            .unwrap()
            .kvs
            .is_empty()
    );

    // Name taken: refused before anything is allocated.
    create_volume(store, &raid5("v", 16 * MIB, &all), &host)
        .await
        .unwrap();
    assert_eq!(c.namespace_counts().await, [1, 1, 1]);
    assert!(matches!(
        create_volume(store, &raid5("v", 16 * MIB, &all), &host).await,
        Err(ControlError::Conflict(_))
    ));
    assert_eq!(c.namespace_counts().await, [1, 1, 1]);

    // Moves: only to a live processor node, only of a volume that exists.
    match request_move(store, "v", "p9").await {
        Err(ControlError::Invalid(m)) => assert!(m.contains("p9"), "{m}"),
        other => panic!("{other:?}"),
    }
    match request_move(store, "v", "n0").await {
        Err(ControlError::Invalid(m)) => assert!(m.contains("not a processor"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        request_move(store, "nope", "n0").await,
        Err(ControlError::NotFound(_))
    ));
    c.stop().await;
}

fn processor_record(name: &str) -> NodeRecord {
    let mut r = NodeRecord::new(
        name,
        NodeRole::Processor,
        vec!["127.0.0.1:4420".parse().unwrap()],
    );
    r.slot = Some(0);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_api_end_to_end() {
    let c = Cluster::start(&[256, 256, 256], None).await;
    let server = ApiServer::start(
        local0(),
        ApiConfig {
            store: c.store.clone(),
            host: provisioner(),
            token: control::auth::cluster_token(c.store.as_ref())
                .await
                .unwrap(),
            node_name: "p1".into(),
            metrics: Some(Arc::new(|page: &mut httpapi::metrics::Page| {
                page.gauge("ferrobay_test_extra", "A family the test adds.")
                    .add(&[], 1);
            })),
            health: None,
            upgrade: None,
        },
    )
    .await
    .unwrap();
    let addr = server.local_addr().to_string();
    let token = control::auth::cluster_token(c.store.as_ref())
        .await
        .unwrap();
    let api = ApiClient::new(addr.clone()).with_token(Some(token.as_str().to_string()));
    let raw = api.http().clone();

    let record = api
        .create_volume(&raid5("web", 16 * MIB, &["n0", "n1", "n2"]))
        .await
        .unwrap();
    assert_eq!(record.members.len(), 3);
    assert_eq!(record.size_bytes, 16 * MIB);
    let views = api.list_volumes().await.unwrap();
    assert_eq!(views.len(), 1);
    assert_eq!(views[0].record, record);
    assert_eq!(api.volume("web").await.unwrap().unwrap().record, record);
    assert!(api.volume("nope").await.unwrap().is_none());

    // Status codes with one-line reasons.
    match api
        .create_volume(&raid5("web", 16 * MIB, &["n0", "n1", "n2"]))
        .await
    {
        Err(ControlError::Api {
            status: 409,
            message,
        }) => assert!(message.contains("web")),
        other => panic!("{other:?}"),
    }
    match api
        .create_volume(&raid5("x", 16 * MIB, &["n0", "n1", "n7"]))
        .await
    {
        Err(ControlError::Api {
            status: 400,
            message,
        }) => assert!(message.contains("n7")),
        other => panic!("{other:?}"),
    }
    let (status, body) = raw
        .request("POST", "/api/v1/volumes", Some(b"{".to_vec()))
        .await
        .unwrap();
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    let (status, _) = raw.request("GET", "/api/v1/nothing", None).await.unwrap();
    assert_eq!(status, 404);
    let (status, _) = raw.request("PUT", "/api/v1/volumes", None).await.unwrap();
    assert_eq!(status, 405);
    match api.move_volume("web", "p1").await {
        Err(ControlError::Api {
            status: 400,
            message,
        }) => assert!(message.contains("p1")),
        other => panic!("{other:?}"),
    }

    // A live processor node: the move is recorded for its owner to act on.
    let p1 = register_node(c.store.clone(), processor_record("p1"), TTL)
        .await
        .unwrap();
    api.move_volume("web", "p1").await.unwrap();
    let h = get_json::<HandoffRecord, _>(c.store.as_ref(), &handoff_key("web").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(h.value.to, "p1");
    let names: Vec<String> = api
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(names, ["n0", "n1", "n2", "p1"]);
    let text = api.metrics().await.unwrap();
    assert!(text.contains("ferrobay_cluster_volumes 1"), "{text}");
    assert!(
        text.contains("ferrobay_cluster_nodes{role=\"processor\"} 1"),
        "{text}"
    );
    assert!(text.contains("ferrobay_test_extra 1"), "{text}");

    // Owned: delete refused (409) unless forced; then it is gone (404).
    meta::schema::acquire_ownership(c.store.as_ref(), "web", "p1", p1.lease_id())
        .await
        .unwrap();
    assert!(
        text.contains("ferrobay_volume_owned{volume=\"web\"} 0"),
        "{text}"
    );
    match api.delete_volume("web", false).await {
        Err(ControlError::Api {
            status: 409,
            message,
        }) => assert!(message.contains("p1")),
        other => panic!("{other:?}"),
    }
    let gone = api.delete_volume("web", true).await.unwrap();
    assert_eq!(gone.uuid, record.uuid);
    assert_eq!(c.namespace_counts().await, [0, 0, 0]);
    assert!(api.volume("web").await.unwrap().is_none());
    assert!(
        c.store
            .get(&handoff_key("web").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    match api.delete_volume("web", false).await {
        Err(ControlError::Api { status: 404, .. }) => {}
        other => panic!("{other:?}"),
    }
    p1.stop().await;
    server.stop().await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_and_list_on_etcd() {
    let etcd = meta::testing::EtcdServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start the test etcd server: {e}"));
    let url = format!("etcd://{}", etcd.endpoint().trim_start_matches("http://"));
    let store = control::metaurl::open_meta(&url).await.unwrap();
    let c = Cluster::start(&[128, 128, 128], Some(store.clone())).await;
    let host = provisioner();
    let record = create_volume(
        store.as_ref(),
        &raid5("e1", 16 * MIB, &["n0", "n1", "n2"]),
        &host,
    )
    .await
    .unwrap();
    assert_eq!(record.ana_group, 1);
    assert_eq!(
        list_volumes(store.as_ref()).await.unwrap(),
        vec![record.clone()]
    );
    let view = volume_view(store.as_ref(), "e1").await.unwrap().unwrap();
    assert_eq!(view.record, record);
    assert_eq!(c.namespace_counts().await, [1, 1, 1]);
    let vol = assemble_as(&record, "p1").await;
    assert_eq!(vol.uuid(), record.uuid);
    vol.stop().await.unwrap();
    drop(vol);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_member_urls_are_used_as_given_and_kept_on_delete() {
    let c = Cluster::start(&[128, 128, 128], None).await;
    let store = c.store.as_ref();
    let host = provisioner();
    let mut urls = Vec::new();
    for i in 0..3 {
        let nqn = format!("nqn.2026-01.io.ferrobay:n{i}:d0");
        let ns = c
            .client(i)
            .create_namespace(&storage_node::api::CreateNamespaceRequest {
                subsystem_nqn: Some(nqn.clone()),
                size_bytes: 40 * MIB,
                block_size_bytes: Some(4096),
                ..Default::default()
            })
            .await
            .unwrap();
        let addr = c.nodes[i].node.nvme_addrs()[0];
        urls.push(format!("nvme+tcp://{addr}/{nqn}/{}", ns.nsid));
    }
    let mut req = raid5("given", 200 * MIB, &[]);
    req.storage_nodes.clear();
    req.members = urls.clone();
    // Too small for what is asked: refused, nothing recorded.
    match create_volume(store, &req, &host).await {
        Err(ControlError::Invalid(m)) => assert!(m.contains("usable bytes"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(list_volumes(store).await.unwrap().is_empty());

    // The refusal came before anything was written: the same members still do.
    req.size_bytes = 16 * MIB;
    let record = create_volume(store, &req, &host).await.unwrap();
    assert_eq!(record.size_bytes, 16 * MIB);
    assert_eq!(record.block_size_bytes, 4096);
    for (m, url) in record.members.iter().zip(&urls) {
        assert_eq!(&m.url, url);
        assert!(m.storage_node.is_none());
        assert!(url.contains(&m.failure_domain), "{}", m.failure_domain);
    }
    let vol = assemble_as(&record, "p1").await;
    assert_eq!(vol.uuid(), record.uuid);
    vol.stop().await.unwrap();
    drop(vol);
    // Not allocated here: left alone by delete.
    delete_volume(store, "given", false, &host).await.unwrap();
    assert_eq!(c.namespace_counts().await, [1, 1, 1]);
    c.stop().await;
}

/// `--layout log --compress zstd:3 --log-block 16k` on a cluster volume: the members are
/// sized for the log's capacity, the record and the superblocks carry the layout, another
/// host assembles the log (map replay from the members alone) and reads what was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_layout_with_compression_across_three_storage_nodes() {
    let c = Cluster::start(&[256, 256, 256], None).await;
    let store = c.store.as_ref();
    let host = provisioner();
    let size = 40 * MIB;
    let mut req = raid5("lz", size, &["n0", "n1", "n2"]);
    req.layout = Some("log".into());
    req.compress = Some("zstd:3".into());
    req.log_block_bytes = Some(16 << 10);
    let record = create_volume(store, &req, &host).await.unwrap();
    assert_eq!(
        record.log,
        Some(LogLayout {
            compression: volume::Compression::Zstd(3),
            block_bytes: 16 << 10,
        })
    );
    assert_eq!(record.size_bytes, size);
    // The log exports a share of the array: members larger than in place (half the
    // volume each on raid5 of 3), but not wastefully so.
    let member = c.namespaces(0).await[0].size_bytes;
    assert!(
        member > size / 2 + 4 * MIB && member < size * 2,
        "member of {member} bytes for a {size}-byte log volume"
    );
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(
        json["log"],
        serde_json::json!({"compression": {"codec": "zstd", "level": 3}, "block_bytes": 16384}),
        "{json}"
    );

    let vol = assemble_as(&record, "p1").await;
    assert!(vol.size_bytes() >= size, "{}", vol.size_bytes());
    let log = vol.status().log.expect("a log-layout volume");
    assert_eq!(log.compression, volume::Compression::Zstd(3));
    assert_eq!(log.block_bytes, 16 << 10);
    // Text-like pages compress; the last MiB of the exported size is written too.
    let text: Vec<u8> = (0..MIB as usize)
        .map(|i| b"ferrobay log layout, page "[i % 26] ^ ((i / 4096) as u8 & 1))
        .collect();
    for at in [0, 5 * MIB, size - MIB] {
        vol.write(at, IoBuf::from_slice(&text), WriteFlags { fua: true })
            .await
            .unwrap();
    }
    let log = vol.status().log.unwrap();
    assert_eq!(log.logical_bytes, 3 * MIB, "{log:?}");
    assert!(log.compression_ratio > 4.0, "{log:?}");
    vol.stop().await.unwrap();
    drop(vol);
    let vol = assemble_as(&record, "p2").await;
    for at in [0, 5 * MIB, size - MIB] {
        let back = vol.read(at, IoBuf::new_zeroed(MIB as usize)).await.unwrap();
        assert!(back.as_slice() == text.as_slice(), "data at {at} differs");
    }
    assert_eq!(vol.status().log.unwrap().logical_bytes, 3 * MIB);
    vol.stop().await.unwrap();
    drop(vol);

    // What cannot work is refused before any namespace is made, one line each.
    let counts = c.namespace_counts().await;
    let all = ["n0", "n1", "n2"];
    let mut r = raid5("bad", 16 * MIB, &all);
    r.level = "raid1".into();
    r.layout = Some("log".into());
    assert_invalid(create_volume(store, &r, &host).await, "parity level");
    let mut r = raid5("bad", 16 * MIB, &all);
    r.compress = Some("lz4".into());
    assert_invalid(
        create_volume(store, &r, &host).await,
        "needs the log layout",
    );
    let mut r = raid5("bad", 16 * MIB, &all);
    r.layout = Some("log".into());
    r.log_block_bytes = Some(3000);
    assert_invalid(create_volume(store, &r, &host).await, "4 KiB to 64 KiB");
    let mut r = raid5("bad", 16 * MIB, &all);
    r.layout = Some("log".into());
    r.compress = Some("gzip".into());
    assert_invalid(create_volume(store, &r, &host).await, "gzip");
    let mut r = raid5("bad", 16 * MIB, &all);
    r.layout = Some("journal".into());
    assert_invalid(create_volume(store, &r, &host).await, "in-place or log");
    assert_eq!(c.namespace_counts().await, counts);
    c.stop().await;
}
