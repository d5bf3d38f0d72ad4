//! Shared by the control tests that run real storage nodes in this process (api, cdc,
//! object_pool, provision): the embedded store in a temp dir, and storage nodes on
//! loopback (ports picked by the OS) with one sparse-file drive, taking the cluster's API
//! token as `node run --meta` does. Also the metered local volume a health monitor
//! watches (api, proactive_copy).

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use blockdev::BlockDevice;
use control::health::HealthMonitor;
use control::records::{NodeRecord, NodeRole};
use control::registration::{Registration, register_node};
use httpapi::auth::Token;
use meta::{EmbeddedOptions, EmbeddedStore, MetaStore};
use storage_node::{NodeConfig, StorageNode, parse_node_drive};
use telemetry::{DeviceTelemetry, MeteredDevice};
use volume::{EngineOptions, LevelSpec, Throttle, Volume, VolumeConfig};

/// Lease of the test nodes' registrations.
pub const TTL: Duration = Duration::from_secs(10);

/// Loopback, port picked by the OS.
pub fn local0() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// An embedded metadata store in `dir`.
pub async fn embedded_store(dir: &Path) -> Arc<dyn MetaStore> {
    Arc::new(
        EmbeddedStore::open(dir, EmbeddedOptions::default())
            .await
            .unwrap(),
    )
}

/// Storage node `name` with its data in `dir`: NVMe/TCP, discovery and HTTP on
/// loopback, the cluster's `token`, drive d0 a sparse file of `drive_mib` MiB with no
/// namespace on it (as `node run --meta` brings new drives up).
pub fn node_config(name: &str, dir: &Path, drive_mib: u64, token: &Token) -> NodeConfig {
    let mut cfg = NodeConfig::new(name, dir.join("data"));
    cfg.api_token = Some(token.clone());
    cfg.listen = vec![local0()];
    cfg.discovery_listen = Some(local0());
    cfg.http_listen = Some(local0());
    cfg.default_namespace = false;
    let spec = format!("d0=file:{}:{drive_mib}M", dir.join("d0.img").display());
    cfg.drives = vec![parse_node_drive(&spec).unwrap()];
    cfg
}

/// [`node_config`], started.
pub async fn start_node(name: &str, dir: &Path, drive_mib: u64, token: &Token) -> StorageNode {
    StorageNode::start(node_config(name, dir, drive_mib, token))
        .await
        .unwrap()
}

/// Registers a started storage node (its NVMe/TCP and HTTP addresses) under a [`TTL`]
/// lease.
pub async fn register_storage_node(
    store: &Arc<dyn MetaStore>,
    name: &str,
    node: &StorageNode,
) -> Registration {
    let record = NodeRecord {
        api_addr: node.http_addr(),
        version: "test".into(),
        started_unix_ms: 1,
        ..NodeRecord::new(name, NodeRole::Storage, node.nvme_addrs())
    };
    register_node(store.clone(), record, TTL).await.unwrap()
}

/// RAID-5 volume `name` over `drives` (the last one its spare), each behind a telemetry
/// meter, watched by `monitor` under `name`; the meters come back in drive order.
pub async fn watched_raid5(
    monitor: &HealthMonitor,
    name: &str,
    drives: Vec<Arc<dyn BlockDevice>>,
) -> (Arc<Volume>, Vec<Arc<MeteredDevice>>) {
    let metered: Vec<Arc<MeteredDevice>> = drives
        .into_iter()
        .map(|d| Arc::new(MeteredDevice::new(d)))
        .collect();
    let devs: Vec<Arc<dyn BlockDevice>> = metered
        .iter()
        .map(|m| m.clone() as Arc<dyn BlockDevice>)
        .collect();
    let cfg = VolumeConfig {
        stripe_unit_bytes: 16 << 10,
        region_bytes: 1 << 20,
        journal_bytes: 256 << 10,
        options: EngineOptions {
            throttle: Throttle::Unlimited,
            batch_bytes: 256 << 10,
            ..EngineOptions::default()
        },
        ..VolumeConfig::new(LevelSpec::Raid5)
    };
    let (members, spare) = devs.split_at(devs.len() - 1);
    let volume = Arc::new(
        Volume::create(name, cfg, members.to_vec(), spare.to_vec())
            .await
            .unwrap(),
    );
    let meters: BTreeMap<String, Arc<DeviceTelemetry>> = metered
        .iter()
        .map(|m| (m.info().name.clone(), m.telemetry().clone()))
        .collect();
    monitor.watch(name, volume.clone(), meters);
    (volume, metered)
}
