//! Serializable views of a volume for the CLI and the control plane.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::format::MemberState;
use crate::layout::LayoutParams;

/// Overall state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeState {
    /// Every slot active.
    Healthy,
    /// Some slot failed or missing, no rebuild running; I/O continues.
    Degraded,
    /// A member is being rebuilt.
    Rebuilding,
    /// More members lost than the layout tolerates: I/O fails.
    Failed,
    /// `stop()` was called.
    Stopped,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    /// Slot index (spares: position in the spare list).
    pub index: usize,
    pub uuid: Uuid,
    /// Device name, if a device is attached.
    pub device: Option<String>,
    pub state: MemberState,
    pub failure_domain: String,
    /// Rebuilding: member data bytes already current.
    pub rebuild_offset_bytes: u64,
    /// Rebuilding or failed: member data bytes that need only their dirty regions
    /// rebuilt (see the format doc); 0 = full rebuild.
    pub valid_bytes: u64,
}

/// Phase of a background task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskPhase {
    Running,
    Done,
    Stopped,
    Failed(String),
}

/// Rebuild progress, published on a watch channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RebuildProgress {
    pub member: usize,
    /// Only regions dirty in the bitmap are copied.
    pub partial: bool,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub rate_bytes_per_sec: f64,
    pub eta_secs: Option<f64>,
    pub phase: TaskPhase,
}

/// Result of a scrub pass.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubReport {
    /// Rows (rotating) or chunks (near) compared.
    pub stripes_checked: u64,
    pub bytes_checked: u64,
    /// Stripes whose parity or copies disagreed (after a confirming re-read).
    pub mismatches: u64,
    /// Stripes rewritten to agree.
    pub repaired: u64,
    /// Of those, how many were repaired by locating a single bad data or parity shard
    /// (m >= 2) instead of recomputing parity.
    pub located: u64,
    /// Stripes skipped because a member was missing.
    pub skipped: u64,
    /// Mismatches that vanished on re-read (transient read corruption).
    pub transient: u64,
    pub phase: Option<TaskPhase>,
}

/// Everything `volume status` shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VolumeStatus {
    pub name: String,
    pub uuid: Uuid,
    pub layout: LayoutParams,
    pub size_bytes: u64,
    pub logical_block_bytes: u32,
    pub member_data_bytes: u64,
    pub data_offset_bytes: u64,
    pub state: VolumeState,
    pub generation: u64,
    pub clean: bool,
    pub members: Vec<MemberStatus>,
    pub spares: Vec<MemberStatus>,
    pub region_bytes: u64,
    pub region_count: u64,
    pub dirty_regions: u64,
    pub rebuild: Option<RebuildProgress>,
    pub last_scrub: Option<ScrubReport>,
    /// Things assembly and failure handling want an operator to know.
    pub notes: Vec<String>,
    pub read_bytes: u64,
    pub write_bytes: u64,
}
