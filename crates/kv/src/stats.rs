//! Counters and capacity figures for Identify (NUSE), SMART and `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Group-commit batch size buckets: 1, 2-3, 4-7, ..., 64-127, 128 or more records.
pub const BATCH_SIZE_BUCKETS: usize = 8;

/// Capacity and key counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of values (with their 40-byte descriptors) the store accepts: the data area
    /// less the compaction reserve, times the fill limit.
    pub capacity_bytes: u64,
    /// Bytes of log segments in use (live values plus garbage not yet reclaimed).
    pub used_bytes: u64,
    /// Bytes the live values take in the log (value footprint plus descriptor).
    pub live_bytes: u64,
    /// `used_bytes - live_bytes`: overwritten and deleted values, headers and padding.
    pub garbage_bytes: u64,
    pub key_count: u64,
    pub max_keys: u64,
    pub segment_count: u32,
    pub free_segments: u32,
}

/// Monotonic counters since open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub stores: u64,
    pub store_bytes: u64,
    pub retrieves: u64,
    pub retrieve_bytes: u64,
    pub deletes: u64,
    pub exists: u64,
    pub lists: u64,
    /// Commands refused (conditions, capacity, sizes).
    pub rejected: u64,
    /// Log batches written (user and relocation) and the records in them.
    pub batches: u64,
    pub batch_records: u64,
    /// Largest batch seen, in records.
    pub batch_records_max: u64,
    /// Batches by record count: `[1, 2-3, 4-7, 8-15, 16-31, 32-63, 64-127, 128+]`.
    pub batch_size_histogram: [u64; BATCH_SIZE_BUCKETS],
    pub log_bytes_written: u64,
    pub flushes: u64,
    pub checkpoints: u64,
    pub checkpoint_bytes_written: u64,
    pub compaction_rounds: u64,
    pub compaction_bytes_read: u64,
    /// Bytes compaction wrote (relocation batches).
    pub compaction_bytes_moved: u64,
    /// Bytes of segments compaction returned to the free pool.
    pub compaction_bytes_reclaimed: u64,
    pub segments_reclaimed: u64,
    /// Time the compaction throttle slept, microseconds.
    pub compaction_throttle_sleep_us: u64,
    /// Values whose checksum did not match on a read (Retrieve or compaction).
    pub checksum_errors: u64,
    /// Device media errors seen on reads.
    pub media_errors: u64,
    /// Times a user batch waited for compaction to free a segment.
    pub space_stalls: u64,
}

impl Stats {
    /// Mean records per group-commit batch.
    pub fn mean_batch_records(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.batch_records as f64 / self.batches as f64
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub stores: AtomicU64,
    pub store_bytes: AtomicU64,
    pub retrieves: AtomicU64,
    pub retrieve_bytes: AtomicU64,
    pub deletes: AtomicU64,
    pub exists: AtomicU64,
    pub lists: AtomicU64,
    pub rejected: AtomicU64,
    pub batches: AtomicU64,
    pub batch_records: AtomicU64,
    pub batch_records_max: AtomicU64,
    pub batch_size_histogram: [AtomicU64; BATCH_SIZE_BUCKETS],
    pub log_bytes_written: AtomicU64,
    pub flushes: AtomicU64,
    pub checkpoints: AtomicU64,
    pub checkpoint_bytes_written: AtomicU64,
    pub compaction_rounds: AtomicU64,
    pub compaction_bytes_read: AtomicU64,
    pub compaction_bytes_moved: AtomicU64,
    pub compaction_bytes_reclaimed: AtomicU64,
    pub segments_reclaimed: AtomicU64,
    pub compaction_throttle_sleep_us: AtomicU64,
    pub checksum_errors: AtomicU64,
    pub media_errors: AtomicU64,
    pub space_stalls: AtomicU64,
}

pub(crate) fn add(c: &AtomicU64, v: u64) {
    c.fetch_add(v, Ordering::Relaxed);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

impl Counters {
    pub fn record_batch(&self, records: u64, bytes: u64) {
        add(&self.batches, 1);
        add(&self.batch_records, records);
        add(&self.log_bytes_written, bytes);
        self.batch_records_max.fetch_max(records, Ordering::Relaxed);
        let bucket = (u64::BITS - records.max(1).leading_zeros() - 1) as usize;
        add(
            &self.batch_size_histogram[bucket.min(BATCH_SIZE_BUCKETS - 1)],
            1,
        );
    }

    pub fn snapshot(&self) -> Stats {
        Stats {
            stores: get(&self.stores),
            store_bytes: get(&self.store_bytes),
            retrieves: get(&self.retrieves),
            retrieve_bytes: get(&self.retrieve_bytes),
            deletes: get(&self.deletes),
            exists: get(&self.exists),
            lists: get(&self.lists),
            rejected: get(&self.rejected),
            batches: get(&self.batches),
            batch_records: get(&self.batch_records),
            batch_records_max: get(&self.batch_records_max),
            batch_size_histogram: std::array::from_fn(|i| get(&self.batch_size_histogram[i])),
            log_bytes_written: get(&self.log_bytes_written),
            flushes: get(&self.flushes),
            checkpoints: get(&self.checkpoints),
            checkpoint_bytes_written: get(&self.checkpoint_bytes_written),
            compaction_rounds: get(&self.compaction_rounds),
            compaction_bytes_read: get(&self.compaction_bytes_read),
            compaction_bytes_moved: get(&self.compaction_bytes_moved),
            compaction_bytes_reclaimed: get(&self.compaction_bytes_reclaimed),
            segments_reclaimed: get(&self.segments_reclaimed),
            compaction_throttle_sleep_us: get(&self.compaction_throttle_sleep_us),
            checksum_errors: get(&self.checksum_errors),
            media_errors: get(&self.media_errors),
            space_stalls: get(&self.space_stalls),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_histogram_buckets() {
        let c = Counters::default();
        for n in [1u64, 2, 3, 4, 7, 8, 64, 127, 128, 5000] {
            c.record_batch(n, 4096);
        }
        let s = c.snapshot();
        assert_eq!(s.batch_size_histogram, [1, 2, 2, 1, 0, 0, 2, 2]);
        assert_eq!(s.batches, 10);
        assert_eq!(s.batch_records_max, 5000);
        assert_eq!(s.log_bytes_written, 40960);
    }
}
