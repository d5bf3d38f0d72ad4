//! SMART/health counters and the metrics snapshot.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::stats::{
    BusyPollStats, HealthSnapshot, NamespaceStats, PersistentHealth, TargetStats, data_units,
};
use crate::sync::read;
use crate::target::{Target, TargetInner};

impl TargetInner {
    pub fn health_snapshot(&self) -> HealthSnapshot {
        let h = &self.health;
        let (mut rb, mut wb, mut ro, mut wo) = (
            h.removed_read_bytes.load(Ordering::Relaxed),
            h.removed_write_bytes.load(Ordering::Relaxed),
            h.removed_read_ops.load(Ordering::Relaxed),
            h.removed_write_ops.load(Ordering::Relaxed),
        );
        for s in read(&self.subsystems).values() {
            for ns in s.namespaces() {
                let c = ns.counters.snapshot();
                rb += c.read_bytes;
                wb += c.write_bytes;
                ro += c.read_ops;
                wo += c.write_ops;
            }
        }
        let mut busy_us = h.closed_busy_us.load(Ordering::Relaxed);
        self.conns
            .for_each(|c| busy_us += c.counters.busy_us.load(Ordering::Relaxed));
        let uptime_hours = self.started.elapsed().as_secs() / 3600;
        HealthSnapshot {
            data_units_read: data_units(rb),
            data_units_written: data_units(wb),
            host_read_commands: ro,
            host_write_commands: wo,
            controller_busy_minutes: busy_us / 60_000_000,
            power_cycles: h.power_cycles.load(Ordering::Relaxed),
            power_on_hours: h.power_on_hours_base.load(Ordering::Relaxed) + uptime_hours,
            unsafe_shutdowns: h.unsafe_shutdowns.load(Ordering::Relaxed),
            media_errors: h.media_errors.load(Ordering::Relaxed),
            error_log_entries: h.error_log_entries.load(Ordering::Relaxed),
        }
    }
}

impl Target {
    /// Feeds the persistent health counters (power cycles, power-on hours before this
    /// start, unsafe shutdowns) kept by the node layer.
    pub fn set_persistent_health(&self, h: PersistentHealth) {
        let c = &self.inner.health;
        c.power_cycles.store(h.power_cycles, Ordering::Relaxed);
        c.power_on_hours_base
            .store(h.power_on_hours, Ordering::Relaxed);
        c.unsafe_shutdowns
            .store(h.unsafe_shutdowns, Ordering::Relaxed);
    }

    /// The SMART/health counters as the health log reports them.
    pub fn health(&self) -> HealthSnapshot {
        self.inner.health_snapshot()
    }

    /// Seconds since this target started (for the node layer's power-on-hours bookkeeping).
    pub fn uptime(&self) -> Duration {
        self.inner.started.elapsed()
    }

    /// A snapshot of all counters for the metrics endpoint.
    pub fn stats(&self) -> TargetStats {
        let mut namespaces = Vec::new();
        for (nqn, s) in read(&self.inner.subsystems).iter() {
            for ns in s.namespaces() {
                namespaces.push(NamespaceStats {
                    subsystem: nqn.clone(),
                    nsid: ns.nsid,
                    csi: ns.csi(),
                    device: ns.device_name(),
                    size_bytes: ns.size_bytes(),
                    kv_usage: ns.kv().map(|k| k.backend.usage()),
                    stats: ns.counters.snapshot(),
                });
            }
        }
        let mut connections = Vec::new();
        self.inner
            .conns
            .for_each(|c| connections.push(c.snapshot()));
        connections.sort_by_key(|c| c.id);
        TargetStats {
            namespaces,
            connections,
            health: self.inner.health_snapshot(),
            discovery_generation: self.inner.discovery_genctr.load(Ordering::Relaxed),
            admission: self.inner.admission.counters.snapshot(),
            busy_poll: BusyPollStats {
                window_us: self.inner.config.busy_poll_us,
                turns: self.inner.busy_poll_turns.load(Ordering::Relaxed),
            },
        }
    }
}
