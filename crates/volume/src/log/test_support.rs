//! What the log module's white-box tests share: a small RAID-5 log volume's configuration.

use std::sync::Arc;

use super::{Compression, LogConfig};
use crate::{EngineOptions, LevelSpec, ManualClock, Throttle, VolumeConfig};

pub const MIB: u64 = 1 << 20;
pub const BS: usize = 4096;

/// RAID-5, 16 KiB stripe unit, 1 MiB regions, no throttle or automatic rebuild, a manual
/// clock; the log layout with `compression`.
pub fn config(compression: Compression) -> VolumeConfig {
    let mut c = VolumeConfig {
        stripe_unit_bytes: 16 << 10,
        region_bytes: MIB,
        journal_bytes: 256 << 10,
        options: EngineOptions {
            throttle: Throttle::Unlimited,
            auto_rebuild: false,
            clock: Arc::new(ManualClock::new()),
            ..EngineOptions::default()
        },
        ..VolumeConfig::new(LevelSpec::Raid5)
    };
    c.log = Some(LogConfig::new(compression));
    c
}
