//! The crate's error type and its mapping onto `BlockError`.
//!
//! Error convention (the volume, registry and blockdev errors): an error's `Display` is
//! the whole story on one line, its cause included, and no error also hands that cause
//! out through `source()`. Logs print errors with `%e` and must not lose the cause; a
//! printer of the `source()` chain (anyhow's `{:#}`) must not repeat it.

use blockdev::BlockError;
use uuid::Uuid;

use crate::format::FormatError;
use crate::layout::LayoutError;
use crate::shortfall::Shortfall;

/// Why a volume operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("{0}")]
    Layout(LayoutError),
    #[error("{0}")]
    Format(FormatError),
    #[error("{0}")]
    Erasure(erasure::ErasureError),
    /// A member I/O failed (the member is then marked failed).
    #[error("member {member} ({name}): {cause}")]
    Member {
        member: usize,
        name: String,
        cause: BlockError,
    },
    /// More members are lost than the layout tolerates.
    #[error(
        "volume {name} has failed: {lost} of {members} members unavailable, it tolerates {tolerance}"
    )]
    Failed {
        name: String,
        lost: usize,
        members: usize,
        tolerance: usize,
    },
    /// Assembly found too few current members; nothing was written.
    #[error(
        "volume {name} cannot start: {0}; {hint}",
        name = .0.name,
        hint = if .0.force_helps {
            format!(
                "bring the missing members back, or assemble with force_stale to count \
                 {} as current (regions written since they left may read stale data)",
                .0.forceable_members()
            )
        } else {
            "bring the missing members back".to_string()
        }
    )]
    TooFewMembers(Box<Shortfall>),
    #[error("no volume superblock found on any of the {0} devices given")]
    NoSuperblock(usize),
    #[error("devices belong to different volumes ({0} and {1})")]
    MixedVolumes(Uuid, Uuid),
    #[error("device {name} already holds volume {volume} (use force to overwrite)")]
    InUse { name: String, volume: Uuid },
    #[error("device {name} is {size_bytes} bytes, the volume needs at least {need_bytes}")]
    TooSmall {
        name: String,
        size_bytes: u64,
        need_bytes: u64,
    },
    #[error(
        "device {name} has {block_bytes}-byte blocks, more than the volume's {volume_block_bytes}"
    )]
    BlockSize {
        name: String,
        block_bytes: u32,
        volume_block_bytes: u32,
    },
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("volume is stopped")]
    Stopped,
    /// The volume no longer touches its members: a member answered Reservation Conflict
    /// (another host owns the volume now), or the owner detached it. I/O fails with
    /// `BlockError::Unavailable`, so a host retries on another path.
    #[error("volume {name} fenced: {reason}")]
    Fenced { name: String, reason: String },
    #[error("a rebuild is already running")]
    RebuildRunning,
    /// A block I/O error; `BlockError` messages say what kind themselves.
    #[error("{0}")]
    Io(BlockError),
}

impl From<LayoutError> for VolumeError {
    fn from(e: LayoutError) -> Self {
        VolumeError::Layout(e)
    }
}

impl From<FormatError> for VolumeError {
    fn from(e: FormatError) -> Self {
        VolumeError::Format(e)
    }
}

impl From<erasure::ErasureError> for VolumeError {
    fn from(e: erasure::ErasureError) -> Self {
        VolumeError::Erasure(e)
    }
}

impl From<BlockError> for VolumeError {
    fn from(e: BlockError) -> Self {
        VolumeError::Io(e)
    }
}

impl From<VolumeError> for BlockError {
    fn from(err: VolumeError) -> BlockError {
        match err {
            VolumeError::Io(e) => e,
            VolumeError::Stopped => BlockError::Closed,
            VolumeError::Fenced { name, reason } => {
                BlockError::Unavailable(format!("volume fenced: {name}: {reason}"))
            }
            other => BlockError::Io(std::io::Error::other(other.to_string())),
        }
    }
}

pub type Result<T, E = VolumeError> = std::result::Result<T, E>;
