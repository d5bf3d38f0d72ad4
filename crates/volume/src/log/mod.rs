//! The log-structured layout (`--layout log`): a log of full stripes over the rotating
//! engine, with inline compression and an indirection map that lives on the members.
//!
//! The rotating engine below provides an *array space* (its usual volume address space,
//! parity, degraded I/O, rebuild, scrub, fencing, resync); the log only ever writes whole
//! rows of it, so a small random write costs `(k+m)/k` member writes and no reads. The
//! format is in `docs/volume-format.md` ("Log layout"). Modules: `params` (what the
//! superblock records), `format` (root, checkpoint, segment summary encodings),
//! `compress` (codecs), `state` (map and space accounting), `engine` (data path),
//! `checkpoint` (checkpoints and replay), `gc` (garbage collection).

mod checkpoint;
#[cfg(test)]
mod compat_tests;
mod compress;
mod engine;
pub mod format;
mod gc;
mod params;
#[cfg(test)]
mod seal_tests;
mod state;
#[cfg(test)]
mod test_support;

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

pub(crate) use checkpoint::geometry;
pub use engine::LogEngine;
pub use params::{
    Compression, DEFAULT_EXPORT_PERCENT, DEFAULT_ZSTD_LEVEL, LogConfig, LogParams,
    MAX_LOG_BLOCK_BYTES, MIN_LOG_BLOCK_BYTES,
};

/// What `Volume::status` reports of a log-layout volume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogStatus {
    pub compression: Compression,
    pub block_bytes: u32,
    /// Bytes of mapped logical blocks (what the host has written and not deallocated).
    pub logical_bytes: u64,
    /// Stored bytes of those blocks (after compression).
    pub physical_bytes: u64,
    /// logical / physical (1.0 when nothing is stored).
    pub compression_ratio: f64,
    /// Mapped blocks (map entries) and the bytes a checkpoint of them takes.
    pub map_entries: u64,
    pub map_bytes: u64,
    pub segment_bytes: u64,
    pub segments_total: u64,
    pub segments_free: u64,
    /// Emptied since the last checkpoint: free after the next one.
    pub segments_pending_free: u64,
    pub checkpoints: u64,
    pub segments_written: u64,
    pub host_write_bytes: u64,
    pub gc_segments: u64,
    pub gc_moved_bytes: u64,
    /// (host bytes stored + bytes moved by GC) / host bytes stored; 1.0 without GC.
    pub gc_write_amplification: f64,
}

impl LogEngine {
    pub fn status(&self) -> LogStatus {
        let st = self.st();
        let c = &self.counters;
        let logical = st.space.mapped_blocks * u64::from(self.geo.block_bytes);
        let physical = st.space.live_stored_bytes;
        let stored = c.stored_write_bytes.load(Ordering::Relaxed);
        let moved = c.gc_moved_bytes.load(Ordering::Relaxed);
        let host_stored = stored.saturating_sub(moved);
        LogStatus {
            compression: self.params.compression,
            block_bytes: self.geo.block_bytes,
            logical_bytes: logical,
            physical_bytes: physical,
            compression_ratio: if physical == 0 {
                1.0
            } else {
                logical as f64 / physical as f64
            },
            map_entries: st.space.mapped_blocks,
            map_bytes: format::CHECKPOINT_HEADER_BYTES as u64
                + st.space.mapped_blocks * format::CHECKPOINT_ENTRY_BYTES as u64,
            segment_bytes: self.geo.segment_bytes,
            segments_total: u64::from(self.geo.segments),
            segments_free: st.space.free.len() as u64,
            segments_pending_free: st.space.pending as u64,
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            segments_written: c.segments_written.load(Ordering::Relaxed),
            host_write_bytes: c.host_write_bytes.load(Ordering::Relaxed),
            gc_segments: c.gc_segments.load(Ordering::Relaxed),
            gc_moved_bytes: moved,
            gc_write_amplification: if host_stored == 0 {
                1.0
            } else {
                stored as f64 / host_stored as f64
            },
        }
    }
}

/// What a member rebuild of a log volume reconstructs: row 0 (the roots), the two
/// checkpoint slots and every segment that is not free (written, being written, or
/// emptied but still named by the last checkpoint). A free segment is written whole
/// (every member, a rebuilding one too) before anything reads it, and replay checks
/// each summary and payload it reads, so its old contents do not matter.
impl crate::rebuild::RowsInUse for LogEngine {
    fn rows_in_use(&self) -> Vec<(u64, u64)> {
        let first_segment_row = 1 + 2 * self.geo.checkpoint_units;
        let st = self.st();
        let rows = st
            .space
            .seg_state
            .iter()
            .enumerate()
            .filter(|(_, s)| **s != state::SegState::Free)
            .map(|(i, _)| {
                let row = first_segment_row + i as u64;
                (row, row + 1)
            });
        crate::chunks::merge_ranges(std::iter::once((0, first_segment_row)).chain(rows))
    }
}
