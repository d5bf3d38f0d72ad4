//! JSON types of the node's telemetry and prediction routes (`GET /api/v1/telemetry`,
//! `GET /api/v1/predictions`, and the `prediction` of each drive in `GET /api/v1/health`),
//! built from what the `telemetry` crate counts and grades (`docs/prediction.md`).

use serde::{Deserialize, Serialize};
use telemetry::hist::{BUCKETS, bucket_lower_us, bucket_upper_us};
use telemetry::{Assessment, ErrorKind, HistogramSnapshot, MediaReading, OpClass};
use telemetry::{Grade, TelemetrySnapshot};
use utoipa::ToSchema;

/// Latency of one operation class since the node started, microseconds. From a
/// log-bucketed histogram: each percentile is the top of the bucket holding it (at most a
/// quarter above the true value); `max_us` the top of the highest bucket used. Failed
/// operations count too (a timeout is slow). All 0 with no operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LatencyView {
    pub count: u64,
    pub mean_us: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl LatencyView {
    pub fn of(h: &HistogramSnapshot) -> LatencyView {
        // The top of the highest bucket used (the lower edge of the open last bucket,
        // as the percentiles do).
        let max_us = h.counts.iter().rposition(|&c| c > 0).map_or(0, |b| {
            if b + 1 >= BUCKETS {
                bucket_lower_us(b)
            } else {
                bucket_upper_us(b) - 1
            }
        });
        LatencyView {
            count: h.count(),
            mean_us: h.mean_us(),
            p50_us: h.quantile_us(0.5),
            p99_us: h.quantile_us(0.99),
            p999_us: h.quantile_us(0.999),
            max_us,
        }
    }
}

/// One operation class: successful operations, the bytes they moved (reads and writes;
/// 0 for flush and other) and their latency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OpClassView {
    pub ops: u64,
    pub bytes: u64,
    pub latency: LatencyView,
}

/// Failed operations by kind (a caller's mistake, such as an out-of-range request, is not
/// counted: it says nothing about the drive).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorCountsView {
    /// The medium could not return or keep the data.
    pub media: u64,
    /// Timeouts, a closed or unreachable device.
    pub transport: u64,
    pub other: u64,
}

/// The I/O counters of a drive or a namespace since the node started (since the
/// namespace was made, for a namespace).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct IoTelemetry {
    pub read: OpClassView,
    pub write: OpClassView,
    pub flush: OpClassView,
    /// Write zeroes and discard.
    pub other: OpClassView,
    pub errors: ErrorCountsView,
    /// Operations in flight now.
    pub queue_depth: u64,
    /// Average depth an arriving operation found (itself included).
    pub queue_depth_avg: f64,
}

impl IoTelemetry {
    pub fn of(s: &TelemetrySnapshot) -> IoTelemetry {
        let class = |op: OpClass, bytes: u64| OpClassView {
            ops: s.ops(op),
            bytes,
            latency: LatencyView::of(s.latency(op)),
        };
        IoTelemetry {
            read: class(OpClass::Read, s.read_bytes),
            write: class(OpClass::Write, s.write_bytes),
            flush: class(OpClass::Flush, 0),
            other: class(OpClass::Other, 0),
            errors: ErrorCountsView {
                media: s.errors(ErrorKind::Media),
                transport: s.errors(ErrorKind::Transport),
                other: s.errors(ErrorKind::Other),
            },
            queue_depth: s.in_flight,
            queue_depth_avg: s.queue_depth_avg(),
        }
    }
}

/// What the drive says about its own medium (NVMe SMART log, read every 10 s); every
/// field absent when not reported (file and RAM drives).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MediaView {
    /// Composite temperature, kelvin.
    pub temperature_k: Option<u16>,
    /// Percentage Used: life used by the vendor's estimate (100 = rated life reached).
    pub percentage_used: Option<u8>,
    /// Available Spare, percent, and the threshold the drive warns below.
    pub available_spare_pct: Option<u8>,
    pub available_spare_threshold_pct: Option<u8>,
    /// Media and data integrity errors the drive counted over its life.
    pub media_errors: Option<u64>,
}

impl From<MediaReading> for MediaView {
    fn from(m: MediaReading) -> Self {
        MediaView {
            temperature_k: m.temperature_k,
            percentage_used: m.percentage_used,
            available_spare_pct: m.available_spare_pct,
            available_spare_threshold_pct: m.available_spare_threshold_pct,
            media_errors: m.media_errors,
        }
    }
}

/// One rule's finding (`docs/prediction.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PredictionReason {
    /// `media_errors`, `transport_errors`, `spare`, `wear` or `fail_slow`.
    pub rule: String,
    /// `suspect` or `failing`.
    #[schema(value_type = String, example = "suspect")]
    pub grade: Grade,
    /// What was seen, against which threshold.
    pub detail: String,
}

/// A drive's (or a volume member's) failure-prediction grade.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Prediction {
    /// `ok`, `suspect` (worth watching) or `failing` (replace it).
    #[schema(value_type = String, example = "failing")]
    pub grade: Grade,
    /// One line: the findings, worst first (`rule: detail; ...`); empty when ok.
    pub reason: String,
    #[serde(default)]
    pub reasons: Vec<PredictionReason>,
    /// When the drive got this grade (wall clock, ms since the Unix epoch): the first
    /// grading after the node started for a grade it has had since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_unix_ms: Option<u64>,
}

impl Prediction {
    pub fn of(a: &Assessment, since_unix_ms: Option<u64>) -> Prediction {
        Prediction {
            grade: a.grade,
            reason: a.reasons_line(),
            reasons: a
                .reasons
                .iter()
                .map(|r| PredictionReason {
                    rule: r.rule.clone(),
                    grade: r.grade,
                    detail: r.detail.clone(),
                })
                .collect(),
            since_unix_ms,
        }
    }
}

/// One drive's telemetry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DriveTelemetry {
    pub drive: String,
    pub io: IoTelemetry,
    pub media: MediaView,
    /// Absent until the drive was graded once (a second after the node started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Prediction>,
}

/// One namespace's telemetry (its share of its drive's I/O).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NamespaceTelemetry {
    pub subsystem_nqn: String,
    pub nsid: u32,
    pub drive: String,
    pub io: IoTelemetry,
}

/// `GET /api/v1/telemetry`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TelemetryReport {
    pub node: String,
    pub drives: Vec<DriveTelemetry>,
    pub namespaces: Vec<NamespaceTelemetry>,
}

/// One drive's grade (`GET /api/v1/predictions`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DrivePrediction {
    pub drive: String,
    pub prediction: Prediction,
}

/// `GET /api/v1/predictions`: every graded drive of the node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PredictionReport {
    pub node: String,
    pub drives: Vec<DrivePrediction>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use telemetry::{DeviceTelemetry, LatencyHistogram};

    use super::*;

    #[test]
    fn latency_figures_come_from_the_histogram() {
        let h = LatencyHistogram::new();
        for _ in 0..999 {
            h.record_us(100);
        }
        h.record_us(50_000);
        let v = LatencyView::of(&h.snapshot());
        assert_eq!(v.count, 1000);
        assert!((100..=111).contains(&v.p50_us), "{v:?}");
        assert!((100..=111).contains(&v.p999_us), "{v:?}");
        assert!((50_000..=57_343).contains(&v.max_us), "{v:?}");
        assert_eq!(
            LatencyView::of(&HistogramSnapshot::default()),
            LatencyView::default()
        );
    }

    #[test]
    fn counters_map_to_classes_and_kinds() {
        let t = DeviceTelemetry::new();
        t.begin();
        t.end(OpClass::Write, 4096, 20_000, None);
        t.begin();
        t.end(
            OpClass::Read,
            4096,
            20_000,
            Some(&blockdev::BlockError::Timeout),
        );
        let io = IoTelemetry::of(&t.snapshot());
        assert_eq!((io.write.ops, io.write.bytes), (1, 4096));
        assert_eq!((io.read.ops, io.read.bytes), (0, 0));
        assert_eq!(io.read.latency.count, 1, "a failed read's time counts");
        assert_eq!(io.errors.transport, 1);
        assert_eq!(io.queue_depth, 0);
    }
}
