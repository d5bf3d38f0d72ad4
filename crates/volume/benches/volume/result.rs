//! What one case measured: the numbers, their ratios, and their JSON.

use serde_json::{Value, json};

use crate::case::Layout;
use crate::measure::{Measured, round};
use crate::members::Media;

/// Everything measured in one case.
pub struct CaseResult {
    pub media: Media,
    pub layout: Layout,
    pub k: usize,
    pub m: usize,
    pub direct: bool,
    pub uring: bool,
    pub base_seq_write: Measured,
    pub base_seq_read: Measured,
    pub base_randwrite: Measured,
    pub base_randrw: Measured,
    pub base_one_seq_write: Measured,
    pub full_stripe_write: Measured,
    pub randwrite: Measured,
    pub read_healthy: Measured,
    pub read_degraded: Measured,
    pub rebuild_unlimited: Rebuild,
    pub rebuild_default: Rebuild,
    pub base_rand_qd_each: u32,
}

/// One rebuild onto a spare.
#[derive(Clone, Debug, Default)]
pub struct Rebuild {
    pub throttle: String,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub elapsed_s: f64,
    /// Our own figure: bytes done / wall time.
    pub mb_per_s: f64,
    /// The engine's `RebuildProgress::rate_bytes_per_sec`.
    pub engine_mb_per_s: f64,
    pub finished: bool,
    pub phase: String,
    pub cpu_s: f64,
    /// The engine's `RebuildProgress::busy_fraction`: the throttle's duty cycle.
    pub busy_fraction: f64,
}

impl Rebuild {
    fn json(&self) -> Value {
        json!({
            "throttle": self.throttle,
            "bytes_done": self.bytes_done,
            "bytes_total": self.bytes_total,
            "elapsed_s": round(self.elapsed_s),
            "mb_per_s": round(self.mb_per_s),
            "engine_mb_per_s": round(self.engine_mb_per_s),
            "finished": self.finished,
            "phase": self.phase,
            "cpu_s": round(self.cpu_s),
            "busy_fraction": round(self.busy_fraction),
        })
    }
}

/// A named ratio for the table and the JSON.
pub struct Ratio {
    pub key: &'static str,
    pub what: String,
    pub value: f64,
}

impl CaseResult {
    /// Member I/Os of one small read-modify-write: read and write one data chunk and
    /// every parity chunk.
    pub fn rmw_ios(&self) -> f64 {
        2.0 * (1 + self.m) as f64
    }

    /// Rebuild MB/s if every member shares one medium: the engine reads every surviving
    /// member and writes one, at the members' summed read and write bandwidth.
    pub fn shared_rebuild_bound(&self) -> f64 {
        // The engine reads k survivors per rebuilt row (any k shards rebuild a row).
        let reads = self.k as f64;
        let (r, w) = (self.base_seq_read.mb_per_s, self.base_seq_write.mb_per_s);
        if r > 0.0 && w > 0.0 {
            1.0 / (reads / r + 1.0 / w)
        } else {
            0.0
        }
    }

    pub fn ratios(&self) -> Vec<Ratio> {
        let n = self.layout.members as f64;
        let k = self.k as f64;
        let div = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let rmw = self.rmw_ios();
        let one_member_write = self.base_one_seq_write.mb_per_s;
        vec![
            Ratio {
                key: "full_stripe_write_vs_members_sum",
                what: "full-stripe write / members' seq write sum (raw; at most k/n)".into(),
                value: div(
                    self.full_stripe_write.mb_per_s,
                    self.base_seq_write.mb_per_s,
                ),
            },
            Ratio {
                key: "full_stripe_write_vs_members_sum_k_over_n",
                what: format!(
                    "full-stripe write / (members' sum x {}/{}) (efficiency; 1 = member speed)",
                    self.k, self.layout.members
                ),
                value: div(
                    self.full_stripe_write.mb_per_s,
                    self.base_seq_write.mb_per_s * k / n,
                ),
            },
            Ratio {
                key: "randwrite_vs_member_write_iops_over_rmw",
                what: format!(
                    "4K randwrite IOPS / (members' randwrite IOPS sum / {rmw:.0}) (RMW limit)"
                ),
                value: div(self.randwrite.iops, self.base_randwrite.iops / rmw),
            },
            Ratio {
                key: "randwrite_vs_member_mixed_iops_over_rmw",
                what: format!("4K randwrite IOPS / (members' 50/50 randrw IOPS sum / {rmw:.0})"),
                value: div(self.randwrite.iops, self.base_randrw.iops / rmw),
            },
            Ratio {
                key: "healthy_read_vs_members_read_sum",
                what: "healthy seq read / members' seq read sum".into(),
                value: div(self.read_healthy.mb_per_s, self.base_seq_read.mb_per_s),
            },
            Ratio {
                key: "degraded_read_vs_healthy",
                what: format!(
                    "degraded seq read / healthy seq read (same volume; member-bound ideal {}/{})",
                    self.layout.members - 1,
                    self.layout.members
                ),
                value: div(self.read_degraded.mb_per_s, self.read_healthy.mb_per_s),
            },
            Ratio {
                key: "full_stripe_write_cpu_efficiency",
                what: format!(
                    "CPU: members' s/GB x {}/{} / volume's s/GB, full-stripe write",
                    self.layout.members, self.k
                ),
                value: div(
                    self.base_seq_write.cpu_s_per_gb() * n / k,
                    self.full_stripe_write.cpu_s_per_gb(),
                ),
            },
            Ratio {
                key: "randwrite_cpu_efficiency",
                what: format!(
                    "CPU: members' 50/50 us/IO x {rmw:.0} / volume's us/IO, 4K randwrite"
                ),
                value: div(
                    self.base_randrw.cpu_us_per_io() * rmw,
                    self.randwrite.cpu_us_per_io(),
                ),
            },
            Ratio {
                key: "healthy_read_cpu_efficiency",
                what: "CPU: members' s/GB / volume's s/GB, healthy seq read".into(),
                value: div(
                    self.base_seq_read.cpu_s_per_gb(),
                    self.read_healthy.cpu_s_per_gb(),
                ),
            },
            Ratio {
                key: "degraded_read_cpu_vs_healthy",
                what: "CPU: healthy read s/GB / degraded read s/GB".into(),
                value: div(
                    self.read_healthy.cpu_s_per_gb(),
                    self.read_degraded.cpu_s_per_gb(),
                ),
            },
            Ratio {
                key: "rebuild_unlimited_vs_member_write",
                what: "unlimited rebuild / one member's seq write alone".into(),
                value: div(self.rebuild_unlimited.mb_per_s, one_member_write),
            },
            Ratio {
                key: "rebuild_unlimited_vs_shared_medium_bound",
                what: format!(
                    "unlimited rebuild / bound if all members share one medium (file members \
                     here): 1/({}/read sum + 1/write sum), {} of {} survivors read",
                    self.k,
                    self.k,
                    self.layout.members - 1
                ),
                value: div(self.rebuild_unlimited.mb_per_s, self.shared_rebuild_bound()),
            },
            Ratio {
                key: "rebuild_default_vs_member_write",
                what: "default-throttle rebuild / one member's seq write alone (issue: 0.2)".into(),
                value: div(self.rebuild_default.mb_per_s, one_member_write),
            },
            Ratio {
                key: "rebuild_default_busy_fraction",
                what: "default-throttle rebuild: engine's busy share of its time (setting: 0.2)"
                    .into(),
                value: self.rebuild_default.busy_fraction,
            },
            Ratio {
                key: "rebuild_default_vs_unlimited",
                what: "default-throttle rebuild / unlimited rebuild".into(),
                value: div(
                    self.rebuild_default.mb_per_s,
                    self.rebuild_unlimited.mb_per_s,
                ),
            },
        ]
    }

    pub fn errors(&self) -> u64 {
        [
            &self.base_seq_write,
            &self.base_seq_read,
            &self.base_randwrite,
            &self.base_randrw,
            &self.base_one_seq_write,
            &self.full_stripe_write,
            &self.randwrite,
            &self.read_healthy,
            &self.read_degraded,
        ]
        .iter()
        .map(|m| m.errors)
        .sum()
    }

    pub fn json(&self) -> Value {
        let ratios = self.ratios();
        json!({
            "media": self.media.name(),
            "level": self.layout.level.to_string(),
            "members": self.layout.members,
            "k": self.k,
            "m": self.m,
            "o_direct": self.direct,
            "io_uring": self.uring,
            "members_alone": {
                "seq_write": self.base_seq_write.json(),
                "seq_read": self.base_seq_read.json(),
                "randwrite_4k": self.base_randwrite.json(),
                "randrw50_4k": self.base_randrw.json(),
                "rand_qd_per_member": self.base_rand_qd_each,
                "one_member_seq_write": self.base_one_seq_write.json(),
            },
            "volume": {
                "full_stripe_write": self.full_stripe_write.json(),
                "randwrite_4k": self.randwrite.json(),
                "seq_read_healthy": self.read_healthy.json(),
                "seq_read_degraded": self.read_degraded.json(),
                "rebuild_unlimited": self.rebuild_unlimited.json(),
                "rebuild_default_throttle": self.rebuild_default.json(),
            },
            "rmw_member_ios": self.rmw_ios(),
            "rebuild_shared_medium_bound_mb_per_s": round(self.shared_rebuild_bound()),
            "ratios": ratios.iter().map(|r| (r.key.to_string(), json!(round(r.value))))
                .collect::<serde_json::Map<_, _>>(),
            "ratio_notes": ratios.iter().map(|r| (r.key.to_string(), json!(r.what)))
                .collect::<serde_json::Map<_, _>>(),
        })
    }
}
