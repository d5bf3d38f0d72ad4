//! The result of a run, printable as text or JSON.

use serde::{Deserialize, Serialize};

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencyReport {
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl LatencyReport {
    pub(crate) fn from_histogram(h: &hdrhistogram::Histogram<u64>) -> LatencyReport {
        if h.is_empty() {
            return LatencyReport::default();
        }
        // The histogram records nanoseconds.
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencyReport {
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.value_at_quantile(0.50)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        }
    }
}

/// What verification found.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct VerifyReport {
    pub sectors_checked: u64,
    pub sectors_unwritten: u64,
    /// Sectors holding an older generation than last written (lost writes).
    pub lost: u64,
    /// Sectors stamped for another offset.
    pub misdirected: u64,
    /// Blocks whose sectors come from different writes.
    pub torn: u64,
    /// Sectors that are not a valid stamp.
    pub corrupt: u64,
    /// The first few problems, as text, for a person.
    pub first_errors: Vec<String>,
}

impl VerifyReport {
    pub fn mismatches(&self) -> u64 {
        self.lost + self.misdirected + self.torn + self.corrupt
    }
}

/// The full report of one run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub target: String,
    pub pattern: String,
    pub block_size_bytes: u64,
    pub iodepth: u32,
    pub jobs: u32,
    pub elapsed_s: f64,
    pub read_ios: u64,
    pub write_ios: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    pub iops: f64,
    pub mb_per_s: f64,
    pub read_latency: LatencyReport,
    pub write_latency: LatencyReport,
    /// CPU seconds (user + system) of the bench process during the run.
    pub cpu_s: f64,
    /// CPU seconds of the bench process per million I/Os.
    pub cpu_s_per_million_ios: f64,
    pub verify: Option<VerifyReport>,
    pub first_error: Option<String>,
}

impl Report {
    /// A fio-like human summary.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{}: {} bs={} iodepth={} jobs={}\n  IOPS={:.0} BW={:.1} MB/s ios: read={} write={} errors={} in {:.2}s\n",
            self.target,
            self.pattern,
            self.block_size_bytes,
            self.iodepth,
            self.jobs,
            self.iops,
            self.mb_per_s,
            self.read_ios,
            self.write_ios,
            self.errors,
            self.elapsed_s
        );
        for (name, l, n) in [
            ("read", &self.read_latency, self.read_ios),
            ("write", &self.write_latency, self.write_ios),
        ] {
            if n > 0 {
                s += &format!(
                    "  {name} lat (us): mean={:.1} p50={:.1} p99={:.1} p99.9={:.1} max={:.1}\n",
                    l.mean_us, l.p50_us, l.p99_us, l.p999_us, l.max_us
                );
            }
        }
        s += &format!(
            "  cpu: {:.2}s ({:.2} s per million I/Os)\n",
            self.cpu_s, self.cpu_s_per_million_ios
        );
        if let Some(v) = &self.verify {
            s += &format!(
                "  verify: {} sectors checked, {} unwritten, {} lost, {} misdirected, {} torn, {} corrupt\n",
                v.sectors_checked, v.sectors_unwritten, v.lost, v.misdirected, v.torn, v.corrupt
            );
            for e in &v.first_errors {
                s += &format!("    {e}\n");
            }
        }
        if let Some(e) = &self.first_error {
            s += &format!("  first error: {e}\n");
        }
        s
    }
}
