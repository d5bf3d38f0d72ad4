//! Where the extended SMART log (vendor LID C0h) and the Telemetry Host-Initiated log
//! (LID 07h, whose data area 1 carries the same page) get their records.
//!
//! The node layer knows the drives and meters them per operation class
//! (`telemetry` crate): it installs a [`TelemetrySource`]. Without one, the target
//! reports its own namespace counters (operations, bytes, errors, queue depth; no
//! per-class latency and no drive readings).

use nvme_proto::log::ExtSmartLog;
use nvme_proto::log::ext_smart::{ExtSmartRecord, kind};

use crate::subsystem::Subsystem;

/// Extended SMART records of a subsystem's drives and namespaces.
pub trait TelemetrySource: Send + Sync {
    /// The records for subsystem `subnqn`: its drives and its namespaces, or only
    /// namespace `nsid` (and its drive) when given.
    fn ext_smart(&self, subnqn: &str, nsid: Option<u32>) -> ExtSmartLog;
}

/// The target's own counters as namespace records.
pub(crate) fn own_records(subsys: &Subsystem, nsid: Option<u32>, timestamp_ms: u64) -> ExtSmartLog {
    let records = subsys
        .namespaces()
        .iter()
        .filter(|ns| nsid.is_none_or(|n| n == ns.nsid))
        .map(|ns| {
            let c = ns.counters.snapshot();
            ExtSmartRecord {
                kind: kind::NAMESPACE,
                nsid: ns.nsid,
                name: ns.device_name(),
                queue_depth: u32::try_from(c.in_flight.max(0)).unwrap_or(u32::MAX),
                read_bytes: c.read_bytes,
                write_bytes: c.write_bytes,
                ops: [c.read_ops, c.write_ops, 0, c.other_ops],
                errors: [c.media_errors, 0, c.errors.saturating_sub(c.media_errors)],
                ..ExtSmartRecord::default()
            }
        })
        .collect();
    ExtSmartLog {
        timestamp_ms,
        records,
    }
}
