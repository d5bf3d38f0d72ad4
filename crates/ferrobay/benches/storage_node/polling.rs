//! Section E: busy polling (issue 15). Two `ferrobay node`s with RAM namespaces on
//! 127.0.0.1, one event-driven (the default) and one with `--busy-poll-us`, each driven by
//! `ferrobay bench` processes, event-driven and with `--busy-poll-us`: four pairings per
//! workload and round, their order rotating from workload to workload and round to round.
//! Ratios are polling / event-driven of the medians: the target's (polling node,
//! event-driven initiator), the initiator's (event-driven node, polling initiator) and the
//! whole stack's (both polling), each against both event-driven.
//!
//! Runs under `--bench` (in a smoke pass only when `FERROBAY_BENCH_SECTIONS` names E);
//! `FERROBAY_BENCH_POLL_US` sets the window (default 500).

use std::path::Path;

use serde::Serialize;

use crate::initiators::{FerrobayBench, InitiatorRun, InitiatorSide, median_side, print_run};
use crate::native::NodeChild;
use crate::workload::{WORKLOADS, Workload, env_string};
use crate::{Settings, workload};

/// Queue depth 1 (the latency goal) and the loads of section A.
pub const POLL_WORKLOADS: [Workload; 5] = [
    Workload {
        name: "randread_4k_qd1",
        rw: "randread",
        block_size_bytes: 4096,
        iodepth: 1,
    },
    Workload {
        name: "randwrite_4k_qd1",
        rw: "randwrite",
        block_size_bytes: 4096,
        iodepth: 1,
    },
    // randread_4k_qd32, randwrite_4k_qd32, seqread_128k_qd8
    WORKLOADS[0],
    WORKLOADS[1],
    WORKLOADS[2],
];

const DEFAULT_WINDOW_US: u32 = 500;

/// Who polls in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pairing {
    pub node_polls: bool,
    pub initiator_polls: bool,
}

const PAIRINGS: [Pairing; 4] = [
    Pairing {
        node_polls: false,
        initiator_polls: false,
    },
    Pairing {
        node_polls: true,
        initiator_polls: false,
    },
    Pairing {
        node_polls: false,
        initiator_polls: true,
    },
    Pairing {
        node_polls: true,
        initiator_polls: true,
    },
];

impl Pairing {
    fn name(self) -> &'static str {
        match (self.node_polls, self.initiator_polls) {
            (false, false) => "event/event",
            (true, false) => "poll node",
            (false, true) => "poll initiator",
            (true, true) => "poll/poll",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PollRun {
    pub pairing: Pairing,
    #[serde(flatten)]
    pub run: InitiatorRun,
}

/// Polling / event-driven of the medians (below 1 for latency and CPU: polling is lower).
#[derive(Debug, Clone, Default, Serialize)]
pub struct PollRatios {
    pub iops: f64,
    pub mib_per_s: f64,
    pub p50_latency: f64,
    pub p99_latency: f64,
    pub initiator_cpu_per_io: f64,
    pub node_cpu_per_io: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PollComparison {
    pub workload: String,
    pub event_driven: InitiatorSide,
    pub node_polling: InitiatorSide,
    pub initiator_polling: InitiatorSide,
    pub both_polling: InitiatorSide,
    /// Polling node / event-driven node, both driven by the event-driven initiator.
    pub ratio_target: PollRatios,
    /// Polling initiator / event-driven initiator, both against the event-driven node.
    pub ratio_initiator: PollRatios,
    /// Both polling / both event-driven.
    pub ratio_whole_stack: PollRatios,
}

#[derive(Debug, Default, Serialize)]
pub struct PollingSection {
    pub ran: bool,
    pub skipped: Option<String>,
    pub description: String,
    pub window_us: u32,
    pub runs: Vec<PollRun>,
    pub comparisons: Vec<PollComparison>,
    pub error: Option<String>,
}

/// Runs section E (blocking); failures end up in `error` with whatever was measured.
pub fn run(binary: &Path, settings: &Settings) -> PollingSection {
    let window_us = env_string("FERROBAY_BENCH_POLL_US")
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&v| v > 0 && v <= blockdev::MAX_BUSY_POLL_US)
        .unwrap_or(DEFAULT_WINDOW_US);
    let mut section = PollingSection {
        ran: true,
        window_us,
        ..PollingSection::default()
    };
    if let Err(e) = measure(binary, settings, &mut section) {
        eprintln!("storage_node bench: polling section failed: {e}");
        section.error = Some(e);
    }
    section.comparisons = compare(&section.runs);
    section
}

fn measure(binary: &Path, settings: &Settings, section: &mut PollingSection) -> Result<(), String> {
    let host = nvmf_host::HostIdentity::system().map_err(|e| format!("host identity: {e}"))?;
    let dir = crate::scratch_dir("bench-poll").map_err(|e| format!("scratch dir: {e}"))?;
    let poll_arg = vec!["--busy-poll-us".to_string(), section.window_us.to_string()];
    let event_node = NodeChild::start(binary, &dir.path().join("event"), &settings.native_drive)?;
    let poll_node = NodeChild::start_with(
        binary,
        &dir.path().join("poll"),
        &settings.native_drive,
        &poll_arg,
        &[],
    )?;
    let nqn = format!("nqn.2026-01.io.ferrobay:{}:d0", crate::native::NODE_NAME);
    let urls = [
        format!("nvme+tcp://{}/{nqn}/1", event_node.nvme_addr),
        format!("nvme+tcp://{}/{nqn}/1", poll_node.nvme_addr),
    ];
    let run_s = settings.runtime_s.round().max(1.0) as u64;
    section.description = format!(
        "two ferrobay nodes --drive {} on 127.0.0.1, one event-driven, one --busy-poll-us {}; \
         ferrobay bench processes (1 job, default I/O queues) without and with \
         --busy-poll-us {}; {} s per run, {} rounds",
        settings.native_drive, section.window_us, section.window_us, run_s, settings.rounds
    );
    let bench = |p: Pairing| FerrobayBench {
        binary,
        url: &urls[usize::from(p.node_polls)],
        hostnqn: &host.hostnqn,
        node: if p.node_polls {
            &poll_node
        } else {
            &event_node
        },
        extra_args: if p.initiator_polls { &poll_arg } else { &[] },
        cpus: &[],
    };
    // Every block written once on each node, so reads never hit never-written memory.
    eprintln!("storage_node bench: polling: precondition (one pass per node)");
    for node_polls in [false, true] {
        bench(Pairing {
            node_polls,
            initiator_polls: false,
        })
        .run(&workload::PRECONDITION, None)?;
    }
    for round in 0..settings.rounds {
        for (i, w) in POLL_WORKLOADS.iter().enumerate() {
            let first = (round as usize + i) % PAIRINGS.len();
            for k in 0..PAIRINGS.len() {
                let p = PAIRINGS[(first + k) % PAIRINGS.len()];
                let mut run = bench(p).run(w, Some(run_s))?;
                run.round = round;
                run.position = k as u32;
                print_run(p.name(), w.name, round, &run);
                section.runs.push(PollRun { pairing: p, run });
            }
        }
    }
    event_node.stop();
    poll_node.stop();
    Ok(())
}

fn compare(runs: &[PollRun]) -> Vec<PollComparison> {
    let mut out = Vec::new();
    for w in &POLL_WORKLOADS {
        let side = |p: Pairing| {
            let rs: Vec<&InitiatorRun> = runs
                .iter()
                .filter(|r| r.pairing == p && r.run.workload == w.name)
                .map(|r| &r.run)
                .collect();
            median_side(&rs)
        };
        let (Some(ee), Some(pe), Some(ep), Some(pp)) = (
            side(PAIRINGS[0]),
            side(PAIRINGS[1]),
            side(PAIRINGS[2]),
            side(PAIRINGS[3]),
        ) else {
            continue;
        };
        out.push(PollComparison {
            workload: w.name.into(),
            ratio_target: ratios(&pe, &ee),
            ratio_initiator: ratios(&ep, &ee),
            ratio_whole_stack: ratios(&pp, &ee),
            event_driven: ee,
            node_polling: pe,
            initiator_polling: ep,
            both_polling: pp,
        });
    }
    out
}

fn ratios(a: &InitiatorSide, b: &InitiatorSide) -> PollRatios {
    let div = |x: f64, y: f64| if y > 0.0 { x / y } else { f64::NAN };
    PollRatios {
        iops: div(a.iops, b.iops),
        mib_per_s: div(a.mib_per_s, b.mib_per_s),
        p50_latency: div(a.p50_us, b.p50_us),
        p99_latency: div(a.p99_us, b.p99_us),
        initiator_cpu_per_io: div(
            a.initiator_cpu_s_per_million_ios,
            b.initiator_cpu_s_per_million_ios,
        ),
        node_cpu_per_io: div(a.node_cpu_s_per_million_ios, b.node_cpu_s_per_million_ios),
    }
}

/// The human summary of this section (stderr).
pub fn render(s: &PollingSection) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "\nE. busy polling: {}", s.description);
    if let Some(why) = &s.skipped {
        let _ = writeln!(out, "   skipped: {why}");
        return out;
    }
    let _ = writeln!(
        out,
        "   {:<18} {:>9} {:>8} | {:>13} | {:>13} | {:>13}   (IOPS x, p50 x; polling / event)",
        "workload", "IOPS", "p50 us", "node", "initiator", "both"
    );
    for c in &s.comparisons {
        let _ = writeln!(
            out,
            "   {:<18} {:>9.0} {:>8.1} | {:>6.2} {:>6.2} | {:>6.2} {:>6.2} | {:>6.2} {:>6.2}",
            c.workload,
            c.event_driven.iops,
            c.event_driven.p50_us,
            c.ratio_target.iops,
            c.ratio_target.p50_latency,
            c.ratio_initiator.iops,
            c.ratio_initiator.p50_latency,
            c.ratio_whole_stack.iops,
            c.ratio_whole_stack.p50_latency,
        );
    }
    if let Some(e) = &s.error {
        let _ = writeln!(out, "   error: {}", e.lines().next().unwrap_or(""));
    }
    out
}
