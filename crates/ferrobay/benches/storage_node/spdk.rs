//! Section C: SPDK's `nvmf_tgt` and `ferrobay node`, both native on 127.0.0.1 with a RAM
//! namespace of the same size, driven by the same initiator as section A (`bench::run` over
//! nvmf-host in this process), one target at a time, the target that goes first
//! alternating from workload to workload and round to round. Runs only when
//! `FERROBAY_BENCH_SPDK_TGT` names an `nvmf_tgt` binary (built outside this repo).
//!
//! Each turn connects, measures, shuts the controller down (CC.SHN) and disconnects.
//! SPDK's reactor polls its core at 100 % even when idle, so the target is stopped
//! (SIGSTOP) outside its own turns: otherwise it would take one of this machine's two
//! cores from ferrobay's runs.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bench::{CpuTime, Progress, Report};
use blockdev::BlockDevice;
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl, RemoteNamespace};
use serde::Serialize;
use testkit::stats::median;

use crate::Settings;
use crate::native::{NODE_NAME, NodeChild, per_million};
use crate::spdk_target::{SPDK_NQN, SpdkChild};
use crate::workload::{PRECONDITION, Workload};

/// A run is quiet when the rest of the machine took at most this many cores meanwhile.
const QUIET_OTHER_CORES: f64 = 0.15;

const MAX_LOG_PROBLEMS: usize = 20;

/// Lets the target finish tearing the queues down before it is stopped.
const SETTLE: Duration = Duration::from_millis(200);

pub const CPU_NOTE: &str = "target_cpu_s is the target process's user+system CPU from \
    /proc/PID/stat over the measured run. SPDK's reactor busy-polls its core(s), so for SPDK \
    this is about wall time x reactor cores whatever the load: its CPU per I/O is the core \
    time it holds, and iops_per_target_cpu_s is its IOPS per core it occupies. \
    target_busy_s (SPDK only) is the time its pollers did work: the \
    share of its reactors' loop time that did work (framework_get_reactors busy / (busy + \
    idle)) times its process CPU: roughly what an event-driven SPDK would spend. (The busy \
    ticks alone count wall time, including time the OS gave the core to other work.) \
    ferrobay's node sleeps in epoll when idle, so its process CPU is its work.";

/// One measured run of one target.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// `ferrobay` or `spdk`.
    pub target: String,
    pub workload: String,
    pub round: u32,
    /// 0: this target went first for this workload and round.
    pub position: u32,
    pub report: Report,
    pub target_cpu_s: f64,
    pub target_cpu_s_per_million_ios: f64,
    /// SPDK: busy / (busy + idle) of its reactors' ticks over the run.
    pub target_busy_fraction: Option<f64>,
    /// SPDK: that fraction of its process CPU, the time its pollers did work.
    pub target_busy_s: Option<f64>,
    pub target_busy_s_per_million_ios: Option<f64>,
    /// I/Os per second of target process CPU.
    pub iops_per_target_cpu_s: f64,
    /// Cores the target process used on average (CPU s / elapsed s).
    pub target_cores: f64,
    pub initiator_cpu_s_per_million_ios: f64,
    /// Cores the rest of the machine kept busy meanwhile (process CPU of all CPUs less
    /// this process and the target): other people's builds and benchmarks on this shared
    /// machine.
    pub other_cores: Option<f64>,
    /// Cores in irq and softirq meanwhile: mostly the loopback TCP stack working for
    /// both ends, charged to neither process.
    pub irq_cores: Option<f64>,
}

/// Medians over one target's rounds of one workload (the machine is shared: a median
/// shrugs off a round that someone else's build slowed down).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Side {
    pub runs: usize,
    pub iops: f64,
    pub iops_min: f64,
    pub iops_max: f64,
    pub mb_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub target_cpu_s_per_million_ios: f64,
    pub target_busy_s_per_million_ios: Option<f64>,
    pub iops_per_target_cpu_s: f64,
    pub target_cores: f64,
    pub initiator_cpu_s_per_million_ios: f64,
    /// The most that other work on the machine took during one of these runs.
    pub other_cores_max: Option<f64>,
    pub irq_cores: Option<f64>,
}

/// ferrobay against SPDK for one workload; ratios are ferrobay / SPDK of the medians (above
/// 1: ferrobay has more IOPS, higher latency, more CPU per I/O).
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub workload: String,
    pub ferrobay: Side,
    pub spdk: Side,
    pub ratio_iops: f64,
    pub ratio_mb_per_s: f64,
    pub ratio_p50_latency: f64,
    pub ratio_p99_latency: f64,
    /// Process CPU per I/O, ferrobay / SPDK (SPDK's includes its idle polling).
    pub ratio_target_cpu_per_io: f64,
    /// ferrobay's process CPU per I/O / SPDK's busy time per I/O.
    pub ratio_target_cpu_per_io_vs_spdk_busy: Option<f64>,
    pub ratio_iops_per_target_cpu_s: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct SpdkSection {
    pub ran: bool,
    pub skipped: Option<String>,
    pub description: String,
    pub spdk_binary: String,
    pub spdk_version: String,
    pub spdk_args: Vec<String>,
    pub spdk_url: String,
    pub ferrobay_url: String,
    pub cpu_note: &'static str,
    pub precondition: Vec<Run>,
    pub results: Vec<Run>,
    pub comparisons: Vec<Comparison>,
    /// The same from the quiet runs only: those during which other work on the machine
    /// took at most `quiet_other_cores_max` cores (workloads without a quiet run of both
    /// targets are left out).
    pub comparisons_quiet: Vec<Comparison>,
    pub quiet_other_cores_max: f64,
    /// Anything the initiator met with SPDK that was not plain success (e.g. shutdown).
    pub interop_notes: Vec<String>,
    /// Error and warning lines of SPDK's log (the first few): its view of our initiator.
    pub spdk_log_problems: Vec<String>,
    pub error: Option<String>,
}

impl SpdkSection {
    pub fn skipped(why: &str) -> SpdkSection {
        SpdkSection {
            skipped: Some(why.to_string()),
            cpu_note: CPU_NOTE,
            ..SpdkSection::default()
        }
    }
}

pub async fn run(binary: &Path, settings: &Settings) -> SpdkSection {
    let Some(tgt) = settings.spdk_tgt.as_deref() else {
        return SpdkSection::skipped(
            "FERROBAY_BENCH_SPDK_TGT is not set: point it at an SPDK nvmf_tgt binary built \
             outside this repo (nothing here fetches or builds SPDK)",
        );
    };
    let mut section = SpdkSection {
        ran: true,
        spdk_binary: tgt.to_string(),
        cpu_note: CPU_NOTE,
        ..SpdkSection::default()
    };
    eprintln!("storage_node bench: spdk: {tgt} vs {}", binary.display());
    if let Err(e) = measure(binary, Path::new(tgt), settings, &mut section).await {
        eprintln!("storage_node bench: spdk section failed: {e}");
        section.error = Some(e);
    }
    section.comparisons = compare(&section.results, settings);
    let quiet: Vec<Run> = section
        .results
        .iter()
        .filter(|r| r.other_cores.is_some_and(|o| o <= QUIET_OTHER_CORES))
        .cloned()
        .collect();
    section.comparisons_quiet = compare(&quiet, settings);
    section.quiet_other_cores_max = QUIET_OTHER_CORES;
    section
}

/// The two targets of the section.
struct Targets {
    node: NodeChild,
    spdk: SpdkChild,
    node_url: String,
    spdk_url: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Ferrobay,
    Spdk,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Ferrobay => "ferrobay",
            Which::Spdk => "spdk",
        }
    }
}

async fn measure(
    binary: &Path,
    tgt: &Path,
    settings: &Settings,
    section: &mut SpdkSection,
) -> Result<(), String> {
    let dir = crate::scratch_dir("bench-spdk").map_err(|e| format!("scratch dir: {e}"))?;
    let node = NodeChild::native(binary, dir.path(), settings)?;
    let mut spdk = SpdkChild::start(tgt, dir.path(), settings)?;
    spdk.pause()?;
    let mut t = Targets {
        node_url: format!(
            "nvme+tcp://{}/nqn.2026-01.io.ferrobay:{NODE_NAME}:d0/1",
            node.nvme_addr
        ),
        spdk_url: format!("nvme+tcp://{}/{SPDK_NQN}/1", spdk.addr),
        node,
        spdk,
    };
    section.spdk_version = t.spdk.version.clone();
    section.spdk_args = t.spdk.args.clone();
    section.spdk_url = t.spdk_url.clone();
    section.ferrobay_url = t.node_url.clone();
    section.description = format!(
        "native 127.0.0.1, one target at a time, same initiator (nvmf-host, {} I/O queues): \
         ferrobay node --drive {} vs SPDK nvmf_tgt ({}; reactor mask {}, Malloc bdev {} MiB of \
         512 B blocks, TCP transport defaults, --no-huge); SPDK is stopped outside its turns",
        settings.io_queues,
        settings.native_drive,
        if t.spdk.version.is_empty() {
            "version unknown"
        } else {
            &t.spdk.version
        },
        settings.spdk_cpumask,
        settings.ram_ns_mb
    );

    for which in [Which::Ferrobay, Which::Spdk] {
        eprintln!(
            "storage_node bench: spdk: {} precondition ({})",
            which.name(),
            PRECONDITION.name
        );
        let r = turn(&mut t, which, &PRECONDITION, 0, 0, 0, settings, section).await?;
        section.precondition.push(r);
    }
    for round in 0..settings.rounds {
        for (i, w) in settings.workloads.iter().enumerate() {
            let order = if (round as usize + i).is_multiple_of(2) {
                [Which::Ferrobay, Which::Spdk]
            } else {
                [Which::Spdk, Which::Ferrobay]
            };
            for (position, which) in order.into_iter().enumerate() {
                let r = turn(
                    &mut t,
                    which,
                    w,
                    settings.runtime_ms(),
                    round,
                    position as u32,
                    settings,
                    section,
                )
                .await?;
                eprintln!(
                    "  {:<8} {:<18} round {round}: {:.0} IOPS {:.1} MB/s, target {:.2} CPU s/MIO{}",
                    which.name(),
                    w.name,
                    r.report.iops,
                    r.report.mb_per_s,
                    r.target_cpu_s_per_million_ios,
                    r.target_busy_s_per_million_ios
                        .map_or(String::new(), |b| format!(" ({b:.2} busy)"))
                );
                section.results.push(r);
            }
        }
    }
    section.spdk_log_problems = t.spdk.log_problems(MAX_LOG_PROBLEMS);
    t.spdk.stop();
    t.node.stop();
    Ok(())
}

/// Connects to one target, runs `w`, shuts the controller down; SPDK runs only meanwhile.
#[allow(clippy::too_many_arguments)]
async fn turn(
    t: &mut Targets,
    which: Which,
    w: &Workload,
    runtime_ms: u64,
    round: u32,
    position: u32,
    settings: &Settings,
    section: &mut SpdkSection,
) -> Result<Run, String> {
    let url = match which {
        Which::Ferrobay => t.node_url.clone(),
        Which::Spdk => {
            t.spdk.resume()?;
            t.spdk_url.clone()
        }
    };
    let log_tail = |t: &Targets| match which {
        Which::Ferrobay => t.node.log_tail(),
        Which::Spdk => t.spdk.log_tail(),
    };
    let pid = match which {
        Which::Ferrobay => t.node.pid(),
        Which::Spdk => t.spdk.pid(),
    };
    let cpu = || {
        CpuTime::of_pid(pid)
            .ok_or_else(|| format!("cannot read /proc/{pid}/stat of {}", which.name()))
    };

    let ns = open(&url, settings.io_queues)
        .await
        .map_err(|e| format!("{e}\n{}", log_tail(t)))?;
    let dev: Arc<dyn BlockDevice> = ns.clone();
    let busy0 = match which {
        Which::Spdk => Some(t.spdk.reactor_ticks()?),
        Which::Ferrobay => None,
    };
    let cpu0 = cpu()?;
    let machine0 = crate::load::machine_cpu();
    let report = bench::run(dev, &w.config(runtime_ms), &url, &Progress::Silent)
        .await
        .map_err(|e| format!("{} {}: {e}\n{}", which.name(), w.name, log_tail(t)))?;
    let cpu1 = cpu()?;
    let machine1 = crate::load::machine_cpu();
    let busy_fraction = match (which, busy0) {
        (Which::Spdk, Some(b0)) => t.spdk.reactor_ticks()?.busy_fraction_since(&b0),
        _ => None,
    };
    if let Err(e) = ns.controller().shutdown().await {
        let note = format!(
            "{}: controller shutdown after {}: {e}",
            which.name(),
            w.name
        );
        eprintln!("storage_node bench: {note}");
        section.interop_notes.push(note);
    }
    drop(ns);
    if which == Which::Spdk {
        tokio::time::sleep(SETTLE).await;
        t.spdk.pause()?;
    }
    if report.errors > 0 {
        return Err(format!(
            "{} {}: {} I/O errors, first: {}\n{}",
            which.name(),
            w.name,
            report.errors,
            report.first_error.as_deref().unwrap_or("?"),
            log_tail(t)
        ));
    }

    let ios = (report.read_ios + report.write_ios) as f64;
    let target_cpu_s = cpu1.since(&cpu0).total().as_secs_f64();
    let busy_s = busy_fraction.map(|f| f * target_cpu_s);
    let machine = match (machine0, machine1) {
        (Some(m0), Some(m1)) if report.elapsed_s > 0.0 => Some(m1 - m0),
        _ => None,
    };
    Ok(Run {
        target: which.name().into(),
        workload: w.name.into(),
        round,
        position,
        target_cpu_s,
        target_cpu_s_per_million_ios: per_million(target_cpu_s, ios),
        target_busy_fraction: busy_fraction,
        target_busy_s: busy_s,
        target_busy_s_per_million_ios: busy_s.map(|b| per_million(b, ios)),
        iops_per_target_cpu_s: if target_cpu_s > 0.0 {
            ios / target_cpu_s
        } else {
            0.0
        },
        target_cores: if report.elapsed_s > 0.0 {
            target_cpu_s / report.elapsed_s
        } else {
            0.0
        },
        initiator_cpu_s_per_million_ios: report.cpu_s_per_million_ios,
        other_cores: machine
            .map(|m| (m.process_s - target_cpu_s - report.cpu_s).max(0.0) / report.elapsed_s),
        irq_cores: machine.map(|m| m.irq_s / report.elapsed_s),
        report,
    })
}

async fn open(url: &str, io_queues: u16) -> Result<Arc<RemoteNamespace>, String> {
    let u = NvmeTcpUrl::parse(url).map_err(|e| e.to_string())?;
    let host = HostIdentity::system().map_err(|e| format!("host identity: {e}"))?;
    let opts = ConnectOptions {
        io_queues,
        ..ConnectOptions::default()
    };
    let ns = u
        .open(&host, &opts)
        .await
        .map_err(|e| format!("connect {url}: {e}"))?;
    Ok(Arc::new(ns))
}

fn compare(results: &[Run], settings: &Settings) -> Vec<Comparison> {
    let div = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let mut out = Vec::new();
    for w in &settings.workloads {
        let side = |t: &str| {
            let runs: Vec<&Run> = results
                .iter()
                .filter(|r| r.target == t && r.workload == w.name)
                .collect();
            median_side(&runs)
        };
        let (Some(f), Some(s)) = (side("ferrobay"), side("spdk")) else {
            continue;
        };
        out.push(Comparison {
            workload: w.name.to_string(),
            ratio_iops: div(f.iops, s.iops),
            ratio_mb_per_s: div(f.mb_per_s, s.mb_per_s),
            ratio_p50_latency: div(f.p50_us, s.p50_us),
            ratio_p99_latency: div(f.p99_us, s.p99_us),
            ratio_target_cpu_per_io: div(
                f.target_cpu_s_per_million_ios,
                s.target_cpu_s_per_million_ios,
            ),
            ratio_target_cpu_per_io_vs_spdk_busy: s
                .target_busy_s_per_million_ios
                .map(|b| div(f.target_cpu_s_per_million_ios, b)),
            ratio_iops_per_target_cpu_s: div(f.iops_per_target_cpu_s, s.iops_per_target_cpu_s),
            ferrobay: f,
            spdk: s,
        });
    }
    out
}

fn median_side(runs: &[&Run]) -> Option<Side> {
    if runs.is_empty() {
        return None;
    }
    let med = |f: &dyn Fn(&Run) -> f64| median(runs.iter().map(|r| f(r)).collect());
    let lat = |r: &Run| {
        if r.report.read_ios >= r.report.write_ios {
            r.report.read_latency.clone()
        } else {
            r.report.write_latency.clone()
        }
    };
    let busy: Option<Vec<f64>> = runs
        .iter()
        .map(|r| r.target_busy_s_per_million_ios)
        .collect();
    Some(Side {
        runs: runs.len(),
        iops: med(&|r| r.report.iops),
        iops_min: runs
            .iter()
            .map(|r| r.report.iops)
            .fold(f64::INFINITY, f64::min),
        iops_max: runs.iter().map(|r| r.report.iops).fold(0.0, f64::max),
        mb_per_s: med(&|r| r.report.mb_per_s),
        p50_us: med(&|r| lat(r).p50_us),
        p99_us: med(&|r| lat(r).p99_us),
        target_cpu_s_per_million_ios: med(&|r| r.target_cpu_s_per_million_ios),
        target_busy_s_per_million_ios: busy.map(median),
        iops_per_target_cpu_s: med(&|r| r.iops_per_target_cpu_s),
        target_cores: med(&|r| r.target_cores),
        initiator_cpu_s_per_million_ios: med(&|r| r.initiator_cpu_s_per_million_ios),
        other_cores_max: runs.iter().filter_map(|r| r.other_cores).reduce(f64::max),
        irq_cores: runs
            .iter()
            .map(|r| r.irq_cores)
            .collect::<Option<Vec<f64>>>()
            .map(median),
    })
}
