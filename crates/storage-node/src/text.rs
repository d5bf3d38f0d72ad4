//! Plain-text tables of API results, for `ferrobay node ns list`, `... health` and friends
//! (so the CLI only prints).

use std::fmt::Write;

use crate::api::{
    HealthReport, IoTelemetry, NamespaceView, PredictionReport, SubsystemView, TelemetryReport,
};

/// A size for people: `1.5 KiB`, `64.0 MiB` (the format of every Ferrobay table; the
/// JSON forms carry exact bytes).
pub fn human_bytes(bytes: u64) -> String {
    bytesize::ByteSize(bytes).display().iec().to_string()
}

/// Rows under a header as aligned columns (every column as wide as its widest cell, in
/// characters), two spaces apart, no trailing blanks: the shape of every Ferrobay table.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

/// `ns list`: one row per namespace; a KV namespace shows its used bytes and keys
/// (NVM ones its block size), and a line below the table if its store is not serving.
pub fn namespaces_table(nss: &[NamespaceView]) -> String {
    let rows: Vec<Vec<String>> = nss
        .iter()
        .map(|n| {
            let attached = if n.attachment.all {
                "all".to_string()
            } else if n.attachment.hosts.is_empty() {
                "none".to_string()
            } else {
                n.attachment.hosts.join(",")
            };
            let (block, used, keys) = match &n.kv {
                Some(kv) => (
                    "-".to_string(),
                    human_bytes(kv.used_bytes),
                    kv.key_count.to_string(),
                ),
                None => (
                    n.block_size_bytes.to_string(),
                    "-".to_string(),
                    "-".to_string(),
                ),
            };
            vec![
                n.subsystem_nqn.clone(),
                n.nsid.to_string(),
                n.kind.clone(),
                n.drive.clone(),
                human_bytes(n.size_bytes),
                block,
                used,
                keys,
                n.nguid.clone(),
                attached,
            ]
        })
        .collect();
    let mut out = table(
        &[
            "SUBSYSTEM",
            "NSID",
            "KIND",
            "DRIVE",
            "SIZE",
            "BLOCK",
            "USED",
            "KEYS",
            "NGUID",
            "ATTACHED",
        ],
        &rows,
    );
    for n in nss {
        if let Some(kv) = n.kv.as_ref().filter(|kv| kv.status != "ok") {
            let _ = writeln!(
                out,
                "namespace {} of {}: KV store not serving: {}",
                n.nsid, n.subsystem_nqn, kv.status
            );
        }
    }
    out
}

pub fn subsystems_table(subs: &[SubsystemView]) -> String {
    let rows: Vec<Vec<String>> = subs
        .iter()
        .map(|s| {
            let hosts = if s.allow_any_host {
                "any".to_string()
            } else {
                s.allowed_hosts.join(",")
            };
            let ns: Vec<String> = s.namespaces.iter().map(u32::to_string).collect();
            vec![
                s.nqn.clone(),
                s.serial.clone(),
                s.drive.clone(),
                ns.join(","),
                s.controllers.len().to_string(),
                hosts,
            ]
        })
        .collect();
    table(
        &[
            "SUBSYSTEM",
            "SERIAL",
            "DRIVE",
            "NAMESPACES",
            "CONTROLLERS",
            "HOSTS",
        ],
        &rows,
    )
}

pub fn health_text(h: &HealthReport) -> String {
    let mut out = format!(
        "node {}: up {}s, power cycles {}, power-on hours {}, unsafe shutdowns {}, connections {}, controller busy {} min, error log entries {}\n",
        h.node_name,
        h.uptime_seconds,
        h.power_cycles,
        h.power_on_hours,
        h.unsafe_shutdowns,
        h.connections,
        h.controller_busy_minutes,
        h.error_log_entries
    );
    let rows: Vec<Vec<String>> = h
        .drives
        .iter()
        .map(|d| {
            vec![
                d.name.clone(),
                d.spec.clone(),
                d.serial.clone(),
                human_bytes(d.size_bytes),
                human_bytes(d.allocated_bytes),
                d.namespaces.to_string(),
                d.data_units_read.to_string(),
                d.data_units_written.to_string(),
                d.host_read_commands.to_string(),
                d.host_write_commands.to_string(),
                d.media_errors.to_string(),
                d.status.clone(),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "DRIVE",
            "SPEC",
            "SERIAL",
            "SIZE",
            "ALLOCATED",
            "NS",
            "DU_READ",
            "DU_WRITTEN",
            "READS",
            "WRITES",
            "MEDIA_ERR",
            "STATUS",
        ],
        &rows,
    ));
    for d in h.drives.iter().filter(|d| d.kv_namespaces > 0) {
        let _ = writeln!(
            out,
            "{}: {} KV namespace{}, {} keys, {} used of {}",
            d.name,
            d.kv_namespaces,
            if d.kv_namespaces == 1 { "" } else { "s" },
            d.kv_keys,
            human_bytes(d.kv_used_bytes),
            human_bytes(d.kv_capacity_bytes)
        );
    }
    out
}

/// Rows of one device's I/O, one per operation class that saw any operation.
fn io_rows(device: &str, io: &IoTelemetry) -> Vec<Vec<String>> {
    let classes = [
        ("read", &io.read),
        ("write", &io.write),
        ("flush", &io.flush),
        ("other", &io.other),
    ];
    classes
        .iter()
        .filter(|(_, c)| c.ops > 0 || c.latency.count > 0)
        .map(|(name, c)| {
            vec![
                device.to_string(),
                name.to_string(),
                c.ops.to_string(),
                human_bytes(c.bytes),
                c.latency.p50_us.to_string(),
                c.latency.p99_us.to_string(),
                c.latency.p999_us.to_string(),
                c.latency.max_us.to_string(),
            ]
        })
        .collect()
}

/// The columns of [`io_rows`].
const IO_HEADER: [&str; 8] = [
    "DEVICE", "OP", "OPS", "BYTES", "P50_US", "P99_US", "P999_US", "MAX_US",
];

/// `node telemetry`: per drive its errors, queue depth, SMART reading and grade, then the
/// latency per operation class of each drive and namespace (classes with no operation
/// left out).
pub fn telemetry_text(t: &TelemetryReport) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
    let drives: Vec<Vec<String>> = t
        .drives
        .iter()
        .map(|d| {
            vec![
                d.drive.clone(),
                d.io.errors.media.to_string(),
                d.io.errors.transport.to_string(),
                d.io.errors.other.to_string(),
                d.io.queue_depth.to_string(),
                format!("{:.2}", d.io.queue_depth_avg),
                opt(d
                    .media
                    .temperature_k
                    .map(|k| format!("{}C", i32::from(k) - 273))),
                opt(d.media.percentage_used.map(|p| format!("{p}%"))),
                opt(d.media.available_spare_pct.map(|p| format!("{p}%"))),
                opt(d.prediction.as_ref().map(|p| p.grade.to_string())),
            ]
        })
        .collect();
    let mut out = format!("node {}\n", t.node);
    out.push_str(&table(
        &[
            "DRIVE",
            "MEDIA_ERR",
            "TRANSPORT_ERR",
            "OTHER_ERR",
            "QD",
            "QD_AVG",
            "TEMP",
            "USED",
            "SPARE",
            "GRADE",
        ],
        &drives,
    ));
    let mut rows = Vec::new();
    for d in &t.drives {
        rows.extend(io_rows(&d.drive, &d.io));
    }
    for n in &t.namespaces {
        rows.extend(io_rows(&format!("{}/{}", n.subsystem_nqn, n.nsid), &n.io));
    }
    if !rows.is_empty() {
        out.push('\n');
        out.push_str(&table(&IO_HEADER, &rows));
    }
    out
}

/// `node predictions`: one row per drive with its grade, since when and why.
pub fn predictions_text(p: &PredictionReport) -> String {
    let rows: Vec<Vec<String>> = p
        .drives
        .iter()
        .map(|d| {
            vec![
                d.drive.clone(),
                d.prediction.grade.to_string(),
                d.prediction
                    .since_unix_ms
                    .map_or_else(|| "-".to_string(), unix_ms_text),
                if d.prediction.reason.is_empty() {
                    "-".to_string()
                } else {
                    d.prediction.reason.clone()
                },
            ]
        })
        .collect();
    let mut out = format!("node {}\n", p.node);
    out.push_str(&table(&["DRIVE", "GRADE", "SINCE", "REASON"], &rows));
    out
}

/// A Unix time in ms as RFC 3339 UTC, to the second (`2026-11-28T04:33:01Z`).
pub fn unix_ms_text(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::AttachmentView;

    #[test]
    fn dates() {
        assert_eq!(unix_ms_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(unix_ms_text(1_700_000_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn sizes_and_tables() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(64 << 20), "64.0 MiB");
        assert_eq!(human_bytes(1 << 40), "1.0 TiB");
        let n = NamespaceView {
            subsystem_nqn: "nqn.x".into(),
            nsid: 1,
            drive: "d0".into(),
            size_bytes: 8 << 20,
            block_size_bytes: 512,
            extents: vec![],
            nguid: "ab".into(),
            eui64: "cd".into(),
            uuid: "u".into(),
            attachment: AttachmentView {
                all: false,
                hosts: vec![],
            },
            created_unix_ms: 0,
            kind: "nvm".into(),
            kv: None,
        };
        let kv = NamespaceView {
            nsid: 2,
            size_bytes: 64 << 20,
            kind: "kv".into(),
            kv: Some(crate::api::KvNamespaceView {
                key_count: 3,
                used_bytes: 6144,
                status: "corrupt KV store: no valid checkpoint".into(),
                ..Default::default()
            }),
            ..n.clone()
        };
        let t = namespaces_table(&[n, kv]);
        assert_eq!(
            t,
            "SUBSYSTEM  NSID  KIND  DRIVE  SIZE      BLOCK  USED     KEYS  NGUID  ATTACHED\n\
             nqn.x      1     nvm   d0     8.0 MiB   512    -        -     ab     none\n\
             nqn.x      2     kv    d0     64.0 MiB  -      6.0 KiB  3     ab     none\n\
             namespace 2 of nqn.x: KV store not serving: corrupt KV store: no valid checkpoint\n"
        );
    }

    #[test]
    fn telemetry_and_prediction_tables() {
        use crate::api::{
            DrivePrediction, DriveTelemetry, IoTelemetry, LatencyView, MediaView,
            NamespaceTelemetry, OpClassView, Prediction, PredictionReport, TelemetryReport,
        };
        let io = IoTelemetry {
            write: OpClassView {
                ops: 12,
                bytes: 12 << 16,
                latency: LatencyView {
                    count: 12,
                    mean_us: 90,
                    p50_us: 95,
                    p99_us: 223,
                    p999_us: 223,
                    max_us: 223,
                },
            },
            ..IoTelemetry::default()
        };
        let failing = Prediction {
            grade: telemetry::Grade::Failing,
            reason: "media_errors: 8 media errors".into(),
            reasons: vec![],
            since_unix_ms: Some(1_764_302_400_000),
        };
        let t = TelemetryReport {
            node: "n1".into(),
            drives: vec![DriveTelemetry {
                drive: "d0".into(),
                io,
                media: MediaView {
                    temperature_k: Some(310),
                    available_spare_pct: Some(97),
                    ..MediaView::default()
                },
                prediction: Some(failing.clone()),
            }],
            namespaces: vec![NamespaceTelemetry {
                subsystem_nqn: "nqn.x".into(),
                nsid: 1,
                drive: "d0".into(),
                io,
            }],
        };
        let text = telemetry_text(&t);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "node n1");
        assert!(lines[1].starts_with("DRIVE  MEDIA_ERR"), "{text}");
        assert!(
            lines[2].starts_with("d0 ") && lines[2].ends_with("37C   -     97%    failing"),
            "{text}"
        );
        let rows: Vec<&str> = lines
            .iter()
            .filter(|l| l.contains(" write "))
            .copied()
            .collect();
        assert_eq!(rows.len(), 2, "drive and namespace, reads left out: {text}");
        assert!(
            rows[1].starts_with("nqn.x/1")
                && rows[1].ends_with("768.0 KiB  95      223     223      223"),
            "{text}"
        );
        let p = PredictionReport {
            node: "n1".into(),
            drives: vec![DrivePrediction {
                drive: "d0".into(),
                prediction: failing,
            }],
        };
        assert_eq!(
            predictions_text(&p),
            "node n1\nDRIVE  GRADE    SINCE                 REASON\nd0     failing  2025-11-28T04:00:00Z  media_errors: 8 media errors\n"
        );
    }
}
