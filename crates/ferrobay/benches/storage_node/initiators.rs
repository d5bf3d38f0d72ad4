//! Section D: initiators side by side. One `ferrobay node` with a RAM namespace on
//! 127.0.0.1, driven in turn by two initiator processes: `ferrobay bench` (nvmf-host) and
//! SPDK's `spdk_nvme_perf` (user-space NVMe/TCP host, busy polling), the one that goes
//! first alternating from workload to workload and round to round. Runs only when
//! `FERROBAY_BENCH_SPDK_PERF` names a `spdk_nvme_perf` binary built outside this repo
//! (nothing here fetches or builds SPDK).
//!
//! CPU: each initiator's CPU over its measured window (ferrobay: its own report; SPDK:
//! /proc/PID/stat sampled when it prints "Launching workers" and when it prints its
//! results), the whole initiator process's CPU (start-up and connect included, from
//! getrusage of the reaped child), and the node's CPU over the same window.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bench::CpuTime;
use serde::Serialize;

use crate::Settings;
use crate::native::{NODE_NAME, NodeChild, per_million};
use crate::spdk_target::{SPDK_NQN, SpdkChild, use_spdk_libs};
use crate::workload::{Pinning, WORKLOADS, Workload, env_string, env_words};
use testkit::process::{die_with_parent, pin_to_cpus};
use testkit::stats::median;

/// What the issue asks for, in the order they run.
pub const INITIATOR_WORKLOADS: [Workload; 5] = [
    Workload {
        name: "randread_4k_qd1",
        rw: "randread",
        block_size_bytes: 4096,
        iodepth: 1,
    },
    // randread_4k_qd32
    WORKLOADS[0],
    Workload {
        name: "randread_4k_qd128",
        rw: "randread",
        block_size_bytes: 4096,
        iodepth: 128,
    },
    // randwrite_4k_qd32, seqread_128k_qd8
    WORKLOADS[1],
    WORKLOADS[2],
];

/// DPDK memory for `spdk_nvme_perf --no-huge` (I/O buffers, PDU pools).
const PERF_MEM_MB: u32 = 512;
/// After its results, perf detaches the controller; give it this long to exit.
const PERF_EXIT_GRACE: Duration = Duration::from_secs(3);
/// Start-up, connect and teardown allowance on top of the run time.
const CHILD_SLACK: Duration = Duration::from_secs(60);
/// Why perf hangs at detach against `ferrobay node` (seen on the wire with a logging
/// proxy): results are measured and printed before it.
const PERF_DETACH_DIAGNOSIS: &str = "At detach SPDK completes its outstanding Asynchronous \
    Event Requests locally (CIDs 0-3 of the admin queue) and reuses one of those CIDs for \
    the shutdown Property Set; the ferrobay target still holds that CID for the AER and \
    ends the admin connection with a C2HTermReq ('command identifier already in use'), \
    and perf then waits forever for the shutdown.";
/// A run is quiet when the rest of the machine took at most this many cores meanwhile.
const QUIET_OTHER_CORES: f64 = 0.15;

pub const CPU_NOTE: &str = "initiator_cpu_s: the initiator's CPU over its measured window \
    (ferrobay bench: user+system of its process during the run, from its own report; \
    spdk_nvme_perf: /proc/PID/stat between its 'Launching workers' line and its results). \
    spdk_nvme_perf busy-polls one core, so its CPU is about wall time whatever the load. \
    initiator_process_cpu_s: the whole process (start-up, connect, teardown) from getrusage \
    of the reaped child. node_cpu_s: the ferrobay node over the same window (for ferrobay \
    bench: from the child's start to its exit, connect included). Loopback TCP work in \
    softirq is charged to neither (see irq_cores).";

/// One measured run of one initiator.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InitiatorRun {
    /// `ferrobay-bench` or `spdk_nvme_perf`.
    pub initiator: String,
    pub workload: String,
    pub round: u32,
    /// 0: this initiator went first for this workload and round.
    pub position: u32,
    pub command: String,
    pub elapsed_s: f64,
    pub ios: f64,
    pub iops: f64,
    /// MiB/s (2^20 bytes), as spdk_nvme_perf prints it.
    pub mib_per_s: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub initiator_cpu_s: f64,
    pub initiator_cpu_s_per_million_ios: f64,
    /// Cores the initiator used on average over its window.
    pub initiator_cores: f64,
    pub initiator_process_cpu_s: f64,
    pub node_cpu_s: f64,
    pub node_cpu_s_per_million_ios: f64,
    /// Cores the rest of the machine kept busy meanwhile (other people's work).
    pub other_cores: Option<f64>,
    pub irq_cores: Option<f64>,
    /// Had to be killed after printing its results (see interop_notes).
    pub killed_after_results: bool,
}

/// Medians over one initiator's rounds of one workload.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InitiatorSide {
    pub runs: usize,
    pub iops: f64,
    pub iops_min: f64,
    pub iops_max: f64,
    pub mib_per_s: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub initiator_cpu_s_per_million_ios: f64,
    pub initiator_cores: f64,
    pub node_cpu_s_per_million_ios: f64,
    pub other_cores_max: Option<f64>,
}

/// ferrobay bench against spdk_nvme_perf for one workload; ratios are ferrobay / SPDK of
/// the medians (above 1: ferrobay has more IOPS, higher latency, more CPU per I/O).
#[derive(Debug, Clone, Serialize)]
pub struct InitiatorComparison {
    pub workload: String,
    pub ferrobay: InitiatorSide,
    pub spdk: InitiatorSide,
    pub ratio_iops: f64,
    pub ratio_mib_per_s: f64,
    pub ratio_mean_latency: f64,
    pub ratio_p50_latency: f64,
    pub ratio_p99_latency: f64,
    pub ratio_initiator_cpu_per_io: f64,
    pub ratio_node_cpu_per_io: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct InitiatorsSection {
    pub ran: bool,
    pub skipped: Option<String>,
    pub description: String,
    pub spdk_perf_binary: String,
    pub spdk_perf_extra_args: Vec<String>,
    pub url: String,
    pub hostnqn: String,
    pub cpu_note: &'static str,
    pub precondition: Option<InitiatorRun>,
    pub runs: Vec<InitiatorRun>,
    pub comparisons: Vec<InitiatorComparison>,
    /// The same from the runs during which other work took at most
    /// `quiet_other_cores_max` cores.
    pub comparisons_quiet: Vec<InitiatorComparison>,
    pub quiet_other_cores_max: f64,
    pub interop_notes: Vec<String>,
    pub error: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Ferrobay,
    Spdk,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Ferrobay => "ferrobay-bench",
            Which::Spdk => "spdk_nvme_perf",
        }
    }
}

impl InitiatorsSection {
    pub fn skipped(why: String) -> InitiatorsSection {
        InitiatorsSection {
            skipped: Some(why),
            cpu_note: CPU_NOTE,
            ..InitiatorsSection::default()
        }
    }

    /// A section that runs `perf` with `extra` arguments.
    fn running(perf: &str, extra: Vec<String>) -> InitiatorsSection {
        InitiatorsSection {
            ran: true,
            spdk_perf_binary: perf.to_string(),
            spdk_perf_extra_args: extra,
            cpu_note: CPU_NOTE,
            quiet_other_cores_max: QUIET_OTHER_CORES,
            ..InitiatorsSection::default()
        }
    }
}

/// Runs section D (blocking); failures end up in `error` with whatever was measured.
pub fn run(binary: &Path, settings: &Settings) -> InitiatorsSection {
    let Some(perf) = env_string("FERROBAY_BENCH_SPDK_PERF") else {
        return InitiatorsSection::skipped(
            "FERROBAY_BENCH_SPDK_PERF is not set: point it at an SPDK spdk_nvme_perf binary \
             built outside this repo (nothing here fetches or builds SPDK)"
                .into(),
        );
    };
    let extra = perf_args(settings, settings.pin.is_some());
    let mut section = InitiatorsSection::running(&perf, extra);
    eprintln!("storage_node bench: initiators: ferrobay bench vs {perf}");
    if let Err(e) = measure(binary, Path::new(&perf), settings, &mut section) {
        eprintln!("storage_node bench: initiators section failed: {e}");
        section.error = Some(e);
    }
    finish(&mut section);
    section
}

/// Section F: the whole stack side by side. `ferrobay bench` against `ferrobay node` (both
/// with their extra arguments, e.g. `--busy-poll-us`) and `spdk_nvme_perf` against SPDK's
/// `nvmf_tgt` (one reactor, Malloc bdev), one pair at a time and alternating; SPDK's
/// target is paused (SIGSTOP) outside its turns, as its reactor polls a core even when
/// idle. Runs only when both `FERROBAY_BENCH_SPDK_TGT` and `FERROBAY_BENCH_SPDK_PERF` are
/// set. Perf gets its own core (`-c 0x2` against the default reactor mask 0x1) unless
/// `FERROBAY_BENCH_SPDK_PERF_ARGS` picks one.
pub fn run_whole_stack(binary: &Path, settings: &Settings) -> InitiatorsSection {
    let (Some(tgt), Some(perf)) = (
        settings.spdk_tgt.clone(),
        env_string("FERROBAY_BENCH_SPDK_PERF"),
    ) else {
        return InitiatorsSection::skipped(
            "needs both FERROBAY_BENCH_SPDK_TGT and FERROBAY_BENCH_SPDK_PERF (SPDK built \
             outside this repo)"
                .into(),
        );
    };
    let extra = perf_args(settings, true);
    let mut section = InitiatorsSection::running(&perf, extra);
    eprintln!("storage_node bench: whole stack: ferrobay bench + node vs {perf} + {tgt}");
    if let Err(e) = measure_whole_stack(
        binary,
        Path::new(&tgt),
        Path::new(&perf),
        settings,
        &mut section,
    ) {
        eprintln!("storage_node bench: whole-stack section failed: {e}");
        section.error = Some(e);
    }
    finish(&mut section);
    section
}

/// The comparisons of all runs and of the quiet ones.
fn finish(section: &mut InitiatorsSection) {
    section.comparisons = compare(&section.runs);
    let quiet: Vec<InitiatorRun> = section
        .runs
        .iter()
        .filter(|r| r.other_cores.is_some_and(|o| o <= QUIET_OTHER_CORES))
        .cloned()
        .collect();
    section.comparisons_quiet = compare(&quiet);
}

/// Where the ferrobay processes run, for the section's description.
fn placement(settings: &Settings) -> String {
    match &settings.pin {
        Some(p) => format!(
            "; ferrobay node pinned to CPUs {:?}, ferrobay bench to {:?} (FERROBAY_BENCH_PIN)",
            p.target_cpus, p.initiator_cpus
        ),
        None => "; ferrobay processes not pinned".into(),
    }
}

/// `FERROBAY_BENCH_SPDK_PERF_ARGS`, and unless they pick a core and when `own_core`, perf's
/// `-c`: the initiators' CPU when pinned, else the lowest allowed CPU outside the
/// target's mask (CPU 1 if none is known).
fn perf_args(settings: &Settings, own_core: bool) -> Vec<String> {
    let mut extra = env_words("FERROBAY_BENCH_SPDK_PERF_ARGS");
    if own_core && !extra.iter().any(|a| a == "-c") {
        let mask = match &settings.pin {
            Some(p) => p.initiator_mask(),
            None => Pinning::from_mask(&settings.spdk_cpumask, &testkit::process::allowed_cpus())
                .map_or_else(|| "0x2".into(), |p| p.initiator_mask()),
        };
        extra.extend(["-c".to_string(), mask]);
    }
    extra
}

fn measure_whole_stack(
    binary: &Path,
    tgt: &Path,
    perf: &Path,
    settings: &Settings,
    section: &mut InitiatorsSection,
) -> Result<(), String> {
    let dir = crate::scratch_dir("bench-stack").map_err(|e| format!("scratch dir: {e}"))?;
    let ctx = Ctx::start(binary, perf, dir.path(), settings, section)?;
    let mut spdk = SpdkChild::start(tgt, dir.path(), settings)?;
    let spdk_addr = spdk.addr.to_string();
    section.description = format!(
        "ferrobay bench {:?} -> ferrobay node --drive {} {:?} vs spdk_nvme_perf {:?} -> \
         nvmf_tgt {} (-m {}, Malloc {} MiB), one pair at a time, {} s per run, {} rounds{}",
        ctx.initiator_args,
        settings.native_drive,
        settings.node_args,
        ctx.extra,
        spdk.version,
        settings.spdk_cpumask,
        settings.ram_ns_mb,
        ctx.run_s,
        settings.rounds,
        placement(settings)
    );
    let pre = Workload {
        name: "precondition_seqwrite_128k_qd8",
        rw: "write",
        block_size_bytes: 128 << 10,
        iodepth: 8,
    };
    spdk.pause()?;
    section.precondition = Some(ferrobay_run(&ctx, &pre, None)?);
    spdk.resume()?;
    {
        let peer = PerfPeer {
            addr: &spdk_addr,
            nqn: SPDK_NQN,
            target: &spdk,
        };
        perf_run(&ctx, &peer, &pre, section)?;
    }
    alternate(settings, section, |which, w, section| match which {
        Which::Ferrobay => {
            spdk.pause()?;
            let r = ferrobay_run(&ctx, w, Some(ctx.run_s));
            spdk.resume()?;
            r
        }
        Which::Spdk => {
            let peer = PerfPeer {
                addr: &spdk_addr,
                nqn: SPDK_NQN,
                target: &spdk,
            };
            perf_run(&ctx, &peer, w, section)
        }
    })?;
    spdk.stop();
    ctx.node.stop();
    Ok(())
}

struct Ctx<'a> {
    binary: &'a Path,
    perf: &'a Path,
    node: NodeChild,
    url: String,
    addr: String,
    nqn: String,
    hostnqn: String,
    run_s: u64,
    extra: Vec<String>,
    /// More `ferrobay bench` arguments (`FERROBAY_BENCH_INITIATOR_ARGS`).
    initiator_args: Vec<String>,
    /// Where `ferrobay bench` runs (perf's `-c` CPU when pinned; empty: anywhere).
    initiator_cpus: Vec<usize>,
}

impl<'a> Ctx<'a> {
    /// Starts the ferrobay node (in `dir`) both initiators are measured against.
    fn start(
        binary: &'a Path,
        perf: &'a Path,
        dir: &Path,
        settings: &Settings,
        section: &mut InitiatorsSection,
    ) -> Result<Ctx<'a>, String> {
        if !perf.is_file() {
            return Err(format!(
                "FERROBAY_BENCH_SPDK_PERF={}: no such file",
                perf.display()
            ));
        }
        let host = nvmf_host::HostIdentity::system().map_err(|e| format!("host identity: {e}"))?;
        let node = NodeChild::native(binary, dir, settings)?;
        let nqn = format!("nqn.2026-01.io.ferrobay:{NODE_NAME}:d0");
        let ctx = Ctx {
            binary,
            perf,
            url: format!("nvme+tcp://{}/{nqn}/1", node.nvme_addr),
            addr: node.nvme_addr.clone(),
            node,
            nqn,
            hostnqn: host.hostnqn,
            // spdk_nvme_perf takes whole seconds.
            run_s: settings.runtime_s.round().max(1.0) as u64,
            extra: section.spdk_perf_extra_args.clone(),
            initiator_args: settings.initiator_args.clone(),
            initiator_cpus: settings
                .pin
                .as_ref()
                .map_or_else(Vec::new, |p| p.initiator_cpus.clone()),
        };
        section.url = ctx.url.clone();
        section.hostnqn = ctx.hostnqn.clone();
        Ok(ctx)
    }
}

/// Every workload of every round, the two initiators in alternating order, each run by
/// `turn`.
fn alternate(
    settings: &Settings,
    section: &mut InitiatorsSection,
    mut turn: impl FnMut(Which, &Workload, &mut InitiatorsSection) -> Result<InitiatorRun, String>,
) -> Result<(), String> {
    for round in 0..settings.rounds {
        for (i, w) in INITIATOR_WORKLOADS.iter().enumerate() {
            let order = if (round as usize + i).is_multiple_of(2) {
                [Which::Ferrobay, Which::Spdk]
            } else {
                [Which::Spdk, Which::Ferrobay]
            };
            for (position, which) in order.into_iter().enumerate() {
                let mut r = turn(which, w, section)?;
                r.round = round;
                r.position = position as u32;
                print_run(which.name(), w.name, round, &r);
                section.runs.push(r);
            }
        }
    }
    Ok(())
}

/// One line per run on stderr.
pub fn print_run(who: &str, workload: &str, round: u32, r: &InitiatorRun) {
    eprintln!(
        "  {who:<15} {workload:<18} round {round}: {:>9.0} IOPS {:>8.1} MiB/s p50 {:>7.1} us, \
         initiator {:.2} / target {:.2} CPU s per million I/Os",
        r.iops,
        r.mib_per_s,
        r.p50_us,
        r.initiator_cpu_s_per_million_ios,
        r.node_cpu_s_per_million_ios
    );
}

fn measure(
    binary: &Path,
    perf: &Path,
    settings: &Settings,
    section: &mut InitiatorsSection,
) -> Result<(), String> {
    let dir = crate::scratch_dir("bench-init").map_err(|e| format!("scratch dir: {e}"))?;
    let ctx = Ctx::start(binary, perf, dir.path(), settings, section)?;
    section.description = format!(
        "one ferrobay node --drive {} on 127.0.0.1, two initiator processes in turn, {} s \
         per run, {} rounds: ferrobay bench (nvmf-host, 1 job, default I/O queues) and \
         spdk_nvme_perf (1 core, 1 qpair, --no-huge -s {PERF_MEM_MB}); the same host NQN{}",
        settings.native_drive,
        ctx.run_s,
        settings.rounds,
        placement(settings)
    );

    // Every block written once, so reads never hit never-written memory.
    eprintln!("storage_node bench: initiators: precondition (ferrobay bench, one pass)");
    let pre = Workload {
        name: "precondition_seqwrite_128k_qd8",
        rw: "write",
        block_size_bytes: 128 << 10,
        iodepth: 8,
    };
    section.precondition = Some(ferrobay_run(&ctx, &pre, None)?);
    let peer = PerfPeer {
        addr: &ctx.addr,
        nqn: &ctx.nqn,
        target: &ctx.node,
    };
    alternate(settings, section, |which, w, section| match which {
        Which::Ferrobay => ferrobay_run(&ctx, w, Some(ctx.run_s)),
        Which::Spdk => perf_run(&ctx, &peer, w, section),
    })?;
    ctx.node.stop();
    Ok(())
}

/// The target process an initiator's run is measured against: its CPU and its log.
pub trait TargetProcess {
    fn cpu_s(&self) -> f64;
    fn log_tail(&self) -> String;
}

impl TargetProcess for NodeChild {
    fn cpu_s(&self) -> f64 {
        self.cpu().map_or(0.0, |c| c.total().as_secs_f64())
    }
    fn log_tail(&self) -> String {
        NodeChild::log_tail(self)
    }
}

impl TargetProcess for SpdkChild {
    fn cpu_s(&self) -> f64 {
        cpu_of(self.pid())
    }
    fn log_tail(&self) -> String {
        SpdkChild::log_tail(self)
    }
}

/// Where `spdk_nvme_perf` connects, and the process that serves it.
struct PerfPeer<'a> {
    addr: &'a str,
    nqn: &'a str,
    target: &'a dyn TargetProcess,
}

/// CPU seconds of reaped children so far (getrusage RUSAGE_CHILDREN).
#[allow(unsafe_code)]
fn children_cpu_s() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own; no other memory is touched.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) != 0 {
            return 0.0;
        }
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn cpu_of(pid: u32) -> f64 {
    CpuTime::of_pid(pid).map_or(0.0, |c| c.total().as_secs_f64())
}

/// `ferrobay bench` as a child process with `--json`; `secs` None: one pass.
fn ferrobay_run(ctx: &Ctx<'_>, w: &Workload, secs: Option<u64>) -> Result<InitiatorRun, String> {
    let bench = FerrobayBench {
        binary: ctx.binary,
        url: &ctx.url,
        hostnqn: &ctx.hostnqn,
        node: &ctx.node,
        extra_args: &ctx.initiator_args,
        cpus: &ctx.initiator_cpus,
    };
    bench.run(w, secs)
}

/// `ferrobay bench` against one node, with these extra arguments.
pub struct FerrobayBench<'a> {
    pub binary: &'a Path,
    pub url: &'a str,
    pub hostnqn: &'a str,
    pub node: &'a NodeChild,
    pub extra_args: &'a [String],
    /// Where it runs (empty: anywhere).
    pub cpus: &'a [usize],
}

impl FerrobayBench<'_> {
    /// One run as a child process with `--json`; `secs` None: one pass.
    pub fn run(&self, w: &Workload, secs: Option<u64>) -> Result<InitiatorRun, String> {
        let ctx = self;
        let mut args: Vec<String> = vec![
            "bench".into(),
            "--target".into(),
            ctx.url.into(),
            "--rw".into(),
            w.rw.into(),
            "--bs".into(),
            w.block_size_bytes.to_string(),
            "--iodepth".into(),
            w.iodepth.to_string(),
            "--hostnqn".into(),
            ctx.hostnqn.into(),
            "--json".into(),
        ];
        args.extend(ctx.extra_args.iter().cloned());
        if let Some(s) = secs {
            args.extend(["--runtime".into(), format!("{s}s")]);
        }
        let command = format!("ferrobay {}", args.join(" "));
        let node0 = ctx.node.cpu()?;
        let machine0 = crate::load::machine_cpu();
        let rusage0 = children_cpu_s();
        let t0 = Instant::now();
        let mut cmd = Command::new(ctx.binary);
        cmd.args(&args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(&mut cmd);
        pin_to_cpus(&mut cmd, ctx.cpus);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {command}: {e}"))?;
        let limit = Duration::from_secs(secs.unwrap_or(600)) + CHILD_SLACK;
        let out = wait_output(child, limit).map_err(|e| format!("{command}: {e}"))?;
        let wall_s = t0.elapsed().as_secs_f64();
        let node1 = ctx.node.cpu()?;
        let machine1 = crate::load::machine_cpu();
        let process_cpu_s = children_cpu_s() - rusage0;
        if !out.status.success() {
            return Err(format!(
                "{command}: {}\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                ctx.node.log_tail()
            ));
        }
        let report: bench::Report = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("{command}: cannot parse its JSON: {e}"))?;
        if report.errors > 0 {
            return Err(format!(
                "{command}: {} I/O errors, first: {}",
                report.errors,
                report.first_error.as_deref().unwrap_or("?")
            ));
        }
        let lat = if report.read_ios >= report.write_ios {
            &report.read_latency
        } else {
            &report.write_latency
        };
        let ios = (report.read_ios + report.write_ios) as f64;
        let node_cpu_s = node1.since(&node0).total().as_secs_f64();
        let machine = match (machine0, machine1) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        Ok(InitiatorRun {
            initiator: Which::Ferrobay.name().into(),
            workload: w.name.into(),
            command,
            elapsed_s: report.elapsed_s,
            ios,
            iops: report.iops,
            mib_per_s: (report.read_bytes + report.write_bytes) as f64
                / report.elapsed_s.max(1e-9)
                / (1 << 20) as f64,
            mean_us: lat.mean_us,
            p50_us: lat.p50_us,
            p99_us: lat.p99_us,
            p999_us: lat.p999_us,
            max_us: lat.max_us,
            initiator_cpu_s: report.cpu_s,
            initiator_cpu_s_per_million_ios: per_million(report.cpu_s, ios),
            initiator_cores: report.cpu_s / report.elapsed_s.max(1e-9),
            initiator_process_cpu_s: process_cpu_s,
            node_cpu_s,
            node_cpu_s_per_million_ios: per_million(node_cpu_s, ios),
            other_cores: machine
                .map(|m| (m.process_s - node_cpu_s - process_cpu_s).max(0.0) / wall_s),
            irq_cores: machine.map(|m| m.irq_s / wall_s),
            ..InitiatorRun::default()
        })
    }
}

/// A child's exit status and its whole stdout and stderr, killed past `limit`.
fn wait_output(mut child: Child, limit: Duration) -> Result<std::process::Output, String> {
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let read_all = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out_t = read_all(stdout.map(|s| Box::new(s) as Box<dyn std::io::Read + Send>));
    let err_t = read_all(stderr.map(|s| Box::new(s) as Box<dyn std::io::Read + Send>));
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("did not finish within {limit:?}; killed"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(std::process::Output {
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    })
}

/// `spdk_nvme_perf`'s name of a pattern.
fn perf_pattern(w: &Workload) -> &'static str {
    match w.rw {
        "randread" => "randread",
        "randwrite" => "randwrite",
        "write" => "write",
        _ => "read",
    }
}

/// One `spdk_nvme_perf` run: stdout line-buffered (stdbuf) so its results survive a
/// kill, CPU sampled at its "Launching workers" line and at its results.
fn perf_run(
    ctx: &Ctx<'_>,
    peer: &PerfPeer<'_>,
    w: &Workload,
    section: &mut InitiatorsSection,
) -> Result<InitiatorRun, String> {
    let (host, port) = peer
        .addr
        .rsplit_once(':')
        .ok_or_else(|| format!("target address {} has no port", peer.addr))?;
    let trid = format!(
        "trtype:TCP adrfam:IPv4 traddr:{host} trsvcid:{port} subnqn:{} ns:1 hostnqn:{}",
        peer.nqn, ctx.hostnqn
    );
    let mut args: Vec<String> = vec![
        "-oL".into(),
        ctx.perf.display().to_string(),
        "--no-huge".into(),
        "-s".into(),
        PERF_MEM_MB.to_string(),
        "-r".into(),
        trid,
        "-q".into(),
        w.iodepth.to_string(),
        "-o".into(),
        w.block_size_bytes.to_string(),
        "-w".into(),
        perf_pattern(w).into(),
        "-t".into(),
        ctx.run_s.to_string(),
        // Latency summary with percentiles.
        "-L".into(),
    ];
    args.extend(ctx.extra.iter().cloned());
    let command = format!("stdbuf {}", shell_words(&args));
    let mut cmd = Command::new("stdbuf");
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    use_spdk_libs(&mut cmd, ctx.perf);
    die_with_parent(&mut cmd);
    let rusage0 = children_cpu_s();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {command} (is stdbuf installed?): {e}"))?;
    let pid = child.id();

    // Lines with the time they arrived; stderr is collected whole.
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take();
    let out_t = std::thread::spawn(move || {
        if let Some(s) = stdout {
            for line in BufReader::new(s).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        }
    });
    let stderr = child.stderr.take();
    let err_t = std::thread::spawn(move || {
        let mut v = String::new();
        if let Some(mut s) = stderr {
            let _ = std::io::Read::read_to_string(&mut s, &mut v);
        }
        v
    });

    let limit = Duration::from_secs(ctx.run_s) + CHILD_SLACK;
    let t0 = Instant::now();
    let mut lines: Vec<String> = Vec::new();
    let mut start: Option<(f64, f64, Option<crate::load::MachineCpu>, Instant)> = None;
    let mut end: Option<(f64, f64, Option<crate::load::MachineCpu>, Instant)> = None;
    let mut results_done: Option<Instant> = None;
    let mut killed_after_results = false;
    let sample = || {
        (
            cpu_of(pid),
            peer.target.cpu_s(),
            crate::load::machine_cpu(),
            Instant::now(),
        )
    };
    let status = loop {
        while let Ok(line) = rx.try_recv() {
            if start.is_none() && line.contains("Launching workers") {
                start = Some(sample());
            } else if start.is_some() && end.is_none() && line.starts_with("=====") {
                // print_stats: the run is over.
                end = Some(sample());
            }
            if line.contains("99.99999%") {
                results_done.get_or_insert_with(Instant::now);
            }
            lines.push(line);
        }
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(s);
        }
        if results_done.is_some_and(|t| t.elapsed() > PERF_EXIT_GRACE) {
            killed_after_results = true;
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let _ = out_t.join();
            return Err(format!(
                "{command}: no results within {limit:?}; killed\n{}\n{}\n{}",
                lines.join("\n"),
                err_t.join().unwrap_or_default(),
                peer.target.log_tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = out_t.join();
    while let Ok(line) = rx.try_recv() {
        lines.push(line);
    }
    let stderr = err_t.join().unwrap_or_default();
    let process_cpu_s = children_cpu_s() - rusage0;
    // DPDK's runtime directory of a killed perf stays behind; it is ours (by pid).
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/spdk_pid{pid}"));

    let parsed = parse_perf(&lines).ok_or_else(|| {
        format!(
            "{command}: no results in its output ({})\n{}\n{stderr}\n{}",
            status.map_or("killed".to_string(), |s| s.to_string()),
            lines.join("\n"),
            peer.target.log_tail()
        )
    })?;
    if killed_after_results {
        let node_note = last_fatal_line(peer.target);
        let note = format!(
            "spdk_nvme_perf {}: did not exit within {PERF_EXIT_GRACE:?} after printing its \
             results (while detaching the controller); killed. {PERF_DETACH_DIAGNOSIS} SPDK \
             log: {}. Node: {}",
            w.name,
            first_error_line(&stderr).unwrap_or("-"),
            node_note
                .as_deref()
                .unwrap_or("(fatal errors are logged at info level)")
        );
        if !section
            .interop_notes
            .iter()
            .any(|n| n.contains("did not exit"))
        {
            section.interop_notes.push(note);
        }
    }
    let (Some(s), Some(e)) = (start, end) else {
        return Err(format!(
            "{command}: did not see its 'Launching workers' line and results\n{}",
            lines.join("\n")
        ));
    };
    let window_s = e.3.duration_since(s.3).as_secs_f64().max(1e-9);
    let elapsed_s = ctx.run_s as f64;
    let ios = parsed.iops * elapsed_s;
    let initiator_cpu_s = (e.0 - s.0).max(0.0);
    let node_cpu_s = (e.1 - s.1).max(0.0);
    let machine = match (s.2, e.2) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    Ok(InitiatorRun {
        initiator: Which::Spdk.name().into(),
        workload: w.name.into(),
        command,
        elapsed_s,
        ios,
        iops: parsed.iops,
        mib_per_s: parsed.mib_per_s,
        mean_us: parsed.mean_us,
        p50_us: parsed.p50_us,
        p99_us: parsed.p99_us,
        p999_us: parsed.p999_us,
        max_us: parsed.max_us,
        initiator_cpu_s,
        initiator_cpu_s_per_million_ios: per_million(initiator_cpu_s, ios),
        initiator_cores: initiator_cpu_s / window_s,
        initiator_process_cpu_s: process_cpu_s,
        node_cpu_s,
        node_cpu_s_per_million_ios: per_million(node_cpu_s, ios),
        other_cores: machine
            .map(|m| (m.process_s - node_cpu_s - initiator_cpu_s).max(0.0) / window_s),
        irq_cores: machine.map(|m| m.irq_s / window_s),
        killed_after_results,
        ..InitiatorRun::default()
    })
}

/// What spdk_nvme_perf printed.
#[derive(Debug, Default, PartialEq)]
struct PerfResult {
    iops: f64,
    mib_per_s: f64,
    mean_us: f64,
    max_us: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
}

/// Parses the "Total : IOPS MiB/s Average min max" line and the `-L` percentile summary
/// ("  50.00000% :    94.917us").
fn parse_perf(lines: &[String]) -> Option<PerfResult> {
    let total = lines.iter().find(|l| l.trim_start().starts_with("Total"))?;
    let nums: Vec<f64> = total
        .split_once(':')?
        .1
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let [iops, mib_per_s, mean_us, _min_us, max_us] = nums.as_slice() else {
        return None;
    };
    let pct = |p: f64| {
        lines.iter().find_map(|l| {
            let (k, v) = l.split_once("% :")?;
            let k: f64 = k.trim().parse().ok()?;
            let v: f64 = v.trim().trim_end_matches("us").trim().parse().ok()?;
            ((k - p).abs() < 1e-6).then_some(v)
        })
    };
    Some(PerfResult {
        iops: *iops,
        mib_per_s: *mib_per_s,
        mean_us: *mean_us,
        max_us: *max_us,
        p50_us: pct(50.0).unwrap_or(f64::NAN),
        p99_us: pct(99.0).unwrap_or(f64::NAN),
        p999_us: pct(99.9).unwrap_or(f64::NAN),
    })
}

fn first_error_line(s: &str) -> Option<&str> {
    s.lines().find(|l| l.contains("ERROR")).map(str::trim)
}

fn last_fatal_line(target: &dyn TargetProcess) -> Option<String> {
    target
        .log_tail()
        .lines()
        .rev()
        .find(|l| l.contains("fatal transport error"))
        .map(str::to_string)
}

fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.contains(' ') {
                format!("'{a}'")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn compare(runs: &[InitiatorRun]) -> Vec<InitiatorComparison> {
    let div = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let mut out = Vec::new();
    for w in &INITIATOR_WORKLOADS {
        let side = |who: Which| {
            let rs: Vec<&InitiatorRun> = runs
                .iter()
                .filter(|r| r.initiator == who.name() && r.workload == w.name)
                .collect();
            median_side(&rs)
        };
        let (Some(f), Some(s)) = (side(Which::Ferrobay), side(Which::Spdk)) else {
            continue;
        };
        out.push(InitiatorComparison {
            workload: w.name.into(),
            ratio_iops: div(f.iops, s.iops),
            ratio_mib_per_s: div(f.mib_per_s, s.mib_per_s),
            ratio_mean_latency: div(f.mean_us, s.mean_us),
            ratio_p50_latency: div(f.p50_us, s.p50_us),
            ratio_p99_latency: div(f.p99_us, s.p99_us),
            ratio_initiator_cpu_per_io: div(
                f.initiator_cpu_s_per_million_ios,
                s.initiator_cpu_s_per_million_ios,
            ),
            ratio_node_cpu_per_io: div(f.node_cpu_s_per_million_ios, s.node_cpu_s_per_million_ios),
            ferrobay: f,
            spdk: s,
        });
    }
    out
}

pub fn median_side(runs: &[&InitiatorRun]) -> Option<InitiatorSide> {
    if runs.is_empty() {
        return None;
    }
    let med = |f: &dyn Fn(&InitiatorRun) -> f64| median(runs.iter().map(|r| f(r)).collect());
    Some(InitiatorSide {
        runs: runs.len(),
        iops: med(&|r| r.iops),
        iops_min: runs.iter().map(|r| r.iops).fold(f64::INFINITY, f64::min),
        iops_max: runs.iter().map(|r| r.iops).fold(0.0, f64::max),
        mib_per_s: med(&|r| r.mib_per_s),
        mean_us: med(&|r| r.mean_us),
        p50_us: med(&|r| r.p50_us),
        p99_us: med(&|r| r.p99_us),
        initiator_cpu_s_per_million_ios: med(&|r| r.initiator_cpu_s_per_million_ios),
        initiator_cores: med(&|r| r.initiator_cores),
        node_cpu_s_per_million_ios: med(&|r| r.node_cpu_s_per_million_ios),
        other_cores_max: runs.iter().filter_map(|r| r.other_cores).reduce(f64::max),
    })
}

/// The human summary of this section (stderr).
pub fn render(title: &str, s: &InitiatorsSection) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "\n{title}: {}", s.description);
    if let Some(why) = &s.skipped {
        let _ = writeln!(out, "   skipped: {why}");
        return out;
    }
    let _ = writeln!(
        out,
        "   {:<18} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9}",
        "workload",
        "ferrobay",
        "spdk",
        "IOPS x",
        "p50 x",
        "p99 x",
        "MiB/s x",
        "init CPU x",
        "node CPU x"
    );
    for c in &s.comparisons {
        let _ = writeln!(
            out,
            "   {:<18} {:>10.0} {:>10.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>9.2}",
            c.workload,
            c.ferrobay.iops,
            c.spdk.iops,
            c.ratio_iops,
            c.ratio_p50_latency,
            c.ratio_p99_latency,
            c.ratio_mib_per_s,
            c.ratio_initiator_cpu_per_io,
            c.ratio_node_cpu_per_io
        );
    }
    for n in &s.interop_notes {
        let _ = writeln!(out, "   note: {n}");
    }
    if let Some(e) = &s.error {
        let _ = writeln!(out, "   error: {}", e.lines().next().unwrap_or(""));
    }
    out
}
