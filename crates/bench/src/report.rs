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

/// What verification found. Counts are of 512-byte sectors or of blocks (`--bs`
/// I/Os) as their names and docs say; `torn` counts writes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct VerifyReport {
    /// Blocks written with stamps by this run, and their sectors.
    pub blocks_written: u64,
    pub sectors_written: u64,
    /// Blocks read and checked (during the load and in the read-back after it), and
    /// their sectors.
    pub blocks_checked: u64,
    pub sectors_checked: u64,
    /// Of the blocks checked: those read back after the load (every block the run
    /// wrote, as fio's verify phase), and how long that took.
    pub blocks_read_back: u64,
    pub read_back_s: f64,
    /// Blocks checked with at least one failure below.
    pub blocks_failed: u64,
    /// Sectors reading as zeroes (never written; a failure only when this run wrote them:
    /// then they count as lost too).
    pub sectors_unwritten: u64,
    /// Sectors holding another write than the last one acknowledged (lost writes).
    pub lost: u64,
    /// Sectors stamped for another offset.
    pub misdirected: u64,
    /// Writes whose extent holds sectors of another write of the same extent, or none.
    pub torn: u64,
    /// Sectors that are not a valid stamp (or of a newer generation than verified).
    pub corrupt: u64,
    /// Blocks whose read for checking failed (also counted in the run's errors).
    pub blocks_unreadable: u64,
    /// The first few problems, as text, for a person.
    pub first_errors: Vec<String>,
}

impl VerifyReport {
    pub fn mismatches(&self) -> u64 {
        self.lost + self.misdirected + self.torn + self.corrupt
    }

    pub(crate) fn merge(&mut self, v: VerifyReport, max_first_errors: usize) {
        self.blocks_written += v.blocks_written;
        self.sectors_written += v.sectors_written;
        self.blocks_checked += v.blocks_checked;
        self.sectors_checked += v.sectors_checked;
        self.blocks_read_back += v.blocks_read_back;
        self.blocks_failed += v.blocks_failed;
        self.sectors_unwritten += v.sectors_unwritten;
        self.lost += v.lost;
        self.misdirected += v.misdirected;
        self.torn += v.torn;
        self.corrupt += v.corrupt;
        self.blocks_unreadable += v.blocks_unreadable;
        for e in v.first_errors {
            if self.first_errors.len() < max_first_errors {
                self.first_errors.push(e);
            }
        }
    }

    /// The verify section of the text report: one aligned field per line.
    fn to_text(&self, verify_only: bool) -> String {
        let n = |v: u64, unit: &str| format!("{v} {unit}{}", if v == 1 { "" } else { "s" });
        let written = if verify_only {
            "none (--verify-only checks what an earlier run wrote)".to_string()
        } else {
            format!(
                "{} ({})",
                n(self.blocks_written, "block"),
                n(self.sectors_written, "sector")
            )
        };
        let mut checked = format!(
            "{} ({})",
            n(self.blocks_checked, "block"),
            n(self.sectors_checked, "sector")
        );
        if self.blocks_read_back > 0 {
            checked += &format!(
                ", {} read back after the load in {:.2}s",
                self.blocks_read_back, self.read_back_s
            );
        }
        let rows = [
            ("written", written),
            ("checked", checked),
            ("failed", n(self.blocks_failed, "block")),
            ("lost", n(self.lost, "sector")),
            ("misdirected", n(self.misdirected, "sector")),
            ("corrupt", n(self.corrupt, "sector")),
            ("torn", n(self.torn, "write")),
            ("unreadable", n(self.blocks_unreadable, "block")),
            ("never written", n(self.sectors_unwritten, "sector")),
        ];
        let mut s = "  verify:\n".to_string();
        for (k, v) in rows {
            s += &format!("    {k:>13} : {v}\n");
        }
        for e in &self.first_errors {
            s += &format!("    {e}\n");
        }
        s
    }
}

/// What `--verify` found in a KV run. Counts are of values (one per key checked).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct KvVerifyReport {
    /// Stores acknowledged with stamped values.
    pub values_stored: u64,
    /// Values retrieved and checked (during the load and in the read-back after it).
    pub values_checked: u64,
    /// Of those, retrieved after the load (every key the run stored), and how long it took.
    pub values_read_back: u64,
    pub read_back_s: f64,
    /// Values checked with a failure below.
    pub values_failed: u64,
    /// Another write than the last acknowledged Store, or no value at all.
    pub lost: u64,
    /// The value of another key.
    pub misdirected: u64,
    /// Not a valid stamp (magic, length field or CRC).
    pub corrupt: u64,
    /// The namespace reported another size than the value stored.
    pub wrong_size: u64,
    /// Retrieves for checking that failed (also in the run's errors).
    pub unreadable: u64,
    pub first_errors: Vec<String>,
}

impl KvVerifyReport {
    pub fn mismatches(&self) -> u64 {
        self.lost + self.misdirected + self.corrupt + self.wrong_size
    }

    pub(crate) fn merge(&mut self, v: KvVerifyReport, max_first_errors: usize) {
        self.values_stored += v.values_stored;
        self.values_checked += v.values_checked;
        self.values_read_back += v.values_read_back;
        self.read_back_s = self.read_back_s.max(v.read_back_s);
        self.values_failed += v.values_failed;
        self.lost += v.lost;
        self.misdirected += v.misdirected;
        self.corrupt += v.corrupt;
        self.wrong_size += v.wrong_size;
        self.unreadable += v.unreadable;
        for e in v.first_errors {
            if self.first_errors.len() < max_first_errors {
                self.first_errors.push(e);
            }
        }
    }

    fn to_text(&self) -> String {
        let n = |v: u64, unit: &str| format!("{v} {unit}{}", if v == 1 { "" } else { "s" });
        let mut checked = n(self.values_checked, "value");
        if self.values_read_back > 0 {
            checked += &format!(
                ", {} read back after the load in {:.2}s",
                self.values_read_back, self.read_back_s
            );
        }
        let rows = [
            ("stored", n(self.values_stored, "value")),
            ("checked", checked),
            ("failed", n(self.values_failed, "value")),
            ("lost", n(self.lost, "value")),
            ("misdirected", n(self.misdirected, "value")),
            ("corrupt", n(self.corrupt, "value")),
            ("wrong size", n(self.wrong_size, "value")),
            ("unreadable", n(self.unreadable, "value")),
        ];
        let mut s = "  verify:\n".to_string();
        for (k, v) in rows {
            s += &format!("    {k:>11} : {v}\n");
        }
        for e in &self.first_errors {
            s += &format!("    {e}\n");
        }
        s
    }
}

/// The KV part of a KV run's report (`--kv`): reads are Retrieves, writes are Stores,
/// `block_size_bytes` is the value size.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct KvReport {
    pub keys: u64,
    pub value_size_bytes: u64,
    /// Retrieves of keys without a value (a mixed run reaching keys it has not stored
    /// yet; in a retrieve run they are errors too).
    pub retrieves_not_found: u64,
    pub verify: Option<KvVerifyReport>,
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
    /// KV runs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<KvReport>,
}

impl Report {
    /// Whether verification found anything wrong (block or KV).
    pub fn verify_failures(&self) -> u64 {
        let block = self.verify.as_ref().map_or(0, VerifyReport::mismatches);
        let kv = self
            .kv
            .as_ref()
            .and_then(|k| k.verify.as_ref())
            .map_or(0, KvVerifyReport::mismatches);
        block + kv
    }

    /// A fio-like human summary.
    pub fn to_text(&self) -> String {
        if let Some(kv) = &self.kv {
            return self.kv_text(kv);
        }
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
        s += &self.latency_and_cpu_text(["read", "write"], "I/Os");
        if let Some(v) = &self.verify {
            s += &v.to_text(self.pattern == "verify");
        }
        s += &self.first_error_text();
        s
    }

    /// The latency line of each kind of command that ran (`names`: the reads', the
    /// writes'), then the CPU line (`per`: what the commands are called).
    fn latency_and_cpu_text(&self, names: [&str; 2], per: &str) -> String {
        let mut s = String::new();
        for (name, l, n) in [
            (names[0], &self.read_latency, self.read_ios),
            (names[1], &self.write_latency, self.write_ios),
        ] {
            if n > 0 {
                s += &format!(
                    "  {name} lat (us): mean={:.1} p50={:.1} p99={:.1} p99.9={:.1} max={:.1}\n",
                    l.mean_us, l.p50_us, l.p99_us, l.p999_us, l.max_us
                );
            }
        }
        s += &format!(
            "  cpu: {:.2}s ({:.2} s per million {per})\n",
            self.cpu_s, self.cpu_s_per_million_ios
        );
        s
    }

    fn first_error_text(&self) -> String {
        self.first_error
            .as_ref()
            .map_or_else(String::new, |e| format!("  first error: {e}\n"))
    }

    fn kv_text(&self, kv: &KvReport) -> String {
        let mut s = format!(
            "{}: kv {} value={} keys={} iodepth={} jobs={}\n  IOPS={:.0} BW={:.1} MB/s commands: retrieve={} store={} not-found={} errors={} in {:.2}s\n",
            self.target,
            self.pattern,
            kv.value_size_bytes,
            kv.keys,
            self.iodepth,
            self.jobs,
            self.iops,
            self.mb_per_s,
            self.read_ios,
            self.write_ios,
            kv.retrieves_not_found,
            self.errors,
            self.elapsed_s
        );
        s += &self.latency_and_cpu_text(["retrieve", "store"], "commands");
        if let Some(v) = &kv.verify {
            s += &v.to_text();
        }
        s += &self.first_error_text();
        s
    }
}
