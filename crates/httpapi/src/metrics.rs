//! `/metrics` pages: a [`Page`] collects families from a snapshot taken at scrape time and
//! renders them with `prometheus-client` (Prometheus text format 0.0.4: HELP and TYPE for
//! every family, escaped label values).
//!
//! Families are named as exported, in base units: counters end in `_total`, and a name
//! ending in `_bytes` or `_seconds` (before `_total`) carries that unit.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

/// The Content-Type of a rendered page.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Label pairs of one sample.
pub type Labels = Vec<(String, String)>;

/// One family of a table ([`Page::counters`], [`Page::gauges`]): the exported name, its
/// help, and the value of a row.
pub type Column<R> = (&'static str, &'static str, fn(&R) -> u64);

#[derive(Debug, Clone)]
enum Value {
    Int(u64),
    Float(f64),
    Histogram {
        sum: f64,
        count: u64,
        /// (upper bound, count in that bucket alone), ascending, +Inf last
        /// (prometheus-client makes them cumulative).
        buckets: Vec<(f64, u64)>,
    },
}

/// One metric family: name, help, type and its samples.
#[derive(Debug, Clone)]
pub struct Family {
    /// Name without the unit and `_total` suffixes (prometheus-client adds them).
    base: String,
    unit: Option<Unit>,
    help: String,
    kind: MetricType,
    samples: Vec<(Labels, Value)>,
}

/// Label pairs made once, for samples of several families ([`Family::add_labels`]).
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

impl Family {
    /// Adds an integer sample.
    pub fn add(&mut self, labels_: &[(&str, &str)], value: u64) -> &mut Family {
        self.samples.push((labels(labels_), Value::Int(value)));
        self
    }

    /// Adds a real-valued sample (seconds, ratios).
    pub fn add_f64(&mut self, labels_: &[(&str, &str)], value: f64) -> &mut Family {
        self.samples.push((labels(labels_), Value::Float(value)));
        self
    }

    /// Adds an integer sample with labels made already ([`labels`]).
    pub fn add_labels(&mut self, labels_: Labels, value: u64) -> &mut Family {
        self.samples.push((labels_, Value::Int(value)));
        self
    }

    /// Adds a real-valued sample with labels made already ([`labels`]).
    pub fn add_labels_f64(&mut self, labels_: Labels, value: f64) -> &mut Family {
        self.samples.push((labels_, Value::Float(value)));
        self
    }

    /// Adds a histogram sample: `sum`, and per bucket (upper bound, count in that bucket
    /// alone); the last count, past the last bound, is the +Inf bucket's.
    pub fn add_histogram(
        &mut self,
        labels_: &[(&str, &str)],
        sum: f64,
        bounds: &[f64],
        counts: &[u64],
    ) -> &mut Family {
        let buckets: Vec<(f64, u64)> = counts
            .iter()
            .enumerate()
            .map(|(i, c)| (bounds.get(i).copied().unwrap_or(f64::INFINITY), *c))
            .collect();
        let count = counts.iter().fold(0u64, |a, c| a.saturating_add(*c));
        self.samples.push((
            labels(labels_),
            Value::Histogram {
                sum,
                count,
                buckets,
            },
        ));
        self
    }
}

/// The families of one scrape, in the order they were added.
#[derive(Debug, Default, Clone)]
pub struct Page {
    families: Vec<Family>,
}

/// Splits an exported name into the base prometheus-client wants and its unit.
fn split_name(name: &str, kind: MetricType) -> (String, Option<Unit>) {
    let mut base = name;
    if kind == MetricType::Counter {
        base = base.strip_suffix("_total").unwrap_or(base);
    }
    for (suffix, unit) in [("_bytes", Unit::Bytes), ("_seconds", Unit::Seconds)] {
        if let Some(b) = base.strip_suffix(suffix) {
            return (b.to_string(), Some(unit));
        }
    }
    (base.to_string(), None)
}

impl Page {
    pub fn new() -> Page {
        Page::default()
    }

    fn family(&mut self, name: &str, help: &str, kind: MetricType) -> &mut Family {
        debug_assert!(
            kind != MetricType::Counter || name.ends_with("_total"),
            "counter {name} must end in _total"
        );
        let (base, unit) = split_name(name, kind);
        self.families.push(Family {
            base,
            unit,
            help: help.to_string(),
            kind,
            samples: Vec::new(),
        });
        let last = self.families.len() - 1;
        &mut self.families[last]
    }

    /// A counter family; `name` ends in `_total`.
    pub fn counter(&mut self, name: &str, help: &str) -> &mut Family {
        self.family(name, help, MetricType::Counter)
    }

    pub fn gauge(&mut self, name: &str, help: &str) -> &mut Family {
        self.family(name, help, MetricType::Gauge)
    }

    pub fn histogram(&mut self, name: &str, help: &str) -> &mut Family {
        self.family(name, help, MetricType::Histogram)
    }

    /// One counter family per column, each with a sample per row (its labels, the thing
    /// the column reads): figures that are fields of one snapshot per labelled thing.
    pub fn counters<R>(&mut self, rows: &[(Labels, &R)], columns: &[Column<R>]) {
        self.table(MetricType::Counter, rows, columns);
    }

    /// One gauge family per column, as [`Page::counters`].
    pub fn gauges<R>(&mut self, rows: &[(Labels, &R)], columns: &[Column<R>]) {
        self.table(MetricType::Gauge, rows, columns);
    }

    fn table<R>(&mut self, kind: MetricType, rows: &[(Labels, &R)], columns: &[Column<R>]) {
        for (name, help, value) in columns {
            let f = self.family(name, help, kind);
            for (l, r) in rows {
                f.add_labels(l.clone(), value(r));
            }
        }
    }

    /// The page in the Prometheus text format.
    pub fn render(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::with_capacity(4096);
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry) {
            tracing::warn!("metrics: encoding failed: {e}");
        }
        out
    }
}

impl Collector for Page {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.families {
            let mut family =
                encoder.encode_descriptor(&f.base, &f.help, f.unit.as_ref(), f.kind)?;
            for (labels, value) in &f.samples {
                let mut m = family.encode_family(labels)?;
                match (value, f.kind) {
                    (Value::Int(v), MetricType::Counter) => ConstCounter::new(*v).encode(m)?,
                    (Value::Float(v), MetricType::Counter) => ConstCounter::new(*v).encode(m)?,
                    (Value::Int(v), _) => {
                        ConstGauge::new(i64::try_from(*v).unwrap_or(i64::MAX)).encode(m)?
                    }
                    (Value::Float(v), _) => ConstGauge::new(*v).encode(m)?,
                    (
                        Value::Histogram {
                            sum,
                            count,
                            buckets,
                        },
                        _,
                    ) => m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                        *sum, *count, buckets, None,
                    )?,
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_units_escaping_and_histograms() {
        let mut p = Page::new();
        p.counter("ferrobay_x_read_bytes_total", "Bytes read.")
            .add(&[("node", "n\"1\\\n")], 4096);
        p.gauge("ferrobay_x_queue_depth", "In flight.")
            .add(&[("node", "n1")], 3);
        p.gauge("ferrobay_x_uptime_seconds", "Up.")
            .add_f64(&[], 1.5);
        p.histogram("ferrobay_x_latency_seconds", "Latency.")
            .add_histogram(&[("node", "n1")], 0.0015, &[0.000008, 0.000016], &[2, 5, 1]);
        let text = p.render();
        for want in [
            "# HELP ferrobay_x_read_bytes_total Bytes read.",
            "# TYPE ferrobay_x_read_bytes_total counter",
            "ferrobay_x_read_bytes_total{node=\"n\\\"1\\\\\\n\"} 4096",
            "# TYPE ferrobay_x_queue_depth gauge",
            "ferrobay_x_queue_depth{node=\"n1\"} 3",
            "ferrobay_x_uptime_seconds 1.5",
            "# TYPE ferrobay_x_latency_seconds histogram",
            "ferrobay_x_latency_seconds_bucket{node=\"n1\",le=\"8e-06\"} 2",
            "ferrobay_x_latency_seconds_bucket{node=\"n1\",le=\"1.6e-05\"} 7",
            "ferrobay_x_latency_seconds_bucket{node=\"n1\",le=\"+Inf\"} 8",
            "ferrobay_x_latency_seconds_count{node=\"n1\"} 8",
            "ferrobay_x_latency_seconds_sum{node=\"n1\"} 0.0015",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn tables_give_a_family_per_column_and_a_sample_per_row() {
        let rows = [
            (labels(&[("disk", "a")]), &(1u64, 10u64)),
            (labels(&[("disk", "b")]), &(2, 20)),
        ];
        let mut p = Page::new();
        p.counters(&rows, &[("ferrobay_x_ops_total", "Ops.", |r| r.0)]);
        p.gauges(&rows, &[("ferrobay_x_depth", "Depth.", |r| r.1)]);
        let text = p.render();
        for want in [
            "# TYPE ferrobay_x_ops_total counter",
            "ferrobay_x_ops_total{disk=\"a\"} 1",
            "ferrobay_x_ops_total{disk=\"b\"} 2",
            "# TYPE ferrobay_x_depth gauge",
            "ferrobay_x_depth{disk=\"a\"} 10",
            "ferrobay_x_depth{disk=\"b\"} 20",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }
}
