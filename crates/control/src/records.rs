//! What the metadata store holds about the cluster. Every record is serde JSON (format in
//! `docs/cluster.md`); the keys come from [`meta::schema`] plus the few below. Records
//! that say "under the lease" vanish when their writer stops renewing its lease.

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

/// `/ferrobay/nodes/<name>`, under the node's lease: a live node and how to reach it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeRecord {
    pub name: String,
    pub role: NodeRole,
    /// NVMe/TCP listeners (I/O and discovery).
    #[schema(value_type = Vec<String>, example = json!(["10.0.0.1:4420"]))]
    pub nvme_addrs: Vec<SocketAddr>,
    /// HTTP control API, if any.
    #[schema(value_type = Option<String>)]
    pub api_addr: Option<SocketAddr>,
    /// Processor nodes: the slot that fixes their cntlid range.
    pub slot: Option<u16>,
    pub version: String,
    pub started_unix_ms: u64,
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
}

impl VolumeRecord {
    pub fn nqn(&self) -> String {
        volume_nqn(&self.name)
    }
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
    fn reservation_keys_are_stable_and_distinct() {
        assert_eq!(reservation_key("p1"), reservation_key("p1"));
        assert_ne!(reservation_key("p1"), reservation_key("p2"));
        assert_ne!(reservation_key(""), 0);
    }
}
