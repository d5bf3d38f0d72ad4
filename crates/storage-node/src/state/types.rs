//! The node's persistent state as plain data (see `docs/node-state.md`).
//!
//! Everything the node must remember across restarts and power loss lives here; the
//! node rebuilds its allocators, subsystems and namespaces from it at start.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::hex;

/// The whole persistent state of one storage node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    pub node_name: String,
    pub node_uuid: Uuid,
    /// Next value of the per-node sequence behind generated serial numbers; never reused.
    pub next_serial_seq: u64,
    pub drives: Vec<DriveRecord>,
    pub subsystems: Vec<SubsystemRecord>,
    pub namespaces: Vec<NamespaceRecord>,
    pub smart: SmartCounters,
    /// QoS limits (version 3; absent in older files: none).
    #[serde(default)]
    pub qos: Vec<QosRecord>,
}

/// QoS limits of one key: a subsystem, optionally one namespace of it, optionally one
/// host (`docs/qos.md`). Absent limits do not limit; rates are per second.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosRecord {
    pub subsystem_nqn: String,
    /// One namespace, or all of the subsystem's together (`None`).
    pub nsid: Option<u32>,
    /// One host, or all hosts together (`None`).
    pub host_nqn: Option<String>,
    pub max_iops: Option<u64>,
    pub max_bytes_per_s: Option<u64>,
    pub burst_ios: Option<u64>,
    pub burst_bytes: Option<u64>,
    pub min_iops: Option<u64>,
    pub min_bytes_per_s: Option<u64>,
}

impl QosRecord {
    /// Whether `other` limits the same key.
    pub fn same_key(&self, other: &QosRecord) -> bool {
        self.subsystem_nqn == other.subsystem_nqn
            && self.nsid == other.nsid
            && self.host_nqn == other.host_nqn
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        [
            self.max_iops,
            self.max_bytes_per_s,
            self.burst_ios,
            self.burst_bytes,
            self.min_iops,
            self.min_bytes_per_s,
        ]
        .iter()
        .all(Option::is_none)
    }
}

/// One drive the node exports, in the order first given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriveRecord {
    /// `d0`, `d1`, ... or the name the user gave; unique per node.
    pub name: String,
    /// The drive spec as given (`ram:1G`, `file:/img:100G`, `/dev/sdb`).
    pub spec: String,
    pub uuid: Uuid,
    pub size_bytes: u64,
    pub block_size_bytes: u32,
    /// Generated serial number, at most 20 ASCII characters.
    pub serial: String,
}

/// One NVM subsystem exported by the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubsystemRecord {
    pub nqn: String,
    /// Serial number reported in Identify Controller, at most 20 ASCII characters.
    pub serial: String,
    /// Model number reported in Identify Controller, at most 40 ASCII characters.
    pub model: String,
    /// The drive that host-side Namespace Management carves new namespaces from.
    pub drive_uuid: Uuid,
    pub allow_any_host: bool,
    pub allowed_hosts: Vec<String>,
    /// Hosts that must authenticate with DH-HMAC-CHAP (format version 4), sorted by NQN.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dhchap: Vec<DhchapHostRecord>,
    /// Hosts that must connect over TLS with a PSK (format version 5), sorted by NQN.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_psks: Vec<TlsPskHostRecord>,
}

/// A host that must connect to a subsystem over TLS: its configured PSK in the interchange
/// form (`NVMeTLSkey-1:..`, what `nvme gen-tls-key` prints); `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsPskHostRecord {
    pub host_nqn: String,
    pub psk: String,
}

impl std::fmt::Debug for TlsPskHostRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsPskHostRecord")
            .field("host_nqn", &self.host_nqn)
            .field("psk", &"<redacted>")
            .finish()
    }
}

impl TlsPskHostRecord {
    /// The parsed PSK, or why it is unusable (the reason never contains the key).
    pub fn configured_psk(&self) -> Result<nvme_proto::tls_key::ConfiguredPsk, String> {
        nvme_proto::tls_key::ConfiguredPsk::parse(&self.psk)
            .map_err(|e| format!("TLS PSK of host {}: {e}", self.host_nqn))
    }
}

/// A host that must authenticate to a subsystem with DH-HMAC-CHAP. The secrets are kept
/// in their `DHHC-1:..` form; `Debug` shows neither.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DhchapHostRecord {
    pub host_nqn: String,
    /// The host's secret (what the host gives `nvme connect --dhchap-secret`).
    pub secret: String,
    /// The controller's secret, for hosts that authenticate the controller too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctrl_secret: Option<String>,
    /// Accepted hash functions (`hmac(sha256)`, ...), preferred first; empty: all three.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hashes: Vec<String>,
    /// Accepted DH groups (`ffdhe2048`, ..., `null`), preferred first; empty: the target's
    /// default (every FFDHE group, then null).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dhgroups: Vec<String>,
    /// Secure channel concatenation required (format version 6; absent: no): the host
    /// authenticates on a plain-TCP admin queue, then connects over TLS with the PSK that
    /// generated (`docs/security.md`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub concat: bool,
}

impl std::fmt::Debug for DhchapHostRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DhchapHostRecord")
            .field("host_nqn", &self.host_nqn)
            .field("secret", &"<redacted>")
            .field(
                "ctrl_secret",
                &self.ctrl_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("hashes", &self.hashes)
            .field("dhgroups", &self.dhgroups)
            .field("concat", &self.concat)
            .finish()
    }
}

impl DhchapHostRecord {
    /// The target's configuration for this host, or why the record is unusable (the
    /// reason never contains a secret).
    pub fn to_target_config(&self) -> Result<nvmf_target::DhchapHostConfig, String> {
        use nvme_proto::auth::{DhGroup, DhchapSecret, HashId};
        let secret = DhchapSecret::parse(&self.secret)
            .map_err(|e| format!("DH-HMAC-CHAP secret of host {}: {e}", self.host_nqn))?;
        let ctrl = match &self.ctrl_secret {
            None => None,
            Some(c) => Some(DhchapSecret::parse(c).map_err(|e| {
                format!(
                    "DH-HMAC-CHAP controller secret for host {}: {e}",
                    self.host_nqn
                )
            })?),
        };
        let mut cfg = nvmf_target::DhchapHostConfig::new(secret, ctrl);
        if !self.hashes.is_empty() {
            cfg.hashes = self
                .hashes
                .iter()
                .map(|h| HashId::parse(h).ok_or_else(|| format!("unknown DH-HMAC-CHAP hash {h:?}")))
                .collect::<Result<_, _>>()?;
        }
        if !self.dhgroups.is_empty() {
            cfg.dhgroups = self
                .dhgroups
                .iter()
                .map(|g| DhGroup::parse(g).ok_or_else(|| format!("unknown DH group {g:?}")))
                .collect::<Result<_, _>>()?;
        }
        cfg.concat = self.concat;
        cfg.check()
            .map_err(|e| format!("host {}: {e}", self.host_nqn))?;
        Ok(cfg)
    }
}

/// A byte range of a drive. Offsets and lengths are multiples of the allocation unit.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
pub struct Extent {
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

impl Extent {
    /// End offset, or `None` on overflow (only possible with corrupt input).
    pub fn end_bytes(&self) -> Option<u64> {
        self.offset_bytes.checked_add(self.len_bytes)
    }
}

/// Which controllers a namespace is attached to.
///
/// NVMe Namespace Attachment names controller IDs, but controllers are dynamic: a host
/// that reconnects gets a new one. So, as in the target, an attachment is kept by the
/// host NQN behind the controller, which survives reconnects and restarts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Attachment {
    /// Every controller of the subsystem, present and future (the default).
    All,
    /// Only the controllers of these hosts (sorted, unique); empty = detached.
    Hosts(Vec<String>),
}

/// One namespace: where its blocks live and the identifiers hosts see.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceRecord {
    pub subsystem_nqn: String,
    pub nsid: u32,
    pub drive_uuid: Uuid,
    /// Namespace size as seen by hosts; a multiple of `block_size_bytes`, at most the sum
    /// of the extents' lengths.
    pub size_bytes: u64,
    /// The drive ranges behind the namespace, concatenated in this order.
    pub extents: Vec<Extent>,
    pub block_size_bytes: u32,
    #[serde(with = "hex::bytes16")]
    pub nguid: [u8; 16],
    #[serde(with = "hex::bytes8")]
    pub eui64: [u8; 8],
    pub uuid: Uuid,
    pub attachment: Attachment,
    pub created_unix_ms: u64,
    pub reservation: ReservationState,
    /// The command set hosts see: NVM (blocks) or Key Value (a store formatted on the
    /// extents). Absent in format version 1 files, which knew NVM only.
    #[serde(default)]
    pub kind: NamespaceKind,
}

/// What a namespace's extents hold and which I/O command set hosts use on it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NamespaceKind {
    /// NVM command set: the extents are the namespace's logical blocks.
    #[default]
    Nvm,
    /// Key Value command set: the extents hold a KV store (`docs/kv.md`) formatted with
    /// these parameters when the namespace was created.
    Kv(KvParams),
}

impl NamespaceKind {
    pub fn is_kv(&self) -> bool {
        matches!(self, NamespaceKind::Kv(_))
    }
}

/// Format parameters of a Key Value namespace's store, as formatted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvParams {
    /// Largest value, bytes (Identify KVVML).
    pub max_value_bytes: u32,
    /// Most keys the store holds (Identify MNKS).
    pub max_keys: u64,
    /// Log segment size, bytes.
    pub segment_bytes: u32,
}

/// Persisted reservation state of one namespace (NVMe Reservations), as plain data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationState {
    /// PRGEN: bumped by Register/Preempt/Clear.
    pub generation: u32,
    pub registrants: Vec<Registrant>,
    /// Host ID of the reservation holder for types 1..=4; `None` when nothing is held and
    /// for the all-registrants types 5 and 6.
    #[serde(with = "hex::opt_u128")]
    pub holder_host_id: Option<u128>,
    /// Reservation type (RTYPE, 1..=6); 0 when nothing is held.
    pub rtype: u8,
    /// Persist Through Power Loss: when false the state is cleared at start.
    pub persist_through_power_loss: bool,
}

/// One registered host. Registrations belong to hosts (the 128-bit host identifier of
/// Connect), not to controllers, which are dynamic: every controller of the host shares it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registrant {
    /// Host ID, as `u128::from_be_bytes` of the Connect HOSTID field.
    #[serde(with = "hex::u128_hex")]
    pub host_id: u128,
    pub key: u64,
}

/// Counters behind the SMART/health log that must survive restarts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmartCounters {
    pub power_cycles: u64,
    pub power_on_seconds: u64,
    pub unsafe_shutdowns: u64,
    /// Set by a clean shutdown, cleared at start: a start that finds it cleared counts an
    /// unsafe shutdown.
    pub clean_shutdown: bool,
}

impl NodeState {
    /// A fresh state for a node that has never run.
    pub fn new(node_name: impl Into<String>, node_uuid: Uuid) -> NodeState {
        NodeState {
            node_name: node_name.into(),
            node_uuid,
            next_serial_seq: 1,
            drives: Vec::new(),
            subsystems: Vec::new(),
            namespaces: Vec::new(),
            // A node that has never run has nothing to count as unsafe.
            smart: SmartCounters {
                clean_shutdown: true,
                ..SmartCounters::default()
            },
            qos: Vec::new(),
        }
    }

    pub fn drive(&self, uuid: Uuid) -> Option<&DriveRecord> {
        self.drives.iter().find(|d| d.uuid == uuid)
    }

    pub fn drive_by_name(&self, name: &str) -> Option<&DriveRecord> {
        self.drives.iter().find(|d| d.name == name)
    }

    pub fn subsystem(&self, nqn: &str) -> Option<&SubsystemRecord> {
        self.subsystems.iter().find(|s| s.nqn == nqn)
    }

    pub fn subsystem_mut(&mut self, nqn: &str) -> Option<&mut SubsystemRecord> {
        self.subsystems.iter_mut().find(|s| s.nqn == nqn)
    }

    pub fn namespace(&self, nqn: &str, nsid: u32) -> Option<&NamespaceRecord> {
        self.namespaces
            .iter()
            .find(|n| n.subsystem_nqn == nqn && n.nsid == nsid)
    }

    pub fn namespace_mut(&mut self, nqn: &str, nsid: u32) -> Option<&mut NamespaceRecord> {
        self.namespaces
            .iter_mut()
            .find(|n| n.subsystem_nqn == nqn && n.nsid == nsid)
    }

    /// Checks the cross-references a decoded state must satisfy; a state that fails this
    /// is treated as corrupt. Extent overlap is checked by the allocator when it rebuilds.
    pub fn validate(&self) -> Result<(), String> {
        let mut names = std::collections::HashSet::new();
        let mut uuids = std::collections::HashSet::new();
        for d in &self.drives {
            if !names.insert(d.name.as_str()) {
                return Err(format!("drive name {} appears twice", d.name));
            }
            if !uuids.insert(d.uuid) {
                return Err(format!("drive uuid {} appears twice", d.uuid));
            }
            if d.block_size_bytes == 0 || !d.block_size_bytes.is_power_of_two() {
                return Err(format!(
                    "drive {} has block size {}",
                    d.name, d.block_size_bytes
                ));
            }
        }
        let mut nqns = std::collections::HashSet::new();
        for s in &self.subsystems {
            if !nqns.insert(s.nqn.as_str()) {
                return Err(format!("subsystem {} appears twice", s.nqn));
            }
            if self.drive(s.drive_uuid).is_none() {
                return Err(format!(
                    "subsystem {} refers to unknown drive {}",
                    s.nqn, s.drive_uuid
                ));
            }
            let mut hosts = std::collections::HashSet::new();
            for d in &s.dhchap {
                if !hosts.insert(d.host_nqn.as_str()) {
                    return Err(format!(
                        "subsystem {} lists DH-HMAC-CHAP host {} twice",
                        s.nqn, d.host_nqn
                    ));
                }
                d.to_target_config()
                    .map_err(|e| format!("subsystem {}: {e}", s.nqn))?;
            }
            let mut tls_hosts = std::collections::HashSet::new();
            for d in &s.tls_psks {
                if !tls_hosts.insert(d.host_nqn.as_str()) {
                    return Err(format!(
                        "subsystem {} lists TLS PSK host {} twice",
                        s.nqn, d.host_nqn
                    ));
                }
                d.configured_psk()
                    .map_err(|e| format!("subsystem {}: {e}", s.nqn))?;
            }
        }
        let mut ids = std::collections::HashSet::new();
        for n in &self.namespaces {
            let where_ = format!("namespace {}/{}", n.subsystem_nqn, n.nsid);
            if n.nsid == 0 || n.nsid == u32::MAX {
                return Err(format!("{where_}: invalid nsid"));
            }
            if !ids.insert((n.subsystem_nqn.as_str(), n.nsid)) {
                return Err(format!("{where_} appears twice"));
            }
            if self.subsystem(&n.subsystem_nqn).is_none() {
                return Err(format!("{where_}: unknown subsystem"));
            }
            if self.drive(n.drive_uuid).is_none() {
                return Err(format!("{where_}: unknown drive {}", n.drive_uuid));
            }
            if n.block_size_bytes == 0 || !n.block_size_bytes.is_power_of_two() {
                return Err(format!("{where_}: block size {}", n.block_size_bytes));
            }
            let mut total_bytes: u64 = 0;
            for e in &n.extents {
                if e.len_bytes == 0 || e.end_bytes().is_none() {
                    return Err(format!("{where_}: bad extent {e:?}"));
                }
                total_bytes = total_bytes
                    .checked_add(e.len_bytes)
                    .ok_or_else(|| format!("{where_}: extents overflow"))?;
            }
            if n.size_bytes == 0
                || n.size_bytes > total_bytes
                || !n.size_bytes.is_multiple_of(u64::from(n.block_size_bytes))
            {
                return Err(format!(
                    "{where_}: size {} does not fit extents of {total_bytes} bytes",
                    n.size_bytes
                ));
            }
            if let NamespaceKind::Kv(p) = &n.kind
                && (p.max_value_bytes == 0 || p.segment_bytes == 0 || p.max_keys == 0)
            {
                return Err(format!("{where_}: KV parameters {p:?}"));
            }
        }
        for (i, q) in self.qos.iter().enumerate() {
            let where_ = format!(
                "QoS limits of {} namespace {:?} host {:?}",
                q.subsystem_nqn, q.nsid, q.host_nqn
            );
            if self.subsystem(&q.subsystem_nqn).is_none() {
                return Err(format!("{where_}: unknown subsystem"));
            }
            if let Some(nsid) = q.nsid
                && self.namespace(&q.subsystem_nqn, nsid).is_none()
            {
                return Err(format!("{where_}: unknown namespace"));
            }
            if q.is_empty() {
                return Err(format!("{where_}: no limit"));
            }
            if self.qos[..i].iter().any(|o| o.same_key(q)) {
                return Err(format!("{where_} appear twice"));
            }
        }
        Ok(())
    }
}
