//! Counters for the metrics endpoint and the SMART/health log.
//!
//! Namespace counters are sharded by connection so that queues on different cores do not
//! bounce one cache line per I/O; a snapshot sums the shards.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Upper bounds (inclusive, microseconds) of the latency histogram buckets; a last bucket
/// counts everything slower.
pub const LATENCY_BUCKETS_US: [u64; 15] = [
    8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536, 262_144, 1_048_576,
];
/// Number of histogram buckets including the overflow bucket.
pub const LATENCY_BUCKET_COUNT: usize = LATENCY_BUCKETS_US.len() + 1;

const SHARDS: usize = 8;
const _: () = assert!(SHARDS.is_power_of_two());

/// What kind of command a namespace counter update is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpKind {
    Read,
    Write,
    Other,
}

#[derive(Default)]
#[repr(align(128))]
struct Shard {
    read_ops: AtomicU64,
    write_ops: AtomicU64,
    other_ops: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    errors: AtomicU64,
    media_errors: AtomicU64,
    in_flight: AtomicI64,
    latency_sum_us: AtomicU64,
    latency: [AtomicU64; LATENCY_BUCKET_COUNT],
}

/// Live counters of one namespace.
#[derive(Default)]
pub(crate) struct NsCounters {
    shards: [Shard; SHARDS],
}

fn bucket_of(us: u64) -> usize {
    LATENCY_BUCKETS_US
        .iter()
        .position(|&b| us <= b)
        .unwrap_or(LATENCY_BUCKETS_US.len())
}

impl NsCounters {
    fn shard(&self, shard: usize) -> &Shard {
        &self.shards[shard & (SHARDS - 1)]
    }

    pub(crate) fn start(&self, shard: usize) {
        self.shard(shard).in_flight.fetch_add(1, Relaxed);
    }

    /// Records a finished command (`bytes` moved, `ok` whether it succeeded).
    pub(crate) fn finish(
        &self,
        shard: usize,
        kind: OpKind,
        bytes: u64,
        latency_us: u64,
        ok: bool,
        media_error: bool,
    ) {
        let s = self.shard(shard);
        s.in_flight.fetch_sub(1, Relaxed);
        if !ok {
            s.errors.fetch_add(1, Relaxed);
            if media_error {
                s.media_errors.fetch_add(1, Relaxed);
            }
            return;
        }
        match kind {
            OpKind::Read => {
                s.read_ops.fetch_add(1, Relaxed);
                s.read_bytes.fetch_add(bytes, Relaxed);
            }
            OpKind::Write => {
                s.write_ops.fetch_add(1, Relaxed);
                s.write_bytes.fetch_add(bytes, Relaxed);
            }
            OpKind::Other => {
                s.other_ops.fetch_add(1, Relaxed);
            }
        }
        s.latency_sum_us.fetch_add(latency_us, Relaxed);
        s.latency[bucket_of(latency_us)].fetch_add(1, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> NsStatsSnapshot {
        let mut out = NsStatsSnapshot::default();
        for s in &self.shards {
            out.read_ops += s.read_ops.load(Relaxed);
            out.write_ops += s.write_ops.load(Relaxed);
            out.other_ops += s.other_ops.load(Relaxed);
            out.read_bytes += s.read_bytes.load(Relaxed);
            out.write_bytes += s.write_bytes.load(Relaxed);
            out.errors += s.errors.load(Relaxed);
            out.media_errors += s.media_errors.load(Relaxed);
            out.in_flight += s.in_flight.load(Relaxed);
            out.latency_sum_us += s.latency_sum_us.load(Relaxed);
            for (o, c) in out.latency_buckets.iter_mut().zip(s.latency.iter()) {
                *o += c.load(Relaxed);
            }
        }
        out.in_flight = out.in_flight.max(0);
        out
    }
}

/// A snapshot of one namespace's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NsStatsSnapshot {
    pub read_ops: u64,
    pub write_ops: u64,
    /// Flush, write zeroes, DSM, compare, reservations; KV List, Exist, Delete.
    pub other_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Commands that completed with an error status.
    pub errors: u64,
    pub media_errors: u64,
    /// Commands being executed right now (queue depth).
    pub in_flight: i64,
    pub latency_sum_us: u64,
    /// Per bucket (not cumulative) counts; bounds in [`LATENCY_BUCKETS_US`].
    pub latency_buckets: [u64; LATENCY_BUCKET_COUNT],
}

/// Live counters of one connection (one queue). Written by the connection's task only.
#[derive(Default, Debug)]
pub(crate) struct ConnCounters {
    pub commands: AtomicU64,
    pub read_ops: AtomicU64,
    pub write_ops: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub errors: AtomicU64,
    pub busy_us: AtomicU64,
    pub in_flight: AtomicU64,
}

impl ConnCounters {
    pub(crate) fn add(&self, c: &AtomicU64, v: u64) {
        // Single writer: a load + store is cheaper than a locked add.
        let _ = self;
        c.store(c.load(Relaxed).wrapping_add(v), Relaxed);
    }
}

/// A snapshot of one connection.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConnStatsSnapshot {
    pub id: u64,
    pub peer: String,
    pub local: String,
    pub subsystem: String,
    pub host_nqn: String,
    pub cntlid: u16,
    pub qid: u16,
    pub commands: u64,
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    pub in_flight: u64,
}

/// Health counters that must survive restarts; the node layer persists and feeds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PersistentHealth {
    pub power_cycles: u64,
    /// Power-on hours accumulated before this process started.
    pub power_on_hours: u64,
    pub unsafe_shutdowns: u64,
}

/// Target-wide health counters (SMART / Health Information log).
#[derive(Default, Debug)]
pub(crate) struct HealthCounters {
    pub power_cycles: AtomicU64,
    pub power_on_hours_base: AtomicU64,
    pub unsafe_shutdowns: AtomicU64,
    pub media_errors: AtomicU64,
    pub error_log_entries: AtomicU64,
    /// Busy time of connections that have closed, in µs.
    pub closed_busy_us: AtomicU64,
    /// Read/write counters of namespaces that were removed (SMART counts are lifetime).
    pub removed_read_bytes: AtomicU64,
    pub removed_write_bytes: AtomicU64,
    pub removed_read_ops: AtomicU64,
    pub removed_write_ops: AtomicU64,
}

/// A snapshot of the target's SMART-style health counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HealthSnapshot {
    /// In units of 1000 × 512 bytes, rounded up (as the SMART log reports them).
    pub data_units_read: u64,
    pub data_units_written: u64,
    pub host_read_commands: u64,
    pub host_write_commands: u64,
    /// Minutes with at least one I/O command outstanding (summed over queues).
    pub controller_busy_minutes: u64,
    pub power_cycles: u64,
    pub power_on_hours: u64,
    pub unsafe_shutdowns: u64,
    pub media_errors: u64,
    pub error_log_entries: u64,
}

/// Data units of the SMART log: thousands of 512-byte units, rounded up.
pub(crate) fn data_units(bytes: u64) -> u64 {
    (bytes / 512).div_ceil(1000)
}

/// Counters of the connection guards: limits at accept and the handshake timeout.
#[derive(Default, Debug)]
pub(crate) struct AdmissionCounters {
    pub refused_listener_limit: AtomicU64,
    pub refused_host_limit: AtomicU64,
    pub handshake_timeouts: AtomicU64,
}

impl AdmissionCounters {
    pub(crate) fn snapshot(&self) -> AdmissionStats {
        AdmissionStats {
            refused_listener_limit: self.refused_listener_limit.load(Relaxed),
            refused_host_limit: self.refused_host_limit.load(Relaxed),
            handshake_timeouts: self.handshake_timeouts.load(Relaxed),
        }
    }
}

/// Connections the target turned away or ended early, since it started.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AdmissionStats {
    /// Closed at accept: the listener held `max_connections_per_listener`.
    pub refused_listener_limit: u64,
    /// Closed at accept: the host address held `max_connections_per_host` on the listener.
    pub refused_host_limit: u64,
    /// Closed because ICReq and Connect did not complete within `handshake_timeout_ms`.
    pub handshake_timeouts: u64,
}

/// Everything [`crate::Target::stats`] reports.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TargetStats {
    pub namespaces: Vec<NamespaceStats>,
    pub connections: Vec<ConnStatsSnapshot>,
    pub health: HealthSnapshot,
    pub discovery_generation: u64,
    pub admission: AdmissionStats,
    pub busy_poll: BusyPollStats,
}

/// Busy polling (`TargetConfig::busy_poll_us`) since the target started.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BusyPollStats {
    /// The configured window; 0: event-driven.
    pub window_us: u32,
    /// Times a connection out of work polled again instead of sleeping.
    pub turns: u64,
}

/// Counters of one namespace with its identity.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct NamespaceStats {
    pub subsystem: String,
    pub nsid: u32,
    /// Command Set Identifier: 0 NVM, 1 Key Value.
    pub csi: u8,
    pub device: String,
    pub size_bytes: u64,
    /// Capacity and keys of a KV namespace.
    pub kv_usage: Option<crate::KvUsage>,
    pub stats: NsStatsSnapshot,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_shards() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(8), 0);
        assert_eq!(bucket_of(9), 1);
        assert_eq!(bucket_of(10_000_000), LATENCY_BUCKETS_US.len());
        let c = NsCounters::default();
        for shard in 0..20 {
            c.start(shard);
            c.finish(shard, OpKind::Read, 4096, 100, true, false);
        }
        c.start(3);
        c.start(4);
        c.finish(4, OpKind::Write, 512, 5, false, true);
        let s = c.snapshot();
        assert_eq!(s.read_ops, 20);
        assert_eq!(s.read_bytes, 20 * 4096);
        assert_eq!(s.errors, 1);
        assert_eq!(s.media_errors, 1);
        assert_eq!(s.in_flight, 1);
        assert_eq!(s.latency_buckets[bucket_of(100)], 20);
        assert_eq!(data_units(0), 0);
        assert_eq!(data_units(512), 1);
        assert_eq!(data_units(512_000), 1);
        assert_eq!(data_units(512_001), 1);
        assert_eq!(data_units(512_512), 2);
    }
}
