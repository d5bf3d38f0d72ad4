//! KV namespace vs NVM namespace on one storage-node drive, over NVMe/TCP, side by side
//! in one run (issue 10, "Measure"). A storage node (in this process, on a runtime of its
//! own) gets one drive — an O_DIRECT file, then RAM — with an NVM namespace and a KV
//! namespace on it; a host (nvmf-host, another runtime) runs `bench::run` on the NVM
//! namespace and `bench::kv::run_kv` on the KV namespace:
//! 1. 1 MiB Stores at QD 8 vs 1 MiB sequential writes at QD 8 (the same bytes; the writes
//!    end with a flush, every Store is durable when acknowledged);
//! 2. 4 KiB Retrieves at QD 32 vs 4 KiB random reads at QD 32 over a region as large as
//!    the values retrieved;
//! 3. 4 KiB Stores at QD 32 vs 4 KiB sequential writes in groups of 32, each group
//!    followed by a Flush (what one group commit needs from the drive).
//!
//! Beside pair 1, a reference line (not the goal's baseline): the same 1 MiB writes each
//! with FUA, durable on completion as every Store is.
//!
//! An unmeasured warm-up pass of pair 1 comes first (no round pays for first writes).
//! Each round starts with a new KV namespace (nothing in it to compact). Each pair runs
//! `FERROBAY_BENCH_ROUNDS` times (default 5), alternating sides; the
//! median of each side and their ratio (goal >= 0.9) go to `target/bench/kv_vs_nvm.json`
//! (`FERROBAY_BENCH_KV_OUT` overrides) and a table on stderr. Knobs:
//! `FERROBAY_BENCH_SECS` (seconds per timed run, default 3), `FERROBAY_BENCH_MEDIA`
//! (`file,ram`), `FERROBAY_BENCH_DRIVE_MIB` (default 4096), `FERROBAY_BENCH_DIR` (where
//! the drive file goes; default `target/bench-tmp`), `FERROBAY_BENCH_ONLY` (`store_1m`
//! and/or `store_4k`, the latter with the Retrieves: for profiling). Without `--bench` (`cargo test`
//! runs it as a test target) it makes a short smoke pass on RAM and writes no file.
//!
//! Files: `kv_vs_nvm/settings.rs`, `node.rs` (drive, node, namespaces, host),
//! `pairs.rs` (the three comparisons), `report.rs` (JSON and table).

#[path = "kv_vs_nvm/node.rs"]
mod node;
#[path = "kv_vs_nvm/pairs.rs"]
mod pairs;
#[path = "kv_vs_nvm/report.rs"]
mod report;
#[path = "kv_vs_nvm/settings.rs"]
mod settings;

use std::process::ExitCode;

use settings::Settings;

fn main() -> ExitCode {
    let full = std::env::args().any(|a| a == "--bench");
    let s = Settings::from_env(full);
    let mut media = Vec::new();
    for m in &s.media {
        eprintln!("kv_vs_nvm bench: {m}");
        match pairs::run_medium(&s, m) {
            Ok(v) => media.push(v),
            Err(e) => {
                eprintln!("kv_vs_nvm bench: {m} failed: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    let doc = report::document(&s, media);
    eprint!("{}", report::table(&doc));
    if !full {
        // The smoke pass checks that every figure came out.
        return match report::check(&doc) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("kv_vs_nvm smoke pass: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let out = testkit::bench::output_path(
        "FERROBAY_BENCH_KV_OUT",
        env!("CARGO_TARGET_TMPDIR"),
        "kv_vs_nvm.json",
    );
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    if let Err(e) = testkit::bench::write_report(&out, &text) {
        eprintln!("kv_vs_nvm bench: writing {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    println!("{text}");
    ExitCode::SUCCESS
}
