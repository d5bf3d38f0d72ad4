//! Cluster benchmark (issue 5, "Measure"): a real cluster of processes on 127.0.0.1
//! (etcd, three `ferrobay node run --meta` storage nodes on RAM drives, two
//! `ferrobay processor run` processor nodes), driven from this process with `bench::run`
//! over nvmf-host.
//!
//! ```text
//! cargo bench -p ferrobay --bench cluster
//! ```
//!
//! Sections, all in one run (the compared cases alternate, each repeated; medians):
//! 1. RAID-5 volume through processor p1 vs one of its member namespaces read directly from
//!    its storage node: 4 KiB random read at QD 32 and 128 KiB sequential read at QD 8,
//!    with latency and CPU seconds per million I/Os of the processor node and of the
//!    storage nodes (`/proc/PID/stat` utime + stime before and after).
//! 2. Scaling: two RAID-5 volumes loaded at once (4 KiB random read, QD 32 each); case A:
//!    p1 owns both, case B: p1 one and p2 the other (`ferrobay volume move`). On a machine
//!    with few cores all processes compete for the same CPUs, so B/A says little about
//!    scaling across machines.
//! 3. Failover: a multipath host (both processor nodes' addresses) writes 4 KiB random
//!    blocks at QD 8 with bench's verify stamps; the owner gets `kill -9` after ~2 s. The
//!    host-visible I/O gap (longest time without a completed I/O), errors, a verify pass
//!    afterwards (bench's stamps, plus an exact check of the last acknowledged write of
//!    every block), the new owner's takeover report, and the time a hyper-converged
//!    cluster would need to resync the same member capacity: member bytes / (20 % of the
//!    member's measured 128 KiB sequential write bandwidth).
//!
//! Output: a summary table on stdout, progress on stderr, JSON in
//! `target/bench/cluster.json` (`FERROBAY_BENCH_CLUSTER_OUT` overrides).
//! Environment: `FERROBAY_BENCH_SECS` (seconds per measured run, default 5),
//! `FERROBAY_BENCH_ROUNDS` (runs per case, default 3), `FERROBAY_BENCH_LEASE_TTL_MS`
//! (processor lease TTL, default 2000), `FERROBAY_BENCH_FAILOVERS` (kill rounds, default
//! 4: odd rounds write a 64 MiB hot range, even rounds the whole volume; each round first
//! waits for the owner's write-intent bitmap to come clean),
//! `FERROBAY_BIN` (binary to measure). Without `--bench` (`cargo test --benches`) it runs
//! a short smoke pass and writes no file.

#[allow(dead_code)] // the tests use more of it
#[path = "../tests/common/cluster.rs"]
mod cluster;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bench::{BenchConfig, CpuTime, Pattern, Progress, Report, StampCheck, VerifyReport};
use blockdev::{BlockDevice, DeviceInfo, DeviceStats, IoBuf, IoFuture, WriteFlags};
use cluster::{Daemon, node_run_args, processor_run_args};
use control::provision::VolumeView;
use control::records::{TakeoverReport, VolumeRecord};
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl};
use serde::Serialize;
use testkit::stats::median;

/// Version of the JSON layout below.
const SCHEMA: &str = "ferrobay.bench.cluster/1";
const VOL_A: &str = "bench-a";
const VOL_B: &str = "bench-b";
const STORAGE_NODES: [&str; 3] = ["n1", "n2", "n3"];
const PROCESSORS: [&str; 2] = ["p1", "p2"];
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const OWNER_TIMEOUT: Duration = Duration::from_secs(60);
const HOST_UUID: [u8; 16] = [
    0x7a, 0x51, 0x0c, 0x3e, 0x91, 0x12, 0x4b, 0x6d, 0x8e, 0x20, 0x44, 0x19, 0xc3, 0x5a, 0x01, 0x77,
];
/// The hot range of the first failover round: a host's working set, a region or two of
/// the write-intent bitmap.
const HOT_RANGE_BYTES: u64 = 64 << 20;
/// Completion timestamps kept per failover run (bounded; ~10 minutes at 10k IOPS).
const MAX_COMPLETIONS: usize = 8 << 20;
/// How long a failover round waits for the owner's bitmap to come clean first.
const CLEAN_BITMAP_TIMEOUT: Duration = Duration::from_secs(30);
/// The share of write bandwidth a hyper-converged cluster gives a background resync.
const HC_RESYNC_SHARE: f64 = 0.2;
const TIB: f64 = (1u64 << 40) as f64;

// ---------------------------------------------------------------------------------------
// Settings

#[derive(Debug, Clone, Serialize)]
struct Settings {
    full: bool,
    runtime_s: f64,
    rounds: u32,
    lease_ttl_ms: u64,
    failovers: u32,
    volume_size_bytes: u64,
    drive: String,
    stripe_unit_bytes: u64,
    kill_after_ms: u64,
    /// I/O queues per controller of the initiator (nvmf-host's default).
    io_queues: u16,
}

impl Settings {
    fn from_env(full: bool) -> Settings {
        Settings {
            full,
            runtime_s: env_f64("FERROBAY_BENCH_SECS")
                .unwrap_or(if full { 5.0 } else { 0.5 })
                .clamp(0.2, 120.0),
            rounds: env_f64("FERROBAY_BENCH_ROUNDS")
                .map_or(if full { 3 } else { 1 }, |v| v as u32)
                .clamp(1, 10),
            lease_ttl_ms: env_f64("FERROBAY_BENCH_LEASE_TTL_MS")
                .map_or(2000, |v| v as u64)
                .clamp(1000, 60_000),
            failovers: env_f64("FERROBAY_BENCH_FAILOVERS")
                .map_or(if full { 4 } else { 1 }, |v| v as u32)
                .clamp(1, 6),
            volume_size_bytes: if full { 512 << 20 } else { 128 << 20 },
            drive: if full { "d0=ram:1G" } else { "d0=ram:512M" }.into(),
            stripe_unit_bytes: 64 << 10,
            kill_after_ms: 2000,
            io_queues: ConnectOptions::default().io_queues,
        }
    }

    fn runtime_ms(&self) -> u64 {
        (self.runtime_s * 1000.0) as u64
    }
}

fn env_f64(name: &str) -> Option<f64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Some(x),
        _ => {
            eprintln!("cluster bench: ignoring {name}={v:?} (not a positive number)");
            None
        }
    }
}

// ---------------------------------------------------------------------------------------
// Processes

/// A ferrobay daemon (stderr in `log`), killed on drop and when this process dies.
fn spawn_daemon(binary: &Path, name: &str, dir: &Path, args: &[String]) -> anyhow::Result<Daemon> {
    // Processor nodes log takeovers and handoffs at info; storage nodes only problems.
    let level = if name.starts_with('p') {
        "info"
    } else {
        "warn"
    };
    Daemon::spawn(
        binary,
        name,
        dir,
        args,
        level,
        testkit::process::die_with_parent,
    )
    .with_context(|| format!("start {} ({}) in {}", name, binary.display(), dir.display()))
}

/// What the bench asks of its daemons beyond `testkit::process::Daemon`.
trait BenchDaemon {
    fn wait_ready(&mut self, path: &Path) -> anyhow::Result<serde_json::Value>;
    fn cpu_s(&self) -> f64;
    fn stop(&mut self);
}

impl BenchDaemon for Daemon {
    /// Waits for the JSON file the daemon writes once it serves.
    fn wait_ready(&mut self, path: &Path) -> anyhow::Result<serde_json::Value> {
        self.wait_json(path, READY_TIMEOUT)
            .map_err(|e| anyhow::anyhow!("{e}\n{}", self.log_tail(20)))
    }

    fn cpu_s(&self) -> f64 {
        CpuTime::of_pid(self.pid()).map_or(0.0, |c| c.total().as_secs_f64())
    }

    /// SIGTERM, then SIGKILL after 10 s.
    fn stop(&mut self) {
        if self.terminate(Duration::from_secs(10)).is_none() {
            eprintln!("cluster bench: {} ignored SIGTERM, killing it", self.name);
            self.kill9();
        }
    }
}

struct StorageNode {
    d: Daemon,
    nvme: String,
    http: String,
}

struct ProcessorNode {
    d: Daemon,
    nvme: String,
}

/// etcd, three storage nodes, two processor nodes.
struct Cluster {
    binary: PathBuf,
    dir: tempfile::TempDir,
    meta_url: String,
    lease_ttl_ms: u64,
    nodes: Vec<StorageNode>,
    procs: Vec<ProcessorNode>,
    // Last: dropped after the daemons that use it.
    _etcd: meta::testing::EtcdServer,
}

impl Cluster {
    /// Starts everything; call from the main thread (see `die_with_parent`).
    async fn start(binary: &Path, s: &Settings) -> anyhow::Result<Cluster> {
        if !binary.is_file() {
            bail!(
                "the ferrobay binary {} does not exist: build it (cargo bench builds it) or set FERROBAY_BIN",
                binary.display()
            );
        }
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(&base)?;
        let dir = tempfile::Builder::new()
            .prefix("bench-cluster")
            .tempdir_in(base)?;
        let etcd = meta::testing::EtcdServer::start()
            .await
            .map_err(|e| anyhow::anyhow!("etcd: {e}"))?;
        let meta_url = etcd.endpoint().replacen("http://", "etcd://", 1);
        let mut c = Cluster {
            binary: binary.to_path_buf(),
            dir,
            meta_url,
            lease_ttl_ms: s.lease_ttl_ms,
            nodes: Vec::new(),
            procs: Vec::new(),
            _etcd: etcd,
        };
        for name in STORAGE_NODES {
            let d = c.dir.path().join(name);
            let args = node_run_args(name, &c.meta_url, None, &s.drive, &d);
            let mut daemon = spawn_daemon(&c.binary, name, &d, &args)?;
            let e = daemon.wait_ready(&d.join("endpoints.json"))?;
            let nvme = e["nvme_tcp"][0]
                .as_str()
                .context("node endpoints: no nvme_tcp")?
                .to_string();
            let http = e["http"]
                .as_str()
                .context("node endpoints: no http")?
                .to_string();
            c.nodes.push(StorageNode {
                d: daemon,
                nvme,
                http,
            });
        }
        // With --meta a new drive has no namespace; one that has (a data dir from another
        // run, --default-namespace) would leave provisioning no room: delete it.
        for n in &c.nodes {
            let nss = c.cli_json(&["node", "ns", "list", "--api", &n.http, "--json"])?;
            for ns in nss.as_array().into_iter().flatten() {
                let nqn = ns["subsystem_nqn"].as_str().unwrap_or_default().to_string();
                let nsid = ns["nsid"].as_u64().unwrap_or(0).to_string();
                eprintln!(
                    "cluster bench: deleting namespace {nqn}/{nsid} on {}",
                    n.d.name
                );
                c.cli(&["node", "ns", "delete", "--api", &n.http, &nqn, &nsid])?;
            }
        }
        for name in PROCESSORS {
            let p = c.start_processor(name)?;
            c.procs.push(p);
        }
        Ok(c)
    }

    /// Starts (or restarts, on a new port) processor node `name`.
    fn start_processor(&self, name: &str) -> anyhow::Result<ProcessorNode> {
        let d = self.dir.path().join(name);
        let ep = d.join("endpoints.json");
        let _ = std::fs::remove_file(&ep);
        let ttl = self.lease_ttl_ms.to_string();
        let args = processor_run_args(name, &self.meta_url, &ttl, &ep);
        let mut daemon = spawn_daemon(&self.binary, name, &d, &args)?;
        let e = daemon.wait_ready(&ep)?;
        let nvme = e["nvme"][0]
            .as_str()
            .context("processor endpoints: no nvme")?
            .to_string();
        Ok(ProcessorNode { d: daemon, nvme })
    }

    fn proc_index(name: &str) -> usize {
        PROCESSORS.iter().position(|p| *p == name).unwrap_or(0)
    }

    /// Runs a ferrobay command, returns its stdout.
    fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(&self.binary)
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("run ferrobay {args:?}"))?;
        if !out.status.success() {
            bail!(
                "ferrobay {} failed ({}): {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn cli_json(&self, args: &[&str]) -> anyhow::Result<serde_json::Value> {
        let out = self.cli(args)?;
        serde_json::from_str(&out).with_context(|| format!("ferrobay {args:?}: not JSON: {out}"))
    }

    fn create_volume(&self, name: &str, s: &Settings) -> anyhow::Result<VolumeRecord> {
        let out = self.cli(&[
            "volume",
            "create",
            name,
            "--level",
            "raid5",
            "--size",
            &format!("{}M", s.volume_size_bytes >> 20),
            "--stripe-unit",
            &format!("{}k", s.stripe_unit_bytes >> 10),
            "--storage-nodes",
            &STORAGE_NODES.join(","),
            "--preferred-owner",
            PROCESSORS[0],
            "--json",
            "--meta",
            &self.meta_url,
        ])?;
        serde_json::from_str(&out).with_context(|| format!("volume create: not a record: {out}"))
    }

    fn view(&self, volume: &str) -> anyhow::Result<VolumeView> {
        let out = self.cli(&[
            "volume",
            "status",
            volume,
            "--json",
            "--meta",
            &self.meta_url,
        ])?;
        serde_json::from_str(&out).with_context(|| format!("volume status: not a view: {out}"))
    }

    /// Waits until `want` owns `volume` with an epoch above `after_epoch` and has
    /// published its status.
    fn wait_owner(&self, volume: &str, want: &str, after_epoch: u64) -> anyhow::Result<VolumeView> {
        let deadline = Instant::now() + OWNER_TIMEOUT;
        loop {
            let v = self.view(volume)?;
            let owned = v
                .owner
                .as_ref()
                .is_some_and(|o| o.node == want && o.epoch > after_epoch);
            let published = v.status.as_ref().is_some_and(|s| s.owner == want);
            if owned && published {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!(
                    "{want} does not own {volume} (epoch > {after_epoch}): owner {:?}\n{}",
                    v.owner,
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn move_volume(&self, volume: &str, to: &str) -> anyhow::Result<()> {
        self.cli(&[
            "volume",
            "move",
            volume,
            "--to",
            to,
            "--wait",
            "--meta",
            &self.meta_url,
        ])?;
        Ok(())
    }

    fn volume_url(&self, volume: &str, via: &[usize]) -> String {
        let addrs: Vec<&str> = via.iter().map(|&i| self.procs[i].nvme.as_str()).collect();
        format!(
            "nvme+tcp://{}/{}/1",
            addrs.join(","),
            control::records::volume_nqn(volume)
        )
    }

    fn cpu(&self) -> CpuSnap {
        CpuSnap {
            procs: self.procs.iter().map(|p| p.d.cpu_s()).collect(),
            nodes: self.nodes.iter().map(|n| n.d.cpu_s()).collect(),
            machine_busy_s: machine_busy_s(),
        }
    }

    fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| &n.d)
            .chain(self.procs.iter().map(|p| &p.d))
            .map(|d| d.log_tail(20))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn stop(mut self) {
        for p in &mut self.procs {
            p.d.stop();
        }
        for n in &mut self.nodes {
            n.d.stop();
        }
    }
}

/// CPU seconds of the cluster's processes (and the whole machine's busy time).
#[derive(Debug, Clone)]
struct CpuSnap {
    procs: Vec<f64>,
    nodes: Vec<f64>,
    machine_busy_s: f64,
}

impl CpuSnap {
    fn since(&self, before: &CpuSnap) -> CpuSnap {
        let d = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| (x - y).max(0.0)).collect();
        CpuSnap {
            procs: d(&self.procs, &before.procs),
            nodes: d(&self.nodes, &before.nodes),
            machine_busy_s: (self.machine_busy_s - before.machine_busy_s).max(0.0),
        }
    }
    fn nodes_total(&self) -> f64 {
        self.nodes.iter().sum()
    }
    fn proc(&self, i: usize) -> f64 {
        self.procs.get(i).copied().unwrap_or(0.0)
    }
}

/// Busy CPU seconds of the whole machine (user, nice, system, irq, softirq, steal).
fn machine_busy_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let busy: u64 = [0usize, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| f.get(i))
        .sum();
    busy as f64 / clock_ticks_per_second()
}

#[allow(unsafe_code)]
fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a configuration value; it has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

// ---------------------------------------------------------------------------------------
// Devices and load

async fn open(url: &str) -> anyhow::Result<Arc<dyn BlockDevice>> {
    let host = HostIdentity::from_uuid(HOST_UUID);
    NvmeTcpUrl::parse(url)
        .with_context(|| format!("URL {url}"))?
        .open_device(&host, &ConnectOptions::default())
        .await
        .with_context(|| format!("connect {url}"))
}

fn config(pattern: Pattern, bs: u64, qd: u32, runtime_ms: u64) -> BenchConfig {
    BenchConfig {
        pattern,
        block_size_bytes: bs,
        iodepth: qd,
        jobs: 1,
        runtime_ms,
        ..BenchConfig::default()
    }
}

/// One measured run: the initiator's view plus the cluster's CPU.
#[derive(Debug, Clone, Default, Serialize)]
struct RunResult {
    iops: f64,
    mb_per_s: f64,
    lat_p50_us: f64,
    lat_p99_us: f64,
    ios: u64,
    errors: u64,
    elapsed_s: f64,
    /// The owning processor node (p1) in section 1.
    processor_cpu_s: f64,
    /// All three storage nodes.
    storage_cpu_s: f64,
    processor_cpu_s_per_million_ios: f64,
    storage_cpu_s_per_million_ios: f64,
    /// Processor + storage nodes.
    cluster_cpu_s_per_million_ios: f64,
    /// This process (the initiator).
    initiator_cpu_s_per_million_ios: f64,
    /// Busy CPU of the whole machine during the run (others' work shows here).
    machine_busy_cpu_s: f64,
}

fn per_million(cpu_s: f64, ios: u64) -> f64 {
    if ios > 0 {
        cpu_s / ios as f64 * 1e6
    } else {
        0.0
    }
}

impl RunResult {
    fn new(r: &Report, cpu: &CpuSnap, processor: Option<usize>) -> RunResult {
        let ios = r.read_ios + r.write_ios;
        let lat = if r.read_ios >= r.write_ios {
            &r.read_latency
        } else {
            &r.write_latency
        };
        let processor_cpu_s = processor.map_or(0.0, |i| cpu.proc(i));
        let storage_cpu_s = cpu.nodes_total();
        RunResult {
            iops: r.iops,
            mb_per_s: r.mb_per_s,
            lat_p50_us: lat.p50_us,
            lat_p99_us: lat.p99_us,
            ios,
            errors: r.errors,
            elapsed_s: r.elapsed_s,
            processor_cpu_s,
            storage_cpu_s,
            processor_cpu_s_per_million_ios: per_million(processor_cpu_s, ios),
            storage_cpu_s_per_million_ios: per_million(storage_cpu_s, ios),
            cluster_cpu_s_per_million_ios: per_million(processor_cpu_s + storage_cpu_s, ios),
            initiator_cpu_s_per_million_ios: r.cpu_s_per_million_ios,
            machine_busy_cpu_s: cpu.machine_busy_s,
        }
    }
}

/// Field-wise medians (errors and I/Os: sums).
fn median_run(runs: &[RunResult]) -> RunResult {
    let m = |f: fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
    RunResult {
        iops: m(|r| r.iops),
        mb_per_s: m(|r| r.mb_per_s),
        lat_p50_us: m(|r| r.lat_p50_us),
        lat_p99_us: m(|r| r.lat_p99_us),
        ios: runs.iter().map(|r| r.ios).sum(),
        errors: runs.iter().map(|r| r.errors).sum(),
        elapsed_s: m(|r| r.elapsed_s),
        processor_cpu_s: m(|r| r.processor_cpu_s),
        storage_cpu_s: m(|r| r.storage_cpu_s),
        processor_cpu_s_per_million_ios: m(|r| r.processor_cpu_s_per_million_ios),
        storage_cpu_s_per_million_ios: m(|r| r.storage_cpu_s_per_million_ios),
        cluster_cpu_s_per_million_ios: m(|r| r.cluster_cpu_s_per_million_ios),
        initiator_cpu_s_per_million_ios: m(|r| r.initiator_cpu_s_per_million_ios),
        machine_busy_cpu_s: m(|r| r.machine_busy_cpu_s),
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// One `bench::run` with the cluster's CPU around it.
async fn measured(
    cluster: &Cluster,
    dev: &Arc<dyn BlockDevice>,
    cfg: &BenchConfig,
    name: &str,
    processor: Option<usize>,
) -> anyhow::Result<RunResult> {
    let before = cluster.cpu();
    let r = bench::run(dev.clone(), cfg, name, &Progress::Silent).await?;
    let cpu = cluster.cpu().since(&before);
    if r.errors > 0 {
        bail!(
            "{name} {}: {} I/O errors, first: {}",
            r.pattern,
            r.errors,
            r.first_error.as_deref().unwrap_or("?")
        );
    }
    Ok(RunResult::new(&r, &cpu, processor))
}

/// Writes the whole device once (so that no read is served from never-written memory).
async fn precondition(dev: &Arc<dyn BlockDevice>, name: &str) -> anyhow::Result<f64> {
    let r = bench::run(
        dev.clone(),
        &config(Pattern::Write, 128 << 10, 8, 0),
        name,
        &Progress::Silent,
    )
    .await?;
    if r.errors > 0 {
        bail!(
            "precondition {name}: {} errors, first: {}",
            r.errors,
            r.first_error.as_deref().unwrap_or("?")
        );
    }
    Ok(r.mb_per_s)
}

// ---------------------------------------------------------------------------------------
// Section 1: RAID-5 volume vs one member namespace

#[derive(Debug, Clone, Copy, Serialize)]
struct Workload {
    name: &'static str,
    rw: &'static str,
    block_size_bytes: u64,
    iodepth: u32,
}

const READS: [Workload; 2] = [
    Workload {
        name: "randread_4k_qd32",
        rw: "randread",
        block_size_bytes: 4096,
        iodepth: 32,
    },
    Workload {
        name: "seqread_128k_qd8",
        rw: "read",
        block_size_bytes: 128 << 10,
        iodepth: 8,
    },
];

impl Workload {
    fn config(&self, runtime_ms: u64) -> BenchConfig {
        let p = if self.rw == "randread" {
            Pattern::RandRead
        } else {
            Pattern::Read
        };
        config(p, self.block_size_bytes, self.iodepth, runtime_ms)
    }
}

#[derive(Debug, Serialize)]
struct Compare {
    workload: Workload,
    volume_runs: Vec<RunResult>,
    member_runs: Vec<RunResult>,
    volume_median: RunResult,
    member_median: RunResult,
    /// volume / member of the medians.
    ratio_iops: f64,
    ratio_mb_per_s: f64,
    ratio_lat_p50: f64,
    ratio_lat_p99: f64,
    /// Processor + storage CPU per I/O, volume / member.
    ratio_cluster_cpu_per_io: f64,
}

#[derive(Debug, Default, Serialize)]
struct VolumeVsMember {
    volume: String,
    volume_url: String,
    volume_size_bytes: u64,
    member_url: String,
    member_size_bytes: u64,
    precondition_mb_per_s: f64,
    results: Vec<Compare>,
    error: Option<String>,
}

async fn section_volume_vs_member(
    c: &Cluster,
    s: &Settings,
    rec: &VolumeRecord,
    out: &mut VolumeVsMember,
) -> anyhow::Result<()> {
    out.volume = rec.name.clone();
    out.volume_url = c.volume_url(&rec.name, &[0]);
    out.volume_size_bytes = rec.size_bytes;
    let member = rec.members.first().context("volume without members")?;
    out.member_url = member.url.clone();
    let vol = open(&out.volume_url).await?;
    let mem = open(&out.member_url).await?;
    out.member_size_bytes = mem.info().size_bytes;
    eprintln!(
        "cluster bench: 1. precondition {} (write it once)",
        rec.name
    );
    out.precondition_mb_per_s = precondition(&vol, &rec.name).await?;
    for w in READS {
        let mut volume_runs = Vec::new();
        let mut member_runs = Vec::new();
        for round in 0..s.rounds {
            // Alternate which case goes first.
            let order = if round % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for is_volume in order {
                let (dev, name, proc_idx) = if is_volume {
                    (&vol, "volume", Some(0))
                } else {
                    (&mem, "member", Some(0))
                };
                let r = measured(c, dev, &w.config(s.runtime_ms()), name, proc_idx).await?;
                eprintln!(
                    "  {} {name} round {}: {:.0} IOPS {:.1} MB/s p50 {:.0} us p99 {:.0} us, CPU s/M I/Os processor {:.2} storage {:.2}",
                    w.name,
                    round + 1,
                    r.iops,
                    r.mb_per_s,
                    r.lat_p50_us,
                    r.lat_p99_us,
                    r.processor_cpu_s_per_million_ios,
                    r.storage_cpu_s_per_million_ios
                );
                if is_volume {
                    volume_runs.push(r);
                } else {
                    member_runs.push(r);
                }
            }
        }
        let vm = median_run(&volume_runs);
        let mm = median_run(&member_runs);
        out.results.push(Compare {
            workload: w,
            ratio_iops: ratio(vm.iops, mm.iops),
            ratio_mb_per_s: ratio(vm.mb_per_s, mm.mb_per_s),
            ratio_lat_p50: ratio(vm.lat_p50_us, mm.lat_p50_us),
            ratio_lat_p99: ratio(vm.lat_p99_us, mm.lat_p99_us),
            ratio_cluster_cpu_per_io: ratio(
                vm.cluster_cpu_s_per_million_ios,
                mm.cluster_cpu_s_per_million_ios,
            ),
            volume_median: vm,
            member_median: mm,
            volume_runs,
            member_runs,
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Section 2: one vs two processor nodes

#[derive(Debug, Clone, Serialize)]
struct ScalingRun {
    case: &'static str,
    owner_a: String,
    owner_b: String,
    iops_a: f64,
    iops_b: f64,
    aggregate_iops: f64,
    p1_cpu_s: f64,
    p2_cpu_s: f64,
    storage_cpu_s: f64,
    /// p1 + p2 + storage nodes per million I/Os of both volumes.
    cluster_cpu_s_per_million_ios: f64,
    machine_busy_cpu_s: f64,
}

#[derive(Debug, Default, Serialize)]
struct Scaling {
    workload: String,
    volumes: Vec<String>,
    runs: Vec<ScalingRun>,
    median_aggregate_iops_a: f64,
    median_aggregate_iops_b: f64,
    ratio_b_over_a: f64,
    note: String,
    error: Option<String>,
}

async fn section_scaling(
    c: &Cluster,
    s: &Settings,
    out: &mut Scaling,
    vol_b_dev: &Arc<dyn BlockDevice>,
) -> anyhow::Result<()> {
    out.workload = "randread_4k_qd32 on each volume, both at once".into();
    out.volumes = vec![VOL_A.into(), VOL_B.into()];
    out.note = format!(
        "{} CPUs: the storage nodes, both processor nodes and this initiator share them, so \
         case B cannot show the scaling separate machines would; it shows whether spreading \
         volumes over processor nodes costs or gains anything on the same CPUs",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let both = [0, 1];
    let a = open(&c.volume_url(VOL_A, &both)).await?;
    let b = vol_b_dev.clone();
    let cfg = config(Pattern::RandRead, 4096, 32, s.runtime_ms());
    for round in 0..s.rounds {
        let order = if round % 2 == 0 {
            ["A", "B"]
        } else {
            ["B", "A"]
        };
        for case in order {
            let owner_b = if case == "A" { "p1" } else { "p2" };
            if c.view(VOL_B)?.owner.is_none_or(|o| o.node != owner_b) {
                c.move_volume(VOL_B, owner_b)?;
                // Let the host see the ANA change before measuring.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let before = c.cpu();
            let (ra, rb) = tokio::join!(
                bench::run(a.clone(), &cfg, VOL_A, &Progress::Silent),
                bench::run(b.clone(), &cfg, VOL_B, &Progress::Silent)
            );
            let cpu = c.cpu().since(&before);
            let (ra, rb) = (ra?, rb?);
            for r in [&ra, &rb] {
                if r.errors > 0 {
                    bail!(
                        "{}: {} errors, first: {}",
                        r.target,
                        r.errors,
                        r.first_error.as_deref().unwrap_or("?")
                    );
                }
            }
            let ios = ra.read_ios + rb.read_ios;
            let cluster_cpu = cpu.proc(0) + cpu.proc(1) + cpu.nodes_total();
            let run = ScalingRun {
                case,
                owner_a: "p1".into(),
                owner_b: owner_b.into(),
                iops_a: ra.iops,
                iops_b: rb.iops,
                aggregate_iops: ra.iops + rb.iops,
                p1_cpu_s: cpu.proc(0),
                p2_cpu_s: cpu.proc(1),
                storage_cpu_s: cpu.nodes_total(),
                cluster_cpu_s_per_million_ios: per_million(cluster_cpu, ios),
                machine_busy_cpu_s: cpu.machine_busy_s,
            };
            eprintln!(
                "  case {case} round {}: {:.0} + {:.0} = {:.0} IOPS (CPU s: p1 {:.1} p2 {:.1} storage {:.1})",
                round + 1,
                run.iops_a,
                run.iops_b,
                run.aggregate_iops,
                run.p1_cpu_s,
                run.p2_cpu_s,
                run.storage_cpu_s
            );
            out.runs.push(run);
        }
    }
    let agg = |case: &str| {
        median(
            out.runs
                .iter()
                .filter(|r| r.case == case)
                .map(|r| r.aggregate_iops)
                .collect(),
        )
    };
    out.median_aggregate_iops_a = agg("A");
    out.median_aggregate_iops_b = agg("B");
    out.ratio_b_over_a = ratio(out.median_aggregate_iops_b, out.median_aggregate_iops_a);
    // Back to one owner for what follows.
    c.move_volume(VOL_B, "p1")?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Section 3: failover

/// A device that notes when each I/O completes and the write id of the last acknowledged
/// write of every block (from bench's stamps), for the I/O gap and an exact lost-write
/// check after a failover.
struct Watched {
    inner: Arc<dyn BlockDevice>,
    state: Mutex<WatchState>,
}

#[derive(Default)]
struct WatchState {
    completions: Vec<Instant>,
    acked: HashMap<u64, u32>,
}

impl Watched {
    fn new(inner: Arc<dyn BlockDevice>) -> Watched {
        Watched {
            inner,
            state: Mutex::new(WatchState::default()),
        }
    }

    fn note(&self, ack: Option<(u64, u32)>) {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.completions.len() < MAX_COMPLETIONS {
            st.completions.push(now);
        }
        if let Some((off, id)) = ack {
            st.acked.insert(off, id);
        }
    }

    fn take(&self) -> WatchState {
        std::mem::take(&mut *self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl BlockDevice for Watched {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            let r = self.inner.read(offset_bytes, buf).await;
            self.note(None);
            r
        })
    }
    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            let r = self.inner.write(offset_bytes, buf, flags).await;
            let ack = r.as_ref().ok().and_then(|b| match b.get(..512) {
                Some(sector) => match bench::check_sector(sector, offset_bytes) {
                    StampCheck::Ok { write_id, .. } => Some((offset_bytes, write_id)),
                    _ => None,
                },
                None => None,
            });
            self.note(ack);
            r
        })
    }
    fn flush(&self) -> IoFuture<'_, ()> {
        self.inner.flush()
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.inner.write_zeroes(offset_bytes, len_bytes)
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.inner.discard(offset_bytes, len_bytes)
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}

/// The exact check: each block's last acknowledged write must be what it holds.
#[derive(Debug, Clone, Default, Serialize)]
struct ExactCheck {
    blocks_checked: u64,
    /// Holding an older write (or none) than the last acknowledged.
    lost: u64,
    misdirected: u64,
    corrupt: u64,
    read_errors: u64,
}

impl ExactCheck {
    fn mismatches(&self) -> u64 {
        self.lost + self.misdirected + self.corrupt + self.read_errors
    }
}

async fn exact_check(dev: &Arc<dyn BlockDevice>, acked: HashMap<u64, u32>) -> ExactCheck {
    const WINDOW: usize = 32;
    let mut out = ExactCheck::default();
    let mut set = tokio::task::JoinSet::new();
    let mut todo = acked.into_iter();
    loop {
        while set.len() < WINDOW {
            let Some((off, id)) = todo.next() else { break };
            let dev = dev.clone();
            set.spawn(async move {
                let r = dev.read(off, IoBuf::new_zeroed(4096)).await;
                (off, id, r)
            });
        }
        let Some(done) = set.join_next().await else {
            break;
        };
        out.blocks_checked += 1;
        let Ok((off, id, r)) = done else {
            out.read_errors += 1;
            continue;
        };
        let Ok(buf) = r else {
            out.read_errors += 1;
            continue;
        };
        let mut bad: Option<&'static str> = None;
        for (i, sector) in buf.chunks_exact(512).enumerate() {
            match bench::check_sector(sector, off + 512 * i as u64) {
                StampCheck::Ok { write_id, .. } if write_id == id => {}
                StampCheck::Ok { .. } | StampCheck::Unwritten => bad = bad.or(Some("lost")),
                StampCheck::Misdirected { .. } => bad = Some("misdirected"),
                StampCheck::Corrupt => bad = Some("corrupt"),
            }
        }
        match bad {
            Some("lost") => out.lost += 1,
            Some("misdirected") => out.misdirected += 1,
            Some(_) => out.corrupt += 1,
            None => {}
        }
    }
    out
}

/// Where the host saw no completion for longest, relative to the kill.
#[derive(Debug, Clone, Default, Serialize)]
struct Gap {
    /// Longest interval without a completed I/O.
    io_gap_ms: f64,
    /// When it started and ended, ms after the kill (negative: before it).
    io_gap_start_ms_after_kill: f64,
    io_gap_end_ms_after_kill: f64,
    completions: u64,
    completions_after_kill: u64,
    /// The longest interval without a completion away from the kill (before it): the
    /// background noise of this machine.
    longest_gap_before_kill_ms: f64,
}

fn gaps(mut t: Vec<Instant>, kill: Instant) -> Gap {
    t.sort();
    let ms_after = |i: Instant| {
        if i >= kill {
            i.duration_since(kill).as_secs_f64() * 1e3
        } else {
            -(kill.duration_since(i).as_secs_f64() * 1e3)
        }
    };
    let mut g = Gap {
        completions: t.len() as u64,
        completions_after_kill: t.iter().filter(|&&i| i >= kill).count() as u64,
        ..Gap::default()
    };
    for w in t.windows(2) {
        let d = w[1].duration_since(w[0]).as_secs_f64() * 1e3;
        if d > g.io_gap_ms {
            g.io_gap_ms = d;
            g.io_gap_start_ms_after_kill = ms_after(w[0]);
            g.io_gap_end_ms_after_kill = ms_after(w[1]);
        }
        if w[1] < kill && d > g.longest_gap_before_kill_ms {
            g.longest_gap_before_kill_ms = d;
        }
    }
    g
}

#[derive(Debug, Default, Serialize)]
struct SeqWrite {
    url: String,
    capacity_bytes: u64,
    runs: Vec<RunResult>,
    median_mb_per_s: f64,
}

#[derive(Debug, Serialize)]
struct FailoverRound {
    round: u32,
    volume: String,
    url: String,
    /// Bytes of the volume the writes went to (from offset 0).
    range_bytes: u64,
    volume_size_bytes: u64,
    killed: String,
    new_owner: String,
    /// Dirty write-intent regions when the round started (after waiting for the sweeper).
    dirty_regions_at_start: u64,
    waited_for_clean_bitmap_ms: u64,
    epoch_before: u64,
    epoch_after: u64,
    lease_ttl_ms: u64,
    kill_after_ms: u64,
    runtime_ms: u64,
    write_ios: u64,
    write_iops: f64,
    errors: u64,
    first_error: Option<String>,
    write_lat_p99_us: f64,
    write_lat_max_us: f64,
    gap: Gap,
    /// bench's verify-only pass over the range (stamps: offset, CRC, torn).
    verify: Option<VerifyReport>,
    /// Every block written: holds its last acknowledged write.
    exact: ExactCheck,
    verify_passed: bool,
    /// As the new owner reports it in its status record.
    takeover: Option<TakeoverReport>,
    resync_member_bytes_written: u64,
    /// Member bytes the resync read, per member: takeover.resync_member_bytes_read /
    /// members_total.
    resync_bytes_per_member: u64,
    /// resync_bytes_per_member / member capacity: the share of a member the takeover
    /// re-checked, against a hyper-converged full resync that rewrites all of it.
    ratio_resync_bytes_to_full_resync: f64,
    /// takeover.resync_ms / the hyper-converged full-resync time.
    ratio_resync_time_to_full_resync_time: f64,
    /// takeover.took_ms (fence, assemble, resync, optimized) / the full-resync time.
    ratio_takeover_time_to_full_resync_time: f64,
}

/// Medians over the failover rounds of one write range.
#[derive(Debug, Default, Serialize)]
struct FailoverMedians {
    range_bytes: u64,
    rounds: usize,
    io_gap_ms: f64,
    io_resumed_ms_after_kill: f64,
    takeover_ms: f64,
    resync_ms: f64,
    resync_regions: f64,
    resync_bytes_per_member: f64,
    ratio_resync_bytes_to_full_resync: f64,
    ratio_resync_time_to_full_resync_time: f64,
    errors: u64,
    all_verified: bool,
}

fn failover_medians(rounds: &[FailoverRound], range_bytes: u64) -> FailoverMedians {
    let rs: Vec<&FailoverRound> = rounds
        .iter()
        .filter(|r| r.range_bytes == range_bytes)
        .collect();
    let m = |f: &dyn Fn(&FailoverRound) -> f64| median(rs.iter().map(|r| f(r)).collect());
    let tk = |r: &FailoverRound, f: fn(&TakeoverReport) -> u64| {
        r.takeover.as_ref().map_or(0.0, |t| f(t) as f64)
    };
    FailoverMedians {
        range_bytes,
        rounds: rs.len(),
        io_gap_ms: m(&|r| r.gap.io_gap_ms),
        io_resumed_ms_after_kill: m(&|r| r.gap.io_gap_end_ms_after_kill),
        takeover_ms: m(&|r| tk(r, |t| t.took_ms)),
        resync_ms: m(&|r| tk(r, |t| t.resync_ms)),
        resync_regions: m(&|r| tk(r, |t| t.resync_regions)),
        resync_bytes_per_member: m(&|r| r.resync_bytes_per_member as f64),
        ratio_resync_bytes_to_full_resync: m(&|r| r.ratio_resync_bytes_to_full_resync),
        ratio_resync_time_to_full_resync_time: m(&|r| r.ratio_resync_time_to_full_resync_time),
        errors: rs.iter().map(|r| r.errors).sum(),
        all_verified: rs.iter().all(|r| r.verify_passed),
    }
}

#[derive(Debug, Default, Serialize)]
struct Failover {
    lease_ttl_ms: u64,
    /// Member bandwidth a hyper-converged resync would get a share of: 128 KiB
    /// sequential writes at QD 8 to a namespace of member size on n1 (RAM drive).
    member_seq_write: SeqWrite,
    member_capacity_bytes: u64,
    hc_resync_share: f64,
    /// member capacity / (share x member sequential write bandwidth).
    full_resync_s: f64,
    full_resync_s_per_tib: f64,
    rounds: Vec<FailoverRound>,
    /// Medians of the hot-range rounds and of the whole-volume rounds.
    medians: Vec<FailoverMedians>,
    definitions: Vec<&'static str>,
    error: Option<String>,
}

const FAILOVER_DEFINITIONS: [&str; 6] = [
    "gap.io_gap_ms: longest interval between two completed host I/Os during the run",
    "gap.io_gap_end_ms_after_kill: when host I/O resumed (the end of the longest gap), ms after kill -9 of the owner",
    "takeover: the new owner's report in its status record (took_ms: ownership acquired to ANA optimized, resync included)",
    "full_resync_s: member_capacity_bytes / (hc_resync_share x median member 128k sequential write bandwidth)",
    "ratio_resync_bytes_to_full_resync: (takeover.resync_member_bytes_read / members_total) / member_capacity_bytes",
    "rounds alternate the write range: odd rounds a 64 MiB hot range, even rounds the whole volume (random 4 KiB writes over all of it dirty every write-intent region)",
];

async fn section_member_write(c: &Cluster, s: &Settings, out: &mut Failover) -> anyhow::Result<()> {
    let n1 = &c.nodes[0];
    let size_mb = out.member_capacity_bytes.div_ceil(1 << 20).max(1);
    let ns = c.cli_json(&[
        "node",
        "ns",
        "create",
        "--api",
        &n1.http,
        "--drive",
        "d0",
        "--size",
        &format!("{size_mb}M"),
        "--block-size",
        "4096",
        "--json",
    ])?;
    let nqn = ns["subsystem_nqn"]
        .as_str()
        .context("ns create: no subsystem_nqn")?;
    let nsid = ns["nsid"].as_u64().context("ns create: no nsid")?;
    let url = format!("nvme+tcp://{}/{nqn}/{nsid}", n1.nvme);
    let dev = open(&url).await?;
    out.member_seq_write.url = url;
    out.member_seq_write.capacity_bytes = dev.info().size_bytes;
    let cfg = config(Pattern::Write, 128 << 10, 8, s.runtime_ms());
    for round in 0..s.rounds {
        let r = measured(c, &dev, &cfg, "member seqwrite", None).await?;
        eprintln!(
            "  member seqwrite_128k_qd8 round {}: {:.1} MB/s",
            round + 1,
            r.mb_per_s
        );
        out.member_seq_write.runs.push(r);
    }
    out.member_seq_write.median_mb_per_s = median(
        out.member_seq_write
            .runs
            .iter()
            .map(|r| r.mb_per_s)
            .collect(),
    );
    drop(dev);
    c.cli(&[
        "node",
        "ns",
        "delete",
        "--api",
        &n1.http,
        nqn,
        &nsid.to_string(),
    ])?;
    let bw = out.member_seq_write.median_mb_per_s * 1e6 * HC_RESYNC_SHARE;
    if bw > 0.0 {
        out.full_resync_s = out.member_capacity_bytes as f64 / bw;
        out.full_resync_s_per_tib = TIB / bw;
    }
    Ok(())
}

async fn failover_round(
    c: &mut Cluster,
    s: &Settings,
    round: u32,
    rec: &VolumeRecord,
    full_resync_s: f64,
    member_capacity_bytes: u64,
) -> anyhow::Result<FailoverRound> {
    // Start from a clean bitmap (the sweeper clears regions quiet for one or two
    // `bitmap_quiet` periods), so that the resync shows what this round dirtied.
    let wait_t0 = Instant::now();
    let before = loop {
        let v = c.view(&rec.name)?;
        let dirty = v.status.as_ref().map_or(0, |s| s.status.dirty_regions);
        if dirty == 0 || wait_t0.elapsed() > CLEAN_BITMAP_TIMEOUT {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let waited_for_clean_bitmap_ms = wait_t0.elapsed().as_millis() as u64;
    let dirty_regions_at_start = before.status.as_ref().map_or(0, |s| s.status.dirty_regions);
    let owner = before.owner.clone().context("volume has no owner")?;
    let victim = Cluster::proc_index(&owner.node);
    let survivor = 1 - victim;
    let url = c.volume_url(&rec.name, &[0, 1]);
    let inner = open(&url).await?;
    let watched = Arc::new(Watched::new(inner.clone()));
    let dev: Arc<dyn BlockDevice> = watched.clone();
    let range_bytes = if round % 2 == 1 {
        HOT_RANGE_BYTES.min(rec.size_bytes)
    } else {
        rec.size_bytes / 4096 * 4096
    };
    let runtime_ms = s.kill_after_ms + s.lease_ttl_ms + 4000;
    let cfg = BenchConfig {
        pattern: Pattern::RandWrite,
        block_size_bytes: 4096,
        iodepth: 8,
        jobs: 1,
        runtime_ms,
        range_bytes,
        verify: true,
        generation: 10 + round,
        ..BenchConfig::default()
    };
    eprintln!(
        "cluster bench: 3. failover round {round}: randwrite 4k QD8 over {} MiB of {}, kill -9 {} after {} ms",
        range_bytes >> 20,
        rec.name,
        owner.node,
        s.kill_after_ms
    );
    let kill_after = Duration::from_millis(s.kill_after_ms);
    let victim_daemon = &mut c.procs[victim].d;
    let (report, kill_at) = tokio::join!(
        bench::run(dev.clone(), &cfg, &url, &Progress::Silent),
        async {
            tokio::time::sleep(kill_after).await;
            let t = Instant::now();
            victim_daemon.kill9();
            t
        }
    );
    let report = report?;
    let st = watched.take();
    let gap = gaps(st.completions, kill_at);
    let new_owner = PROCESSORS[survivor];
    let after = c.wait_owner(&rec.name, new_owner, owner.epoch)?;
    eprintln!(
        "  {} writes, {} errors, gap {:.0} ms (I/O resumed {:.0} ms after the kill); verifying",
        report.write_ios, report.errors, gap.io_gap_ms, gap.io_gap_end_ms_after_kill
    );
    let verify_cfg = BenchConfig {
        pattern: Pattern::Read,
        block_size_bytes: 4096,
        iodepth: 32,
        jobs: 1,
        runtime_ms: 0,
        range_bytes,
        verify_only: true,
        generation: cfg.generation,
        ..BenchConfig::default()
    };
    let verify = bench::run(inner.clone(), &verify_cfg, &url, &Progress::Silent).await?;
    let exact = exact_check(&inner, st.acked).await;
    let verify_ok =
        verify.errors == 0 && verify.verify.as_ref().is_some_and(|v| v.mismatches() == 0);
    drop(dev);
    drop(watched);
    drop(inner);
    let status = after.status.as_ref();
    let takeover = status.and_then(|s| s.takeover.clone());
    let resync_member_bytes_written = status
        .and_then(|s| s.status.last_resync.as_ref())
        .map_or(0, |r| r.member_bytes_written);
    let resync_bytes_per_member = takeover.as_ref().map_or(0, |t| {
        t.resync_member_bytes_read / (t.members_total.max(1) as u64)
    });
    let (resync_s, took_s) = takeover.as_ref().map_or((0.0, 0.0), |t| {
        (t.resync_ms as f64 / 1e3, t.took_ms as f64 / 1e3)
    });
    // The killed node comes back as a standby (on a new port).
    eprintln!("  restarting {}", PROCESSORS[victim]);
    let p = c.start_processor(PROCESSORS[victim])?;
    c.procs[victim] = p;
    Ok(FailoverRound {
        round,
        volume: rec.name.clone(),
        url,
        range_bytes,
        volume_size_bytes: rec.size_bytes,
        killed: owner.node.clone(),
        new_owner: new_owner.into(),
        dirty_regions_at_start,
        waited_for_clean_bitmap_ms,
        epoch_before: owner.epoch,
        epoch_after: after.owner.as_ref().map_or(0, |o| o.epoch),
        lease_ttl_ms: s.lease_ttl_ms,
        kill_after_ms: s.kill_after_ms,
        runtime_ms,
        write_ios: report.write_ios,
        write_iops: report.iops,
        errors: report.errors,
        first_error: report.first_error.clone(),
        write_lat_p99_us: report.write_latency.p99_us,
        write_lat_max_us: report.write_latency.max_us,
        gap,
        verify_passed: verify_ok && exact.mismatches() == 0,
        verify: verify.verify,
        exact,
        takeover,
        resync_member_bytes_written,
        resync_bytes_per_member,
        ratio_resync_bytes_to_full_resync: ratio(
            resync_bytes_per_member as f64,
            member_capacity_bytes as f64,
        ),
        ratio_resync_time_to_full_resync_time: ratio(resync_s, full_resync_s),
        ratio_takeover_time_to_full_resync_time: ratio(took_s, full_resync_s),
    })
}

async fn section_failover(
    c: &mut Cluster,
    s: &Settings,
    rec: &VolumeRecord,
    out: &mut Failover,
) -> anyhow::Result<()> {
    out.lease_ttl_ms = s.lease_ttl_ms;
    out.hc_resync_share = HC_RESYNC_SHARE;
    out.definitions = FAILOVER_DEFINITIONS.to_vec();
    eprintln!("cluster bench: 3. member sequential write bandwidth");
    section_member_write(c, s, out).await?;
    for round in 1..=s.failovers {
        let r = failover_round(
            c,
            s,
            round,
            rec,
            out.full_resync_s,
            out.member_capacity_bytes,
        )
        .await?;
        eprintln!(
            "  round {round}: gap {:.0} ms, errors {}, verify {}, takeover {:?} ms, resync {} regions {} MiB",
            r.gap.io_gap_ms,
            r.errors,
            if r.verify_passed { "passed" } else { "FAILED" },
            r.takeover.as_ref().map(|t| t.took_ms),
            r.takeover.as_ref().map_or(0, |t| t.resync_regions),
            r.takeover.as_ref().map_or(0, |t| t.resync_bytes >> 20)
        );
        out.rounds.push(r);
    }
    let mut ranges: Vec<u64> = out.rounds.iter().map(|r| r.range_bytes).collect();
    ranges.sort_unstable();
    ranges.dedup();
    out.medians = ranges
        .into_iter()
        .map(|range| failover_medians(&out.rounds, range))
        .collect();
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Report

#[derive(Debug, Serialize)]
struct Output {
    schema: &'static str,
    mode: &'static str,
    command: String,
    machine: Machine,
    settings: Settings,
    setup: String,
    volume_vs_member: VolumeVsMember,
    scaling: Scaling,
    failover: Failover,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct Machine {
    cpus: usize,
    kernel: String,
    binary: String,
    load_average: String,
}

fn summary(o: &Output) -> String {
    let mut t = String::new();
    let s = &o.settings;
    t += &format!(
        "Ferrobay cluster bench ({} mode): {} CPUs, {} s per run, {} rounds, RAID-5 {} MiB volumes on 3 storage nodes ({}), lease TTL {} ms\n",
        o.mode,
        o.machine.cpus,
        s.runtime_s,
        s.rounds,
        s.volume_size_bytes >> 20,
        s.drive,
        s.lease_ttl_ms
    );
    let v = &o.volume_vs_member;
    t += "\n1. RAID-5 volume (through p1) vs one member namespace (direct), medians\n";
    t += &format!(
        "{:<18} {:<7} {:>9} {:>9} {:>8} {:>8} {:>11} {:>11} {:>11}\n",
        "workload",
        "target",
        "IOPS",
        "MB/s",
        "p50 us",
        "p99 us",
        "proc s/MIO",
        "stor s/MIO",
        "init s/MIO"
    );
    for c in &v.results {
        for (name, r) in [("volume", &c.volume_median), ("member", &c.member_median)] {
            t += &format!(
                "{:<18} {:<7} {:>9.0} {:>9.1} {:>8.0} {:>8.0} {:>11.2} {:>11.2} {:>11.2}\n",
                c.workload.name,
                name,
                r.iops,
                r.mb_per_s,
                r.lat_p50_us,
                r.lat_p99_us,
                r.processor_cpu_s_per_million_ios,
                r.storage_cpu_s_per_million_ios,
                r.initiator_cpu_s_per_million_ios
            );
        }
        t += &format!(
            "{:<18} {:<7} {:>9.2} {:>9.2} {:>8.2} {:>8.2}   cluster CPU per I/O x{:.2}\n",
            c.workload.name,
            "ratio",
            c.ratio_iops,
            c.ratio_mb_per_s,
            c.ratio_lat_p50,
            c.ratio_lat_p99,
            c.ratio_cluster_cpu_per_io
        );
    }
    if let Some(e) = &v.error {
        t += &format!("  error: {e}\n");
    }
    let sc = &o.scaling;
    t += "\n2. Two volumes loaded at once (4k randread QD32 each): aggregate IOPS, medians\n";
    t += &format!(
        "  A (p1 owns both): {:.0}   B (p1 one, p2 one): {:.0}   B/A = {:.2}\n",
        sc.median_aggregate_iops_a, sc.median_aggregate_iops_b, sc.ratio_b_over_a
    );
    if !sc.note.is_empty() {
        t += &format!("  note: {}\n", sc.note);
    }
    if let Some(e) = &sc.error {
        t += &format!("  error: {e}\n");
    }
    let f = &o.failover;
    t += &format!(
        "\n3. Failover (kill -9 of the owner, multipath host, 4k randwrite QD8 with verify, lease TTL {} ms)\n",
        f.lease_ttl_ms
    );
    t += &format!(
        "  member seq write 128k QD8: {:.1} MB/s; hyper-converged full resync of {} MiB at {:.0}%: {:.1} s ({:.0} s per TiB)\n",
        f.member_seq_write.median_mb_per_s,
        f.member_capacity_bytes >> 20,
        f.hc_resync_share * 100.0,
        f.full_resync_s,
        f.full_resync_s_per_tib
    );
    t += &format!(
        "  {:<5} {:>9} {:>6} {:>7} {:>11} {:>6} {:>6} {:>11} {:>9} {:>7} {:>10} {:>10} {:>10}\n",
        "round",
        "range MiB",
        "killed",
        "gap ms",
        "resumed ms",
        "errors",
        "verify",
        "takeover ms",
        "resync ms",
        "regions",
        "MiB/member",
        "bytes/full",
        "time/full"
    );
    let row = |round: String,
               range: u64,
               killed: &str,
               gap: f64,
               kill_io: f64,
               errors: u64,
               ok: bool,
               took: f64,
               resync: f64,
               regions: f64,
               per_member: f64,
               bytes_ratio: f64,
               time_ratio: f64| {
        format!(
            "  {:<5} {:>9} {:>6} {:>7.0} {:>11.0} {:>6} {:>6} {:>11.0} {:>9.0} {:>7.0} {:>10.1} {:>10.3} {:>10.3}\n",
            round,
            range >> 20,
            killed,
            gap,
            kill_io,
            errors,
            if ok { "pass" } else { "FAIL" },
            took,
            resync,
            regions,
            per_member / (1u64 << 20) as f64,
            bytes_ratio,
            time_ratio
        )
    };
    for r in &f.rounds {
        let tk = |g: fn(&TakeoverReport) -> u64| r.takeover.as_ref().map_or(0.0, |t| g(t) as f64);
        t += &row(
            r.round.to_string(),
            r.range_bytes,
            &r.killed,
            r.gap.io_gap_ms,
            r.gap.io_gap_end_ms_after_kill,
            r.errors,
            r.verify_passed,
            tk(|t| t.took_ms),
            tk(|t| t.resync_ms),
            tk(|t| t.resync_regions),
            r.resync_bytes_per_member as f64,
            r.ratio_resync_bytes_to_full_resync,
            r.ratio_resync_time_to_full_resync_time,
        );
    }
    for m in &f.medians {
        t += &row(
            "med".into(),
            m.range_bytes,
            "-",
            m.io_gap_ms,
            m.io_resumed_ms_after_kill,
            m.errors,
            m.all_verified,
            m.takeover_ms,
            m.resync_ms,
            m.resync_regions,
            m.resync_bytes_per_member,
            m.ratio_resync_bytes_to_full_resync,
            m.ratio_resync_time_to_full_resync_time,
        );
    }
    for r in f.rounds.iter().filter(|r| r.dirty_regions_at_start > 0) {
        t += &format!(
            "  note: round {} started with {} dirty regions (not cleared within {} s)\n",
            r.round,
            r.dirty_regions_at_start,
            CLEAN_BITMAP_TIMEOUT.as_secs()
        );
    }
    t += "  bytes/full: resync member bytes per member / member capacity; time/full: resync time / hyper-converged full-resync time\n";
    if let Some(e) = &f.error {
        t += &format!("  error: {e}\n");
    }
    if let Some(e) = &o.error {
        t += &format!("\nerror: {e}\n");
    }
    t
}

// ---------------------------------------------------------------------------------------
// Main

/// The sections, in order, on one cluster; errors end up in the section that failed.
async fn run_all(c: &mut Cluster, s: &Settings, o: &mut Output) -> anyhow::Result<()> {
    eprintln!("cluster bench: creating volumes {VOL_A} and {VOL_B}");
    let rec_a = c.create_volume(VOL_A, s)?;
    c.create_volume(VOL_B, s)?;
    c.wait_owner(VOL_A, "p1", 0)?;
    c.wait_owner(VOL_B, "p1", 0)?;
    let member_bytes = {
        let m = rec_a.members.first().context("no members")?;
        open(&m.url).await?.info().size_bytes
    };
    o.failover.member_capacity_bytes = member_bytes;

    eprintln!("cluster bench: 1. RAID-5 volume vs member namespace");
    if let Err(e) = section_volume_vs_member(c, s, &rec_a, &mut o.volume_vs_member).await {
        eprintln!("cluster bench: section 1 failed: {e:#}");
        o.volume_vs_member.error = Some(format!("{e:#}"));
    }

    eprintln!("cluster bench: 2. one vs two processor nodes");
    let scaling = async {
        let b = open(&c.volume_url(VOL_B, &[0, 1])).await?;
        eprintln!("cluster bench: 2. precondition {VOL_B}");
        precondition(&b, VOL_B).await?;
        section_scaling(c, s, &mut o.scaling, &b).await
    };
    if let Err(e) = scaling.await {
        eprintln!("cluster bench: section 2 failed: {e:#}");
        o.scaling.error = Some(format!("{e:#}"));
    }

    eprintln!("cluster bench: 3. failover");
    if let Err(e) = section_failover(c, s, &rec_a, &mut o.failover).await {
        eprintln!("cluster bench: section 3 failed: {e:#}");
        o.failover.error = Some(format!("{e:#}"));
    }
    Ok(())
}

fn main() -> ExitCode {
    let full = std::env::args().any(|a| a == "--bench");
    let settings = Settings::from_env(full);
    let binary = match std::env::var_os("FERROBAY_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_ferrobay")),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cluster bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let t0 = Instant::now();
    let mut out = Output {
        schema: SCHEMA,
        mode: if full { "bench" } else { "smoke" },
        command: "cargo bench -p ferrobay --bench cluster".into(),
        machine: Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            binary: binary.display().to_string(),
            load_average: std::fs::read_to_string("/proc/loadavg")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        },
        setup: "all on 127.0.0.1: etcd (meta::testing::EtcdServer), storage nodes n1..n3 \
                (`ferrobay node run --meta`, one RAM drive each), processor nodes p1, p2 \
                (`ferrobay processor run`); RAID-5 volumes over n1..n3 made by `volume create \
                --storage-nodes`, preferred owner p1; initiator: this process, nvmf-host, \
                bench::run"
            .into(),
        settings: settings.clone(),
        volume_vs_member: VolumeVsMember::default(),
        scaling: Scaling::default(),
        failover: Failover::default(),
        error: None,
    };
    eprintln!(
        "cluster bench: {} s per run, {} rounds, binary {}",
        settings.runtime_s,
        settings.rounds,
        binary.display()
    );
    // Daemons are started from this (the main) thread: block_on polls here.
    match rt.block_on(Cluster::start(&binary, &settings)) {
        Ok(mut cluster) => {
            if let Err(e) = rt.block_on(run_all(&mut cluster, &settings, &mut out)) {
                eprintln!("cluster bench: {e:#}\n{}", cluster.logs());
                out.error = Some(format!("{e:#}"));
            }
            let failed_any = out.volume_vs_member.error.is_some()
                || out.scaling.error.is_some()
                || out.failover.error.is_some();
            if failed_any {
                eprintln!("{}", cluster.logs());
            }
            cluster.stop();
        }
        Err(e) => {
            eprintln!("cluster bench: cannot start the cluster: {e:#}");
            out.error = Some(format!("cannot start the cluster: {e:#}"));
        }
    }
    drop(rt);
    eprintln!("cluster bench: done in {:.0} s", t0.elapsed().as_secs_f64());

    match serde_json::to_string_pretty(&out) {
        Ok(json) if full => {
            let path = output_path();
            let written = path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(&path, format!("{json}\n")));
            match written {
                Ok(()) => eprintln!("cluster bench: wrote {}", path.display()),
                Err(e) => eprintln!("cluster bench: cannot write {}: {e}", path.display()),
            }
        }
        Ok(_) => {}
        Err(e) => eprintln!("cluster bench: cannot encode the report: {e}"),
    }
    print!("{}", summary(&out));

    let failover_bad = out
        .failover
        .rounds
        .iter()
        .any(|r| r.errors > 0 || !r.verify_passed);
    let failed = out.error.is_some()
        || out.volume_vs_member.error.is_some()
        || out.scaling.error.is_some()
        || out.failover.error.is_some()
        || failover_bad;
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `FERROBAY_BENCH_CLUSTER_OUT`, else `<target>/bench/cluster.json`.
fn output_path() -> PathBuf {
    if let Some(p) = std::env::var_os("FERROBAY_BENCH_CLUSTER_OUT").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent()
        .map_or_else(|| tmp.clone(), PathBuf::from)
        .join("bench")
        .join("cluster.json")
}
