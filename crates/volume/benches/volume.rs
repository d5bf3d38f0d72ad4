//! Volume engine throughput against its own members, side by side in one run.
//!
//! For each layout (RAID-5 on 4 members, RAID-6 and RS 4+2 on 6; 64 KiB stripe unit) and
//! each kind of member (O_DIRECT files through io_uring in `<target>/bench-tmp`, and RAM
//! disks, which show the engine's own cost without disk noise):
//! 1. the members alone, all at once: sequential write and read (stripe-unit I/Os at the
//!    volume's sequential queue depth each), 4 KiB random write and 50/50 random
//!    read/write (the volume's random queue depth spread over them), and one member's
//!    sequential write alone;
//! 2. the volume on the same members: full-stripe sequential writes (k x stripe unit),
//!    4 KiB random writes, sequential reads healthy, then with member 1 failed;
//! 3. a rebuild onto a spare unlimited, then (re-assembled with default options) at the
//!    default throttle, stopped after a cap.
//!
//! Ratios: full-stripe write vs the members' write sum (raw, at most k/n) and vs that sum
//! x k/n (efficiency); 4 KiB random write vs the members' IOPS / 2(1+m) (a small
//! read-modify-write reads and writes one data and m parity chunks: 4 member I/Os for
//! RAID-5); degraded vs healthy read; rebuild vs one member's write bandwidth.
//!
//! Output: JSON on stdout and in `<target>/bench/volume.json` (or `VOLUME_BENCH_OUT`), a
//! table on stderr. Knobs: `VOLUME_BENCH_QUICK=1` (1 s loads, 64 MiB members),
//! `VOLUME_BENCH_MEDIA=file,ram`, `VOLUME_BENCH_LEVELS=raid5,raid6,4+2`,
//! `VOLUME_BENCH_RUNTIME_MS`, `VOLUME_BENCH_MEMBER_MIB`, `VOLUME_BENCH_JOBS` (threads
//! submitting to the volume, default: one per core; each member alone gets one),
//! `VOLUME_BENCH_REBUILD_BATCH_KIB` (overrides the engine's rebuild batch),
//! `VOLUME_BENCH_REBUILD_CAP_MS` (the throttled rebuild is stopped after this long),
//! `VOLUME_BENCH_STEPS=base,write,randwrite,read,degraded,rebuild` (skipped steps report
//! zeroes; for profiling one path under `perf`).

#[path = "volume/case.rs"]
mod case;
#[path = "volume/measure.rs"]
mod measure;
#[path = "volume/members.rs"]
mod members;
#[path = "volume/result.rs"]
mod result;
#[path = "volume/table.rs"]
mod table;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;

use case::{Layout, Settings};
use members::Media;

/// Every step, in order (`VOLUME_BENCH_STEPS` picks some, e.g. to profile one path).
const STEPS: &str = "base,write,randwrite,read,degraded,rebuild";

pub type Error = Box<dyn std::error::Error + Send + Sync>;

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect()
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// `<target>` (the parent of `CARGO_TARGET_TMPDIR`, which cargo sets for benches).
fn target_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().map_or_else(|| tmp.clone(), PathBuf::from)
}

fn output_path() -> PathBuf {
    match std::env::var_os("VOLUME_BENCH_OUT").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => target_dir().join("bench").join("volume.json"),
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() -> ExitCode {
    let quick = std::env::var_os("VOLUME_BENCH_QUICK").is_some_and(|v| v != "0");
    let settings = Settings {
        member_bytes: env_u64("VOLUME_BENCH_MEMBER_MIB").unwrap_or(if quick { 64 } else { 256 })
            << 20,
        stripe_unit_bytes: 64 << 10,
        runtime_ms: env_u64("VOLUME_BENCH_RUNTIME_MS").unwrap_or(if quick { 1000 } else { 2000 }),
        seq_qd: 8,
        rand_qd: 32,
        vol_jobs: env_u64("VOLUME_BENCH_JOBS")
            .and_then(|j| u32::try_from(j).ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get() as u32))
            .clamp(1, 16),
        rebuild_batch_bytes: env_u64("VOLUME_BENCH_REBUILD_BATCH_KIB").map(|k| k << 10),
        steps: env_list("VOLUME_BENCH_STEPS", STEPS),
        rebuild_cap: env_u64("VOLUME_BENCH_REBUILD_CAP_MS").map_or(
            Duration::from_secs(if quick { 3 } else { 8 }),
            Duration::from_millis,
        ),
    };
    let mut media = Vec::new();
    for m in env_list("VOLUME_BENCH_MEDIA", "file,ram") {
        match Media::parse(&m) {
            Some(x) => media.push(x),
            None => {
                eprintln!("VOLUME_BENCH_MEDIA: unknown {m:?} (file, ram)");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut layouts = Vec::new();
    for l in env_list("VOLUME_BENCH_LEVELS", "raid5,raid6,4+2") {
        match Layout::parse(&l) {
            Some(x) => layouts.push(x),
            None => {
                eprintln!("VOLUME_BENCH_LEVELS: unsupported {l:?} (raid5, raid6, K+M)");
                return ExitCode::FAILURE;
            }
        }
    }
    let dir = target_dir()
        .join("bench-tmp")
        .join(format!("volume-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let load_before = load_average();
    let t0 = Instant::now();
    let mut results = Vec::new();
    let mut failed = false;
    for &md in &media {
        for &layout in &layouts {
            match rt.block_on(case::run(md, layout, &settings, &dir)) {
                Ok(r) => {
                    table::print(&r, &settings);
                    failed |= r.errors() > 0;
                    results.push(r);
                }
                Err(e) => {
                    eprintln!("{} {}: {e}", md.name(), layout.level);
                    failed = true;
                }
            }
        }
    }
    drop(rt);
    let _ = std::fs::remove_dir(&dir);

    let report = json!({
        "bench": "volume",
        "units": "MB/s = 1e6 bytes/s of volume (or member) data; IOPS = completed I/Os/s",
        "cpu": cpu_model(),
        "cpus_online": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "quick": quick,
        "member_bytes": settings.member_bytes,
        "stripe_unit_bytes": settings.stripe_unit_bytes,
        "runtime_ms": settings.runtime_ms,
        "seq_qd": settings.seq_qd,
        "rand_qd": settings.rand_qd,
        "volume_jobs": settings.vol_jobs,
        "steps": settings.steps,
        "rebuild_cap_s": settings.rebuild_cap.as_secs_f64(),
        "rebuild_batch_bytes": settings.rebuild_batch_bytes,
        "member_dir": dir.display().to_string(),
        "total_s": measure::round(t0.elapsed().as_secs_f64()),
        "cases": results.iter().map(result::CaseResult::json).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&report).unwrap_or_default();
    println!("{text}");
    let path = output_path();
    if let Some(d) = path.parent() {
        let _ = std::fs::create_dir_all(d);
    }
    if let Err(e) = std::fs::write(&path, text + "\n") {
        eprintln!("cannot write {}: {e}", path.display());
        failed = true;
    } else {
        eprintln!(
            "wrote {} in {:.0} s",
            path.display(),
            t0.elapsed().as_secs_f64()
        );
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default()
}
