//! What the metadata store holds about the cluster. Every record is serde JSON (format in
//! `docs/cluster.md`); the keys come from [`meta::schema`] plus the few below. Records
//! that say "under the lease" vanish when their writer stops renewing its lease.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use meta::schema::{SchemaError, validate_name};

/// `/ferrobay/volume-status/<volume>`: the owner's view of a volume (under the owner's lease).
pub const VOLUME_STATUS: &str = "/ferrobay/volume-status/";
/// `/ferrobay/handoffs/<volume>`: a request to move a volume to another processor node.
pub const HANDOFFS: &str = "/ferrobay/handoffs/";
/// `/ferrobay/ana-groups/<id>`: which volume holds ANA group `id` (no lease).
pub const ANA_GROUPS: &str = "/ferrobay/ana-groups/";
/// `/ferrobay/processor-slots/<node>`: the processor node's slot (no lease), which fixes
/// its controller ID range for good.
pub const PROCESSOR_SLOTS: &str = "/ferrobay/processor-slots/";
/// `/ferrobay/processor-slot-holders/<slot>`: the node name holding a slot (no lease).
/// The reverse of [`PROCESSOR_SLOTS`], so that a claim can require the slot to be free
/// in the same transaction.
pub const PROCESSOR_SLOT_HOLDERS: &str = "/ferrobay/processor-slot-holders/";

/// `/ferrobay/object-pools/<pool>` (no lease): the KV namespaces an object store keeps
/// its shards in ([`ObjectPoolRecord`]); S3 gateways follow it.
pub const OBJECT_POOLS: &str = "/ferrobay/object-pools/";

/// Controller IDs per processor slot: slot `s` uses `s * CNTLIDS_PER_SLOT + 1 ..=
/// (s + 1) * CNTLIDS_PER_SLOT`, so every processor node exporting the same volume
/// subsystem hands out IDs no other one does (hosts reject duplicate cntlids in a
/// subsystem).
pub const CNTLIDS_PER_SLOT: u16 = 0x0800;
/// Slots that fit below the reserved cntlids (0xFFF0..).
pub const MAX_PROCESSOR_SLOTS: u16 = 0xFFEF / CNTLIDS_PER_SLOT;
const _: () = assert!(MAX_PROCESSOR_SLOTS >= 16);

/// The NQN a volume is exported under, from every processor node.
pub fn volume_nqn(volume: &str) -> String {
    format!("nqn.2026-01.io.ferrobay:vol:{volume}")
}

/// The host NQN a processor node uses towards the members.
pub fn processor_hostnqn(node: &str) -> String {
    format!("nqn.2026-01.io.ferrobay:processor:{node}")
}

/// The host NQN an S3 gateway uses towards the storage nodes' KV namespaces.
pub fn s3_hostnqn(gateway: &str) -> String {
    format!("nqn.2026-01.io.ferrobay:s3:{gateway}")
}

/// The controller ID range of a processor slot.
pub fn cntlid_range(slot: u16) -> (u16, u16) {
    let first = slot.saturating_mul(CNTLIDS_PER_SLOT).saturating_add(1);
    (first, first.saturating_add(CNTLIDS_PER_SLOT - 1))
}

/// The NVMe reservation key of a processor node: a stable non-zero hash of its name
/// (FNV-1a 64), the same on every member and across restarts.
pub fn reservation_key(node: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

pub fn object_pool_key(pool: &str) -> Result<String, SchemaError> {
    validate_name(pool)?;
    Ok(format!("{OBJECT_POOLS}{pool}"))
}

pub fn volume_status_key(volume: &str) -> Result<String, SchemaError> {
    validate_name(volume)?;
    Ok(format!("{VOLUME_STATUS}{volume}"))
}

pub fn handoff_key(volume: &str) -> Result<String, SchemaError> {
    validate_name(volume)?;
    Ok(format!("{HANDOFFS}{volume}"))
}

pub fn ana_group_key(group: u32) -> String {
    format!("{ANA_GROUPS}{group}")
}

pub fn processor_slot_holder_key(slot: u16) -> String {
    format!("{PROCESSOR_SLOT_HOLDERS}{slot}")
}

pub fn processor_slot_key(node: &str) -> Result<String, SchemaError> {
    validate_name(node)?;
    Ok(format!("{PROCESSOR_SLOTS}{node}"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeRole {
    Storage,
    Processor,
}

/// The [`NodeRecord`] format this build writes. Format 2 added `discovery_addrs` and
/// `subsystems` (what the central discovery controller lists); a record without `format`
/// is format 1 and has neither. Format 3 added `tls_addrs` and keeps TLS listeners out of
/// `nvme_addrs` (a format 2 storage node listed them there, indistinguishable from plain
/// ones). Readers ignore fields they do not know, so an older reader still reads a newer
/// record.
pub const NODE_RECORD_FORMAT: u32 = 3;

fn node_record_format_1() -> u32 {
    1
}

/// `/ferrobay/nodes/<name>`, under the node's lease: a live node, how to reach it and
/// what it exports. The node rewrites it (same lease) when its exports change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeRecord {
    /// [`NODE_RECORD_FORMAT`] when written by this build; 1 when absent.
    #[serde(default = "node_record_format_1")]
    pub format: u32,
    pub name: String,
    pub role: NodeRole,
    /// NVMe/TCP listeners (I/O and discovery) in plain TCP.
    #[schema(value_type = Vec<String>, example = json!(["10.0.0.1:4420"]))]
    pub nvme_addrs: Vec<SocketAddr>,
    /// NVMe/TCP listeners that require TLS 1.3 with a PSK (`--tls-listen`). Format 3.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<String>, example = json!(["10.0.0.1:4421"]))]
    pub tls_addrs: Vec<SocketAddr>,
    /// HTTP control API, if any.
    #[schema(value_type = Option<String>)]
    pub api_addr: Option<SocketAddr>,
    /// Processor nodes: the slot that fixes their cntlid range.
    pub slot: Option<u16>,
    pub version: String,
    pub started_unix_ms: u64,
    /// Listeners that serve only discovery (a storage node's port 8009); the node's
    /// discovery controller also answers on every `nvme_addrs` entry. Format 2.
    #[serde(default)]
    #[schema(value_type = Vec<String>)]
    pub discovery_addrs: Vec<SocketAddr>,
    /// The NVM subsystems the node exports on its `nvme_addrs`, with their access lists,
    /// sorted by NQN. Format 2.
    #[serde(default)]
    pub subsystems: Vec<SubsystemRecord>,
    /// The cluster protocol the node's build speaks (`release::CLUSTER_PROTOCOL`); 1 when
    /// absent (builds before rolling upgrades, docs/upgrade.md).
    #[serde(default = "protocol_1")]
    pub protocol: u32,
    /// The oldest cluster protocol the node's build works beside; 1 when absent.
    #[serde(default = "protocol_1")]
    pub oldest_protocol: u32,
}

fn protocol_1() -> u32 {
    1
}

impl NodeRecord {
    /// A record of this build's format with nothing exported yet.
    pub fn new(name: impl Into<String>, role: NodeRole, nvme_addrs: Vec<SocketAddr>) -> Self {
        NodeRecord {
            format: NODE_RECORD_FORMAT,
            name: name.into(),
            role,
            nvme_addrs,
            tls_addrs: Vec::new(),
            api_addr: None,
            slot: None,
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_unix_ms: 0,
            discovery_addrs: Vec::new(),
            subsystems: Vec::new(),
            protocol: release::CLUSTER_PROTOCOL,
            oldest_protocol: release::OLDEST_CLUSTER_PROTOCOL,
        }
    }

    /// What the node's build is, as far as the record says.
    pub fn build(&self) -> release::BuildInfo {
        release::BuildInfo {
            version: self.version.clone(),
            protocol: self.protocol,
            oldest_protocol: self.oldest_protocol,
        }
    }

    /// Whether the record says what the node exports (format 2 and later).
    pub fn publishes_subsystems(&self) -> bool {
        self.format >= 2
    }

    /// Where the node's own discovery controller is: its first discovery-only listener,
    /// else its first NVMe/TCP listener.
    pub fn discovery_controller(&self) -> Option<SocketAddr> {
        self.discovery_addrs
            .first()
            .or_else(|| self.nvme_addrs.first())
            .copied()
    }
}

/// An NVM subsystem a node exports and who may connect to it (the node target's access
/// list: a storage node's from its node state, a processor node's volume exports allow
/// any host).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SubsystemRecord {
    pub nqn: String,
    /// Any host may connect; `allowed_hosts` is then not used.
    pub allow_any_host: bool,
    /// Host NQNs allowed, sorted.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
}

impl SubsystemRecord {
    pub fn allows(&self, hostnqn: &str) -> bool {
        self.allow_any_host || self.allowed_hosts.iter().any(|h| h == hostnqn)
    }
}

impl From<nvmf_target::SubsystemAccess> for SubsystemRecord {
    fn from(a: nvmf_target::SubsystemAccess) -> Self {
        SubsystemRecord {
            nqn: a.nqn,
            allow_any_host: a.allow_any_host,
            allowed_hosts: a.allowed_hosts,
        }
    }
}

/// One member of a volume: where it is and which failure domain it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemberRecord {
    /// `nvme+tcp://ADDR:PORT[,ADDR:PORT]/SUBNQN/NSID`.
    pub url: String,
    /// The storage node that holds it, when it is a Ferrobay storage node.
    pub storage_node: Option<String>,
    /// Placement hint: no two members of a stripe in the same domain.
    pub failure_domain: String,
}

/// `/ferrobay/volumes/<name>` (no lease): a volume, its layout and its members.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VolumeRecord {
    pub name: String,
    pub uuid: Uuid,
    /// `raid5`, `raid6`, `rs:4+2`, ... ([`volume::LevelSpec`] text).
    pub level: String,
    pub stripe_unit_bytes: u64,
    /// Usable size exported to hosts.
    pub size_bytes: u64,
    pub block_size_bytes: u32,
    pub members: Vec<MemberRecord>,
    #[serde(default)]
    pub spares: Vec<MemberRecord>,
    /// The ANA group of the volume's namespace on every processor node.
    pub ana_group: u32,
    /// The processor node that should own it when it is up.
    pub preferred_owner: Option<String>,
    pub created_unix_ms: u64,
    /// QoS limits, applied by every processor node exporting the volume (absent: none,
    /// never set).
    #[serde(default, skip_serializing_if = "VolumeQos::never_set")]
    pub qos: VolumeQos,
    /// The log-structured layout with inline compression (`--layout log`), fixed at
    /// creation and recorded in the members' superblocks too; absent: data in place
    /// (records written before the log layout look the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogLayout>,
}

/// A log-layout volume's creation choices (`docs/volume-format.md`, "Log layout").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogLayout {
    /// How each logical block is compressed before it enters a stripe.
    pub compression: volume::Compression,
    /// The logical block: the unit of compression and of the map (4 KiB..=64 KiB).
    pub block_bytes: u32,
}

impl LogLayout {
    /// The volume engine's creation choice (default share of the space exported).
    pub fn config(&self) -> volume::LogConfig {
        let mut c = volume::LogConfig::new(self.compression);
        c.block_bytes = self.block_bytes;
        c
    }

    /// `log zstd:3 16k`: for logs and one-line summaries.
    pub fn summary(&self) -> String {
        format!("log {} {}k", self.compression, self.block_bytes / 1024)
    }
}

/// A volume's QoS limits (`docs/qos.md`): of the volume as a whole (every host together,
/// optionally with a minimum under contention) and of single hosts on it. Changed only by
/// compare-and-swap on the volume record; `generation` counts the changes, so a processor
/// node can say which version it applies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VolumeQos {
    pub generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<nvmf_target::QosLimits>,
    /// By host NQN.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, nvmf_target::QosLimits>,
}

impl VolumeQos {
    /// No limit (whatever the generation): nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.volume.is_none() && self.hosts.is_empty()
    }

    /// Never set: the record carries no `qos` (records written before QoS look the same).
    pub fn never_set(&self) -> bool {
        *self == VolumeQos::default()
    }

    /// The target's keys and limits for the volume exported as `nqn` (namespace 1).
    pub fn target_limits(&self, nqn: &str) -> Vec<(nvmf_target::QosKey, nvmf_target::QosLimits)> {
        let mut out = Vec::new();
        if let Some(l) = self.volume {
            out.push((nvmf_target::QosKey::namespace(nqn, VOLUME_NSID), l));
        }
        for (host, l) in &self.hosts {
            out.push((
                nvmf_target::QosKey::host_on_namespace(nqn, VOLUME_NSID, host.clone()),
                *l,
            ));
        }
        out
    }
}

/// The namespace ID of a volume in its subsystem on every processor node.
pub const VOLUME_NSID: u32 = 1;

impl VolumeRecord {
    pub fn nqn(&self) -> String {
        volume_nqn(&self.name)
    }
}

/// One Key Value namespace of an object pool: a shard store of the S3 gateways.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvNamespaceRecord {
    /// The shard store id, recorded in every shard map that places shards here: stable
    /// for the namespace's life and unique in the pool (`<node>/<drive>/<nsid>`).
    pub id: String,
    /// `nvme+tcp://ADDR:PORT[,ADDR:PORT]/SUBNQN/NSID`.
    pub url: String,
    /// The storage node that holds it, when it is a Ferrobay storage node.
    pub storage_node: Option<String>,
    /// No two shards of a stripe in the same domain (the storage node).
    pub failure_domain: String,
    pub size_bytes: u64,
    pub added_unix_ms: u64,
}

/// `/ferrobay/object-pools/<name>` (no lease): the KV namespaces S3 gateways place
/// object shards on. Namespaces are only ever added: shard maps name them for good.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectPoolRecord {
    pub name: String,
    pub namespaces: Vec<KvNamespaceRecord>,
    pub created_unix_ms: u64,
}

/// `/ferrobay/volume-status/<name>`, under the owner's lease: what the owner sees.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VolumeStatusRecord {
    pub owner: String,
    pub epoch: u64,
    pub status: volume::VolumeStatus,
    pub updated_unix_ms: u64,
    /// How this owner took the volume over (epoch, time, regions and bytes resynced).
    #[serde(default)]
    pub takeover: Option<TakeoverReport>,
}

/// How a takeover went (also in the log).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TakeoverReport {
    /// Ownership epoch (fencing generation in the metadata store).
    pub epoch: u64,
    /// Volume superblock generation after assembly.
    pub generation: u64,
    /// From ownership acquired to ANA optimized.
    pub took_ms: u64,
    /// Members reached and fenced / in the record.
    pub members_fenced: usize,
    pub members_total: usize,
    /// Members whose target has no reservations (protected by generations only).
    pub members_unfenceable: usize,
    /// Dirty bitmap regions resynced by the assembly (0 after a clean stop).
    pub resync_regions: u64,
    /// Volume bytes in those regions (what was re-checked; a full resync would be the
    /// whole volume).
    #[serde(default)]
    pub resync_bytes: u64,
    /// Member bytes read to resync them.
    #[serde(default)]
    pub resync_member_bytes_read: u64,
    #[serde(default)]
    pub resync_ms: u64,
}

/// `/ferrobay/handoffs/<name>`: move the volume to `to` (`ferrobay volume move`). The
/// owner hands over cleanly and deletes the record once `to` owns the volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffRecord {
    pub to: String,
    pub requested_unix_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cntlid_ranges_are_disjoint_and_valid() {
        for slot in 0..MAX_PROCESSOR_SLOTS {
            let (a, b) = cntlid_range(slot);
            let (c, _) = cntlid_range(slot + 1);
            assert!(a >= 1 && a <= b && b < c, "slot {slot}");
            assert!(b <= 0xFFEF, "slot {slot} reaches reserved ids");
        }
    }

    #[test]
    fn node_records_of_format_1_still_read_and_newer_fields_are_ignored_by_old_readers() {
        // As written before format 2 (no format, no exports).
        let v1 = r#"{"name":"n1","role":"storage","nvme_addrs":["10.0.0.11:4420"],
            "api_addr":"10.0.0.11:9420","slot":null,"version":"0.1.0","started_unix_ms":5}"#;
        let r: NodeRecord = serde_json::from_str(v1).expect("format 1 parses");
        assert_eq!(r.format, 1);
        assert!(!r.publishes_subsystems());
        assert!(r.subsystems.is_empty() && r.discovery_addrs.is_empty());
        assert_eq!(
            r.discovery_controller(),
            Some("10.0.0.11:4420".parse().unwrap())
        );
        // A format 2 record read by a format 1 reader: the same fields, the rest ignored.
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct NodeRecordV1 {
            name: String,
            role: NodeRole,
            nvme_addrs: Vec<SocketAddr>,
            api_addr: Option<SocketAddr>,
            slot: Option<u16>,
            version: String,
            started_unix_ms: u64,
        }
        let mut v2 = NodeRecord::new(
            "n1",
            NodeRole::Storage,
            vec!["10.0.0.11:4420".parse().unwrap()],
        );
        v2.discovery_addrs = vec!["10.0.0.11:8009".parse().unwrap()];
        v2.subsystems = vec![SubsystemRecord {
            nqn: "nqn.2026-01.io.ferrobay:n1:d0".into(),
            allow_any_host: false,
            allowed_hosts: vec!["nqn.2026-01.io.ferrobay:processor:p1".into()],
        }];
        let text = serde_json::to_string(&v2).unwrap();
        let old: NodeRecordV1 = serde_json::from_str(&text).expect("old reader");
        assert_eq!(old.nvme_addrs, v2.nvme_addrs);
        let back: NodeRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v2);
        assert_eq!(back.format, NODE_RECORD_FORMAT);
        assert_eq!(
            back.discovery_controller(),
            Some("10.0.0.11:8009".parse().unwrap())
        );
        assert!(back.subsystems[0].allows("nqn.2026-01.io.ferrobay:processor:p1"));
        assert!(!back.subsystems[0].allows("nqn.2014-08.org.nvmexpress:uuid:x"));
    }

    #[test]
    fn node_records_of_format_3_list_tls_listeners_apart() {
        let mut r = NodeRecord::new(
            "n1",
            NodeRole::Storage,
            vec!["10.0.0.11:4420".parse().unwrap()],
        );
        // Without TLS listeners the record reads as format 2 did.
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("tls_addrs"), "{text}");
        r.tls_addrs = vec!["10.0.0.11:4421".parse().unwrap()];
        let text = serde_json::to_string(&r).unwrap();
        // A format 2 reader sees the plain listener only (it never connects in plain
        // TCP to the TLS one).
        #[derive(Deserialize)]
        struct NodeRecordV2 {
            nvme_addrs: Vec<SocketAddr>,
        }
        let old: NodeRecordV2 = serde_json::from_str(&text).unwrap();
        assert_eq!(old.nvme_addrs, r.nvme_addrs);
        let back: NodeRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.format, 3);
        // A format 2 record has none.
        let v2 = text.replace(",\"tls_addrs\":[\"10.0.0.11:4421\"]", "");
        let back: NodeRecord = serde_json::from_str(&v2).unwrap();
        assert!(back.tls_addrs.is_empty(), "{v2}");
    }

    #[test]
    fn volume_qos_in_the_record() {
        // A record written before QoS (no `qos` key) reads as "never set".
        let old = r#"{"name":"v","uuid":"0b7c3c0e-5d1f-4d7e-9a51-3f5a2f1f7a10","level":"raid5",
            "stripe_unit_bytes":65536,"size_bytes":1048576,"block_size_bytes":4096,
            "members":[],"ana_group":1,"preferred_owner":null,"created_unix_ms":0}"#;
        let rec: VolumeRecord = serde_json::from_str(old).unwrap();
        assert!(rec.qos.never_set() && rec.qos.is_empty());
        assert!(!serde_json::to_string(&rec).unwrap().contains("qos"));
        // Cleared limits keep their generation (it must never go back).
        let mut rec = rec;
        rec.qos.generation = 4;
        let back: VolumeRecord =
            serde_json::from_str(&serde_json::to_string(&rec).unwrap()).unwrap();
        assert_eq!(back.qos.generation, 4);
        // Limits as the target sees them: namespace 1 of the volume's NQN.
        rec.qos.volume = Some(nvmf_target::QosLimits {
            max_iops: Some(100),
            ..Default::default()
        });
        rec.qos.hosts.insert(
            "nqn.h".into(),
            nvmf_target::QosLimits {
                max_bytes_per_s: Some(1 << 20),
                ..Default::default()
            },
        );
        let json = serde_json::to_string(&rec.qos).unwrap();
        assert_eq!(
            json,
            r#"{"generation":4,"volume":{"max_iops":100},"hosts":{"nqn.h":{"max_bytes_per_s":1048576}}}"#
        );
        let keys: Vec<String> = rec
            .qos
            .target_limits(&volume_nqn("v"))
            .iter()
            .map(|(k, _)| k.to_string())
            .collect();
        assert_eq!(
            keys,
            [
                "nqn.2026-01.io.ferrobay:vol:v namespace 1 (all hosts)",
                "nqn.2026-01.io.ferrobay:vol:v namespace 1 host nqn.h"
            ]
        );
    }

    #[test]
    fn reservation_keys_are_stable_and_distinct() {
        assert_eq!(reservation_key("p1"), reservation_key("p1"));
        assert_ne!(reservation_key("p1"), reservation_key("p2"));
        assert_ne!(reservation_key(""), 0);
    }
}
