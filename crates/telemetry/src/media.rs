//! What a drive says about its own medium (NVMe SMART / Health log), when it says it.

use serde::{Deserialize, Serialize};

/// A reading of a drive's own health. `None`: not reported (files, RAM drives, remote
/// namespaces, a drive that could not be asked).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaReading {
    /// Composite temperature, kelvin.
    pub temperature_k: Option<u16>,
    /// Percentage Used: the vendor's estimate of life used, 0..=255 (100 = rated life
    /// reached; it may go above).
    pub percentage_used: Option<u8>,
    /// Available Spare, normalized percent, and the threshold the drive warns below.
    pub available_spare_pct: Option<u8>,
    pub available_spare_threshold_pct: Option<u8>,
    /// Media and data integrity errors the drive counted over its life.
    pub media_errors: Option<u64>,
}
