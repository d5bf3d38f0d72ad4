//! `ferrobay node health`: a SMART-like summary per drive from the target's counters and
//! the drive's own statistics.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::api::{DriveHealth, DrivePrediction, HealthReport, PredictionReport, TelemetryReport};
use crate::catalog::now_unix_ms;

use super::StorageNode;

/// SMART data units: thousands of 512-byte units, rounded up.
pub(crate) fn data_units(bytes: u64) -> u64 {
    (bytes / 512).div_ceil(1000)
}

impl StorageNode {
    /// Each KV namespace's store figures, for `/metrics`.
    pub fn kv_samples(&self) -> Vec<crate::http::metrics::KvSample> {
        self.kv_namespaces()
            .iter()
            .filter_map(|((nqn, nsid), e)| {
                e.engine.as_ref().map(|k| crate::http::metrics::KvSample {
                    subsystem: nqn.clone(),
                    nsid: *nsid,
                    usage: k.usage(),
                    stats: k.stats(),
                })
            })
            .collect()
    }

    /// Each drive's own counters, for `/metrics`.
    pub fn drive_samples(&self) -> Vec<crate::http::metrics::DriveSample> {
        let c = self.catalog();
        c.state()
            .drives
            .iter()
            .filter_map(|d| {
                self.inner
                    .drives
                    .get(&d.uuid)
                    .map(|dev| crate::http::metrics::DriveSample {
                        name: d.name.clone(),
                        spec: d.spec.clone(),
                        stats: dev.stats(),
                    })
            })
            .collect()
    }

    /// `GET /api/v1/telemetry`: every drive's and namespace's I/O counters, latency
    /// percentiles, SMART reading and grade.
    pub fn telemetry_report(&self) -> TelemetryReport {
        self.inner.telemetry.report(now_unix_ms())
    }

    /// `GET /api/v1/predictions`: every graded drive's grade, reasons and since when.
    pub fn predictions(&self) -> PredictionReport {
        PredictionReport {
            node: self.name().to_string(),
            drives: self
                .inner
                .telemetry
                .predictions(now_unix_ms())
                .into_iter()
                .map(|(drive, prediction)| DrivePrediction { drive, prediction })
                .collect(),
        }
    }

    pub fn health(&self) -> HealthReport {
        let mut predictions = self.inner.telemetry.predictions(now_unix_ms());
        let stats = self.inner.target.stats();
        let (state, allocated): (_, BTreeMap<Uuid, (u64, u64)>) = {
            let c = self.catalog();
            let alloc = c
                .state()
                .drives
                .iter()
                .filter_map(|d| {
                    c.allocator(d.uuid)
                        .map(|a| (d.uuid, (a.allocated_bytes(), a.free_bytes())))
                })
                .collect();
            (c.state().clone(), alloc)
        };
        let unsaved_secs = self
            .inner
            .power_on_saved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
            .as_secs();
        let mut drives = Vec::with_capacity(state.drives.len());
        for d in &state.drives {
            let mut h = DriveHealth {
                name: d.name.clone(),
                spec: d.spec.clone(),
                uuid: d.uuid.to_string(),
                serial: d.serial.clone(),
                size_bytes: d.size_bytes,
                prediction: predictions.remove(&d.name),
                ..DriveHealth::default()
            };
            if let Some(&(used, free)) = allocated.get(&d.uuid) {
                (h.allocated_bytes, h.free_bytes) = (used, free);
            }
            let on_drive = |nqn: &str, nsid: u32| {
                state
                    .namespace(nqn, nsid)
                    .is_some_and(|n| n.drive_uuid == d.uuid)
            };
            let (mut read_bytes, mut write_bytes) = (0, 0);
            for ns in stats
                .namespaces
                .iter()
                .filter(|ns| on_drive(&ns.subsystem, ns.nsid))
            {
                h.namespaces += 1;
                h.host_read_commands += ns.stats.read_ops;
                h.host_write_commands += ns.stats.write_ops;
                h.command_errors += ns.stats.errors;
                h.media_errors += ns.stats.media_errors;
                if let Some(u) = ns.kv_usage {
                    h.kv_namespaces += 1;
                    h.kv_keys += u.key_count;
                    h.kv_used_bytes += u.used_bytes;
                    h.kv_capacity_bytes += u.capacity_bytes;
                }
                read_bytes += ns.stats.read_bytes;
                write_bytes += ns.stats.write_bytes;
            }
            h.data_units_read = data_units(read_bytes);
            h.data_units_written = data_units(write_bytes);
            if let Some(dev) = self.inner.drives.get(&d.uuid) {
                let ds = dev.stats();
                h.kind = format!("{:?}", dev.info().kind).to_lowercase();
                h.device_read_ops = ds.read_ops;
                h.device_write_ops = ds.write_ops;
                h.device_read_bytes = ds.read_bytes;
                h.device_write_bytes = ds.write_bytes;
                h.device_flushes = ds.flushes;
                // The device counts every media error it returned; the namespaces count
                // the commands that failed with one. Report the larger.
                h.media_errors = h.media_errors.max(ds.media_errors);
            }
            h.status = if h.media_errors > 0 {
                format!("media errors: {}", h.media_errors)
            } else {
                "ok".to_string()
            };
            drives.push(h);
        }
        HealthReport {
            node_name: state.node_name.clone(),
            uptime_seconds: self.inner.started.elapsed().as_secs(),
            power_cycles: state.smart.power_cycles,
            power_on_hours: (state.smart.power_on_seconds + unsaved_secs) / 3600,
            unsafe_shutdowns: state.smart.unsafe_shutdowns,
            controller_busy_minutes: stats.health.controller_busy_minutes,
            error_log_entries: stats.health.error_log_entries,
            connections: stats.connections.len() as u64,
            drives,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::data_units;

    #[test]
    fn smart_data_units_round_up() {
        assert_eq!(data_units(0), 0);
        assert_eq!(data_units(512), 1);
        assert_eq!(data_units(512_000), 1);
        assert_eq!(data_units(512_512), 2);
    }
}
