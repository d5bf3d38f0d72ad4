//! QoS families of `/metrics` (`docs/qos.md`), shared by storage nodes and processor
//! nodes: per limit (commands and bytes through it, commands it held back and their wait,
//! the configured rates) and per namespace capped by the contention controller.

use httpapi::metrics::Page;
use nvmf_target::{QosKey, QosStats};

/// A key's labels: `subsystem`, `nsid` and `host` (`all` when the key covers them all).
fn key_labels(key: &QosKey) -> [(&'static str, String); 3] {
    [
        ("subsystem", key.subsystem_nqn.clone()),
        (
            "nsid",
            key.nsid
                .map_or_else(|| "all".to_string(), |n| n.to_string()),
        ),
        (
            "host",
            key.host_nqn.clone().unwrap_or_else(|| "all".to_string()),
        ),
    ]
}

/// Adds the QoS families of `stats` to `page`, each sample labelled `node`.
pub fn add_qos_families(page: &mut Page, node: &str, stats: &QosStats) {
    let rows: Vec<([(&str, String); 3], &nvmf_target::QosLimitStats)> = stats
        .limits
        .iter()
        .map(|s| (key_labels(&s.key), s))
        .collect();
    let labels = |l: &[(&'static str, String); 3]| -> Vec<(&'static str, String)> {
        let mut v = vec![("node", node.to_string())];
        v.extend(l.iter().cloned());
        v
    };
    fn refs<'a>(v: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
        v.iter().map(|(k, s)| (*k, s.as_str())).collect()
    }
    type Field = fn(&nvmf_target::QosLimitStats) -> u64;
    let counters: [(&str, &str, Field); 3] = [
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
    for (name, help, field) in counters {
        let f = page.counter(name, help);
        for (l, s) in &rows {
            f.add(&refs(&labels(l)), field(s));
        }
    }
    let f = page.counter(
        "ferrobay_qos_throttled_seconds_total",
        "Time commands waited for a QoS limit.",
    );
    for (l, s) in &rows {
        f.add_f64(&refs(&labels(l)), s.throttled_ns as f64 / 1e9);
    }
    let f = page.gauge(
        "ferrobay_qos_limit_iops",
        "Configured QoS rate in commands per second (limit: max or min).",
    );
    for (l, s) in &rows {
        for (kind, v) in [("max", s.limits.max_iops), ("min", s.limits.min_iops)] {
            if let Some(v) = v {
                let mut ls = labels(l);
                ls.push(("limit", kind.to_string()));
                f.add(&refs(&ls), v);
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
                let mut ls = labels(l);
                ls.push(("limit", kind.to_string()));
                f.add(&refs(&ls), v);
            }
        }
    }
    // Caps of the contention controller (only while a minimum is configured).
    let caps: Vec<(Vec<(&'static str, String)>, &nvmf_target::QosCapStats)> = stats
        .caps
        .iter()
        .map(|c| {
            (
                vec![
                    ("node", node.to_string()),
                    ("subsystem", c.subsystem_nqn.clone()),
                    ("nsid", c.nsid.to_string()),
                ],
                c,
            )
        })
        .collect();
    let f = page.gauge(
        "ferrobay_qos_cap_iops",
        "Commands per second the contention controller holds a namespace to, so that minimums elsewhere are met (absent: not capped).",
    );
    for (l, c) in &caps {
        if let Some(v) = c.cap_iops {
            f.add(&refs(l), v);
        }
    }
    let f = page.gauge(
        "ferrobay_qos_cap_bytes_per_second",
        "Bytes per second the contention controller holds a namespace to (absent: not capped).",
    );
    for (l, c) in &caps {
        if let Some(v) = c.cap_bytes_per_s {
            f.add(&refs(l), v);
        }
    }
    let f = page.counter(
        "ferrobay_qos_cap_throttled_commands_total",
        "Commands a contention cap made wait.",
    );
    for (l, c) in &caps {
        f.add(&refs(l), c.throttled_commands);
    }
    let f = page.counter(
        "ferrobay_qos_cap_throttled_seconds_total",
        "Time commands waited for a contention cap.",
    );
    for (l, c) in &caps {
        f.add_f64(&refs(l), c.throttled_ns as f64 / 1e9);
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
