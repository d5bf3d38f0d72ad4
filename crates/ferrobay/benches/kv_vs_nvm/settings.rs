//! What a run measures, from the environment.

use std::path::PathBuf;
use std::time::Duration;

pub struct Settings {
    /// `--bench`: the full run (else the smoke pass of `cargo test`).
    pub full: bool,
    /// "file" (an O_DIRECT drive file) and/or "ram".
    pub media: Vec<String>,
    pub dir: PathBuf,
    pub drive_bytes: u64,
    /// Length of each timed run.
    pub run: Duration,
    pub rounds: usize,
    /// Run only these pairs (`store_1m`, `store_4k`: with its retrieves, for profiling);
    /// empty: all.
    pub only: Vec<String>,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

impl Settings {
    pub fn from_env(full: bool) -> Settings {
        let media = if full {
            std::env::var("FERROBAY_BENCH_MEDIA").unwrap_or_else(|_| "file,ram".into())
        } else {
            "ram".into()
        };
        Settings {
            full,
            media: media
                .split(',')
                .map(|m| m.trim().to_string())
                .filter(|m| !m.is_empty())
                .collect(),
            dir: std::env::var_os("FERROBAY_BENCH_DIR").map_or_else(
                || testkit::bench::target_dir(env!("CARGO_TARGET_TMPDIR")).join("bench-tmp"),
                PathBuf::from,
            ),
            drive_bytes: if full {
                env_u64("FERROBAY_BENCH_DRIVE_MIB").unwrap_or(4096) << 20
            } else {
                192 << 20
            },
            run: if full {
                Duration::from_millis(env_u64("FERROBAY_BENCH_SECS").unwrap_or(3) * 1000)
            } else {
                Duration::from_millis(300)
            },
            only: std::env::var("FERROBAY_BENCH_ONLY")
                .unwrap_or_default()
                .split(',')
                .map(|m| m.trim().to_string())
                .filter(|m| !m.is_empty())
                .collect(),
            rounds: if full {
                env_u64("FERROBAY_BENCH_ROUNDS").unwrap_or(5).max(1) as usize
            } else {
                1
            },
        }
    }
}
