//! QoS overhead benchmark: what the QoS path costs a host whose commands are not held
//! back, side by side in one run.
//!
//! ```text
//! cargo bench -p nvmf-target --bench qos
//! ```
//!
//! One in-process target with a null namespace (no media cost: the target's per-command
//! work is all there is) on 127.0.0.1, one host (nvmf-host, `bench` load: 4 KiB random
//! reads at QD 32), the same connection throughout. Configurations, alternated round by
//! round so that drift in the machine hits them alike:
//!
//! - `none`: no QoS configured at all;
//! - `other_host_limited`: a limit on another host: this host's commands have no gate;
//! - `limits_not_reached`: a namespace limit and a host limit far above what the target
//!   does (10^9 IOPS, 1 TiB/s): every command is charged to four buckets and never waits;
//! - `minimum_elsewhere`: a minimum on another (idle) namespace: the contention controller
//!   runs and every command passes its namespace's (uncapped) cap.
//!
//! Reported per configuration (medians over rounds): IOPS, p50/p99 latency, CPU µs per
//! I/O of the whole process (host and target), heap allocations per I/O on the runtime's
//! threads (the counting allocator), and the ratios to `none`.
//!
//! On a shared machine the loopback figures move by more than the QoS path costs, so the
//! engine's own per-command work is measured alone too (`admission`): nanoseconds to
//! admit one command through no gate, a cap only, one limit, two limits and a cap, on one
//! thread and on two threads sharing the gate (two queues of one host), the best of the
//! rounds.
//!
//! Output: JSON on stdout and in `target/bench/qos.json` (`FERROBAY_BENCH_OUT` overrides),
//! a table on stderr. Environment: `FERROBAY_BENCH_SECS` (seconds per run, default 3),
//! `FERROBAY_BENCH_ROUNDS` (default 3). Without `--bench` (`cargo test --benches`) it runs
//! one short round as a smoke test and writes no file.

use std::process::ExitCode;
use std::sync::Arc;

use blockdev::{BlockDevice, NullDevice};
use nvmf_host::{ConnectOptions, Controller, HostIdentity, RemoteNamespace};
use nvmf_target::{NamespaceConfig, QosKey, QosLimits, SubsystemConfig, Target, TargetConfig};
use serde::Serialize;
use testkit::alloc::{CountingAllocator, Tag};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const SCHEMA: &str = "ferrobay.bench.qos/2";
const SUBNQN: &str = "nqn.2026-01.io.ferrobay:bench:qos";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-0000000000b1";
const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-0000000000b2";
const CONFIGS: [&str; 4] = [
    "none",
    "other_host_limited",
    "limits_not_reached",
    "minimum_elsewhere",
];

#[derive(Debug, Serialize)]
struct Settings {
    runtime_s: f64,
    rounds: usize,
    block_size_bytes: u64,
    iodepth: u32,
}

#[derive(Debug, Serialize, Clone, Default)]
struct Run {
    iops: f64,
    p50_us: f64,
    p99_us: f64,
    cpu_us_per_io: f64,
    allocations_per_io: f64,
}

#[derive(Debug, Serialize)]
struct ConfigResult {
    name: &'static str,
    /// Medians over the rounds.
    iops: f64,
    p50_us: f64,
    p99_us: f64,
    cpu_us_per_io: f64,
    allocations_per_io: f64,
    /// This configuration / `none` (IOPS: above 1 is faster; CPU: above 1 costs more).
    iops_ratio: f64,
    cpu_ratio: f64,
    rounds: Vec<Run>,
}

#[derive(Debug, Serialize)]
struct AdmissionResult {
    gate: String,
    threads: usize,
    /// Best of the rounds.
    ns_per_command: f64,
}

#[derive(Debug, Serialize)]
struct Output {
    schema: &'static str,
    mode: &'static str,
    command: &'static str,
    cpus: usize,
    settings: Settings,
    admission: Vec<AdmissionResult>,
    configs: Vec<ConfigResult>,
    error: Option<String>,
}

/// The engine's per-command admission cost per gate kind and thread count.
fn admission(rounds: usize, commands: u64) -> Vec<AdmissionResult> {
    use nvmf_target::qos::measure::{GateKind, admission_cost};
    let kinds = [
        (GateKind::None, "none"),
        (GateKind::CapOnly, "cap_only"),
        (GateKind::OneLimit, "one_limit"),
        (GateKind::TwoLimitsAndCap, "two_limits_and_cap"),
    ];
    let mut out = Vec::new();
    for threads in [1, 2] {
        for (kind, name) in kinds {
            let best = (0..rounds)
                .map(|_| admission_cost(kind, threads, commands).as_nanos() as f64)
                .fold(f64::MAX, f64::min);
            eprintln!("qos bench: admission {name} on {threads} thread(s): {best:.1} ns/command");
            out.push(AdmissionResult {
                gate: name.to_string(),
                threads,
                ns_per_command: best,
            });
        }
    }
    out
}

fn env_num<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Puts the target in configuration `name` (from any other).
fn configure(t: &Target, name: &str) -> Result<(), String> {
    for (k, _) in t.qos_limits() {
        t.clear_qos(&k);
    }
    let far = QosLimits {
        max_iops: Some(1_000_000_000),
        max_bytes_per_s: Some(1 << 40),
        ..QosLimits::default()
    };
    let r = match name {
        "none" => Ok(()),
        "other_host_limited" => t.set_qos(
            QosKey::host_on_namespace(SUBNQN, 1, OTHER_HOST),
            QosLimits {
                max_iops: Some(100),
                ..QosLimits::default()
            },
        ),
        "limits_not_reached" => t
            .set_qos(QosKey::namespace(SUBNQN, 1), far)
            .and_then(|()| t.set_qos(QosKey::host_on_namespace(SUBNQN, 1, HOST), far)),
        "minimum_elsewhere" => t.set_qos(
            QosKey::namespace(SUBNQN, 2),
            QosLimits {
                min_iops: Some(1000),
                ..QosLimits::default()
            },
        ),
        other => return Err(format!("unknown configuration {other}")),
    };
    r.map_err(|e| e.to_string())
}

async fn one_run(dev: Arc<dyn BlockDevice>, cfg: &bench::BenchConfig) -> Result<Run, String> {
    let a0 = testkit::alloc::allocations(Tag::A);
    let r = bench::run(dev, cfg, "qos", &bench::Progress::auto(0))
        .await
        .map_err(|e| e.to_string())?;
    let allocs = testkit::alloc::allocations(Tag::A) - a0;
    if r.errors > 0 {
        return Err(format!("{} I/O errors: {:?}", r.errors, r.first_error));
    }
    let ios = (r.read_ios + r.write_ios).max(1) as f64;
    Ok(Run {
        iops: r.iops,
        p50_us: r.read_latency.p50_us,
        p99_us: r.read_latency.p99_us,
        cpu_us_per_io: r.cpu_s * 1e6 / ios,
        allocations_per_io: allocs as f64 / ios,
    })
}

async fn measure(settings: &Settings) -> Result<Vec<ConfigResult>, String> {
    let target = Target::new(TargetConfig::default()).map_err(|e| e.to_string())?;
    target
        .add_subsystem(SubsystemConfig::new(SUBNQN))
        .map_err(|e| e.to_string())?;
    for nsid in [1, 2] {
        let dev = Arc::new(NullDevice::new(format!("null{nsid}"), 1 << 30));
        target
            .add_namespace(SUBNQN, NamespaceConfig::whole_device(nsid, dev))
            .map_err(|e| e.to_string())?;
    }
    let l = target
        .listen("127.0.0.1:0".parse().map_err(|e| format!("{e}"))?)
        .await
        .map_err(|e| e.to_string())?;
    let host = HostIdentity::from_hostnqn(HOST).map_err(|e| e.to_string())?;
    let opts = ConnectOptions {
        io_queues: 1,
        queue_size: 128,
        ..ConnectOptions::default()
    };
    let ctrl = Controller::connect(l.local_addr(), SUBNQN, &host, &opts)
        .await
        .map_err(|e| e.to_string())?;
    let dev: Arc<dyn BlockDevice> = Arc::new(
        RemoteNamespace::open(&ctrl, 1)
            .await
            .map_err(|e| e.to_string())?,
    );
    let cfg = bench::BenchConfig {
        pattern: bench::Pattern::RandRead,
        block_size_bytes: settings.block_size_bytes,
        iodepth: settings.iodepth,
        runtime_ms: (settings.runtime_s * 1000.0) as u64,
        ..bench::BenchConfig::default()
    };
    // Warm-up (connections, buffer pools).
    configure(&target, "none")?;
    let mut warm = cfg.clone();
    warm.runtime_ms = 300;
    one_run(dev.clone(), &warm).await?;
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); CONFIGS.len()];
    for round in 0..settings.rounds {
        for (i, name) in CONFIGS.iter().enumerate() {
            configure(&target, name)?;
            // Let the contention controller take its first samples.
            tokio::time::sleep(nvmf_target::QOS_CONTROL_PERIOD * 2).await;
            let r = one_run(dev.clone(), &cfg).await?;
            eprintln!(
                "qos bench: round {} {name}: {:.0} IOPS, p99 {:.0} µs, {:.2} CPU µs/IO, {:.2} allocations/IO",
                round + 1,
                r.iops,
                r.p99_us,
                r.cpu_us_per_io,
                r.allocations_per_io
            );
            runs[i].push(r);
        }
    }
    configure(&target, "none")?;
    drop(dev);
    let _ = ctrl.shutdown().await;
    target.shutdown(std::time::Duration::from_secs(2)).await;
    let med = |v: &[Run], f: fn(&Run) -> f64| testkit::stats::median(v.iter().map(f).collect());
    let base_iops = med(&runs[0], |r| r.iops);
    let base_cpu = med(&runs[0], |r| r.cpu_us_per_io);
    Ok(CONFIGS
        .iter()
        .zip(runs)
        .map(|(name, rounds)| {
            let iops = med(&rounds, |r| r.iops);
            let cpu = med(&rounds, |r| r.cpu_us_per_io);
            ConfigResult {
                name,
                iops,
                p50_us: med(&rounds, |r| r.p50_us),
                p99_us: med(&rounds, |r| r.p99_us),
                cpu_us_per_io: cpu,
                allocations_per_io: med(&rounds, |r| r.allocations_per_io),
                iops_ratio: iops / base_iops.max(1e-9),
                cpu_ratio: cpu / base_cpu.max(1e-9),
                rounds,
            }
        })
        .collect())
}

fn render(configs: &[ConfigResult]) -> String {
    let mut s = format!(
        "{:<20} {:>10} {:>8} {:>8} {:>10} {:>10} {:>9} {:>9}\n",
        "CONFIG", "IOPS", "P50 µs", "P99 µs", "CPU µs/IO", "ALLOCS/IO", "IOPS ×", "CPU ×"
    );
    for c in configs {
        s += &format!(
            "{:<20} {:>10.0} {:>8.1} {:>8.1} {:>10.2} {:>10.2} {:>9.3} {:>9.3}\n",
            c.name,
            c.iops,
            c.p50_us,
            c.p99_us,
            c.cpu_us_per_io,
            c.allocations_per_io,
            c.iops_ratio,
            c.cpu_ratio
        );
    }
    s
}

fn main() -> ExitCode {
    let full = std::env::args().any(|a| a == "--bench");
    let settings = Settings {
        runtime_s: if full {
            env_num("FERROBAY_BENCH_SECS").unwrap_or(3.0)
        } else {
            0.3
        },
        rounds: if full {
            env_num("FERROBAY_BENCH_ROUNDS").unwrap_or(3).max(1)
        } else {
            1
        },
        block_size_bytes: 4096,
        iodepth: 32,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(|| testkit::alloc::set_thread_tag(Tag::A))
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("qos bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let admission = admission(
        settings.rounds.max(3),
        if full { 5_000_000 } else { 100_000 },
    );
    let result = rt.block_on(measure(&settings));
    let (configs, error) = match result {
        Ok(c) => (c, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let out = Output {
        schema: SCHEMA,
        mode: if full { "bench" } else { "smoke" },
        command: "cargo bench -p nvmf-target --bench qos",
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        settings,
        admission,
        configs,
        error,
    };
    let json = match serde_json::to_string_pretty(&out) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("qos bench: cannot encode the report: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{json}");
    if full {
        let path = testkit::bench::output_path(
            "FERROBAY_BENCH_OUT",
            env!("CARGO_TARGET_TMPDIR"),
            "qos.json",
        );
        match testkit::bench::write_report(&path, &json) {
            Ok(()) => eprintln!("qos bench: wrote {}", path.display()),
            Err(e) => eprintln!("qos bench: cannot write {}: {e}", path.display()),
        }
    }
    eprint!("{}", render(&out.configs));
    if let Some(e) = &out.error {
        eprintln!("qos bench: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
