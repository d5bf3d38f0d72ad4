//! Serializable views of a volume for the CLI and the control plane.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::format::MemberState;
use crate::layout::LayoutParams;

/// Overall state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// A member answered Reservation Conflict (another host owns the volume) or the
    /// owner detached it: no member I/O any more, I/O fails (`BlockError::Unavailable`).
    Fenced,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberStatus {
    /// Slot index (spares: position in the spare list).
    pub index: usize,
    pub uuid: Uuid,
    /// Device name, if a device is attached (`Volume::examine`: the device found for the
    /// member, or, through the registry, where it was expected).
    pub device: Option<String>,
    pub state: MemberState,
    pub failure_domain: String,
    /// Rebuilding: member data bytes already current.
    pub rebuild_offset_bytes: u64,
    /// Rebuilding or failed: member data bytes that need only their dirty regions
    /// rebuilt (see the format doc); 0 = full rebuild.
    pub valid_bytes: u64,
    /// Failed by the operator: it stays out until re-added or replaced (a member failed
    /// by an error comes back by itself when its device is offered again).
    #[serde(default)]
    pub failed_by_operator: bool,
    /// `Volume::examine`: listed active or rebuilding, but no usable device was found
    /// (the next assembly marks it failed). Always false on a running volume.
    #[serde(default)]
    pub missing: bool,
    /// A spare being filled with a copy of this slot (state replacing;
    /// `rebuild_offset_bytes` is how much is copied).
    #[serde(default)]
    pub replaces: Option<usize>,
}

/// Phase of a background task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum TaskPhase {
    Running,
    Done,
    Stopped,
    Failed(String),
}

/// Rebuild progress, published on a watch channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RebuildProgress {
    pub member: usize,
    /// Only regions dirty in the bitmap are copied.
    pub partial: bool,
    /// Only the rows the layout uses are rebuilt (a log volume: its root, checkpoints
    /// and segments in use, not the free segments).
    #[serde(default)]
    pub in_use_only: bool,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub rate_bytes_per_sec: f64,
    pub eta_secs: Option<f64>,
    pub phase: TaskPhase,
    /// Share of the elapsed time with member I/O in flight (the rest was throttle
    /// sleep): about the `Throttle::Fraction` setting, 1 when unthrottled.
    #[serde(default)]
    pub busy_fraction: f64,
}

/// A proactive copy (`Volume::copy_member`), published after every batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CopyProgress {
    /// The slot being copied and the device it is copied to.
    pub member: usize,
    pub target: String,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub rate_bytes_per_sec: f64,
    pub eta_secs: Option<f64>,
    pub phase: TaskPhase,
    /// Member bytes rebuilt from the other members because the member could not read
    /// them (its media errors during the copy).
    pub bytes_reconstructed: u64,
}

/// Result of a scrub pass.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// Progress of a running scrub (or where the last one ended), like [`RebuildProgress`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScrubProgress {
    /// Member bytes read and verified so far.
    pub bytes_done: u64,
    /// Member bytes the scrub reads in all (every row of every member).
    pub bytes_total: u64,
    pub rate_bytes_per_sec: f64,
    pub eta_secs: Option<f64>,
    pub phase: TaskPhase,
    /// As in [`RebuildProgress`].
    #[serde(default)]
    pub busy_fraction: f64,
}

/// What the resync after assembly did (dirty bitmap regions only; what a node taking
/// over a volume publishes as "bytes resynced after takeover").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResyncReport {
    /// Dirty bitmap regions resynced.
    pub regions: u64,
    /// Volume data bytes in those regions (the part of the volume that was re-checked).
    pub bytes_resynced: u64,
    /// Member bytes read to check them.
    pub member_bytes_read: u64,
    /// Parity (or copy) bytes rewritten.
    pub member_bytes_written: u64,
    /// Stripes (rotating) or chunks (near) whose parity or copies were rewritten.
    pub stripes_rewritten: u64,
    /// Stripes that could not be verified (a data member missing, not journaled).
    pub stripes_unverifiable: u64,
    pub duration_secs: f64,
}

/// A background resync after assembly (`EngineOptions::background_resync`), published
/// after every batch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResyncProgress {
    /// Dirty regions to resync, and how many of them are still pending (the sweeper
    /// keeps them dirty until their resync is done).
    pub regions: u64,
    pub regions_pending: u64,
    /// Volume data bytes in those regions, and done so far.
    pub bytes_total: u64,
    pub bytes_done: u64,
    pub phase: Option<TaskPhase>,
}

/// Everything `volume status` shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// The running proactive copy (or the last one, once it ended).
    #[serde(default)]
    pub copy: Option<CopyProgress>,
    pub last_scrub: Option<ScrubReport>,
    /// The running scrub's progress (or the last one's, once it ended).
    #[serde(default)]
    pub scrub: Option<ScrubProgress>,
    /// What the resync at assembly did (`None` for a volume just created).
    #[serde(default)]
    pub last_resync: Option<ResyncReport>,
    /// The background resync's progress (or the last one's, once it ended); `None`
    /// when the resync ran during assembly.
    #[serde(default)]
    pub resync: Option<ResyncProgress>,
    /// Things assembly and failure handling want an operator to know.
    pub notes: Vec<String>,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Log layout: compression, map and space figures (`None`: data in place).
    #[serde(default)]
    pub log: Option<crate::log::LogStatus>,
}
