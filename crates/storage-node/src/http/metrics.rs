//! `/metrics` in the Prometheus text exposition format (version 0.0.4).

use std::fmt::Write;

use blockdev::DeviceStats;
use nvmf_target::LATENCY_BUCKETS_US;
use nvmf_target::TargetStats;

use crate::node::StorageNode;

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Escapes a label value: backslash, double quote and newline.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes `# HELP`/`# TYPE` and one sample per item.
fn family<T>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    items: &[T],
    sample: impl Fn(&T) -> (String, String),
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for it in items {
        let (labels, value) = sample(it);
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// A drive as `/metrics` reports it.
pub struct DriveSample {
    pub name: String,
    pub spec: String,
    pub stats: DeviceStats,
}

/// A Key Value namespace's store as `/metrics` reports it.
pub struct KvSample {
    pub subsystem: String,
    pub nsid: u32,
    pub usage: kv::Usage,
    pub stats: kv::Stats,
}

/// Renders a target stats snapshot plus drive and KV store counters.
pub fn render_stats(
    node_name: &str,
    stats: &TargetStats,
    drives: &[DriveSample],
    kv: &[KvSample],
) -> String {
    let mut out = String::with_capacity(4096);
    let node = esc(node_name);
    let ns = &stats.namespaces;
    let nsl = |n: &nvmf_target::NamespaceStats| {
        format!(
            "node=\"{node}\",subsystem=\"{}\",nsid=\"{}\"",
            esc(&n.subsystem),
            n.nsid
        )
    };
    type NsField = fn(&nvmf_target::NsStatsSnapshot) -> u64;
    let counters: [(&str, &str, NsField); 7] = [
        (
            "ferrobay_namespace_read_ops_total",
            "Read commands completed successfully.",
            |s| s.read_ops,
        ),
        (
            "ferrobay_namespace_write_ops_total",
            "Write commands completed successfully.",
            |s| s.write_ops,
        ),
        (
            "ferrobay_namespace_other_ops_total",
            "Other I/O commands (flush, write zeroes, DSM, compare, reservations).",
            |s| s.other_ops,
        ),
        (
            "ferrobay_namespace_read_bytes_total",
            "Bytes read by hosts.",
            |s| s.read_bytes,
        ),
        (
            "ferrobay_namespace_write_bytes_total",
            "Bytes written by hosts.",
            |s| s.write_bytes,
        ),
        (
            "ferrobay_namespace_errors_total",
            "I/O commands completed with an error status.",
            |s| s.errors,
        ),
        (
            "ferrobay_namespace_media_errors_total",
            "I/O commands failed by a media error.",
            |s| s.media_errors,
        ),
    ];
    for (name, help, field) in counters {
        family(&mut out, name, "counter", help, ns, |n| {
            (nsl(n), field(&n.stats).to_string())
        });
    }
    family(
        &mut out,
        "ferrobay_namespace_queue_depth",
        "gauge",
        "I/O commands executing now.",
        ns,
        |n| (nsl(n), n.stats.in_flight.max(0).to_string()),
    );
    family(
        &mut out,
        "ferrobay_namespace_size_bytes",
        "gauge",
        "Namespace size.",
        ns,
        |n| (nsl(n), n.size_bytes.to_string()),
    );
    let h = "ferrobay_namespace_latency_seconds";
    let _ = writeln!(
        out,
        "# HELP {h} Latency of successful I/O commands.\n# TYPE {h} histogram"
    );
    for n in ns {
        let labels = nsl(n);
        let mut cumulative = 0u64;
        for (i, count) in n.stats.latency_buckets.iter().enumerate() {
            cumulative += count;
            let le = match LATENCY_BUCKETS_US.get(i) {
                Some(us) => format!("{}", *us as f64 / 1e6),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(out, "{h}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(
            out,
            "{h}_sum{{{labels}}} {}",
            n.stats.latency_sum_us as f64 / 1e6
        );
        let _ = writeln!(out, "{h}_count{{{labels}}} {cumulative}");
    }

    let conns = &stats.connections;
    let _ = writeln!(
        out,
        "# HELP ferrobay_connections Open NVMe/TCP connections (one per queue).\n# TYPE ferrobay_connections gauge\nferrobay_connections{{node=\"{node}\"}} {}",
        conns.len()
    );
    let cl = |c: &nvmf_target::ConnStatsSnapshot| {
        format!(
            "node=\"{node}\",conn=\"{}\",peer=\"{}\",subsystem=\"{}\",host=\"{}\",cntlid=\"{}\",qid=\"{}\"",
            c.id,
            esc(&c.peer),
            esc(&c.subsystem),
            esc(&c.host_nqn),
            c.cntlid,
            c.qid
        )
    };
    type ConnField = fn(&nvmf_target::ConnStatsSnapshot) -> u64;
    let conn_counters: [(&str, &str, ConnField); 6] = [
        (
            "ferrobay_connection_commands_total",
            "Commands received on the connection.",
            |c| c.commands,
        ),
        (
            "ferrobay_connection_read_ops_total",
            "Reads on the connection.",
            |c| c.read_ops,
        ),
        (
            "ferrobay_connection_write_ops_total",
            "Writes on the connection.",
            |c| c.write_ops,
        ),
        (
            "ferrobay_connection_read_bytes_total",
            "Bytes read on the connection.",
            |c| c.read_bytes,
        ),
        (
            "ferrobay_connection_write_bytes_total",
            "Bytes written on the connection.",
            |c| c.write_bytes,
        ),
        (
            "ferrobay_connection_errors_total",
            "Commands failed on the connection.",
            |c| c.errors,
        ),
    ];
    for (name, help, field) in conn_counters {
        family(&mut out, name, "counter", help, conns, |c| {
            (cl(c), field(c).to_string())
        });
    }
    family(
        &mut out,
        "ferrobay_connection_queue_depth",
        "gauge",
        "Commands in flight on the connection.",
        conns,
        |c| (cl(c), c.in_flight.to_string()),
    );
    let adm = &stats.admission;
    family(
        &mut out,
        "ferrobay_connections_refused_total",
        "counter",
        "NVMe/TCP connections closed at accept by a connection limit (listener: max_connections_per_listener, host: max_connections_per_host).",
        &[
            ("listener", adm.refused_listener_limit),
            ("host", adm.refused_host_limit),
        ],
        |(limit, n)| (format!("node=\"{node}\",limit=\"{limit}\""), n.to_string()),
    );
    family(
        &mut out,
        "ferrobay_connection_handshake_timeouts_total",
        "counter",
        "NVMe/TCP connections closed for not completing ICReq and Connect within handshake_timeout_ms.",
        &[adm.handshake_timeouts],
        |n| (format!("node=\"{node}\""), n.to_string()),
    );

    let hs = &stats.health;
    let one = [()];
    let nl = |_: &()| format!("node=\"{node}\"");
    let health: [(&str, &str, &str, u64); 6] = [
        (
            "ferrobay_node_power_cycles_total",
            "counter",
            "Starts of this node.",
            hs.power_cycles,
        ),
        (
            "ferrobay_node_power_on_hours",
            "gauge",
            "Hours this node has run.",
            hs.power_on_hours,
        ),
        (
            "ferrobay_node_unsafe_shutdowns_total",
            "counter",
            "Starts after a run that did not shut down cleanly.",
            hs.unsafe_shutdowns,
        ),
        (
            "ferrobay_node_controller_busy_minutes_total",
            "counter",
            "SMART controller busy time.",
            hs.controller_busy_minutes,
        ),
        (
            "ferrobay_node_media_errors_total",
            "counter",
            "SMART media and data integrity errors.",
            hs.media_errors,
        ),
        (
            "ferrobay_node_error_log_entries_total",
            "counter",
            "SMART error log entries.",
            hs.error_log_entries,
        ),
    ];
    for (name, kind, help, v) in health {
        family(&mut out, name, kind, help, &one, |u| (nl(u), v.to_string()));
    }

    let dl = |d: &DriveSample| {
        format!(
            "node=\"{node}\",drive=\"{}\",spec=\"{}\"",
            esc(&d.name),
            esc(&d.spec)
        )
    };
    type DriveField = fn(&DeviceStats) -> u64;
    let drive_counters: [(&str, &str, DriveField); 6] = [
        (
            "ferrobay_drive_read_ops_total",
            "Reads the drive completed.",
            |s| s.read_ops,
        ),
        (
            "ferrobay_drive_write_ops_total",
            "Writes the drive completed.",
            |s| s.write_ops,
        ),
        (
            "ferrobay_drive_read_bytes_total",
            "Bytes read from the drive.",
            |s| s.read_bytes,
        ),
        (
            "ferrobay_drive_write_bytes_total",
            "Bytes written to the drive.",
            |s| s.write_bytes,
        ),
        (
            "ferrobay_drive_flushes_total",
            "Flushes of the drive.",
            |s| s.flushes,
        ),
        (
            "ferrobay_drive_media_errors_total",
            "Media errors the drive returned.",
            |s| s.media_errors,
        ),
    ];
    for (name, help, field) in drive_counters {
        family(&mut out, name, "counter", help, drives, |d| {
            (dl(d), field(&d.stats).to_string())
        });
    }
    render_kv(&mut out, &node, kv);
    out
}

/// Per-namespace figures of the KV stores: usage gauges and operation counters.
fn render_kv(out: &mut String, node: &str, kv: &[KvSample]) {
    let kl = |k: &KvSample| {
        format!(
            "node=\"{node}\",subsystem=\"{}\",nsid=\"{}\"",
            esc(&k.subsystem),
            k.nsid
        )
    };
    type UsageField = fn(&kv::Usage) -> u64;
    let gauges: [(&str, &str, UsageField); 5] = [
        ("ferrobay_kv_keys", "Keys stored.", |u| u.key_count),
        (
            "ferrobay_kv_used_bytes",
            "Bytes the live values take in the log (Identify NUSE).",
            |u| u.live_bytes,
        ),
        (
            "ferrobay_kv_garbage_bytes",
            "Bytes of overwritten and deleted values not yet compacted.",
            |u| u.garbage_bytes,
        ),
        (
            "ferrobay_kv_capacity_bytes",
            "Bytes of values the store accepts (Identify NSZE).",
            |u| u.capacity_bytes,
        ),
        (
            "ferrobay_kv_free_segments",
            "Log segments free for writing.",
            |u| u64::from(u.free_segments),
        ),
    ];
    for (name, help, field) in gauges {
        family(out, name, "gauge", help, kv, |k| {
            (kl(k), field(&k.usage).to_string())
        });
    }
    type StatsField = fn(&kv::Stats) -> u64;
    let counters: [(&str, &str, StatsField); 15] = [
        ("ferrobay_kv_stores_total", "Values stored.", |s| s.stores),
        (
            "ferrobay_kv_store_bytes_total",
            "Bytes of values stored.",
            |s| s.store_bytes,
        ),
        ("ferrobay_kv_retrieves_total", "Values read.", |s| {
            s.retrieves
        }),
        (
            "ferrobay_kv_retrieve_bytes_total",
            "Bytes of values read.",
            |s| s.retrieve_bytes,
        ),
        ("ferrobay_kv_deletes_total", "Keys deleted.", |s| s.deletes),
        ("ferrobay_kv_exists_total", "Exist lookups.", |s| s.exists),
        ("ferrobay_kv_lists_total", "List calls.", |s| s.lists),
        (
            "ferrobay_kv_rejected_total",
            "Commands refused (store conditions, sizes, capacity).",
            |s| s.rejected,
        ),
        (
            "ferrobay_kv_log_bytes_written_total",
            "Bytes written to the log (values, headers, relocations).",
            |s| s.log_bytes_written,
        ),
        (
            "ferrobay_kv_batches_total",
            "Group-commit log writes.",
            |s| s.batches,
        ),
        ("ferrobay_kv_flushes_total", "Device flushes.", |s| {
            s.flushes
        }),
        (
            "ferrobay_kv_checkpoints_total",
            "Index checkpoints written.",
            |s| s.checkpoints,
        ),
        (
            "ferrobay_kv_compaction_bytes_reclaimed_total",
            "Bytes of log segments compaction freed.",
            |s| s.compaction_bytes_reclaimed,
        ),
        (
            "ferrobay_kv_checksum_errors_total",
            "Values whose checksum did not match on a read.",
            |s| s.checksum_errors,
        ),
        (
            "ferrobay_kv_space_stalls_total",
            "Times a write waited for compaction to free a segment.",
            |s| s.space_stalls,
        ),
    ];
    for (name, help, field) in counters {
        family(out, name, "counter", help, kv, |k| {
            (kl(k), field(&k.stats).to_string())
        });
    }
}

/// The node's `/metrics` page.
pub fn render(node: &StorageNode) -> String {
    let stats = node.target().stats();
    let drives = node.drive_samples();
    let kv = node.kv_samples();
    render_stats(node.name(), &stats, &drives, &kv)
}

#[cfg(test)]
mod tests {
    use nvmf_target::{ConnStatsSnapshot, NamespaceStats, NsStatsSnapshot};

    use super::*;

    #[test]
    fn renders_families_histogram_and_escapes() {
        let mut s = NsStatsSnapshot {
            read_ops: 7,
            write_bytes: 4096,
            in_flight: 3,
            latency_sum_us: 1500,
            ..Default::default()
        };
        s.latency_buckets[0] = 2;
        s.latency_buckets[3] = 5;
        *s.latency_buckets.last_mut().unwrap() = 1;
        let stats = TargetStats {
            namespaces: vec![NamespaceStats {
                subsystem: "nqn.2026-01.io.ferrobay:n1:d0".into(),
                nsid: 1,
                csi: 0,
                kv_usage: None,
                device: "ram:1G".into(),
                size_bytes: 1 << 30,
                stats: s,
            }],
            connections: vec![ConnStatsSnapshot {
                id: 4,
                peer: "127.0.0.1:5000".into(),
                host_nqn: "nqn.h\"x".into(),
                commands: 12,
                ..Default::default()
            }],
            admission: nvmf_target::AdmissionStats {
                refused_listener_limit: 2,
                refused_host_limit: 5,
                handshake_timeouts: 9,
            },
            ..Default::default()
        };
        let drives = [DriveSample {
            name: "d0".into(),
            spec: "ram:1G".into(),
            stats: DeviceStats {
                flushes: 2,
                ..Default::default()
            },
        }];
        let kv = [KvSample {
            subsystem: "nqn.2026-01.io.ferrobay:n1:d0".into(),
            nsid: 2,
            usage: kv::Usage {
                key_count: 12,
                live_bytes: 4096,
                ..Default::default()
            },
            stats: kv::Stats {
                stores: 14,
                ..Default::default()
            },
        }];
        let text = render_stats("n1", &stats, &drives, &kv);
        let l = "node=\"n1\",subsystem=\"nqn.2026-01.io.ferrobay:n1:d0\",nsid=\"1\"";
        for want in [
            format!("ferrobay_namespace_read_ops_total{{{l}}} 7"),
            format!("ferrobay_namespace_write_bytes_total{{{l}}} 4096"),
            format!("ferrobay_namespace_queue_depth{{{l}}} 3"),
            format!("ferrobay_namespace_latency_seconds_bucket{{{l},le=\"0.000008\"}} 2"),
            format!("ferrobay_namespace_latency_seconds_bucket{{{l},le=\"0.000064\"}} 7"),
            format!("ferrobay_namespace_latency_seconds_bucket{{{l},le=\"+Inf\"}} 8"),
            format!("ferrobay_namespace_latency_seconds_count{{{l}}} 8"),
            format!("ferrobay_namespace_latency_seconds_sum{{{l}}} 0.0015"),
            "ferrobay_connections{node=\"n1\"} 1".to_string(),
            "ferrobay_connections_refused_total{node=\"n1\",limit=\"listener\"} 2".to_string(),
            "ferrobay_connections_refused_total{node=\"n1\",limit=\"host\"} 5".to_string(),
            "ferrobay_connection_handshake_timeouts_total{node=\"n1\"} 9".to_string(),
            "host=\"nqn.h\\\"x\"".to_string(),
            "# TYPE ferrobay_namespace_latency_seconds histogram".to_string(),
            "ferrobay_drive_flushes_total{node=\"n1\",drive=\"d0\",spec=\"ram:1G\"} 2".to_string(),
            "ferrobay_kv_keys{node=\"n1\",subsystem=\"nqn.2026-01.io.ferrobay:n1:d0\",nsid=\"2\"} 12".to_string(),
            "ferrobay_kv_used_bytes{node=\"n1\",subsystem=\"nqn.2026-01.io.ferrobay:n1:d0\",nsid=\"2\"} 4096".to_string(),
            "ferrobay_kv_stores_total{node=\"n1\",subsystem=\"nqn.2026-01.io.ferrobay:n1:d0\",nsid=\"2\"} 14".to_string(),
            "# TYPE ferrobay_kv_keys gauge".to_string(),
        ] {
            assert!(text.contains(&want), "missing {want} in\n{text}");
        }
        // Every sample line is `name{labels} number`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
            assert!(line.contains('{') && line.contains("} "), "{line}");
        }
    }
}
