//! The crate's error type and its mapping onto `BlockError`.

use blockdev::BlockError;
use uuid::Uuid;

use crate::format::FormatError;
use crate::layout::LayoutError;

/// Why a volume operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Erasure(#[from] erasure::ErasureError),
    /// A member I/O failed (the member is then marked failed).
    #[error("member {member} ({name}): {source}")]
    Member {
        member: usize,
        name: String,
        #[source]
        source: BlockError,
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
    #[error("I/O error: {0}")]
    Io(#[from] BlockError),
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
