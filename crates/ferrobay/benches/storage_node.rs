//! Storage node benchmark (issue 2, "Measure"): 4 KiB random read and write at QD 32 and
//! 128 KiB sequential read against a RAM namespace over loopback, with the target's CPU
//! seconds per million I/Os, side by side with the best other target we can run here.
//!
//! ```text
//! cargo bench -p ferrobay --bench storage_node
//! ```
//!
//! Sections, all in one run:
//! - A. native: `ferrobay node` (this build's binary, a child process) with a RAM drive on
//!   127.0.0.1, measured from this process with `bench::run` over nvmf-host.
//! - B. guest: a QEMU guest (TCG) with *both* Linux's nvmet-tcp on a brd RAM disk and the
//!   same `ferrobay` binary on a RAM drive, on guest loopback, each driven by the same
//!   initiators inside the guest: `ferrobay bench` (nvmf-host) and the kernel's nvme-tcp
//!   host with fio. Ratios are ferrobay / kernel.
//! - C. SPDK: SPDK's `nvmf_tgt` (Malloc bdev, TCP, one polling reactor, `--no-huge`) and a
//!   second `ferrobay node`, both native on 127.0.0.1 with RAM namespaces of the same size,
//!   measured one at a time and alternately by the same initiator as A. Ratios are
//!   ferrobay / SPDK. Runs only when `FERROBAY_BENCH_SPDK_TGT` names an `nvmf_tgt` binary
//!   built outside this repo (nothing here fetches or builds SPDK); otherwise "not run" with
//!   the reason. A shared SPDK build (as with a packaged DPDK) gets `<bin>/../lib` on its
//!   `LD_LIBRARY_PATH`.
//!
//! - D. initiators: one `ferrobay node` with a RAM namespace, driven in turn by two
//!   initiator processes, `ferrobay bench` and SPDK's `spdk_nvme_perf` (4 KiB randread at
//!   QD 1/32/128, 4 KiB randwrite at QD 32, 128 KiB sequential read at QD 8), alternating;
//!   ratios are ferrobay / SPDK, with CPU per I/O of each initiator and of the node. Runs
//!   only when `FERROBAY_BENCH_SPDK_PERF` names a `spdk_nvme_perf` built outside this repo
//!   (`FERROBAY_BENCH_SPDK_PERF_ARGS`: more perf arguments); needs `stdbuf`.
//! - E. busy polling: an event-driven and a `--busy-poll-us` node, each driven by
//!   `ferrobay bench` without and with `--busy-poll-us` (QD 1 and the loads of A); ratios
//!   polling / event-driven for the target, the initiator and both
//!   (`FERROBAY_BENCH_POLL_US` sets the window, default 500; a smoke pass runs it only
//!   when `FERROBAY_BENCH_SECTIONS` names it).
//! - F. whole stack: `ferrobay bench` -> `ferrobay node` against `spdk_nvme_perf` ->
//!   SPDK's `nvmf_tgt`, alternating (the QD 1 latency goal); needs both SPDK binaries.
//!   With `FERROBAY_BENCH_NODE_ARGS` and `FERROBAY_BENCH_INITIATOR_ARGS` set to
//!   `--busy-poll-us 500`, both sides poll as SPDK's do.
//!
//! `FERROBAY_BENCH_SECTIONS` (e.g. `CF`) runs only the listed ones of C to F (A always
//! runs; B has its own switch).
//!
//! Output: JSON on stdout and in `target/bench/storage_node.json`, a table on stderr.
//! Environment: `FERROBAY_BENCH_SECS` (seconds per workload, default 5),
//! `FERROBAY_BENCH_ROUNDS` (runs per target and workload in B and C, default 2),
//! `FERROBAY_BENCH_GUEST=0` (skip B), `FERROBAY_BENCH_GUEST_FIO=0` (skip the kernel host in
//! B), `FERROBAY_BENCH_GUEST_NS_MB` (default 256), `FERROBAY_BENCH_SPDK_TGT` (run C with
//! this `nvmf_tgt`), `FERROBAY_BENCH_SPDK_CPUMASK` (its reactor mask, default 0x1),
//! `FERROBAY_BENCH_PIN=0` (by default, with two CPUs free, the ferrobay node of A, C, D
//! and F runs on the CPUs of that mask and `ferrobay bench` in D and F on perf's `-c` CPU,
//! placed as SPDK's processes are),
//! `FERROBAY_BENCH_SPDK_ARGS` (more `nvmf_tgt` arguments, e.g. `--interrupt-mode`),
//! `FERROBAY_BENCH_NODE_ARGS` (more `node run` arguments in A, C and D, e.g.
//! `--busy-poll-us 500`), `FERROBAY_BENCH_INITIATOR_ARGS` (more `ferrobay bench`
//! arguments in D),
//! `FERROBAY_BIN` (binary to measure), `FERROBAY_BENCH_OUT` (JSON path). Without `--bench`
//! (e.g. `cargo test --benches`) it runs a short native smoke pass (and C, if asked for)
//! and writes no file.

#[path = "storage_node/files.rs"]
mod files;
#[path = "storage_node/guest.rs"]
mod guest;
#[path = "storage_node/initiators.rs"]
mod initiators;
#[path = "storage_node/load.rs"]
mod load;
#[path = "storage_node/native.rs"]
mod native;
#[path = "storage_node/polling.rs"]
mod polling;
#[path = "storage_node/spdk.rs"]
mod spdk;
#[path = "storage_node/spdk_target.rs"]
mod spdk_target;
#[path = "storage_node/table.rs"]
mod table;
#[path = "storage_node/workload.rs"]
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;

pub use workload::{Settings, WORKLOADS, Workload};

/// Version of the JSON layout below.
const SCHEMA: &str = "ferrobay.bench.storage_node/4";

#[derive(Debug, Serialize)]
struct Output {
    schema: &'static str,
    mode: &'static str,
    command: String,
    machine: Machine,
    settings: Settings,
    native: native::NativeSection,
    guest: guest::GuestSection,
    spdk: spdk::SpdkSection,
    initiators: initiators::InitiatorsSection,
    polling: polling::PollingSection,
    whole_stack: initiators::InitiatorsSection,
}

#[derive(Debug, Serialize)]
struct Machine {
    cpus: usize,
    kernel: String,
    binary: String,
}

fn main() -> ExitCode {
    let full = std::env::args().any(|a| a == "--bench");
    let settings = Settings::from_env(full);
    let binary = ferrobay_binary();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("storage_node bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };

    eprintln!(
        "storage_node bench: {} s per workload, binary {}",
        settings.runtime_s,
        binary.display()
    );
    let native = runtime.block_on(native::run(&binary, &settings));
    let only = workload::env_string("FERROBAY_BENCH_SECTIONS");
    let skip = |section: char| {
        let only = only.as_deref()?;
        (!only.contains(section)).then(|| format!("FERROBAY_BENCH_SECTIONS={only}"))
    };
    let spdk = match skip('C') {
        Some(why) => spdk::SpdkSection::skipped(&why),
        None => runtime.block_on(spdk::run(&binary, &settings)),
    };
    let initiators = match skip('D') {
        Some(why) => initiators::InitiatorsSection::skipped(why),
        None => initiators::run(&binary, &settings),
    };
    let polling = match skip('E') {
        None if full || only.is_some() => polling::run(&binary, &settings),
        why => polling::PollingSection {
            skipped: Some(why.unwrap_or_else(|| {
                "smoke run (no --bench; FERROBAY_BENCH_SECTIONS=E runs it)".into()
            })),
            ..Default::default()
        },
    };
    let whole_stack = match skip('F') {
        Some(why) => initiators::InitiatorsSection::skipped(why),
        None => initiators::run_whole_stack(&binary, &settings),
    };
    let guest = if settings.guest {
        guest::run(&binary, &settings)
    } else {
        guest::GuestSection::skipped(if full {
            "FERROBAY_BENCH_GUEST=0"
        } else {
            "smoke run (no --bench)"
        })
    };

    let out = Output {
        schema: SCHEMA,
        mode: if full { "bench" } else { "smoke" },
        command: "cargo bench -p ferrobay --bench storage_node".into(),
        machine: Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            binary: binary.display().to_string(),
        },
        settings,
        native,
        guest,
        spdk,
        initiators,
        polling,
        whole_stack,
    };
    let json = match serde_json::to_string_pretty(&out) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("storage_node bench: cannot encode the report: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{json}");
    if full {
        let path = testkit::bench::output_path(
            "FERROBAY_BENCH_OUT",
            env!("CARGO_TARGET_TMPDIR"),
            "storage_node.json",
        );
        match testkit::bench::write_report(&path, &json) {
            Ok(()) => eprintln!("storage_node bench: wrote {}", path.display()),
            Err(e) => eprintln!("storage_node bench: cannot write {}: {e}", path.display()),
        }
    }
    eprint!("{}", table::render(&out.native, &out.guest, &out.spdk));
    eprint!("{}", initiators::render("D. initiators", &out.initiators));
    eprint!("{}", initiators::render("F. whole stack", &out.whole_stack));
    eprint!("{}", polling::render(&out.polling));

    let failed = out.native.error.is_some()
        || out.guest.error.is_some()
        || out.spdk.error.is_some()
        || out.initiators.error.is_some()
        || out.polling.error.is_some()
        || out.whole_stack.error.is_some();
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The binary under test: `FERROBAY_BIN`, else the one cargo built for this bench (release
/// under `cargo bench`).
fn ferrobay_binary() -> PathBuf {
    match std::env::var_os("FERROBAY_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_ferrobay")),
    }
}

/// A scratch directory under the target dir (tmpfs may refuse O_DIRECT; RAM drives do not
/// care, but node state files are fsynced).
fn scratch_dir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&base)?;
    tempfile::Builder::new().prefix(prefix).tempdir_in(base)
}
