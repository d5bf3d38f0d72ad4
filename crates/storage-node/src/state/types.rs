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
        Ok(())
    }
}
