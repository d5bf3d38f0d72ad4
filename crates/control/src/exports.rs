//! What a node exports, as its [`NodeRecord`] tells the cluster: the NVM subsystems of its
//! NVMe/TCP target with their access lists, and its discovery listeners. Nodes keep it
//! current ([`crate::registration::RecordFeed::following`] the target) so that the
//! central discovery controller ([`crate::cdc`]) lists every subsystem of the cluster.

use nvmf_target::Target;
use storage_node::StorageNode;

use crate::records::{NodeRecord, NodeRole, SubsystemRecord};
use crate::registration::RecordFeed;

/// The NVM subsystems `target` exports, with their access lists, sorted by NQN.
pub fn subsystem_records(target: &Target) -> Vec<SubsystemRecord> {
    target
        .subsystem_access()
        .into_iter()
        .map(SubsystemRecord::from)
        .collect()
}

/// A storage node's record as of now: role storage, its NVMe/TCP (plain and TLS apart),
/// discovery and HTTP addresses, its subsystems with their allowed hosts.
pub fn storage_node_record(node: &StorageNode, started_unix_ms: u64) -> NodeRecord {
    let tls = node.tls_addrs();
    let plain = node
        .nvme_addrs()
        .into_iter()
        .filter(|a| !tls.contains(a))
        .collect();
    let mut r = NodeRecord::new(node.name(), NodeRole::Storage, plain);
    r.tls_addrs = tls;
    r.api_addr = node.http_addr();
    r.discovery_addrs = node.discovery_addr().into_iter().collect();
    r.subsystems = subsystem_records(node.target());
    r.started_unix_ms = started_unix_ms;
    r
}

/// A storage node's record, rebuilt whenever its subsystems or access lists change.
pub fn storage_node_feed(node: &StorageNode) -> RecordFeed {
    let started = crate::events::now_unix_ms();
    let n = node.clone();
    RecordFeed::following(node.target(), move || storage_node_record(&n, started))
}
