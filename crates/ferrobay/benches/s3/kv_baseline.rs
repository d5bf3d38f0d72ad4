//! The KV Retrieve baseline beside the 1 MiB GET (issue 11: "1 MiB GET close to what the
//! storage nodes' KV Retrieve delivers"): what the same storage nodes serve to a plain
//! KV client, without the gateway.
//!
//! A 1 MiB GET reads the two data shards of its one stripe (EC 2+1, 1 MiB shards: each
//! 512 KiB of payload after a 48-byte header) from two of the three nodes. The baseline
//! stores values of exactly that size in one extra KV namespace per node (on the same
//! drive file as the object pool's namespace), then runs `ferrobay bench --kv --rw
//! retrieve` against the three namespaces at once, as many commands in flight as the
//! GET load keeps (two per GET worker), for the same time. It reports the MiB/s the
//! three nodes deliver together, and CPU seconds per GiB of the nodes and of the KV
//! clients (the clients' share stands where the gateway stands in a GET).

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use serde::Serialize;

use crate::object_cluster::ObjectCluster;

/// One 1 MiB object's data shard as stored: 48-byte header + 512 KiB payload.
pub(crate) const VALUE_BYTES: u64 = 48 + (512 << 10);
/// Size of each baseline namespace.
const NAMESPACE_SIZE: &str = "1G";

/// The extra KV namespaces, one per storage node.
pub(crate) struct Baseline {
    urls: Vec<String>,
    /// Values stored per namespace.
    keys: u64,
}

/// One measured baseline run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct BaselineRun {
    pub(crate) round: u32,
    pub(crate) mib_per_s: f64,
    pub(crate) retrieves_per_s: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) storage_cpu_s: f64,
    pub(crate) client_cpu_s: f64,
    pub(crate) bytes: u64,
    pub(crate) errors: u64,
}

impl BaselineRun {
    fn per_gib(&self, cpu_s: f64) -> Option<f64> {
        let gib = self.bytes as f64 / f64::from(1u32 << 30);
        (gib > 0.0).then(|| cpu_s / gib)
    }
    pub(crate) fn storage_cpu_s_per_gib(&self) -> Option<f64> {
        self.per_gib(self.storage_cpu_s)
    }
    pub(crate) fn client_cpu_s_per_gib(&self) -> Option<f64> {
        self.per_gib(self.client_cpu_s)
    }
}

/// Medians of the baseline runs.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct BaselineSummary {
    pub(crate) value_bytes: u64,
    pub(crate) mib_per_s: f64,
    pub(crate) retrieves_per_s: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) storage_cpu_s_per_gib: Option<f64>,
    pub(crate) client_cpu_s_per_gib: Option<f64>,
    pub(crate) errors: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn summarize(runs: &[BaselineRun]) -> BaselineSummary {
    let opt = |v: Vec<Option<f64>>| {
        let v: Vec<f64> = v.into_iter().flatten().collect();
        (!v.is_empty()).then(|| median(v))
    };
    BaselineSummary {
        value_bytes: VALUE_BYTES,
        mib_per_s: median(runs.iter().map(|r| r.mib_per_s).collect()),
        retrieves_per_s: median(runs.iter().map(|r| r.retrieves_per_s).collect()),
        p50_ms: median(runs.iter().map(|r| r.p50_ms).collect()),
        p99_ms: median(runs.iter().map(|r| r.p99_ms).collect()),
        storage_cpu_s_per_gib: opt(runs
            .iter()
            .map(BaselineRun::storage_cpu_s_per_gib)
            .collect()),
        client_cpu_s_per_gib: opt(runs.iter().map(BaselineRun::client_cpu_s_per_gib).collect()),
        errors: runs.iter().map(|r| r.errors).sum(),
    }
}

/// What `ferrobay bench --kv --json` reports (the fields used here).
#[derive(serde::Deserialize)]
struct KvBenchReport {
    read_ios: u64,
    write_ios: u64,
    read_bytes: u64,
    errors: u64,
    elapsed_s: f64,
    cpu_s: f64,
    read_latency: KvLatency,
    first_error: Option<String>,
}

#[derive(serde::Deserialize)]
struct KvLatency {
    #[serde(default)]
    p50_us: f64,
    #[serde(default)]
    p99_us: f64,
}

impl Baseline {
    /// Creates one KV namespace per storage node and stores `keys` values in each (as
    /// many as the GET case's objects keep shards on a node).
    pub(crate) fn prepare(c: &ObjectCluster, keys: u64) -> anyhow::Result<Baseline> {
        let mut urls = Vec::new();
        for n in &c.nodes {
            let out = c
                .cli(&[
                    "node",
                    "ns",
                    "create",
                    "--data-dir",
                    &n.dir.display().to_string(),
                    "--drive",
                    "d0",
                    "--size",
                    NAMESPACE_SIZE,
                    "--kv",
                    "--json",
                ])
                .map_err(anyhow::Error::msg)
                .context("create the baseline KV namespace")?;
            let v: serde_json::Value =
                serde_json::from_str(&out).with_context(|| format!("ns create said {out}"))?;
            let nqn = v["subsystem_nqn"].as_str().context("no subsystem_nqn")?;
            let nsid = v["nsid"].as_u64().context("no nsid")?;
            urls.push(format!("nvme+tcp://127.0.0.1:{}/{nqn}/{nsid}", n.nvme_port));
        }
        let b = Baseline { urls, keys };
        let runs = b.run_all(&c.binary, &["--rw", "store", "--iodepth", "8"])?;
        for (url, r) in b.urls.iter().zip(runs) {
            if r.errors > 0 || r.write_ios < keys {
                bail!(
                    "storing the baseline values on {url}: {} of {keys} stored, {} errors, first: {}",
                    r.write_ios,
                    r.errors,
                    r.first_error.as_deref().unwrap_or("-")
                );
            }
        }
        Ok(b)
    }

    /// `ferrobay bench --kv` on every namespace at once, with `extra` arguments.
    fn run_all(&self, binary: &Path, extra: &[&str]) -> anyhow::Result<Vec<KvBenchReport>> {
        let value = VALUE_BYTES.to_string();
        let keys = self.keys.to_string();
        let children = self
            .urls
            .iter()
            .map(|url| {
                Command::new(binary)
                    .args(["bench", "--kv", "--json", "--target", url])
                    .args(["--value-size", &value, "--keys", &keys])
                    .args(extra)
                    .env("RUST_LOG", "warn")
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .context("start ferrobay bench --kv")
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut reports = Vec::new();
        for child in children {
            let out = child
                .wait_with_output()
                .context("wait for ferrobay bench")?;
            let report: KvBenchReport = serde_json::from_slice(&out.stdout).with_context(|| {
                format!(
                    "ferrobay bench --kv ({}): {}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                )
            })?;
            reports.push(report);
        }
        Ok(reports)
    }

    /// One measured Retrieve run: `in_flight` commands spread over the namespaces for
    /// `seconds`; `storage_cpu` reads the storage nodes' CPU seconds.
    pub(crate) fn measure(
        &self,
        binary: &Path,
        in_flight: u32,
        seconds: f64,
        round: u32,
        storage_cpu: impl Fn() -> f64,
    ) -> anyhow::Result<BaselineRun> {
        let depth = in_flight
            .div_ceil(self.urls.len() as u32)
            .max(1)
            .to_string();
        let runtime = format!("{}ms", (seconds * 1000.0) as u64);
        let before = storage_cpu();
        let reports = self.run_all(
            binary,
            &[
                "--rw",
                "retrieve",
                "--iodepth",
                &depth,
                "--runtime",
                &runtime,
            ],
        )?;
        let storage_cpu_s = storage_cpu() - before;
        let elapsed = reports.iter().map(|r| r.elapsed_s).fold(0.0, f64::max);
        let bytes: u64 = reports.iter().map(|r| r.read_bytes).sum();
        let ios: u64 = reports.iter().map(|r| r.read_ios).sum();
        let per_s = |x: f64| if elapsed > 0.0 { x / elapsed } else { 0.0 };
        Ok(BaselineRun {
            round,
            mib_per_s: per_s(bytes as f64 / f64::from(1u32 << 20)),
            retrieves_per_s: per_s(ios as f64),
            p50_ms: median(reports.iter().map(|r| r.read_latency.p50_us).collect()) / 1000.0,
            p99_ms: reports
                .iter()
                .map(|r| r.read_latency.p99_us)
                .fold(0.0, f64::max)
                / 1000.0,
            storage_cpu_s,
            client_cpu_s: reports.iter().map(|r| r.cpu_s).sum(),
            bytes,
            errors: reports.iter().map(|r| r.errors).sum(),
        })
    }
}
