//! The run's JSON document, medians per case and system, the ratios, the table.

use serde::Serialize;

use crate::kv_baseline::BaselineSummary;
use crate::s3load::{Case, LoadReport};

/// One measured run of one case on one system.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Measurement {
    pub(crate) system: &'static str,
    pub(crate) case: String,
    pub(crate) round: u32,
    pub(crate) load: LoadReport,
    /// CPU seconds of the gateway process (Ferrobay) or of the server (MinIO).
    pub(crate) gateway_cpu_s: f64,
    /// CPU seconds of the storage node processes (Ferrobay; 0 for MinIO).
    pub(crate) storage_cpu_s: f64,
}

impl Measurement {
    pub(crate) fn cpu_s(&self) -> f64 {
        self.gateway_cpu_s + self.storage_cpu_s
    }

    pub(crate) fn cpu_s_per_gib(&self) -> Option<f64> {
        let gib = self.load.bytes as f64 / f64::from(1u32 << 30);
        (gib > 0.0).then(|| self.cpu_s() / gib)
    }

    pub(crate) fn cpu_s_per_kop(&self) -> Option<f64> {
        (self.load.ops > 0).then(|| self.cpu_s() / (self.load.ops as f64 / 1000.0))
    }
}

/// Medians of one system in one case.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Summary {
    pub(crate) mib_per_s: f64,
    pub(crate) ops_per_s: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) cpu_s_per_gib: Option<f64>,
    pub(crate) cpu_s_per_kop: Option<f64>,
    pub(crate) gateway_cpu_s: f64,
    pub(crate) storage_cpu_s: f64,
    pub(crate) errors: u64,
}

/// Ferrobay / MinIO. Throughput and ops: >= 1 is the goal; CPU: <= 0.5.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Ratios {
    pub(crate) throughput: Option<f64>,
    pub(crate) ops_per_s: Option<f64>,
    pub(crate) p50: Option<f64>,
    pub(crate) p99: Option<f64>,
    pub(crate) cpu_per_gib: Option<f64>,
    pub(crate) cpu_per_kop: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct CaseResult {
    pub(crate) case: Case,
    pub(crate) ferrobay: Summary,
    pub(crate) minio: Summary,
    pub(crate) ratios: Ratios,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn median_opt(v: Vec<Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = v.into_iter().flatten().collect();
    (!v.is_empty()).then(|| median(v))
}

pub(crate) fn summarize(ms: &[&Measurement]) -> Summary {
    Summary {
        mib_per_s: median(ms.iter().map(|m| m.load.mib_per_s).collect()),
        ops_per_s: median(ms.iter().map(|m| m.load.ops_per_s).collect()),
        p50_ms: median(ms.iter().map(|m| m.load.latency_ms.p50).collect()),
        p99_ms: median(ms.iter().map(|m| m.load.latency_ms.p99).collect()),
        cpu_s_per_gib: median_opt(ms.iter().map(|m| m.cpu_s_per_gib()).collect()),
        cpu_s_per_kop: median_opt(ms.iter().map(|m| m.cpu_s_per_kop()).collect()),
        gateway_cpu_s: median(ms.iter().map(|m| m.gateway_cpu_s).collect()),
        storage_cpu_s: median(ms.iter().map(|m| m.storage_cpu_s).collect()),
        errors: ms.iter().map(|m| m.load.errors).sum(),
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

pub(crate) fn ratios(f: &Summary, m: &Summary) -> Ratios {
    Ratios {
        throughput: ratio(f.mib_per_s, m.mib_per_s),
        ops_per_s: ratio(f.ops_per_s, m.ops_per_s),
        p50: ratio(f.p50_ms, m.p50_ms),
        p99: ratio(f.p99_ms, m.p99_ms),
        cpu_per_gib: f
            .cpu_s_per_gib
            .zip(m.cpu_s_per_gib)
            .and_then(|(a, b)| ratio(a, b)),
        cpu_per_kop: f
            .cpu_s_per_kop
            .zip(m.cpu_s_per_kop)
            .and_then(|(a, b)| ratio(a, b)),
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.digits$}"))
}

/// The table on stdout: one line per case and system, then the ratios.
pub(crate) fn table(results: &[CaseResult]) -> String {
    let mut t = format!(
        "{:<12} {:<9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}\n",
        "case", "system", "MiB/s", "ops/s", "p50 ms", "p99 ms", "CPU s/GiB", "CPU s/kop"
    );
    for r in results {
        for (name, s) in [("ferrobay", &r.ferrobay), ("minio", &r.minio)] {
            t += &format!(
                "{:<12} {:<9} {:>9.1} {:>9.0} {:>9.2} {:>9.2} {:>10} {:>10}\n",
                r.case.name,
                name,
                s.mib_per_s,
                s.ops_per_s,
                s.p50_ms,
                s.p99_ms,
                opt(s.cpu_s_per_gib, 2),
                opt(s.cpu_s_per_kop, 3)
            );
        }
    }
    t += &format!(
        "\nferrobay / minio (goal: throughput and ops >= 1.0, CPU <= 0.5)\n{:<12} {:>10} {:>8} {:>8} {:>8} {:>10} {:>10}\n",
        "case", "throughput", "ops/s", "p50", "p99", "CPU/GiB", "CPU/op"
    );
    for r in results {
        let x = &r.ratios;
        t += &format!(
            "{:<12} {:>10} {:>8} {:>8} {:>8} {:>10} {:>10}\n",
            r.case.name,
            opt(x.throughput, 2),
            opt(x.ops_per_s, 2),
            opt(x.p50, 2),
            opt(x.p99, 2),
            opt(x.cpu_per_gib, 2),
            opt(x.cpu_per_kop, 2)
        );
    }
    t
}

/// The KV Retrieve baseline beside the 1 MiB GET: MiB/s, CPU per GiB of the storage
/// nodes and of the client (the gateway for S3, the KV bench processes for KV).
pub(crate) fn baseline_table(b: &BaselineSummary, results: &[CaseResult]) -> String {
    let mut t = format!(
        "\n1 MiB GET beside KV Retrieve of its shards ({}-byte values, no gateway)\n\
         {:<22} {:>9} {:>9} {:>9} {:>16} {:>16}\n",
        b.value_bytes, "", "MiB/s", "p50 ms", "p99 ms", "nodes CPU s/GiB", "client CPU s/GiB"
    );
    t += &format!(
        "{:<22} {:>9.1} {:>9.2} {:>9.2} {:>16} {:>16}\n",
        "kv-retrieve (3 nodes)",
        b.mib_per_s,
        b.p50_ms,
        b.p99_ms,
        opt(b.storage_cpu_s_per_gib, 2),
        opt(b.client_cpu_s_per_gib, 2)
    );
    if let Some(get) = results.iter().find(|r| r.case.name == "get-1MiB") {
        let f = &get.ferrobay;
        let gib = |cpu_s: f64| {
            (f.mib_per_s > 0.0 && f.cpu_s_per_gib.is_some()).then(|| {
                // CPU s/GiB of one side: its share of the whole.
                let total = f.gateway_cpu_s + f.storage_cpu_s;
                f.cpu_s_per_gib.unwrap_or(0.0) * if total > 0.0 { cpu_s / total } else { 0.0 }
            })
        };
        t += &format!(
            "{:<22} {:>9.1} {:>9.2} {:>9.2} {:>16} {:>16}\n",
            "s3 get-1MiB",
            f.mib_per_s,
            f.p50_ms,
            f.p99_ms,
            opt(gib(f.storage_cpu_s), 2),
            opt(gib(f.gateway_cpu_s), 2)
        );
        t += &format!(
            "GET / KV Retrieve throughput: {}\n",
            opt(ratio(f.mib_per_s, b.mib_per_s), 2)
        );
    }
    t
}
