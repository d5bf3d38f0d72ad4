//! One load on one device, or the same load on several devices at once (summed).

use std::sync::Arc;

use bench::{BenchConfig, Pattern, Progress, Report};
use blockdev::BlockDevice;
use serde_json::{Value, json};

use crate::Error;

/// What a load did (summed over devices for a concurrent run).
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub iops: f64,
    pub mb_per_s: f64,
    /// Process CPU seconds during the run (the whole process: ring threads included).
    pub cpu_s: f64,
    pub elapsed_s: f64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Bracketed baselines: the later run's rate / the earlier one's.
    pub spread: Option<f64>,
    /// The bench crate's reports, one per device (and run).
    pub reports: Vec<Report>,
}

impl Measured {
    fn from_reports(reports: Vec<Report>) -> Measured {
        let mut m = Measured::default();
        for r in &reports {
            m.iops += r.iops;
            m.mb_per_s += r.mb_per_s;
            m.errors += r.errors;
            m.elapsed_s = m.elapsed_s.max(r.elapsed_s);
            // Concurrent runs each see the whole process: the largest is the total.
            m.cpu_s = m.cpu_s.max(r.cpu_s);
            if m.first_error.is_none() {
                m.first_error.clone_from(&r.first_error);
            }
        }
        m.reports = reports;
        m
    }

    /// The mean of two runs of the same load (rates and CPU averaged; both runs' reports
    /// kept, `spread` = after / before).
    pub fn mean_of(before: Measured, after: Measured) -> Measured {
        let avg = |a: f64, b: f64| (a + b) / 2.0;
        let rate = |m: &Measured| if m.iops > 0.0 { m.iops } else { m.mb_per_s };
        let spread = if rate(&before) > 0.0 {
            rate(&after) / rate(&before)
        } else {
            0.0
        };
        let mut reports = before.reports;
        reports.extend(after.reports);
        Measured {
            iops: avg(before.iops, after.iops),
            mb_per_s: avg(before.mb_per_s, after.mb_per_s),
            cpu_s: avg(before.cpu_s, after.cpu_s),
            elapsed_s: avg(before.elapsed_s, after.elapsed_s),
            errors: before.errors + after.errors,
            first_error: before.first_error.or(after.first_error),
            spread: Some(spread),
            reports,
        }
    }

    /// Cores this process kept busy (2 = both cores of this machine).
    pub fn cores(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            self.cpu_s / self.elapsed_s
        } else {
            0.0
        }
    }

    /// CPU seconds per GB moved (1e9 bytes).
    pub fn cpu_s_per_gb(&self) -> f64 {
        let gb = self.mb_per_s * self.elapsed_s / 1e3;
        if gb > 0.0 { self.cpu_s / gb } else { 0.0 }
    }

    /// CPU microseconds per I/O.
    pub fn cpu_us_per_io(&self) -> f64 {
        let ios = self.iops * self.elapsed_s;
        if ios > 0.0 {
            self.cpu_s / ios * 1e6
        } else {
            0.0
        }
    }

    pub fn json(&self) -> Value {
        let lat = |f: &dyn Fn(&Report) -> f64| {
            let v: Vec<f64> = self.reports.iter().map(f).collect();
            v.iter().copied().fold(0.0, f64::max)
        };
        json!({
            "iops": round(self.iops),
            "mb_per_s": round(self.mb_per_s),
            "elapsed_s": round(self.elapsed_s),
            "cpu_s": round(self.cpu_s),
            "cores_busy": round(self.cores()),
            "after_over_before": self.spread.map(round),
            "cpu_s_per_gb": round(self.cpu_s_per_gb()),
            "cpu_us_per_io": round(self.cpu_us_per_io()),
            "p50_us_max": round(lat(&|r: &Report| r.read_latency.p50_us.max(r.write_latency.p50_us))),
            "p99_us_max": round(lat(&|r: &Report| r.read_latency.p99_us.max(r.write_latency.p99_us))),
            "errors": self.errors,
            "first_error": self.first_error,
            "per_device": self.reports.iter().map(|r| json!({
                "target": r.target,
                "iops": round(r.iops),
                "mb_per_s": round(r.mb_per_s),
            })).collect::<Vec<_>>(),
        })
    }
}

/// Rounds to 4 significant-ish decimals for readable JSON.
pub fn round(x: f64) -> f64 {
    if !x.is_finite() {
        return 0.0;
    }
    let scale = if x.abs() >= 100.0 { 10.0 } else { 10_000.0 };
    (x * scale).round() / scale
}

/// A timed load.
pub fn load(pattern: Pattern, block_size_bytes: u64, iodepth: u32, runtime_ms: u64) -> BenchConfig {
    BenchConfig {
        pattern,
        block_size_bytes,
        iodepth,
        jobs: 1,
        runtime_ms,
        ..BenchConfig::default()
    }
}

/// Runs `cfg` on every device of `devs` at the same time; rates are summed.
pub async fn concurrent(
    devs: &[Arc<dyn BlockDevice>],
    cfg: &BenchConfig,
) -> Result<Measured, Error> {
    let runs = devs.iter().map(|d| {
        let d = d.clone();
        let cfg = cfg.clone();
        tokio::spawn(async move {
            let name = d.info().name.clone();
            bench::run(d, &cfg, &name, &Progress::Silent).await
        })
    });
    let mut reports = Vec::with_capacity(devs.len());
    for r in futures::future::join_all(runs).await {
        reports.push(r.map_err(|e| format!("bench task: {e}"))??);
    }
    Ok(Measured::from_reports(reports))
}

/// Runs `cfg` on one device.
pub async fn single(dev: &Arc<dyn BlockDevice>, cfg: &BenchConfig) -> Result<Measured, Error> {
    concurrent(std::slice::from_ref(dev), cfg).await
}
