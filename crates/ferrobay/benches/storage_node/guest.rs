//! Section B: Linux's nvmet-tcp and `ferrobay node` side by side in one QEMU guest (TCG),
//! both on guest loopback and RAM, driven by the same initiators in the guest
//! (`storage_node/job.sh`). The guest is emulated and far slower than this machine, so
//! only ratios between the two targets in the same guest mean something.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use test_guest::{GuestConfig, GuestError, GuestRun, spawn};

use crate::Settings;
use crate::files::FileServer;
use crate::native::per_million;
use crate::workload::PRECONDITION;

const JOB: &str = include_str!("job.sh");
const KERNEL_NQN: &str = "nqn.2026-01.io.ferrobay.bench:kernel-ram";
const KERNEL_PORT: u16 = 4420;
const NODE_NAME: &str = "g1";
const NODE_PORT: u16 = 4421;
/// Boot, fetch, two preconditioning passes and the fixed costs of each run, on top of the
/// measured seconds (TCG on a busy 2-core host is slow).
const FIXED_BUDGET: Duration = Duration::from_secs(420);

/// One measured run in the guest.
#[derive(Debug, Clone, Serialize)]
pub struct GuestResult {
    /// `nvmf-host` (`ferrobay bench`) or `linux-nvme-tcp+fio`.
    pub initiator: String,
    /// `ferrobay` or `kernel`.
    pub target: String,
    pub workload: String,
    pub round: u32,
    pub elapsed_s: f64,
    pub ios: u64,
    pub iops: f64,
    pub mb_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Busy CPU of the whole guest over the run (both vCPUs; initiator + target + kernel).
    pub guest_busy_cpu_s: f64,
    /// CPU of the ferrobay node process (0 for the kernel target, whose work runs in
    /// kernel threads and softirqs that no process owns).
    pub node_cpu_s: f64,
    /// CPU of the initiator process over its whole life (`ferrobay bench` under busybox
    /// `time`; fio's own usr+sys for the kernel host, whose nvme-tcp work is not in fio).
    pub initiator_cpu_s: f64,
    /// Target CPU, the same way for both targets: guest busy CPU minus the initiator
    /// process's CPU (nvmf-host runs only; see the report for what this includes).
    pub target_cpu_s_est: Option<f64>,
    pub guest_busy_cpu_s_per_million_ios: f64,
    pub target_cpu_s_per_million_ios_est: Option<f64>,
    pub node_cpu_s_per_million_ios: Option<f64>,
    /// The initiator's own report (`ferrobay bench --json` or fio's JSON job entry).
    pub raw: Value,
}

/// Means over the rounds of one target's runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Side {
    pub runs: usize,
    pub iops: f64,
    /// The spread over the rounds (the machine is shared: look at it before a ratio).
    pub iops_min: f64,
    pub iops_max: f64,
    pub mb_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub guest_busy_cpu_s_per_million_ios: f64,
    pub target_cpu_s_per_million_ios_est: Option<f64>,
    /// The node process's own CPU (ferrobay only): a check on the estimate.
    pub node_cpu_s_per_million_ios: Option<f64>,
}

/// Ferrobay against the kernel target for one initiator and workload; ratios are
/// ferrobay / kernel of the means (above 1: ferrobay has more IOPS, higher latency, more
/// CPU per I/O).
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub initiator: String,
    pub workload: String,
    pub ferrobay: Side,
    pub kernel: Side,
    pub ratio_iops: f64,
    pub ratio_mb_per_s: f64,
    pub ratio_p99_latency: f64,
    pub ratio_guest_busy_cpu_per_io: f64,
    pub ratio_target_cpu_per_io_est: Option<f64>,
}

#[derive(Debug, Default, Serialize)]
pub struct GuestSection {
    pub ran: bool,
    pub skipped: Option<String>,
    pub description: String,
    pub kernel_version: String,
    pub precondition: Vec<GuestResult>,
    pub results: Vec<GuestResult>,
    /// Per initiator and workload: both targets' means and the ratios.
    pub comparisons: Vec<Comparison>,
    pub boot_s: Option<f64>,
    pub wall_s: f64,
    pub log: String,
    pub error: Option<String>,
}

impl GuestSection {
    pub fn skipped(why: &str) -> GuestSection {
        GuestSection {
            skipped: Some(why.to_string()),
            ..GuestSection::default()
        }
    }
}

pub fn run(binary: &Path, settings: &Settings) -> GuestSection {
    let mut section = GuestSection {
        ran: true,
        description: format!(
            "QEMU TCG guest, {} vCPUs, {} MiB; Linux nvmet-tcp on brd vs ferrobay node on ram:{}M, \
             both on 127.0.0.1 in the guest; initiators in the guest",
            settings.guest_cpus, settings.guest_mem_mb, settings.guest_ns_mb
        ),
        ..GuestSection::default()
    };
    eprintln!("storage_node bench: guest: booting (TCG; this takes a few minutes)");
    match measure(binary, settings) {
        Ok(run) => fill(&mut section, &run, settings),
        Err(e) => {
            if let Some(run) = e.run() {
                fill(&mut section, run, settings);
            }
            let msg = e.to_string();
            eprintln!("storage_node bench: guest section failed: {msg}");
            section.error = Some(msg);
        }
    }
    section
}

fn fill(section: &mut GuestSection, run: &GuestRun, settings: &Settings) {
    section.boot_s = run.boot_secs;
    section.wall_s = run.wall.as_secs_f64();
    section.log = run.log_path.display().to_string();
    section.kernel_version = run
        .log
        .lines()
        .find_map(|l| l.strip_prefix("HARNESS_INIT "))
        .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("kernel=")))
        .unwrap_or_default()
        .to_string();
    for line in run.log.lines() {
        let Some(rest) = line.strip_prefix("FBRESULT ") else {
            continue;
        };
        match parse_result(rest) {
            Ok(r) if r.workload == PRECONDITION.name => section.precondition.push(r),
            Ok(r) => section.results.push(r),
            Err(e) => {
                let e = format!("unreadable result line ({e}): {}", cut(line, 300));
                eprintln!("storage_node bench: {e}");
                section.error.get_or_insert(e);
            }
        }
    }
    section.comparisons = compare(&section.results, settings);
}

/// Errors carry the guest run (for the log and partial results).
#[derive(Debug)]
enum MeasureError {
    Setup(String),
    Guest(GuestError),
}

impl MeasureError {
    fn run(&self) -> Option<&GuestRun> {
        match self {
            MeasureError::Guest(e) => e.run(),
            MeasureError::Setup(_) => None,
        }
    }
}

impl std::fmt::Display for MeasureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MeasureError::Setup(s) => f.write_str(s),
            MeasureError::Guest(e) => write!(f, "{e}"),
        }
    }
}

fn measure(binary: &Path, settings: &Settings) -> Result<GuestRun, MeasureError> {
    if !binary.is_file() {
        return Err(MeasureError::Setup(format!(
            "the ferrobay binary {} does not exist",
            binary.display()
        )));
    }
    let scratch = crate::scratch_dir("bench-guest")
        .map_err(|e| MeasureError::Setup(format!("scratch dir: {e}")))?;
    let (served, libs) = guest_files(binary, scratch.path()).map_err(MeasureError::Setup)?;
    let server =
        FileServer::start(served).map_err(|e| MeasureError::Setup(format!("file server: {e}")))?;

    let spec =
        |w: &crate::Workload| format!("{}:{}:{}:{}", w.name, w.rw, w.block_size_bytes, w.iodepth);
    let workloads: Vec<String> = settings.workloads.iter().map(spec).collect();
    // Two targets and two initiators per round; three times the measured time for the fixed
    // costs of each run under TCG.
    let runs = settings.workloads.len() as f64 * 4.0 * f64::from(settings.rounds);
    let measured = Duration::from_secs_f64(settings.runtime_s * runs * 3.0);
    let mut cfg = GuestConfig::new("bench-storage-node", JOB)
        .cpus(settings.guest_cpus)
        .mem_mb(settings.guest_mem_mb)
        .timeout(FIXED_BUDGET + measured)
        .env("FILES_PORT", server.port())
        .env("LIBS", libs.join(" "))
        .env("NS_MB", settings.guest_ns_mb)
        .env("SECS", format!("{}", settings.runtime_s))
        .env("ROUNDS", settings.rounds)
        .env("WORKLOADS", workloads.join(" "))
        .env("PRE", spec(&PRECONDITION))
        .env("KNQN", KERNEL_NQN)
        .env("KPORT", KERNEL_PORT)
        .env("FNAME", NODE_NAME)
        .env("FNQN", format!("nqn.2026-01.io.ferrobay:{NODE_NAME}:d0"))
        .env("FPORT", NODE_PORT)
        .env("WITH_FIO", u8::from(settings.guest_fio));
    if settings.guest_fio {
        cfg = cfg.with_fio();
    }
    let timeout = cfg.timeout;
    let guest = spawn(&cfg).map_err(MeasureError::Guest)?;
    let run = guest.finish(timeout).map_err(MeasureError::Guest);
    drop(server);
    run
}

/// The files the guest fetches: the binary (without debug info, to keep the copy over
/// QEMU's user network short) and its shared libraries by file name. Returns the served
/// map and the library names.
fn guest_files(
    binary: &Path,
    scratch: &Path,
) -> Result<(BTreeMap<String, PathBuf>, Vec<String>), String> {
    let stripped = scratch.join("ferrobay");
    let strip_ok = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(binary)
        .arg(&stripped)
        .status()
        .is_ok_and(|s| s.success());
    let served_binary = if strip_ok {
        stripped
    } else {
        binary.to_path_buf()
    };
    let mut files = BTreeMap::from([("ferrobay".to_string(), served_binary)]);
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| format!("cannot run ldd {}: {e}", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("not found") {
        return Err(format!(
            "ldd {}: unresolved libraries:\n{text}",
            binary.display()
        ));
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        // "\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x...)"
        let Some((_, rest)) = line.split_once("=> ") else {
            continue;
        };
        let Some(path) = rest
            .split_whitespace()
            .next()
            .filter(|p| p.starts_with('/'))
        else {
            continue;
        };
        let path = PathBuf::from(path);
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        files.insert(format!("lib/{name}"), path);
        libs.push(name);
    }
    Ok((files, libs))
}

/// `initiator=.. target=.. workload=.. round=.. busy_ticks=.. node_ticks=.. hz=.. time=.. json=...`
fn parse_result(rest: &str) -> Result<GuestResult, String> {
    let (head, json) = rest.split_once(" json=").ok_or("no json=")?;
    let kv: BTreeMap<&str, &str> = head
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect();
    let get = |k: &str| kv.get(k).copied().ok_or_else(|| format!("no {k}="));
    let num = |k: &str| -> Result<f64, String> {
        get(k)?.parse::<f64>().map_err(|e| format!("{k}: {e}"))
    };
    let hz = num("hz")?.max(1.0);
    let busy = num("busy_ticks")? / hz;
    let node = num("node_ticks")? / hz;
    let initiator = get("initiator")?.to_string();
    let target = get("target")?.to_string();
    let value: Value = serde_json::from_str(json).map_err(|e| format!("json: {e}"))?;
    let mut r = if initiator == "nvmf-host" {
        from_bench_report(&value, get("time")?)?
    } else {
        from_fio(&value)?
    };
    r.initiator = initiator;
    r.target = target;
    r.workload = get("workload")?.to_string();
    r.round = get("round")?.parse().map_err(|e| format!("round: {e}"))?;
    r.guest_busy_cpu_s = busy;
    r.node_cpu_s = node;
    let ios = r.ios as f64;
    r.guest_busy_cpu_s_per_million_ios = per_million(busy, ios);
    if r.initiator == "nvmf-host" {
        let t = (busy - r.initiator_cpu_s).max(0.0);
        r.target_cpu_s_est = Some(t);
        r.target_cpu_s_per_million_ios_est = Some(per_million(t, ios));
    }
    if r.target == "ferrobay" {
        r.node_cpu_s_per_million_ios = Some(per_million(node, ios));
    }
    Ok(r)
}

fn empty(raw: Value) -> GuestResult {
    GuestResult {
        initiator: String::new(),
        target: String::new(),
        workload: String::new(),
        round: 0,
        elapsed_s: 0.0,
        ios: 0,
        iops: 0.0,
        mb_per_s: 0.0,
        p50_us: 0.0,
        p99_us: 0.0,
        guest_busy_cpu_s: 0.0,
        node_cpu_s: 0.0,
        initiator_cpu_s: 0.0,
        target_cpu_s_est: None,
        guest_busy_cpu_s_per_million_ios: 0.0,
        target_cpu_s_per_million_ios_est: None,
        node_cpu_s_per_million_ios: None,
        raw,
    }
}

/// A `ferrobay bench --json` report plus busybox `time -f "%e %U %S"` (commas for spaces).
fn from_bench_report(v: &Value, time: &str) -> Result<GuestResult, String> {
    let rep: bench::Report =
        serde_json::from_value(v.clone()).map_err(|e| format!("bench report: {e}"))?;
    let t: Vec<f64> = time
        .split(',')
        .filter_map(|x| x.trim().parse().ok())
        .collect();
    let initiator_cpu_s = match t.as_slice() {
        [_, user, sys] => user + sys,
        _ => return Err(format!("time={time:?}: expected real,user,sys")),
    };
    let lat = if rep.read_ios >= rep.write_ios {
        &rep.read_latency
    } else {
        &rep.write_latency
    };
    let mut r = empty(v.clone());
    r.elapsed_s = rep.elapsed_s;
    r.ios = rep.read_ios + rep.write_ios;
    r.iops = rep.iops;
    r.mb_per_s = rep.mb_per_s;
    r.p50_us = lat.p50_us;
    r.p99_us = lat.p99_us;
    r.initiator_cpu_s = initiator_cpu_s;
    Ok(r)
}

/// fio's `--output-format=json`: the first job's read and write sides.
fn from_fio(v: &Value) -> Result<GuestResult, String> {
    let job = v.pointer("/jobs/0").ok_or("fio JSON without jobs[0]")?;
    let f = |p: &str| job.pointer(p).and_then(Value::as_f64).unwrap_or(0.0);
    let (rios, wios) = (f("/read/total_ios"), f("/write/total_ios"));
    let side = if rios >= wios { "read" } else { "write" };
    let runtime_s = f("/job_runtime") / 1000.0;
    let mut r = empty(job.clone());
    r.elapsed_s = runtime_s;
    r.ios = (rios + wios) as u64;
    r.iops = f("/read/iops") + f("/write/iops");
    r.mb_per_s = (f("/read/bw_bytes") + f("/write/bw_bytes")) / 1e6;
    r.p50_us = f(&format!("/{side}/clat_ns/percentile/50.000000")) / 1000.0;
    r.p99_us = f(&format!("/{side}/clat_ns/percentile/99.000000")) / 1000.0;
    // usr_cpu and sys_cpu are percentages of the job's runtime.
    r.initiator_cpu_s = (f("/usr_cpu") + f("/sys_cpu")) / 100.0 * runtime_s;
    Ok(r)
}

fn compare(results: &[GuestResult], settings: &Settings) -> Vec<Comparison> {
    let div = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let mut out = Vec::new();
    for initiator in ["nvmf-host", "linux-nvme-tcp+fio"] {
        for w in &settings.workloads {
            let side = |t: &str| {
                let runs: Vec<&GuestResult> = results
                    .iter()
                    .filter(|r| r.initiator == initiator && r.target == t && r.workload == w.name)
                    .collect();
                mean_side(&runs)
            };
            let (Some(f), Some(k)) = (side("ferrobay"), side("kernel")) else {
                continue;
            };
            out.push(Comparison {
                initiator: initiator.to_string(),
                workload: w.name.to_string(),
                ratio_iops: div(f.iops, k.iops),
                ratio_mb_per_s: div(f.mb_per_s, k.mb_per_s),
                ratio_p99_latency: div(f.p99_us, k.p99_us),
                ratio_guest_busy_cpu_per_io: div(
                    f.guest_busy_cpu_s_per_million_ios,
                    k.guest_busy_cpu_s_per_million_ios,
                ),
                ratio_target_cpu_per_io_est: match (
                    f.target_cpu_s_per_million_ios_est,
                    k.target_cpu_s_per_million_ios_est,
                ) {
                    (Some(a), Some(b)) => Some(div(a, b)),
                    _ => None,
                },
                ferrobay: f,
                kernel: k,
            });
        }
    }
    out
}

fn mean_side(runs: &[&GuestResult]) -> Option<Side> {
    if runs.is_empty() {
        return None;
    }
    let n = runs.len() as f64;
    let mean = |f: &dyn Fn(&GuestResult) -> f64| runs.iter().map(|r| f(r)).sum::<f64>() / n;
    let mean_opt = |f: &dyn Fn(&GuestResult) -> Option<f64>| {
        let v: Option<Vec<f64>> = runs.iter().map(|r| f(r)).collect();
        v.map(|v| v.iter().sum::<f64>() / n)
    };
    Some(Side {
        runs: runs.len(),
        iops: mean(&|r| r.iops),
        iops_min: runs.iter().map(|r| r.iops).fold(f64::INFINITY, f64::min),
        iops_max: runs.iter().map(|r| r.iops).fold(0.0, f64::max),
        mb_per_s: mean(&|r| r.mb_per_s),
        p50_us: mean(&|r| r.p50_us),
        p99_us: mean(&|r| r.p99_us),
        guest_busy_cpu_s_per_million_ios: mean(&|r| r.guest_busy_cpu_s_per_million_ios),
        target_cpu_s_per_million_ios_est: mean_opt(&|r| r.target_cpu_s_per_million_ios_est),
        node_cpu_s_per_million_ios: mean_opt(&|r| r.node_cpu_s_per_million_ios),
    })
}

fn cut(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
