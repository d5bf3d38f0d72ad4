//! QoS arguments and tables shared by `ferrobay node qos` and `ferrobay volume qos`.

use clap::Args;
use nvmf_target::QosLimits;
use storage_node::text::table;

use crate::cluster::{human_bytes, parse_size_arg, usage};

/// The limits of one key. `set` replaces every limit of the key with the ones given.
#[derive(Args, Debug, Clone, Default)]
pub struct QosLimitArgs {
    /// Most commands per second.
    #[arg(long)]
    pub iops: Option<u64>,
    /// Most data per second (reads and writes), e.g. 100M (binary units: 100 MiB/s).
    #[arg(long)]
    pub bandwidth: Option<String>,
    /// Commands let through at once after an idle spell (default: a tenth of --iops).
    #[arg(long, requires = "iops")]
    pub burst_iops: Option<u64>,
    /// Data let through at once after an idle spell, e.g. 1M (default: a tenth of
    /// --bandwidth).
    #[arg(long, requires = "bandwidth")]
    pub burst_bandwidth: Option<String>,
    /// Commands per second guaranteed when the node is saturated (a namespace or volume
    /// as a whole, not a host): other namespaces are held back to make room.
    #[arg(long)]
    pub min_iops: Option<u64>,
    /// Data per second guaranteed when the node is saturated, e.g. 50M.
    #[arg(long)]
    pub min_bandwidth: Option<String>,
}

impl QosLimitArgs {
    /// The limits asked for; at least one must be given.
    pub fn limits(&self) -> anyhow::Result<QosLimits> {
        let size = |flag: &str, v: &Option<String>| {
            v.as_deref().map(|s| parse_size_arg(flag, s)).transpose()
        };
        let l = QosLimits {
            max_iops: self.iops,
            max_bytes_per_s: size("--bandwidth", &self.bandwidth)?,
            burst_ios: self.burst_iops,
            burst_bytes: size("--burst-bandwidth", &self.burst_bandwidth)?,
            min_iops: self.min_iops,
            min_bytes_per_s: size("--min-bandwidth", &self.min_bandwidth)?,
        };
        if l.is_empty() {
            return Err(usage(
                "give at least one limit (--iops, --bandwidth, --min-iops, --min-bandwidth); \
                 `qos clear` removes them",
            ));
        }
        Ok(l)
    }
}

fn rate(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |n| n.to_string())
}

fn bytes_rate(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |n| format!("{}/s", human_bytes(n)))
}

fn burst_bytes(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), human_bytes)
}

/// The limit columns of a table row, after the key columns.
pub fn limit_columns(l: &QosLimits) -> [String; 6] {
    [
        rate(l.max_iops),
        bytes_rate(l.max_bytes_per_s),
        rate(l.effective_burst_ios()),
        burst_bytes(l.effective_burst_bytes()),
        rate(l.min_iops),
        bytes_rate(l.min_bytes_per_s),
    ]
}

pub const LIMIT_HEADERS: [&str; 6] = [
    "MAX IOPS",
    "MAX BANDWIDTH",
    "BURST IOS",
    "BURST BYTES",
    "MIN IOPS",
    "MIN BANDWIDTH",
];

/// `ferrobay node qos list`: limits with what they did, then the caps in force.
pub fn node_qos_text(v: &storage_node::api::QosList) -> String {
    if v.limits.is_empty() && v.caps.is_empty() {
        return "no QoS limits\n".to_string();
    }
    let mut headers = vec!["SUBSYSTEM", "NSID", "HOST"];
    headers.extend(LIMIT_HEADERS);
    headers.extend(["THROTTLED", "WAITED"]);
    let rows: Vec<Vec<String>> = v
        .limits
        .iter()
        .map(|e| {
            let mut r = vec![
                e.subsystem_nqn.clone(),
                e.nsid.map_or_else(|| "all".to_string(), |n| n.to_string()),
                e.host_nqn.clone().unwrap_or_else(|| "all".to_string()),
            ];
            r.extend(limit_columns(&e.limits));
            let s = e.stats.clone().unwrap_or_default();
            r.push(format!("{}/{}", s.throttled_commands, s.commands));
            r.push(format!("{:.3} s", s.throttled_seconds));
            r
        })
        .collect();
    let mut out = table(&headers, &rows);
    if !v.caps.is_empty() {
        let caps: Vec<Vec<String>> = v
            .caps
            .iter()
            .map(|c| {
                vec![
                    c.subsystem_nqn.clone(),
                    c.nsid.to_string(),
                    rate(c.cap_iops),
                    bytes_rate(c.cap_bytes_per_s),
                    format!("{:.0}", c.measured_iops),
                    format!("{}/s", human_bytes(c.measured_bytes_per_s as u64)),
                ]
            })
            .collect();
        out += "\ncapped so that minimums are met:\n";
        out += &table(
            &[
                "SUBSYSTEM",
                "NSID",
                "CAP IOPS",
                "CAP BANDWIDTH",
                "IOPS",
                "BANDWIDTH",
            ],
            &caps,
        );
    }
    out
}

/// `ferrobay volume qos list NAME`.
pub fn volume_qos_text(name: &str, q: &control::records::VolumeQos) -> String {
    let mut headers = vec!["VOLUME", "HOST"];
    headers.extend(LIMIT_HEADERS);
    let mut rows = Vec::new();
    if let Some(l) = &q.volume {
        let mut r = vec![name.to_string(), "(all hosts)".to_string()];
        r.extend(limit_columns(l));
        rows.push(r);
    }
    for (h, l) in &q.hosts {
        let mut r = vec![name.to_string(), h.clone()];
        r.extend(limit_columns(l));
        rows.push(r);
    }
    if rows.is_empty() {
        return format!(
            "volume {name} has no QoS limits (generation {})\n",
            q.generation
        );
    }
    table(&headers, &rows) + &format!("generation {}\n", q.generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_from_arguments() {
        let a = QosLimitArgs {
            iops: Some(1000),
            bandwidth: Some("100M".into()),
            min_iops: Some(10),
            ..Default::default()
        };
        let l = a.limits().unwrap();
        assert_eq!(l.max_bytes_per_s, Some(100 << 20));
        assert_eq!((l.max_iops, l.min_iops), (Some(1000), Some(10)));
        assert!(QosLimitArgs::default().limits().is_err());
        let bad = QosLimitArgs {
            bandwidth: Some("fast".into()),
            ..Default::default()
        };
        assert!(
            bad.limits()
                .unwrap_err()
                .to_string()
                .starts_with("--bandwidth: ")
        );
    }

    #[test]
    fn node_table_shows_limits_what_they_did_and_caps() {
        use storage_node::api::{QosCapView, QosEntry, QosEntryStats, QosList};
        let v = QosList {
            limits: vec![QosEntry {
                subsystem_nqn: "nqn.s".into(),
                nsid: Some(1),
                host_nqn: None,
                limits: QosLimits {
                    max_iops: Some(500),
                    burst_ios: Some(5),
                    ..Default::default()
                },
                stats: Some(QosEntryStats {
                    commands: 1200,
                    bytes: 0,
                    throttled_commands: 700,
                    throttled_seconds: 2.5,
                }),
            }],
            caps: vec![QosCapView {
                subsystem_nqn: "nqn.s".into(),
                nsid: 2,
                cap_iops: Some(300),
                cap_bytes_per_s: None,
                measured_iops: 299.6,
                measured_bytes_per_s: 1228800.0,
                throttled_commands: 1,
                throttled_seconds: 0.1,
            }],
        };
        assert_eq!(
            node_qos_text(&v),
            "SUBSYSTEM  NSID  HOST  MAX IOPS  MAX BANDWIDTH  BURST IOS  BURST BYTES  MIN IOPS  MIN BANDWIDTH  THROTTLED  WAITED\n\
             nqn.s      1     all   500       -              5          -            -         -              700/1200   2.500 s\n\
             \n\
             capped so that minimums are met:\n\
             SUBSYSTEM  NSID  CAP IOPS  CAP BANDWIDTH  IOPS  BANDWIDTH\n\
             nqn.s      2     300       -              300   1.2 MiB/s\n"
        );
        assert_eq!(node_qos_text(&QosList::default()), "no QoS limits\n");
    }

    #[test]
    fn volume_table_reads_like_the_other_tables() {
        let mut q = control::records::VolumeQos {
            generation: 3,
            volume: Some(QosLimits {
                max_iops: Some(1000),
                max_bytes_per_s: Some(100 << 20),
                min_iops: Some(200),
                ..Default::default()
            }),
            ..Default::default()
        };
        q.hosts.insert(
            "nqn.h1".into(),
            QosLimits {
                max_iops: Some(50),
                burst_ios: Some(2),
                ..Default::default()
            },
        );
        assert_eq!(
            volume_qos_text("vol1", &q),
            "VOLUME  HOST         MAX IOPS  MAX BANDWIDTH  BURST IOS  BURST BYTES  MIN IOPS  MIN BANDWIDTH\n\
             vol1    (all hosts)  1000      100.0 MiB/s    100        10.0 MiB     200       -\n\
             vol1    nqn.h1       50        -              2          -            -         -\n\
             generation 3\n"
        );
        assert_eq!(
            volume_qos_text("v", &control::records::VolumeQos::default()),
            "volume v has no QoS limits (generation 0)\n"
        );
    }
}
