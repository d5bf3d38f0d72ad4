//! What a log-layout volume is created with: the codec and the logical block size.
//! Persisted in the superblock (format version 2, header bytes 232..256).

use serde::{Deserialize, Serialize};

/// Smallest and largest logical block of a log-layout volume.
pub const MIN_LOG_BLOCK_BYTES: u32 = 4096;
pub const MAX_LOG_BLOCK_BYTES: u32 = 64 << 10;
/// Default share of the segment space exported as logical capacity (the rest is room for
/// garbage collection to find sparse segments).
pub const DEFAULT_EXPORT_PERCENT: u32 = 80;

/// How each logical block is compressed before it enters a stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase", tag = "codec", content = "level")]
pub enum Compression {
    /// Blocks are stored raw.
    Off,
    /// LZ4 block format (lz4_flex).
    Lz4,
    /// Zstandard at a level 1..=22.
    Zstd(u8),
}

/// Default zstd level (zstd's own default).
pub const DEFAULT_ZSTD_LEVEL: u8 = 3;

impl Compression {
    pub(crate) fn code(self) -> (u8, u8) {
        match self {
            Compression::Off => (0, 0),
            Compression::Lz4 => (1, 0),
            Compression::Zstd(l) => (2, l),
        }
    }

    pub(crate) fn from_code(codec: u8, level: u8) -> Option<Compression> {
        match (codec, level) {
            (0, 0) => Some(Compression::Off),
            (1, 0) => Some(Compression::Lz4),
            (2, 1..=22) => Some(Compression::Zstd(level)),
            _ => None,
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Compression::Off => f.write_str("off"),
            Compression::Lz4 => f.write_str("lz4"),
            Compression::Zstd(l) => write!(f, "zstd:{l}"),
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = String;

    /// `off`, `lz4`, `zstd` or `zstd:LEVEL` (1..=22).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" | "none" => Ok(Compression::Off),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd(DEFAULT_ZSTD_LEVEL)),
            _ => {
                let level = s
                    .strip_prefix("zstd:")
                    .ok_or_else(|| format!("unknown compression {s:?} (off, lz4, zstd[:LEVEL])"))?;
                match level.parse::<u8>() {
                    Ok(l @ 1..=22) => Ok(Compression::Zstd(l)),
                    _ => Err(format!("zstd level {level:?} is not 1..=22")),
                }
            }
        }
    }
}

/// Creation choice of a log-structured layout (`VolumeConfig::log`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogConfig {
    pub compression: Compression,
    /// Logical block: the unit of compression and of the map, a power of two in
    /// 4 KiB..=64 KiB.
    pub block_bytes: u32,
    /// Logical capacity as a percentage of the segment space (1..=95; default 80).
    pub export_percent: u32,
}

impl LogConfig {
    pub fn new(compression: Compression) -> LogConfig {
        LogConfig {
            compression,
            block_bytes: 4096,
            export_percent: DEFAULT_EXPORT_PERCENT,
        }
    }
}

/// What the superblock records of a log-layout volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogParams {
    pub compression: Compression,
    pub block_bytes: u32,
    /// Logical blocks the volume exports (fixed at creation).
    pub logical_blocks: u64,
}

impl LogParams {
    pub fn block_bytes_valid(block_bytes: u32) -> bool {
        block_bytes.is_power_of_two()
            && (MIN_LOG_BLOCK_BYTES..=MAX_LOG_BLOCK_BYTES).contains(&block_bytes)
    }
}
