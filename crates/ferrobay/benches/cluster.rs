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
//! (processor lease TTL, default 2000), `FERROBAY_BENCH_SECTIONS` (which sections, e.g.
//! `3` for failover only; default all), `FERROBAY_BENCH_FAILOVERS` (kill rounds, default
//! 4: odd rounds write a 64 MiB hot range, even rounds the whole volume; each round first
//! waits for the owner's write-intent bitmap to come clean),
//! `FERROBAY_BENCH_PROCESSOR_ARGS` (more `processor run` arguments, e.g. `--busy-poll-us
//! 500`), `FERROBAY_BIN` (binary to measure). Without `--bench` (`cargo test -p ferrobay`: the
//! bench is a test target too) it runs a short smoke pass and writes no file; without
//! etcd that pass says it did not run (`testkit::prereq`).
//!
//! Files: `cluster/daemons.rs` (the cluster's processes and the commands that manage it),
//! `settings.rs`, `cpu.rs` (CPU sampling), `load.rs` (devices, measured runs, medians),
//! one file per section (`volume_vs_member.rs`, `scaling.rs`, `failover.rs` with
//! `watched.rs`, the device wrapper, `io_gap.rs` and `exact_check.rs`), `report.rs`
//! (JSON document and tables).

#[allow(dead_code)] // the tests use more of it
#[path = "../tests/common/cluster.rs"]
mod cluster;
#[path = "cluster/cpu.rs"]
mod cpu;
#[path = "cluster/daemons.rs"]
mod daemons;
#[path = "cluster/exact_check.rs"]
mod exact_check;
#[path = "cluster/failover.rs"]
mod failover;
#[path = "cluster/io_gap.rs"]
mod io_gap;
#[path = "cluster/load.rs"]
mod load;
#[path = "cluster/report.rs"]
mod report;
#[path = "cluster/scaling.rs"]
mod scaling;
#[path = "cluster/settings.rs"]
mod settings;
#[path = "cluster/volume_vs_member.rs"]
mod volume_vs_member;
#[path = "cluster/watched.rs"]
mod watched;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use daemons::Cluster;
use failover::{Failover, section_failover};
use load::{open, precondition};
use report::{Machine, Output, summary};
use scaling::{Scaling, section_scaling};
use settings::Settings;
use volume_vs_member::{VolumeVsMember, section_volume_vs_member};

/// Version of the JSON layout below.
const SCHEMA: &str = "ferrobay.bench.cluster/1";
const VOL_A: &str = "bench-a";
const VOL_B: &str = "bench-b";

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

    if s.runs(1) {
        eprintln!("cluster bench: 1. RAID-5 volume vs member namespace");
        if let Err(e) = section_volume_vs_member(c, s, &rec_a, &mut o.volume_vs_member).await {
            eprintln!("cluster bench: section 1 failed: {e:#}");
            o.volume_vs_member.error = Some(format!("{e:#}"));
        }
    }

    if s.runs(2) {
        scaling_section(c, s, o).await;
    }

    if s.runs(3) {
        eprintln!("cluster bench: 3. failover");
        if let Err(e) = section_failover(c, s, &rec_a, &mut o.failover).await {
            eprintln!("cluster bench: section 3 failed: {e:#}");
            o.failover.error = Some(format!("{e:#}"));
        }
    }
    Ok(())
}

async fn scaling_section(c: &mut Cluster, s: &Settings, o: &mut Output) {
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
    // In the test suite (smoke mode) a machine without etcd skips, by the one policy.
    if !full && let Err(why) = meta::testing::EtcdServer::find_binary() {
        testkit::prereq::missing(why);
        return ExitCode::SUCCESS;
    }
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
            let path = testkit::bench::output_path(
                "FERROBAY_BENCH_CLUSTER_OUT",
                env!("CARGO_TARGET_TMPDIR"),
                "cluster.json",
            );
            match testkit::bench::write_report(&path, &json) {
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
