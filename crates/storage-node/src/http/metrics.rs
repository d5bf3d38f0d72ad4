//! The node's `/metrics` page, rendered by [`httpapi::metrics::Page`] (prometheus-client)
//! from a snapshot of the target, drive and KV store counters. Names and labels:
//! `docs/node-api.md`.

use blockdev::DeviceStats;
use httpapi::metrics::{Column, Labels, Page, labels};
use nvmf_target::LATENCY_BUCKETS_US;
use nvmf_target::TargetStats;

use crate::node::StorageNode;

pub use httpapi::metrics::CONTENT_TYPE;

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
    qos: &nvmf_target::QosStats,
) -> String {
    stats_page(node_name, stats, drives, kv, qos).render()
}

/// The families of [`render_stats`], to add more before rendering.
pub fn stats_page(
    node_name: &str,
    stats: &TargetStats,
    drives: &[DriveSample],
    kv: &[KvSample],
    qos: &nvmf_target::QosStats,
) -> Page {
    let mut page = Page::new();
    let node = node_name;
    namespace_families(&mut page, node, &stats.namespaces);
    let conns = &stats.connections;
    page.gauge(
        "ferrobay_connections",
        "Open NVMe/TCP connections (one per queue).",
    )
    .add(&[("node", node)], conns.len() as u64);
    let conn_rows: Vec<(Labels, &nvmf_target::ConnStatsSnapshot)> = conns
        .iter()
        .map(|c| {
            let l = labels(&[
                ("node", node),
                ("conn", &c.id.to_string()),
                ("peer", &c.peer),
                ("subsystem", &c.subsystem),
                ("host", &c.host_nqn),
                ("cntlid", &c.cntlid.to_string()),
                ("qid", &c.qid.to_string()),
            ]);
            (l, c)
        })
        .collect();
    let conn_counters: [Column<nvmf_target::ConnStatsSnapshot>; 6] = [
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
    page.counters(&conn_rows, &conn_counters);
    page.gauges(
        &conn_rows,
        &[(
            "ferrobay_connection_queue_depth",
            "Commands in flight on the connection.",
            |c| c.in_flight,
        )],
    );
    let adm = &stats.admission;
    page.counter(
        "ferrobay_connections_refused_total",
        "NVMe/TCP connections closed at accept by a connection limit (listener: max_connections_per_listener, host: max_connections_per_host).",
    )
    .add(&[("node", node), ("limit", "listener")], adm.refused_listener_limit)
    .add(&[("node", node), ("limit", "host")], adm.refused_host_limit);
    page.counter(
        "ferrobay_connection_handshake_timeouts_total",
        "NVMe/TCP connections closed for not completing ICReq and Connect within handshake_timeout_ms.",
    )
    .add(&[("node", node)], adm.handshake_timeouts);
    page.counter(
        "ferrobay_busy_poll_turns_total",
        "Times an NVMe/TCP connection out of work polled its socket again instead of sleeping (node run --busy-poll-us; 0 when event-driven).",
    )
    .add(&[("node", node)], stats.busy_poll.turns);

    let hs = &stats.health;
    let nl = [("node", node)];
    page.counter("ferrobay_node_power_cycles_total", "Starts of this node.")
        .add(&nl, hs.power_cycles);
    page.gauge(
        "ferrobay_node_power_on_seconds",
        "Time this node has run (SMART power-on hours, whole hours).",
    )
    .add(&nl, hs.power_on_hours.saturating_mul(3600));
    page.counter(
        "ferrobay_node_unsafe_shutdowns_total",
        "Starts after a run that did not shut down cleanly.",
    )
    .add(&nl, hs.unsafe_shutdowns);
    page.counter(
        "ferrobay_node_controller_busy_seconds_total",
        "SMART controller busy time (whole minutes).",
    )
    .add(&nl, hs.controller_busy_minutes.saturating_mul(60));
    page.counter(
        "ferrobay_node_media_errors_total",
        "SMART media and data integrity errors.",
    )
    .add(&nl, hs.media_errors);
    page.counter(
        "ferrobay_node_error_log_entries_total",
        "SMART error log entries.",
    )
    .add(&nl, hs.error_log_entries);

    let drive_rows: Vec<(Labels, &DeviceStats)> = drives
        .iter()
        .map(|d| {
            let l = labels(&[("node", node), ("drive", &d.name), ("spec", &d.spec)]);
            (l, &d.stats)
        })
        .collect();
    let drive_counters: [Column<DeviceStats>; 6] = [
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
    page.counters(&drive_rows, &drive_counters);
    render_kv(&mut page, node, kv);
    super::qos_metrics::add_qos_families(&mut page, node, qos);
    page
}

/// The `ferrobay_namespace_*` families of a target's namespaces (also the processor
/// node's, whose namespaces are volumes): I/O counters, queue depth, size, latency.
pub fn namespace_families(page: &mut Page, node: &str, ns: &[nvmf_target::NamespaceStats]) {
    let rows: Vec<(Labels, &nvmf_target::NamespaceStats)> = ns
        .iter()
        .map(|n| (ns_labels(node, &n.subsystem, n.nsid), n))
        .collect();
    let counters: [Column<nvmf_target::NamespaceStats>; 7] = [
        (
            "ferrobay_namespace_read_ops_total",
            "Read commands completed successfully.",
            |n| n.stats.read_ops,
        ),
        (
            "ferrobay_namespace_write_ops_total",
            "Write commands completed successfully.",
            |n| n.stats.write_ops,
        ),
        (
            "ferrobay_namespace_other_ops_total",
            "Other I/O commands (flush, write zeroes, DSM, compare, reservations).",
            |n| n.stats.other_ops,
        ),
        (
            "ferrobay_namespace_read_bytes_total",
            "Bytes read by hosts.",
            |n| n.stats.read_bytes,
        ),
        (
            "ferrobay_namespace_write_bytes_total",
            "Bytes written by hosts.",
            |n| n.stats.write_bytes,
        ),
        (
            "ferrobay_namespace_errors_total",
            "I/O commands completed with an error status.",
            |n| n.stats.errors,
        ),
        (
            "ferrobay_namespace_media_errors_total",
            "I/O commands failed by a media error.",
            |n| n.stats.media_errors,
        ),
    ];
    page.counters(&rows, &counters);
    page.gauges(
        &rows,
        &[
            (
                "ferrobay_namespace_queue_depth",
                "I/O commands executing now.",
                |n| u64::try_from(n.stats.in_flight.max(0)).unwrap_or(0),
            ),
            ("ferrobay_namespace_size_bytes", "Namespace size.", |n| {
                n.size_bytes
            }),
        ],
    );
    let bounds: Vec<f64> = LATENCY_BUCKETS_US
        .iter()
        .map(|us| *us as f64 / 1e6)
        .collect();
    let latency = page.histogram(
        "ferrobay_namespace_latency_seconds",
        "Latency of successful I/O commands.",
    );
    for n in ns {
        let nsid = n.nsid.to_string();
        latency.add_histogram(
            &[("node", node), ("subsystem", &n.subsystem), ("nsid", &nsid)],
            n.stats.latency_sum_us as f64 / 1e6,
            &bounds,
            &n.stats.latency_buckets,
        );
    }
}

/// Per-namespace figures of the KV stores: usage gauges and operation counters.
fn render_kv(page: &mut Page, node: &str, kv: &[KvSample]) {
    let rows: Vec<(Labels, &KvSample)> = kv
        .iter()
        .map(|k| (ns_labels(node, &k.subsystem, k.nsid), k))
        .collect();
    let gauges: [Column<KvSample>; 5] = [
        ("ferrobay_kv_keys", "Keys stored.", |k| k.usage.key_count),
        (
            "ferrobay_kv_used_bytes",
            "Bytes the live values take in the log (Identify NUSE).",
            |k| k.usage.live_bytes,
        ),
        (
            "ferrobay_kv_garbage_bytes",
            "Bytes of overwritten and deleted values not yet compacted.",
            |k| k.usage.garbage_bytes,
        ),
        (
            "ferrobay_kv_capacity_bytes",
            "Bytes of values the store accepts (Identify NSZE).",
            |k| k.usage.capacity_bytes,
        ),
        (
            "ferrobay_kv_free_segments",
            "Log segments free for writing.",
            |k| u64::from(k.usage.free_segments),
        ),
    ];
    page.gauges(&rows, &gauges);
    let counters: [Column<kv::Stats>; 15] = [
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
    let stats_rows: Vec<(Labels, &kv::Stats)> =
        rows.into_iter().map(|(l, k)| (l, &k.stats)).collect();
    page.counters(&stats_rows, &counters);
}

/// The labels of a namespace's samples.
fn ns_labels(node: &str, subsystem: &str, nsid: u32) -> Labels {
    labels(&[
        ("node", node),
        ("subsystem", subsystem),
        ("nsid", &nsid.to_string()),
    ])
}

/// The node's `/metrics` page.
pub fn render(node: &StorageNode) -> String {
    let stats = node.target().stats();
    let drives = node.drive_samples();
    let kv = node.kv_samples();
    let mut page = stats_page(
        node.name(),
        &stats,
        &drives,
        &kv,
        &node.target().qos_stats(),
    );
    node.telemetry().add_metrics(&mut page);
    page.render()
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
            busy_poll: nvmf_target::BusyPollStats {
                window_us: 500,
                turns: 31,
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
        let text = render_stats("n1", &stats, &drives, &kv, &Default::default());
        let l = "node=\"n1\",subsystem=\"nqn.2026-01.io.ferrobay:n1:d0\",nsid=\"1\"";
        for want in [
            format!("ferrobay_namespace_read_ops_total{{{l}}} 7"),
            format!("ferrobay_namespace_write_bytes_total{{{l}}} 4096"),
            format!("ferrobay_namespace_queue_depth{{{l}}} 3"),
            format!("ferrobay_namespace_latency_seconds_bucket{{{l},le=\"8e-06\"}} 2"),
            format!("ferrobay_namespace_latency_seconds_bucket{{{l},le=\"6.4e-05\"}} 7"),
            format!("ferrobay_namespace_latency_seconds_bucket{{{l},le=\"+Inf\"}} 8"),
            format!("ferrobay_namespace_latency_seconds_count{{{l}}} 8"),
            format!("ferrobay_namespace_latency_seconds_sum{{{l}}} 0.0015"),
            "ferrobay_connections{node=\"n1\"} 1".to_string(),
            "ferrobay_connections_refused_total{node=\"n1\",limit=\"listener\"} 2".to_string(),
            "ferrobay_connections_refused_total{node=\"n1\",limit=\"host\"} 5".to_string(),
            "ferrobay_connection_handshake_timeouts_total{node=\"n1\"} 9".to_string(),
            "ferrobay_busy_poll_turns_total{node=\"n1\"} 31".to_string(),
            "host=\"nqn.h\\\"x\"".to_string(),
            "# TYPE ferrobay_namespace_latency_seconds histogram".to_string(),
            "ferrobay_drive_flushes_total{node=\"n1\",drive=\"d0\",spec=\"ram:1G\"} 2".to_string(),
            "ferrobay_kv_keys{node=\"n1\",subsystem=\"nqn.2026-01.io.ferrobay:n1:d0\",nsid=\"2\"} 12".to_string(),
            "ferrobay_kv_used_bytes{node=\"n1\",subsystem=\"nqn.2026-01.io.ferrobay:n1:d0\",nsid=\"2\"} 4096".to_string(),
            "ferrobay_kv_stores_total{node=\"n1\",subsystem=\"nqn.2026-01.io.ferrobay:n1:d0\",nsid=\"2\"} 14".to_string(),
            "# TYPE ferrobay_kv_keys gauge".to_string(),
            "# HELP ferrobay_node_power_on_seconds ".to_string(),
            "# TYPE ferrobay_node_controller_busy_seconds_total counter".to_string(),
        ] {
            assert!(text.contains(&want), "missing {want} in\n{text}");
        }
        // Every sample line is `name{labels} number`, and every family has HELP text.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
            assert!(line.contains('{') && line.contains("} "), "{line}");
        }
        let types = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        let helps = text
            .lines()
            .filter(|l| l.starts_with("# HELP ") && l.split(' ').count() > 3)
            .count();
        assert_eq!(types, helps, "{text}");
        assert!(types > 40, "{types} families");
    }
}
