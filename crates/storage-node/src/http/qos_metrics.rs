//! QoS families of `/metrics` (`docs/qos.md`), shared by storage nodes and processor
//! nodes: per limit (commands and bytes through it, commands it held back and their wait,
//! the configured rates) and per namespace capped by the contention controller.

use httpapi::metrics::{Column, Labels, Page, labels};
use nvmf_target::{QosKey, QosStats};

/// A key's labels after `node`: `subsystem`, `nsid` and `host` (`all` when the key covers
/// them all).
fn key_labels(node: &str, key: &QosKey) -> Labels {
    let (nsid, host) = super::qos_routes::key_segments(key);
    labels(&[
        ("node", node),
        ("subsystem", &key.subsystem_nqn),
        ("nsid", &nsid),
        ("host", host),
    ])
}

/// `l` with a `limit` label (`max` or `min`) added.
fn with_limit(l: &Labels, kind: &str) -> Labels {
    let mut l = l.clone();
    l.push(("limit".to_string(), kind.to_string()));
    l
}

/// Adds the QoS families of `stats` to `page`, each sample labelled `node`.
pub fn add_qos_families(page: &mut Page, node: &str, stats: &QosStats) {
    let rows: Vec<(Labels, &nvmf_target::QosLimitStats)> = stats
        .limits
        .iter()
        .map(|s| (key_labels(node, &s.key), s))
        .collect();
    let counters: [Column<nvmf_target::QosLimitStats>; 3] = [
        (
            "ferrobay_qos_commands_total",
            "Commands that passed a QoS limit.",
            |s| s.commands,
        ),
        (
            "ferrobay_qos_bytes_total",
            "Data bytes of the commands that passed a QoS limit.",
            |s| s.bytes,
        ),
        (
            "ferrobay_qos_throttled_commands_total",
            "Commands a QoS limit made wait (counted on the limit they waited longest for).",
            |s| s.throttled_commands,
        ),
    ];
    page.counters(&rows, &counters);
    let f = page.counter(
        "ferrobay_qos_throttled_seconds_total",
        "Time commands waited for a QoS limit.",
    );
    for (l, s) in &rows {
        f.add_labels_f64(l.clone(), s.throttled_ns as f64 / 1e9);
    }
    let f = page.gauge(
        "ferrobay_qos_limit_iops",
        "Configured QoS rate in commands per second (limit: max or min).",
    );
    for (l, s) in &rows {
        for (kind, v) in [("max", s.limits.max_iops), ("min", s.limits.min_iops)] {
            if let Some(v) = v {
                f.add_labels(with_limit(l, kind), v);
            }
        }
    }
    let f = page.gauge(
        "ferrobay_qos_limit_bytes_per_second",
        "Configured QoS rate in bytes per second (limit: max or min).",
    );
    for (l, s) in &rows {
        let pairs = [
            ("max", s.limits.max_bytes_per_s),
            ("min", s.limits.min_bytes_per_s),
        ];
        for (kind, v) in pairs {
            if let Some(v) = v {
                f.add_labels(with_limit(l, kind), v);
            }
        }
    }
    // Caps of the contention controller (only while a minimum is configured).
    let caps: Vec<(Labels, &nvmf_target::QosCapStats)> = stats
        .caps
        .iter()
        .map(|c| {
            let l = labels(&[
                ("node", node),
                ("subsystem", &c.subsystem_nqn),
                ("nsid", &c.nsid.to_string()),
            ]);
            (l, c)
        })
        .collect();
    let f = page.gauge(
        "ferrobay_qos_cap_iops",
        "Commands per second the contention controller holds a namespace to, so that minimums elsewhere are met (absent: not capped).",
    );
    for (l, c) in &caps {
        if let Some(v) = c.cap_iops {
            f.add_labels(l.clone(), v);
        }
    }
    let f = page.gauge(
        "ferrobay_qos_cap_bytes_per_second",
        "Bytes per second the contention controller holds a namespace to (absent: not capped).",
    );
    for (l, c) in &caps {
        if let Some(v) = c.cap_bytes_per_s {
            f.add_labels(l.clone(), v);
        }
    }
    page.counters(
        &caps,
        &[(
            "ferrobay_qos_cap_throttled_commands_total",
            "Commands a contention cap made wait.",
            |c| c.throttled_commands,
        )],
    );
    let f = page.counter(
        "ferrobay_qos_cap_throttled_seconds_total",
        "Time commands waited for a contention cap.",
    );
    for (l, c) in &caps {
        f.add_labels_f64(l.clone(), c.throttled_ns as f64 / 1e9);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_target::{QosCapStats, QosLimitStats, QosLimits};

    #[test]
    fn qos_families_in_base_units_with_key_labels() {
        let stats = QosStats {
            limits: vec![QosLimitStats {
                key: QosKey::host_on_namespace("nqn.s", 1, "nqn.h"),
                limits: QosLimits {
                    max_iops: Some(500),
                    min_bytes_per_s: None,
                    max_bytes_per_s: Some(1 << 20),
                    ..QosLimits::default()
                },
                commands: 10,
                bytes: 40960,
                throttled_commands: 4,
                throttled_ns: 1_500_000_000,
            }],
            caps: vec![QosCapStats {
                subsystem_nqn: "nqn.s".into(),
                nsid: 2,
                cap_iops: Some(300),
                cap_bytes_per_s: None,
                measured_iops: 290.0,
                measured_bytes_per_s: 0.0,
                throttled_commands: 7,
                throttled_ns: 250_000_000,
            }],
        };
        let mut page = Page::new();
        add_qos_families(&mut page, "n1", &stats);
        let text = page.render();
        let key = "node=\"n1\",subsystem=\"nqn.s\",nsid=\"1\",host=\"nqn.h\"";
        for want in [
            "# HELP ferrobay_qos_commands_total Commands that passed a QoS limit.".to_string(),
            format!("ferrobay_qos_commands_total{{{key}}} 10"),
            format!("ferrobay_qos_bytes_total{{{key}}} 40960"),
            format!("ferrobay_qos_throttled_commands_total{{{key}}} 4"),
            format!("ferrobay_qos_throttled_seconds_total{{{key}}} 1.5"),
            format!("ferrobay_qos_limit_iops{{{key},limit=\"max\"}} 500"),
            format!("ferrobay_qos_limit_bytes_per_second{{{key},limit=\"max\"}} 1048576"),
            "ferrobay_qos_cap_iops{node=\"n1\",subsystem=\"nqn.s\",nsid=\"2\"} 300".to_string(),
            "ferrobay_qos_cap_throttled_seconds_total{node=\"n1\",subsystem=\"nqn.s\",nsid=\"2\"} 0.25"
                .to_string(),
        ] {
            assert!(text.contains(&want), "missing {want:?} in\n{text}");
        }
        assert!(!text.contains("limit=\"min\""), "no minimum configured");
        assert!(
            !text.contains("ferrobay_qos_cap_bytes_per_second{"),
            "not capped"
        );
    }
}
