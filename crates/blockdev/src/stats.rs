//! Per-device counters for SMART/health reporting.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::BlockError;

/// Counters a backend keeps for SMART/health reporting (a snapshot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub media_errors: u64,
    pub flushes: u64,
}

/// Cheap relaxed atomics behind [`DeviceStats`]; reusable by backends outside this crate.
/// Successful operations are counted; failed ones only bump `media_errors` when they are
/// media errors. `write_zeroes`/`discard` are not counted as writes.
#[derive(Debug, Default)]
pub struct StatsCounters {
    read_ops: AtomicU64,
    write_ops: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    media_errors: AtomicU64,
    flushes: AtomicU64,
}

impl StatsCounters {
    pub fn new() -> StatsCounters {
        StatsCounters::default()
    }

    pub fn record_read(&self, len_bytes: u64) {
        self.read_ops.fetch_add(1, Ordering::Relaxed);
        self.read_bytes.fetch_add(len_bytes, Ordering::Relaxed);
    }

    pub fn record_write(&self, len_bytes: u64) {
        self.write_ops.fetch_add(1, Ordering::Relaxed);
        self.write_bytes.fetch_add(len_bytes, Ordering::Relaxed);
    }

    pub fn record_flush(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_media_error(&self) {
        self.media_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `err` if it is a media error; returns it unchanged for chaining.
    pub fn note_error(&self, err: BlockError) -> BlockError {
        if err.is_media() {
            self.record_media_error();
        }
        err
    }

    pub fn snapshot(&self) -> DeviceStats {
        DeviceStats {
            read_ops: self.read_ops.load(Ordering::Relaxed),
            write_ops: self.write_ops.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            media_errors: self.media_errors.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_media_errors() {
        let s = StatsCounters::new();
        s.record_read(512);
        s.record_read(4096);
        s.record_write(1024);
        s.record_flush();
        let _ = s.note_error(BlockError::Media { offset_bytes: 0 });
        let _ = s.note_error(BlockError::Timeout);
        let want = DeviceStats {
            read_ops: 2,
            write_ops: 1,
            read_bytes: 4608,
            write_bytes: 1024,
            media_errors: 1,
            flushes: 1,
        };
        assert_eq!(s.snapshot(), want);
    }
}
