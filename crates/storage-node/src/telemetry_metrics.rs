//! Prometheus families of drive telemetry (`telemetry` crate), for the storage node's
//! `/metrics` (drives and namespaces) and the processor node's (volume members). Names
//! are in `docs/node-api.md`; every family is in base units.

use httpapi::metrics::{Labels, Page};
use telemetry::hist::{BUCKETS, bucket_lower_us};
use telemetry::{ErrorKind, Grade, MediaReading, OpClass, TelemetrySnapshot};

/// One metered device: its labels, counters, the drive's own readings and its grade.
pub struct TelemetryRow<'a> {
    pub labels: Vec<(&'a str, String)>,
    pub counters: &'a TelemetrySnapshot,
    pub media: Option<MediaReading>,
    pub grade: Option<Grade>,
}

/// Histogram bounds exported: one per power of two from 4 µs (the store's sub-buckets are
/// summed), in seconds.
fn export_bounds() -> Vec<(usize, f64)> {
    (4..BUCKETS)
        .step_by(4)
        .skip(1)
        .map(|i| (i, bucket_lower_us(i) as f64 / 1e6))
        .collect()
}

/// Adds the families `{prefix}_io_op_latency_seconds`, `{prefix}_io_ops_total`,
/// `{prefix}_io_read_bytes_total`, `{prefix}_io_write_bytes_total`,
/// `{prefix}_io_errors_total`, `{prefix}_io_queue_depth`,
/// `{prefix}_io_queue_depth_average`, and, where known,
/// `{prefix}_temperature_celsius`, `{prefix}_wear_ratio`,
/// `{prefix}_available_spare_ratio`, `{prefix}_health_grade`.
pub fn add_families(page: &mut Page, prefix: &str, what: &str, rows: &[TelemetryRow<'_>]) {
    let bounds = export_bounds();
    let bound_secs: Vec<f64> = bounds.iter().map(|b| b.1).collect();
    let with = |r: &TelemetryRow<'_>, extra: &[(&'static str, &str)]| -> Labels {
        r.labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .chain(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .collect()
    };
    let f = page.histogram(
        &format!("{prefix}_io_op_latency_seconds"),
        &format!("Latency of {what} operations by class (read, write, flush, other), failed ones included."),
    );
    for r in rows {
        for op in OpClass::ALL {
            let h = r.counters.latency(op);
            // Per exported bucket: the store's buckets below its bound, not yet counted.
            let mut counts = Vec::with_capacity(bounds.len() + 1);
            let mut from = 0;
            for (i, _) in &bounds {
                counts.push(h.counts.get(from..*i).map_or(0, |c| c.iter().sum()));
                from = *i;
            }
            counts.push(h.counts.get(from..).map_or(0, |c| c.iter().sum()));
            let l = with(r, &[("op", op.name())]);
            let refs: Vec<(&str, &str)> = l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            f.add_histogram(&refs, h.sum_us as f64 / 1e6, &bound_secs, &counts);
        }
    }
    let f = page.counter(
        &format!("{prefix}_io_ops_total"),
        &format!("Successful {what} operations by class."),
    );
    for r in rows {
        for op in OpClass::ALL {
            f.add_labels(with(r, &[("op", op.name())]), r.counters.ops(op));
        }
    }
    let f = page.counter(
        &format!("{prefix}_io_read_bytes_total"),
        &format!("Bytes read from the {what}."),
    );
    for r in rows {
        f.add_labels(with(r, &[]), r.counters.read_bytes);
    }
    let f = page.counter(
        &format!("{prefix}_io_write_bytes_total"),
        &format!("Bytes written to the {what}."),
    );
    for r in rows {
        f.add_labels(with(r, &[]), r.counters.write_bytes);
    }
    let f = page.counter(
        &format!("{prefix}_io_errors_total"),
        &format!(
            "Failed {what} operations by kind: media, transport (timeouts, lost paths), other."
        ),
    );
    for r in rows {
        for k in ErrorKind::ALL {
            f.add_labels(with(r, &[("kind", k.name())]), r.counters.errors(k));
        }
    }
    let f = page.gauge(
        &format!("{prefix}_io_queue_depth"),
        &format!("Operations in flight on the {what} now."),
    );
    for r in rows {
        f.add_labels(with(r, &[]), r.counters.in_flight);
    }
    let f = page.gauge(
        &format!("{prefix}_io_queue_depth_average"),
        &format!(
            "Average queue depth seen by operations arriving at the {what}, since it was opened."
        ),
    );
    for r in rows {
        f.add_labels_f64(with(r, &[]), r.counters.queue_depth_avg());
    }
    type MediaField = fn(&MediaReading) -> Option<f64>;
    let media: [(&str, &str, MediaField); 4] = [
        (
            "temperature_celsius",
            "Composite temperature the drive reports.",
            |m| m.temperature_k.map(|k| f64::from(k) - 273.15),
        ),
        (
            "wear_ratio",
            "Share of rated life used (NVMe Percentage Used / 100; may exceed 1).",
            |m| m.percentage_used.map(|p| f64::from(p) / 100.0),
        ),
        (
            "available_spare_ratio",
            "Available spare capacity the drive reports (0..1).",
            |m| m.available_spare_pct.map(|p| f64::from(p) / 100.0),
        ),
        (
            "available_spare_threshold_ratio",
            "Spare level below which the drive warns (0..1).",
            |m| {
                m.available_spare_threshold_pct
                    .map(|p| f64::from(p) / 100.0)
            },
        ),
    ];
    for (name, help, field) in media {
        let values: Vec<(Labels, f64)> = rows
            .iter()
            .filter_map(|r| Some((with(r, &[]), field(&r.media?)?)))
            .collect();
        if values.is_empty() {
            continue;
        }
        let f = page.gauge(&format!("{prefix}_{name}"), help);
        for (l, v) in values {
            f.add_labels_f64(l, v);
        }
    }
    let graded: Vec<&TelemetryRow<'_>> = rows.iter().filter(|r| r.grade.is_some()).collect();
    if !graded.is_empty() {
        let f = page.gauge(
            &format!("{prefix}_health_grade"),
            "Failure prediction grade: 0 ok, 1 suspect, 2 failing (docs/prediction.md).",
        );
        for r in graded {
            f.add_labels(with(r, &[]), r.grade.map_or(0, |g| g as u64));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use telemetry::DeviceTelemetry;

    use super::*;

    #[test]
    fn families_render_in_base_units_with_help() {
        let t = DeviceTelemetry::new();
        for us in [50u64, 300, 300, 70_000] {
            t.begin();
            t.end(OpClass::Read, 4096, us * 1000, None);
        }
        t.begin();
        t.end(
            OpClass::Write,
            0,
            1_000,
            Some(&blockdev::BlockError::Timeout),
        );
        let s = t.snapshot();
        let mut page = Page::new();
        add_families(
            &mut page,
            "ferrobay_drive",
            "drive",
            &[TelemetryRow {
                labels: vec![("node", "n1".into()), ("drive", "d\"0".into())],
                counters: &s,
                media: Some(MediaReading {
                    temperature_k: Some(310),
                    percentage_used: Some(3),
                    ..MediaReading::default()
                }),
                grade: Some(Grade::Suspect),
            }],
        );
        let text = page.render();
        assert!(
            text.contains("# HELP ferrobay_drive_io_op_latency_seconds "),
            "{text}"
        );
        assert!(text.contains("ferrobay_drive_io_op_latency_seconds_count{node=\"n1\",drive=\"d\\\"0\",op=\"read\"} 4"), "{text}");
        assert!(
            text.contains(
                "ferrobay_drive_io_ops_total{node=\"n1\",drive=\"d\\\"0\",op=\"read\"} 4"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "ferrobay_drive_io_errors_total{node=\"n1\",drive=\"d\\\"0\",kind=\"transport\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("ferrobay_drive_temperature_celsius{node=\"n1\",drive=\"d\\\"0\"} 36.85"),
            "{text}"
        );
        assert!(
            text.contains("ferrobay_drive_health_grade{node=\"n1\",drive=\"d\\\"0\"} 1"),
            "{text}"
        );
        assert!(
            !text.contains("available_spare"),
            "not reported, not exported"
        );
        // Buckets are cumulative and the 300 µs reads are under the 512 µs bound.
        assert!(text.contains("op=\"read\",le=\"0.000512\"} 3"), "{text}");
    }

    /// Every family the shipped Grafana dashboard queries is one this module exports.
    #[test]
    fn the_grafana_dashboard_queries_exported_families() {
        let t = DeviceTelemetry::new();
        t.begin();
        t.end(OpClass::Read, 4096, 1_000, None);
        let s = t.snapshot();
        let media = MediaReading {
            temperature_k: Some(300),
            percentage_used: Some(1),
            available_spare_pct: Some(100),
            available_spare_threshold_pct: Some(10),
            media_errors: Some(0),
        };
        let mut page = Page::new();
        for (prefix, media) in [
            ("ferrobay_drive", Some(media)),
            ("ferrobay_namespace", None),
            ("ferrobay_member", None),
        ] {
            let row = TelemetryRow {
                labels: vec![("node", "n1".into())],
                counters: &s,
                media,
                grade: Some(Grade::Ok),
            };
            add_families(&mut page, prefix, "device", &[row]);
        }
        let text = page.render();
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/grafana/ferrobay.json"
        );
        let dash: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut exprs = Vec::new();
        for p in dash["panels"].as_array().unwrap() {
            for t in p["targets"].as_array().into_iter().flatten() {
                exprs.push(t["expr"].as_str().unwrap().to_string());
            }
        }
        for q in dash["templating"]["list"].as_array().unwrap() {
            if let Some(q) = q["query"]["query"].as_str() {
                exprs.push(q.to_string());
            }
        }
        assert!(exprs.len() > 15);
        for e in &exprs {
            let mut rest = e.as_str();
            while let Some(at) = rest.find("ferrobay_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                assert!(
                    text.lines().any(|l| l.starts_with(&name)),
                    "{name} (in {e}) is not exported"
                );
            }
        }
    }
}
