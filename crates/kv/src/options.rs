//! Run-time options (not stored on disk; a store may be reopened with others).

use std::sync::Arc;

use crate::clock::{Clock, TokioClock};

/// How a store runs.
#[derive(Clone)]
pub struct Options {
    /// Time seam for the compaction throttle.
    pub clock: Arc<dyn Clock>,
    /// Target size of one group-commit write (records join a batch while it stays under
    /// this; one record alone may be larger). Clamped to a quarter segment. Default 1 MiB.
    pub batch_max_bytes: u32,
    /// Batches being written at once. Default 8.
    pub max_inflight_batches: usize,
    /// Flushes in flight at once (on a device with a volatile write cache): when a
    /// batch's writes complete, a flush for it (and every other completed write) starts
    /// while fewer than this many run, instead of waiting for the running one. Default 4.
    pub max_inflight_flushes: usize,
    /// Values at least this large (and at least a logical block) are written to the log
    /// from the Store's own buffer, in place in their batch, by a device write of their
    /// own; smaller ones are copied into the batch buffer. Default 64 KiB.
    pub in_place_min_bytes: usize,
    /// Commands waiting for the committer before `store`/`delete` callers wait for room.
    /// Default 4096.
    pub queue_capacity: usize,
    /// Log bytes between checkpoints (bounds replay at open). The engine uses at least 16
    /// times the last checkpoint's size so checkpoints cost at most ~1/16 of log writes.
    /// Default 256 MiB.
    pub checkpoint_interval_bytes: u64,
    /// Share of the data area (less the compaction reserve) that values may fill, in
    /// percent; the rest keeps compaction cheap. Default 90.
    pub fill_percent: u8,
    pub compaction: CompactionOptions,
}

/// When and how fast the background compactor runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactionOptions {
    /// Compaction reads plus writes at most this many bytes per second while no command
    /// waits for space (then it runs unthrottled). 0 = unlimited. Default 256 MiB/s.
    pub throttle_bytes_per_sec: u64,
    /// Start when fewer than this percentage of segments are free. Default 15.
    pub start_free_percent: u8,
    /// Background rounds only take segments with at least this much garbage (percent of
    /// the segment). Default 20.
    pub min_garbage_percent: u8,
    /// Most segments one round reclaims (one checkpoint frees them all). Default 16.
    pub max_segments_per_round: u32,
}

impl Default for CompactionOptions {
    fn default() -> CompactionOptions {
        CompactionOptions {
            throttle_bytes_per_sec: 256 << 20,
            start_free_percent: 15,
            min_garbage_percent: 20,
            max_segments_per_round: 16,
        }
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            clock: Arc::new(TokioClock::new()),
            batch_max_bytes: 1 << 20,
            max_inflight_batches: 8,
            max_inflight_flushes: 4,
            in_place_min_bytes: 64 << 10,
            queue_capacity: 4096,
            checkpoint_interval_bytes: 256 << 20,
            fill_percent: 90,
            compaction: CompactionOptions::default(),
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("batch_max_bytes", &self.batch_max_bytes)
            .field("max_inflight_batches", &self.max_inflight_batches)
            .field("max_inflight_flushes", &self.max_inflight_flushes)
            .field("in_place_min_bytes", &self.in_place_min_bytes)
            .field("queue_capacity", &self.queue_capacity)
            .field("checkpoint_interval_bytes", &self.checkpoint_interval_bytes)
            .field("fill_percent", &self.fill_percent)
            .field("compaction", &self.compaction)
            .finish_non_exhaustive()
    }
}
