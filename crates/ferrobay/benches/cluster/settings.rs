//! What a run measures and for how long: `FERROBAY_BENCH_*` and the mode (full or smoke).

use nvmf_host::ConnectOptions;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Settings {
    pub(crate) full: bool,
    pub(crate) runtime_s: f64,
    pub(crate) rounds: u32,
    pub(crate) lease_ttl_ms: u64,
    pub(crate) failovers: u32,
    pub(crate) volume_size_bytes: u64,
    pub(crate) drive: String,
    pub(crate) stripe_unit_bytes: u64,
    pub(crate) kill_after_ms: u64,
    /// I/O queues per controller of the initiator (nvmf-host's default).
    pub(crate) io_queues: u16,
    /// The sections to run (1, 2, 3; `FERROBAY_BENCH_SECTIONS=3`: failover only).
    pub(crate) sections: Vec<u8>,
    /// `FERROBAY_BENCH_PROCESSOR_ARGS`: more `processor run` arguments (e.g.
    /// `--busy-poll-us 500`).
    pub(crate) processor_args: Vec<String>,
}

impl Settings {
    pub(crate) fn from_env(full: bool) -> Settings {
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
            sections: sections_from_env(),
            processor_args: std::env::var("FERROBAY_BENCH_PROCESSOR_ARGS")
                .map(|a| a.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
        }
    }

    pub(crate) fn runs(&self, section: u8) -> bool {
        self.sections.contains(&section)
    }

    pub(crate) fn runtime_ms(&self) -> u64 {
        (self.runtime_s * 1000.0) as u64
    }
}

/// `FERROBAY_BENCH_SECTIONS`: a comma list of section numbers; all three when unset.
fn sections_from_env() -> Vec<u8> {
    let all = vec![1, 2, 3];
    let Ok(v) = std::env::var("FERROBAY_BENCH_SECTIONS") else {
        return all;
    };
    let picked: Option<Vec<u8>> = v
        .split(',')
        .map(|p| p.trim().parse::<u8>().ok().filter(|n| (1..=3).contains(n)))
        .collect();
    match picked {
        Some(p) if !p.is_empty() => p,
        _ => {
            eprintln!(
                "cluster bench: ignoring FERROBAY_BENCH_SECTIONS={v:?} (not a list of 1, 2, 3)"
            );
            all
        }
    }
}

pub(crate) fn env_f64(name: &str) -> Option<f64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Some(x),
        _ => {
            eprintln!("cluster bench: ignoring {name}={v:?} (not a positive number)");
            None
        }
    }
}
