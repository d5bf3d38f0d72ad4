//! QoS limits of a storage node: set, listed, cleared, persisted across restarts in node
//! state (version 3 and later), applied to the target, and a data dir written by the version 2
//! program (the committed vector) brought up and upgraded.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;

use nvmf_target::{QosKey, QosLimits};
use storage_node::api::QosEntry;
use storage_node::node::ErrorKind;
use storage_node::{NodeConfig, StorageNode};

const NQN: &str = "nqn.2026-01.io.ferrobay:n1:d0";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-00000000000a";

fn local0() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn config(data: &Path) -> NodeConfig {
    let mut cfg = NodeConfig::new("n1", data);
    cfg.listen = vec![local0()];
    cfg.discovery_listen = Some(local0());
    cfg
}

fn entry(nsid: Option<u32>, host: Option<&str>, limits: QosLimits) -> QosEntry {
    QosEntry {
        subsystem_nqn: NQN.into(),
        nsid,
        host_nqn: host.map(str::to_string),
        limits,
        stats: None,
    }
}

fn iops(n: u64) -> QosLimits {
    QosLimits {
        max_iops: Some(n),
        ..QosLimits::default()
    }
}

/// The format version of the data dir's current state file.
fn state_version(data: &Path) -> u32 {
    let b = std::fs::read(data.join("node-state")).unwrap();
    u32::from_le_bytes(b[8..12].try_into().unwrap())
}

/// The committed version 2 vector with its host NQN made one the target accepts (the
/// vector's `...:uuid:host-a` is not a UUID): same version, length and checksum fixed.
fn version_2_state() -> Vec<u8> {
    let v =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/node-state-v2.bin"))
            .unwrap();
    assert_eq!(&v[8..12], &2u32.to_le_bytes());
    let body = std::str::from_utf8(&v[32..])
        .unwrap()
        .replace("nqn.2014-08.org.nvmexpress:uuid:host-a", HOST);
    let mut out = v[..32].to_vec();
    out[24..28].copy_from_slice(&(body.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out[..28]), body.as_bytes());
    out[28..32].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(body.as_bytes());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_data_dir_comes_up_and_keeps_limits_as_version_3() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // Written by the version 2 program: node n1, drive d0 (ram:1G), namespaces 1 and 2.
    std::fs::write(data.join("node-state"), version_2_state()).unwrap();
    let node = StorageNode::start(config(&data)).await.unwrap();
    let nsids: Vec<u32> = node.list_namespaces().iter().map(|n| n.nsid).collect();
    assert_eq!(nsids, [1, 2], "the version 2 namespaces are back");
    assert!(node.qos_list().limits.is_empty());

    let volume_limit = QosLimits {
        max_iops: Some(20_000),
        min_iops: Some(5_000),
        ..QosLimits::default()
    };
    node.set_qos(entry(Some(1), None, volume_limit))
        .await
        .unwrap();
    node.set_qos(entry(None, Some(HOST), iops(700)))
        .await
        .unwrap();
    assert_eq!(
        state_version(&data),
        storage_node::state::FORMAT_VERSION,
        "the first save writes the current version"
    );
    // Replacing a key's limits keeps one entry.
    node.set_qos(entry(None, Some(HOST), iops(800)))
        .await
        .unwrap();
    let listed = node.qos_list().limits;
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].nsid, None);
    assert_eq!(listed[0].limits, iops(800));
    assert_eq!(listed[1].limits, volume_limit);
    assert!(listed.iter().all(|e| e.stats.is_some()));
    let mut in_target = node.target().qos_limits();
    in_target.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        in_target,
        vec![
            (QosKey::host(NQN, HOST), iops(800)),
            (QosKey::namespace(NQN, 1), volume_limit),
        ]
    );
    node.shutdown().await.unwrap();

    // Restart: the limits come back from the state and are in force.
    let node = StorageNode::start(config(&data)).await.unwrap();
    let keys_and_limits = |v: &[QosEntry]| {
        v.iter()
            .map(|e| (e.nsid, e.host_nqn.clone(), e.limits))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys_and_limits(&node.qos_list().limits),
        keys_and_limits(&listed)
    );
    assert_eq!(node.target().qos_limits().len(), 2);
    // Clearing one; deleting the namespace takes the other with it.
    assert_eq!(
        node.clear_qos(QosKey::host(NQN, HOST)).await.unwrap(),
        iops(800)
    );
    node.delete_namespace(NQN, 1).await.unwrap();
    assert!(node.qos_list().limits.is_empty());
    assert!(node.target().qos_limits().is_empty());
    assert!(node.state().qos.is_empty());
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_limits_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&dir.path().join("data"));
    cfg.drives = vec![storage_node::parse_node_drive("ram:64M").unwrap()];
    let node = StorageNode::start(cfg).await.unwrap();
    let refused = |r: Result<QosEntry, storage_node::NodeError>| {
        let e = r.unwrap_err();
        (e.kind(), e.to_string())
    };
    let (kind, msg) = refused(node.set_qos(entry(Some(7), None, iops(10))).await);
    assert_eq!(kind, ErrorKind::NotFound);
    assert_eq!(msg, format!("no namespace 7 in {NQN}"));
    let (kind, msg) = refused(
        node.set_qos(entry(
            Some(1),
            Some(HOST),
            QosLimits {
                min_iops: Some(10),
                ..QosLimits::default()
            },
        ))
        .await,
    );
    assert_eq!(kind, ErrorKind::BadRequest);
    assert!(
        msg.starts_with("a minimum applies to a namespace as a whole"),
        "{msg}"
    );
    let (kind, _) = refused(node.set_qos(entry(Some(1), None, iops(0))).await);
    assert_eq!(kind, ErrorKind::BadRequest);
    let (kind, msg) = refused(node.set_qos(entry(None, Some("bad host"), iops(5))).await);
    assert_eq!(kind, ErrorKind::BadRequest, "{msg}");
    let e = node.clear_qos(QosKey::namespace(NQN, 1)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert_eq!(
        e.to_string(),
        format!("no QoS limits on {NQN} namespace 1 (all hosts)")
    );
    assert!(node.state().qos.is_empty());
    assert!(node.target().qos_limits().is_empty());
    node.shutdown().await.unwrap();
}
