//! KV engine against the raw device, side by side in one run, on an O_DIRECT drive file
//! (blockdev's file backend) and on RAM:
//! - 1 MiB stores at queue depth 8 vs the device's 1 MiB sequential writes at QD 8;
//! - 4 KiB retrieves at QD 32 vs the device's 4 KiB random reads at QD 32 over a region
//!   as large as the stored values;
//! - 4 KiB stores at QD 32 vs the device's 4 KiB sequential writes in groups of 32, each
//!   group followed by a flush (what one group commit needs);
//! - compaction: live data at half the data area, random overwrites of 64 KiB values for
//!   twice the data area: device bytes written per user byte (write amplification);
//! - a reference line from fjall (LSM with key-value separation) on the same filesystem.
//!
//! Output: JSON on stdout and in `<target>/bench/kv.json` (or `KV_BENCH_OUT`), a table on
//! stderr. Knobs: `KV_BENCH_QUICK=1`, `KV_BENCH_MEDIA=file,ram`, `KV_BENCH_DRIVE_MIB`,
//! `KV_BENCH_RUNTIME_MS`, `KV_BENCH_REFERENCE=0` (skip fjall), `KV_BENCH_DIR` (where the
//! drive file goes; default `<target>/bench-tmp`).

#[path = "kv/loads.rs"]
mod loads;
#[path = "kv/reference.rs"]
mod reference;
#[path = "kv/run.rs"]
mod run;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// `<target>` (the parent of `CARGO_TARGET_TMPDIR`, which cargo sets for benches).
fn target_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().map_or_else(|| tmp.clone(), PathBuf::from)
}

fn main() -> ExitCode {
    let quick = std::env::var_os("KV_BENCH_QUICK").is_some_and(|v| v != "0");
    let settings = run::Settings {
        quick,
        media: std::env::var("KV_BENCH_MEDIA")
            .unwrap_or_else(|_| "file,ram".into())
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        dir: std::env::var_os("KV_BENCH_DIR")
            .map_or_else(|| target_dir().join("bench-tmp"), PathBuf::from),
        drive_bytes: env_u64("KV_BENCH_DRIVE_MIB").unwrap_or(if quick { 256 } else { 2048 }) << 20,
        runtime: Duration::from_millis(env_u64("KV_BENCH_RUNTIME_MS").unwrap_or(if quick {
            300
        } else {
            3000
        })),
        reference: env_u64("KV_BENCH_REFERENCE") != Some(0),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kv bench: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = match rt.block_on(run::run(&settings)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kv bench failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprint!("{}", run::table(&report));
    let out = std::env::var_os("KV_BENCH_OUT")
        .filter(|p| !p.is_empty())
        .map_or_else(|| target_dir().join("bench").join("kv.json"), PathBuf::from);
    let text = serde_json::to_string_pretty(&report).unwrap_or_default();
    if let Some(dir) = out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = std::fs::write(&out, &text) {
        eprintln!("kv bench: writing {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    println!("{text}");
    ExitCode::SUCCESS
}
