//! Identifying volume members among arbitrary devices (for `volume assemble` by name).

use blockdev::BlockDevice;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::Result;
use crate::format::MemberState;
use crate::layout::LayoutParams;
use crate::sbio;

/// What a device's superblock says about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeInfo {
    pub volume_uuid: Uuid,
    pub volume_name: String,
    pub member_uuid: Uuid,
    /// Slot index, or `slots + j` for spare `j`.
    pub member_index: usize,
    /// State of this member as its own superblock records it (a newer superblock on
    /// another member may say otherwise).
    pub state: MemberState,
    pub generation: u64,
    pub layout: LayoutParams,
    pub clean: bool,
    /// Both superblock copies are valid and identical.
    pub intact: bool,
}

/// Reads a device's superblocks. `Ok(None)`: no valid volume superblock.
pub async fn probe_device(dev: &dyn BlockDevice) -> Result<Option<ProbeInfo>> {
    let read = sbio::read_member(dev).await?;
    let intact = !read.needs_repair();
    Ok(read.best.and_then(|sb| {
        let state = sb.own_entry()?.state;
        Some(ProbeInfo {
            volume_uuid: sb.volume_uuid,
            volume_name: sb.name.clone(),
            member_uuid: sb.member_uuid,
            member_index: sb.member_index,
            state,
            generation: sb.generation,
            layout: sb.layout,
            clean: sb.clean,
            intact,
        })
    }))
}
