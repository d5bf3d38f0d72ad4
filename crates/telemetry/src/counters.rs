//! The live counters of one device (a drive, a namespace, a volume member).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use blockdev::BlockError;
use serde::{Deserialize, Serialize};

use crate::hist::{HistogramSnapshot, LatencyHistogram};

/// The operation classes latency is kept for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpClass {
    Read = 0,
    Write = 1,
    Flush = 2,
    /// Write zeroes, discard.
    Other = 3,
}

impl OpClass {
    pub const ALL: [OpClass; 4] = [
        OpClass::Read,
        OpClass::Write,
        OpClass::Flush,
        OpClass::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpClass::Read => "read",
            OpClass::Write => "write",
            OpClass::Flush => "flush",
            OpClass::Other => "other",
        }
    }
}

/// The error kinds counted apart, because they mean different things for a drive's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The medium could not return or keep the data (unrecovered read, write fault).
    Media = 0,
    /// The path to the drive failed: timeouts, a closed or unreachable device.
    Transport = 1,
    /// Anything else (an I/O error without a media cause, a reservation conflict).
    Other = 2,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 3] = [ErrorKind::Media, ErrorKind::Transport, ErrorKind::Other];

    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Media => "media",
            ErrorKind::Transport => "transport",
            ErrorKind::Other => "other",
        }
    }

    /// The kind of a device error; `None` for a caller's mistake (a misaligned or
    /// out-of-range request, a write to a read-only device), which says nothing about the
    /// drive.
    pub fn of(err: &BlockError) -> Option<ErrorKind> {
        match err {
            BlockError::Media { .. } => Some(ErrorKind::Media),
            BlockError::Timeout | BlockError::Closed | BlockError::Unavailable(_) => {
                Some(ErrorKind::Transport)
            }
            BlockError::Io(_) | BlockError::ReservationConflict => Some(ErrorKind::Other),
            BlockError::OutOfRange { .. }
            | BlockError::Misaligned { .. }
            | BlockError::ReadOnly => None,
        }
    }
}

/// Live counters, updated with relaxed atomics on the I/O path.
///
/// Queue depth: `in_flight` is the depth now; every submission adds the depth it found
/// (itself included) to `qd_sum`, so `qd_sum / qd_samples` over an interval is the
/// average depth an arriving I/O saw.
#[derive(Debug, Default)]
pub struct DeviceTelemetry {
    latency: [LatencyHistogram; 4],
    ops: [AtomicU64; 4],
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    errors: [AtomicU64; 3],
    in_flight: AtomicI64,
    qd_sum: AtomicU64,
    qd_samples: AtomicU64,
}

impl DeviceTelemetry {
    pub fn new() -> DeviceTelemetry {
        DeviceTelemetry::default()
    }

    /// An I/O was submitted.
    #[inline]
    pub fn begin(&self) {
        let depth = self.in_flight.fetch_add(1, Relaxed) + 1;
        self.qd_sum.fetch_add(depth.max(0) as u64, Relaxed);
        self.qd_samples.fetch_add(1, Relaxed);
    }

    /// The I/O begun last completed after `latency_ns`, moving `bytes` if it succeeded.
    #[inline]
    pub fn end(&self, op: OpClass, bytes: u64, latency_ns: u64, error: Option<&BlockError>) {
        self.in_flight.fetch_sub(1, Relaxed);
        match error {
            None => {
                self.ops[op as usize].fetch_add(1, Relaxed);
                match op {
                    OpClass::Read => self.read_bytes.fetch_add(bytes, Relaxed),
                    OpClass::Write => self.write_bytes.fetch_add(bytes, Relaxed),
                    _ => 0,
                };
                self.latency[op as usize].record_us(latency_ns / 1000);
            }
            Some(e) => {
                if let Some(kind) = ErrorKind::of(e) {
                    self.errors[kind as usize].fetch_add(1, Relaxed);
                }
                // A failed I/O's time still says how the drive behaves (a timeout is slow).
                self.latency[op as usize].record_us(latency_ns / 1000);
            }
        }
    }

    /// The I/O begun last was abandoned before it completed.
    pub fn cancelled(&self) {
        self.in_flight.fetch_sub(1, Relaxed);
    }

    pub fn snapshot(&self) -> TelemetrySnapshot {
        TelemetrySnapshot {
            ops: std::array::from_fn(|i| self.ops[i].load(Relaxed)),
            read_bytes: self.read_bytes.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            errors: std::array::from_fn(|i| self.errors[i].load(Relaxed)),
            in_flight: self.in_flight.load(Relaxed).max(0) as u64,
            qd_sum: self.qd_sum.load(Relaxed),
            qd_samples: self.qd_samples.load(Relaxed),
            latency: std::array::from_fn(|i| self.latency[i].snapshot()),
        }
    }
}

/// A reading of [`DeviceTelemetry`]: lifetime counters (since the device was wrapped).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TelemetrySnapshot {
    /// Successful operations per [`OpClass`] (read, write, flush, other).
    pub ops: [u64; 4],
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Failed operations per [`ErrorKind`] (media, transport, other).
    pub errors: [u64; 3],
    /// Operations in flight now.
    pub in_flight: u64,
    pub qd_sum: u64,
    pub qd_samples: u64,
    /// Latency per [`OpClass`], failed operations included.
    pub latency: [HistogramSnapshot; 4],
}

impl TelemetrySnapshot {
    pub fn ops(&self, op: OpClass) -> u64 {
        self.ops[op as usize]
    }

    pub fn errors(&self, kind: ErrorKind) -> u64 {
        self.errors[kind as usize]
    }

    pub fn latency(&self, op: OpClass) -> &HistogramSnapshot {
        &self.latency[op as usize]
    }

    /// Lifetime average queue depth seen by arriving I/Os.
    pub fn queue_depth_avg(&self) -> f64 {
        if self.qd_samples == 0 {
            0.0
        } else {
            self.qd_sum as f64 / self.qd_samples as f64
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn counts_ops_bytes_errors_and_depth() {
        let t = DeviceTelemetry::new();
        t.begin();
        t.begin();
        assert_eq!(t.snapshot().in_flight, 2);
        t.end(OpClass::Read, 4096, 50_000, None);
        t.end(
            OpClass::Write,
            4096,
            9_000_000,
            Some(&BlockError::Media { offset_bytes: 0 }),
        );
        t.begin();
        t.end(OpClass::Flush, 0, 1_000, Some(&BlockError::Timeout));
        t.begin();
        t.end(
            OpClass::Read,
            512,
            1_000,
            Some(&BlockError::Misaligned {
                offset_bytes: 1,
                len_bytes: 512,
                align_bytes: 512,
            }),
        );
        let s = t.snapshot();
        assert_eq!(s.ops(OpClass::Read), 1);
        assert_eq!(s.ops(OpClass::Write), 0);
        assert_eq!(s.read_bytes, 4096);
        assert_eq!(s.write_bytes, 0);
        assert_eq!(s.errors(ErrorKind::Media), 1);
        assert_eq!(s.errors(ErrorKind::Transport), 1);
        assert_eq!(
            s.errors(ErrorKind::Other),
            0,
            "a caller's mistake is not counted"
        );
        assert_eq!(s.in_flight, 0);
        // Depths seen: 1, 2, 1, 1.
        assert_eq!((s.qd_sum, s.qd_samples), (5, 4));
        assert_eq!(s.latency(OpClass::Write).count(), 1);
        assert_eq!(
            s.latency(OpClass::Read).count() + s.latency(OpClass::Write).count(),
            3,
            "failed reads and writes are timed too"
        );
    }
}
