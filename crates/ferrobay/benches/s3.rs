//! S3 benchmark (issue 11, "Measure"): Ferrobay's gateway on KV namespaces against MinIO,
//! side by side in one run, with the same load generator.
//!
//! ```text
//! cargo bench -p ferrobay --bench s3
//! ```
//!
//! - Ferrobay: etcd, three `ferrobay node run --meta` storage nodes on file drives (O_DIRECT),
//!   an object pool of one KV namespace per node (`ferrobay s3 pool create`), one
//!   `ferrobay s3 run --meta` gateway (SQLite index, EC 2+1), all separate processes.
//! - MinIO: one `minio server` over three drive directories (one erasure set, EC:1: 2 data
//!   + 1 parity), on the same filesystem as Ferrobay's drive files.
//! - Load: `benches/s3load` (Go, minio-go, shaped like MinIO's warp, which the Go module
//!   proxy does not serve here): PUT and GET of 1 MiB and 4 KiB objects and LIST
//!   (ListObjectsV2 pages of 1,000 keys over 4 KiB objects), N workers for a fixed time.
//! - Per case and system: MiB/s, ops/s, p50/p99 latency, and CPU seconds of the gateway +
//!   storage node processes (MinIO: its one process) per GiB moved and per 1,000
//!   operations (`/proc/PID/stat` utime + stime at the start and end of the measured
//!   phase); medians over the rounds; ratios Ferrobay / MinIO.
//!
//! Output: the table on stdout, progress on stderr, JSON in `target/bench/s3.json`
//! (`FERROBAY_BENCH_S3_OUT` overrides). Environment: `FERROBAY_BENCH_SECS` (seconds per
//! run, default 10), `FERROBAY_BENCH_ROUNDS` (default 3), `FERROBAY_BENCH_S3_CONCURRENCY`
//! (workers, default 16), `FERROBAY_BENCH_MINIO` (the minio binary), `FERROBAY_BIN`.
//! Without `--bench` (`cargo test -p ferrobay`) it runs a short smoke pass and writes no
//! file; without etcd, Go or MinIO that pass says it did not run (`testkit::prereq`).

#[path = "s3/kv_baseline.rs"]
mod kv_baseline;
#[path = "s3/minio.rs"]
mod minio;
#[allow(dead_code)] // the tests use more of it
#[path = "../tests/common/object_cluster.rs"]
mod object_cluster;
#[path = "s3/report.rs"]
mod report;
#[path = "s3/s3load.rs"]
mod s3load;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use bench::CpuTime;
use kv_baseline::{Baseline, BaselineRun, BaselineSummary};
use minio::Minio;
use object_cluster::ObjectCluster;
use report::{CaseResult, Measurement, ratios, summarize, table};
use s3load::{Case, Target};
use serde::Serialize;

const SCHEMA: &str = "ferrobay.bench.s3/1";

#[derive(Clone, Debug, Serialize)]
struct Settings {
    full: bool,
    runtime_s: f64,
    rounds: u32,
    concurrency: u32,
    /// Objects uploaded before GET runs.
    get_objects: u32,
    /// Objects uploaded before LIST runs.
    list_objects: u32,
}

fn env_f64(name: &str) -> Option<f64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

impl Settings {
    fn from_env(full: bool) -> Settings {
        Settings {
            full,
            runtime_s: env_f64("FERROBAY_BENCH_SECS")
                .unwrap_or(if full { 10.0 } else { 1.0 })
                .clamp(0.5, 300.0),
            rounds: env_f64("FERROBAY_BENCH_ROUNDS")
                .map_or(if full { 3 } else { 1 }, |v| v as u32)
                .clamp(1, 10),
            concurrency: env_f64("FERROBAY_BENCH_S3_CONCURRENCY")
                .map_or(if full { 16 } else { 4 }, |v| v as u32)
                .clamp(1, 256),
            get_objects: if full { 256 } else { 16 },
            list_objects: if full { 10_000 } else { 200 },
        }
    }

    fn cases(&self) -> Vec<Case> {
        let c = |name: &str, op, object_bytes, objects| Case {
            name: name.to_string(),
            op,
            object_bytes,
            objects,
        };
        let all = vec![
            c("put-1MiB", "put", 1 << 20, 0),
            c("get-1MiB", "get", 1 << 20, self.get_objects),
            c("put-4KiB", "put", 4 << 10, 0),
            c("get-4KiB", "get", 4 << 10, self.get_objects),
            c("list", "list", 4 << 10, self.list_objects),
        ];
        // `FERROBAY_BENCH_S3_CASES=put-1MiB,get-1MiB` runs only those (profiling runs).
        match std::env::var("FERROBAY_BENCH_S3_CASES") {
            Ok(only) if !only.trim().is_empty() => {
                let only: Vec<&str> = only.split(',').map(str::trim).collect();
                all.into_iter()
                    .filter(|c| only.contains(&c.name.as_str()))
                    .collect()
            }
            _ => all,
        }
    }
}

#[derive(Serialize)]
struct Output {
    schema: &'static str,
    mode: &'static str,
    command: &'static str,
    setup: &'static str,
    machine: Machine,
    settings: Settings,
    results: Vec<CaseResult>,
    measurements: Vec<Measurement>,
    /// KV Retrieve of the 1 MiB GET's shards straight from the storage nodes (no
    /// gateway), measured in the rounds of the 1 MiB GET: medians and every run.
    kv_retrieve_baseline: Option<BaselineSummary>,
    kv_retrieve_runs: Vec<BaselineRun>,
    error: Option<String>,
}

#[derive(Serialize)]
struct Machine {
    cpus: usize,
    kernel: String,
    load_average: String,
    ferrobay: String,
    minio: String,
}

fn cpu_of(pid: u32) -> f64 {
    CpuTime::of_pid(pid).map_or(0.0, |c| c.total().as_secs_f64())
}

/// The systems under test, with the processes whose CPU time counts.
struct Systems {
    ferrobay: ObjectCluster,
    minio: Minio,
    baseline: Baseline,
}

impl Systems {
    /// (gateway or server CPU s, storage node CPU s) now.
    fn cpu(&self, system: &str) -> (f64, f64) {
        if system == "minio" {
            return (cpu_of(self.minio.daemon.pid()), 0.0);
        }
        let gw = self
            .ferrobay
            .gateway
            .as_ref()
            .map_or(0.0, |d| cpu_of(d.pid()));
        let nodes = self
            .ferrobay
            .nodes
            .iter()
            .filter_map(|n| n.daemon.as_ref())
            .map(|d| cpu_of(d.pid()))
            .sum();
        (gw, nodes)
    }

    fn target(&self, system: &str) -> Target<'_> {
        if system == "minio" {
            Target {
                endpoint: &self.minio.endpoint,
                access_key: minio::ACCESS_KEY,
                secret_key: minio::SECRET_KEY,
            }
        } else {
            Target {
                endpoint: &self.ferrobay.s3_endpoint,
                access_key: object_cluster::ACCESS_KEY,
                secret_key: object_cluster::SECRET_KEY,
            }
        }
    }
}

fn measure(
    sys: &Systems,
    load_bin: &Path,
    s: &Settings,
    case: &Case,
    system: &'static str,
    round: u32,
) -> anyhow::Result<Measurement> {
    let mut marks = Vec::new();
    let load = s3load::run(
        load_bin,
        &sys.target(system),
        case,
        s.concurrency,
        s.runtime_s,
        || marks.push(sys.cpu(system)),
    )?;
    let (start, end) = (marks[0], marks[1]);
    Ok(Measurement {
        system,
        case: case.name.clone(),
        round,
        load,
        gateway_cpu_s: end.0 - start.0,
        storage_cpu_s: end.1 - start.1,
    })
}

fn run_all(sys: &Systems, load_bin: &Path, s: &Settings, o: &mut Output) -> anyhow::Result<()> {
    for case in s.cases() {
        for round in 0..s.rounds {
            // Alternate which system goes first, so neither always meets a warmer cache.
            let order: [&'static str; 2] = if round % 2 == 0 {
                ["ferrobay", "minio"]
            } else {
                ["minio", "ferrobay"]
            };
            for system in order {
                eprintln!("s3 bench: {} on {system}, round {}", case.name, round + 1);
                let m = measure(sys, load_bin, s, &case, system, round)?;
                if m.load.errors > 0 {
                    eprintln!(
                        "s3 bench: {} on {system}: {} errors, first: {}",
                        case.name,
                        m.load.errors,
                        m.load.first_error.as_deref().unwrap_or("-")
                    );
                }
                o.measurements.push(m);
            }
            if case.name == "get-1MiB" {
                eprintln!("s3 bench: KV Retrieve baseline, round {}", round + 1);
                // Two shard Retrieves in flight per GET worker, as the GET load keeps.
                let r = sys.baseline.measure(
                    &sys.ferrobay.binary,
                    2 * s.concurrency,
                    s.runtime_s,
                    round,
                    || sys.cpu("ferrobay").1,
                )?;
                o.kv_retrieve_runs.push(r);
            }
        }
        if case.name == "get-1MiB" {
            o.kv_retrieve_baseline = Some(kv_baseline::summarize(&o.kv_retrieve_runs));
        }
        let of = |system: &str| {
            o.measurements
                .iter()
                .filter(|m| m.case == case.name && m.system == system)
                .collect::<Vec<_>>()
        };
        let f = summarize(&of("ferrobay"));
        let m = summarize(&of("minio"));
        let r = ratios(&f, &m);
        o.results.push(CaseResult {
            case,
            ferrobay: f,
            minio: m,
            ratios: r,
        });
    }
    Ok(())
}

fn start_systems(
    settings: &Settings,
    binary: &Path,
    minio_bin: &Path,
    dir: &Path,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<Systems> {
    eprintln!("s3 bench: starting etcd, storage nodes n1..n3, the object pool and the gateway");
    let mut ferrobay = rt
        .block_on(ObjectCluster::start(
            binary,
            &dir.join("ferrobay"),
            32 << 30,
        ))
        .map_err(anyhow::Error::msg)?;
    ferrobay
        .create_pool("24G")
        .map_err(anyhow::Error::msg)
        .context("s3 pool create")?;
    ferrobay
        .start_gateway(&[])
        .map_err(anyhow::Error::msg)
        .context("s3 run")?;
    // For profiling: the processes whose CPU time counts.
    let nodes: Vec<String> = ferrobay
        .nodes
        .iter()
        .filter_map(|n| n.daemon.as_ref())
        .map(|d| d.pid().to_string())
        .collect();
    eprintln!(
        "s3 bench: gateway pid {}, storage node pids {}",
        ferrobay.gateway.as_ref().map_or(0, |d| d.pid()),
        nodes.join(",")
    );
    eprintln!("s3 bench: KV namespaces and values for the KV Retrieve baseline");
    let baseline = Baseline::prepare(&ferrobay, u64::from(settings.get_objects).max(16))?;
    eprintln!("s3 bench: starting MinIO on 3 drive directories");
    let minio = Minio::start(minio_bin, &dir.join("minio"), 3)?;
    eprintln!("s3 bench: minio pid {}", minio.daemon.pid());
    Ok(Systems {
        ferrobay,
        minio,
        baseline,
    })
}

/// What the smoke pass needs; the reason it cannot run otherwise.
fn prerequisites() -> Result<PathBuf, String> {
    meta::testing::EtcdServer::find_binary()?;
    let go = std::process::Command::new("go").arg("version").output();
    if !go.is_ok_and(|o| o.status.success()) {
        return Err("Go is not installed (the load generator benches/s3load is Go)".into());
    }
    minio::find_binary()
}

fn main() -> ExitCode {
    let full = std::env::args().any(|a| a == "--bench");
    let settings = Settings::from_env(full);
    let binary = match std::env::var_os("FERROBAY_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_ferrobay")),
    };
    let minio_bin = match prerequisites() {
        Ok(m) => m,
        Err(why) if !full => {
            testkit::prereq::missing(why);
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("s3 bench: {why}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("s3 bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = Output {
        schema: SCHEMA,
        mode: if full { "bench" } else { "smoke" },
        command: "cargo bench -p ferrobay --bench s3",
        setup: "all on 127.0.0.1. ferrobay: etcd, storage nodes n1..n3 (`ferrobay node run \
                --meta`, one O_DIRECT file drive each), object pool of one KV namespace per \
                node, gateway `ferrobay s3 run --meta` (SQLite index, EC 2+1, objects up to \
                16 KiB inline in the index). minio: `minio server` over three drive \
                directories on the same filesystem (one erasure set, EC:1). Load: \
                benches/s3load (Go, minio-go) with N workers.",
        machine: Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            load_average: std::fs::read_to_string("/proc/loadavg")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            ferrobay: binary.display().to_string(),
            minio: minio_bin.display().to_string(),
        },
        settings: settings.clone(),
        results: Vec::new(),
        measurements: Vec::new(),
        kv_retrieve_baseline: None,
        kv_retrieve_runs: Vec::new(),
        error: None,
    };
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = match std::fs::create_dir_all(&base).and_then(|()| {
        tempfile::Builder::new()
            .prefix("bench-s3")
            .tempdir_in(&base)
    }) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("s3 bench: temp dir in {}: {e}", base.display());
            return ExitCode::FAILURE;
        }
    };
    let result = s3load::build(dir.path()).and_then(|load_bin| {
        let mut sys = start_systems(&settings, &binary, &minio_bin, dir.path(), &rt)?;
        let r = run_all(&sys, &load_bin, &settings, &mut out);
        if r.is_err() {
            eprintln!("{}", sys.ferrobay.logs());
            eprintln!("{}", sys.minio.daemon.log_tail(30));
        }
        sys.minio.stop();
        sys.ferrobay.stop();
        r
    });
    if let Err(e) = &result {
        eprintln!("s3 bench: {e:#}");
        out.error = Some(format!("{e:#}"));
    }
    println!("{}", table(&out.results));
    if let Some(b) = &out.kv_retrieve_baseline {
        println!("{}", report::baseline_table(b, &out.results));
    }
    if full {
        let path = testkit::bench::output_path(
            "FERROBAY_BENCH_S3_OUT",
            env!("CARGO_TARGET_TMPDIR"),
            "s3.json",
        );
        let json = serde_json::to_string_pretty(&out).unwrap_or_default();
        match testkit::bench::write_report(&path, &json) {
            Ok(()) => eprintln!("s3 bench: JSON in {}", path.display()),
            Err(e) => eprintln!("s3 bench: writing {}: {e}", path.display()),
        }
    }
    // The smoke pass fails on errors: a bench that cannot run is a broken bench.
    let errors: u64 = out.measurements.iter().map(|m| m.load.errors).sum();
    if result.is_err() || (!full && errors > 0) {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
