//! The node over real NVMe/TCP (the project's initiator on 127.0.0.1, port 0): a namespace
//! carved from fragmented space keeps its data and identifiers across a restart, and the
//! discovery listener lists the node's subsystems.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::Path;

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl, RemoteNamespace, discover};
use storage_node::api::CreateNamespaceRequest;
use storage_node::state::hex_decode;
use storage_node::{NodeConfig, StorageNode, parse_node_drive};

const MIB: u64 = 1 << 20;
const NQN: &str = "nqn.2026-01.io.ferrobay:n1:d0";

fn config(dir: &Path) -> NodeConfig {
    let mut cfg = NodeConfig::new("n1", dir.join("data"));
    cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.discovery_listen = Some("127.0.0.1:0".parse().unwrap());
    let spec = format!("file:{}:32M", dir.join("d0.img").display());
    cfg.drives = vec![parse_node_drive(&spec).unwrap()];
    cfg
}

fn host() -> HostIdentity {
    HostIdentity::from_uuid([
        0x5a, 1, 2, 3, 4, 5, 0x46, 7, 0x88, 9, 10, 11, 12, 13, 14, 15,
    ])
}

async fn open(node: &StorageNode, nsid: u32) -> RemoteNamespace {
    let url = format!("nvme+tcp://{}/{NQN}/{nsid}", node.nvme_addrs()[0]);
    NvmeTcpUrl::parse(&url)
        .unwrap()
        .open(&host(), &ConnectOptions::default())
        .await
        .unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

async fn create(node: &StorageNode, size_bytes: u64) -> storage_node::api::NamespaceView {
    let req = CreateNamespaceRequest {
        subsystem_nqn: Some(NQN.into()),
        size_bytes,
        ..Default::default()
    };
    node.create_namespace(req).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragmented_namespace_keeps_data_and_identity_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let node = StorageNode::start(config(dir.path())).await.unwrap();
    node.delete_namespace(NQN, 1).await.unwrap();
    let a = create(&node, 4 * MIB).await;
    let _b = create(&node, 4 * MIB).await;
    let _d = create(&node, 20 * MIB).await;
    node.delete_namespace(NQN, a.nsid).await.unwrap();
    // Free: [0, 4M) and [28M, 32M). 8 MiB fits in neither alone, so it spans both.
    let c = create(&node, 8 * MIB).await;
    assert_eq!(c.extents.len(), 2, "{:?}", c.extents);

    let ns = open(&node, c.nsid).await;
    assert_eq!(ns.id().nguid, hex_decode::<16>(&c.nguid).unwrap());
    assert_eq!(ns.id().eui64, hex_decode::<8>(&c.eui64).unwrap());
    assert_eq!(ns.info().size_bytes, 8 * MIB);
    // A write across the boundary between the two extents.
    let data = pattern(256 << 10, 7);
    let at = 4 * MIB - (100 << 10);
    ns.write(at, IoBuf::from_slice(&data), WriteFlags { fua: true })
        .await
        .unwrap();
    ns.flush().await.unwrap();
    let back = ns.read(at, IoBuf::new_zeroed(data.len())).await.unwrap();
    assert!(back.as_slice() == &data[..], "read-back differs");
    ns.controller().disconnect().await;

    let entries = discover(node.discovery_addr().unwrap(), &host())
        .await
        .unwrap();
    assert!(
        entries.iter().any(|e| e.subnqn == NQN),
        "discovery lacks {NQN}"
    );
    node.shutdown().await.unwrap();

    let node = StorageNode::start(config(dir.path())).await.unwrap();
    let ns = open(&node, c.nsid).await;
    assert_eq!(ns.id().nguid, hex_decode::<16>(&c.nguid).unwrap());
    let back = ns.read(at, IoBuf::new_zeroed(data.len())).await.unwrap();
    assert!(back.as_slice() == &data[..], "data lost across restart");
    ns.controller().disconnect().await;
    node.shutdown().await.unwrap();
}
