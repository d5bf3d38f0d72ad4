//! The workloads and the knobs of a run.

use bench::{BenchConfig, Pattern};
use serde::Serialize;

/// One measured load.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Workload {
    pub name: &'static str,
    /// fio's name of the pattern, as `ferrobay bench --rw` and fio take it.
    pub rw: &'static str,
    pub block_size_bytes: u64,
    pub iodepth: u32,
}

/// What issue 2 asks for, in the order they run.
pub const WORKLOADS: [Workload; 3] = [
    Workload {
        name: "randread_4k_qd32",
        rw: "randread",
        block_size_bytes: 4096,
        iodepth: 32,
    },
    Workload {
        name: "randwrite_4k_qd32",
        rw: "randwrite",
        block_size_bytes: 4096,
        iodepth: 32,
    },
    Workload {
        name: "seqread_128k_qd8",
        rw: "read",
        block_size_bytes: 128 << 10,
        iodepth: 8,
    },
];

/// One sequential pass that writes every block before anything is measured, so that no
/// target serves reads of never-written memory from a shortcut (brd returns zeroes for
/// pages it never allocated).
pub const PRECONDITION: Workload = Workload {
    name: "precondition_seqwrite_128k_qd8",
    rw: "write",
    block_size_bytes: 128 << 10,
    iodepth: 8,
};

impl Workload {
    pub fn pattern(&self) -> Pattern {
        match self.rw {
            "randread" => Pattern::RandRead,
            "randwrite" => Pattern::RandWrite,
            "write" => Pattern::Write,
            _ => Pattern::Read,
        }
    }

    /// A run of `runtime_ms` (0: one pass over the device).
    pub fn config(&self, runtime_ms: u64) -> BenchConfig {
        BenchConfig {
            pattern: self.pattern(),
            block_size_bytes: self.block_size_bytes,
            iodepth: self.iodepth,
            jobs: 1,
            runtime_ms,
            ..BenchConfig::default()
        }
    }

    /// Whether this load is judged by bandwidth rather than IOPS.
    pub fn by_bandwidth(&self) -> bool {
        self.block_size_bytes >= 64 << 10
    }
}

/// The knobs of one run (from the environment), recorded in the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub runtime_s: f64,
    pub workloads: Vec<Workload>,
    /// Size of the native RAM namespaces (ferrobay's `--drive ram:..`, SPDK's Malloc bdev).
    pub ram_ns_mb: u64,
    /// `--drive` of the native node.
    pub native_drive: String,
    /// Size of each RAM namespace in the guest (brd and the node's RAM drive).
    pub guest_ns_mb: u64,
    pub guest_cpus: u32,
    pub guest_mem_mb: u32,
    pub guest: bool,
    pub guest_fio: bool,
    /// Runs of each workload per target (and initiator) in the guest and in the SPDK
    /// section (means are compared).
    pub rounds: u32,
    /// I/O queues the nvmf-host initiator asks for (nvmf-host's default: one per CPU).
    pub io_queues: u16,
    /// `FERROBAY_BENCH_SPDK_TGT`: an `nvmf_tgt` binary built outside the repo (section C).
    pub spdk_tgt: Option<String>,
    /// `FERROBAY_BENCH_SPDK_CPUMASK`: SPDK's reactor mask (default 0x1: one core).
    pub spdk_cpumask: String,
    /// `FERROBAY_BENCH_SPDK_ARGS`: more `nvmf_tgt` arguments (e.g. `--interrupt-mode`).
    pub spdk_args: Vec<String>,
    /// `FERROBAY_BENCH_NODE_ARGS`: more `node run` arguments for the nodes of sections A, C
    /// and D (e.g. `--busy-poll-us 500`).
    pub node_args: Vec<String>,
    /// `FERROBAY_BENCH_INITIATOR_ARGS`: more `ferrobay bench` arguments in section D.
    pub initiator_args: Vec<String>,
    /// Where targets and initiator processes run (`FERROBAY_BENCH_PIN`); None: anywhere.
    pub pin: Option<Pinning>,
}

/// Targets on the CPUs of SPDK's reactor mask, initiator processes on the lowest CPU
/// outside it: `ferrobay node` and `ferrobay bench` are pinned (sched_setaffinity) where
/// `nvmf_tgt -m` and `spdk_nvme_perf -c` run. Without it a pinned SPDK pair met an
/// unpinned ferrobay pair that the kernel moved about (and in section D perf, with no
/// `-c`, shared core 0 with whatever ran there).
/// `FERROBAY_BENCH_PIN=0` turns it off; it needs the mask's CPUs and one more among those
/// this process may use, and the smoke pass (`cargo test`) never pins.
#[derive(Debug, Clone, Serialize)]
pub struct Pinning {
    pub target_cpus: Vec<usize>,
    pub initiator_cpus: Vec<usize>,
}

impl Pinning {
    /// From SPDK's reactor mask (hex, as `nvmf_tgt -m`) and the CPUs this process may use:
    /// None unless every CPU of the mask and one more are among them.
    pub fn from_mask(target_mask: &str, allowed: &[usize]) -> Option<Pinning> {
        let mask = u64::from_str_radix(target_mask.trim_start_matches("0x"), 16).ok()?;
        let in_mask = |c: usize| c < 64 && mask & (1u64 << c) != 0;
        let target_cpus: Vec<usize> = allowed.iter().copied().filter(|&c| in_mask(c)).collect();
        let initiator = allowed.iter().copied().find(|&c| c < 64 && !in_mask(c))?;
        (!target_cpus.is_empty() && target_cpus.len() as u32 == mask.count_ones()).then(|| {
            Pinning {
                target_cpus,
                initiator_cpus: vec![initiator],
            }
        })
    }

    /// The initiators' CPUs as a core mask (`spdk_nvme_perf -c`).
    pub fn initiator_mask(&self) -> String {
        let mask = self
            .initiator_cpus
            .iter()
            .fold(0u64, |m, &c| m | (1u64 << c));
        format!("{mask:#x}")
    }
}

impl Settings {
    pub fn from_env(full: bool) -> Settings {
        let secs = env_f64("FERROBAY_BENCH_SECS").unwrap_or(if full { 5.0 } else { 0.5 });
        let guest_ns_mb = env_f64("FERROBAY_BENCH_GUEST_NS_MB")
            .map_or(256, |v| v as u64)
            .clamp(16, 2048);
        let ram_ns_mb = if full { 1024 } else { 256 };
        let spdk_cpumask =
            env_string("FERROBAY_BENCH_SPDK_CPUMASK").unwrap_or_else(|| "0x1".into());
        Settings {
            runtime_s: secs.clamp(0.1, 600.0),
            workloads: WORKLOADS.to_vec(),
            ram_ns_mb,
            native_drive: format!("ram:{ram_ns_mb}M"),
            guest_ns_mb,
            guest_cpus: 2,
            // Two RAM namespaces, fio's libraries and page cache headroom.
            guest_mem_mb: (2 * guest_ns_mb + 768) as u32,
            guest: full && env_flag("FERROBAY_BENCH_GUEST", true),
            guest_fio: env_flag("FERROBAY_BENCH_GUEST_FIO", true),
            rounds: env_f64("FERROBAY_BENCH_ROUNDS")
                .map_or(2, |v| v as u32)
                .clamp(1, 10),
            io_queues: nvmf_host::ConnectOptions::default().io_queues,
            spdk_tgt: env_string("FERROBAY_BENCH_SPDK_TGT"),
            spdk_cpumask: spdk_cpumask.clone(),
            spdk_args: env_words("FERROBAY_BENCH_SPDK_ARGS"),
            node_args: env_words("FERROBAY_BENCH_NODE_ARGS"),
            initiator_args: env_words("FERROBAY_BENCH_INITIATOR_ARGS"),
            // Not in the smoke pass: tests share the machine and need no placement.
            pin: (full && env_flag("FERROBAY_BENCH_PIN", true))
                .then(|| Pinning::from_mask(&spdk_cpumask, &testkit::process::allowed_cpus()))
                .flatten(),
        }
    }

    pub fn runtime_ms(&self) -> u64 {
        (self.runtime_s * 1000.0) as u64
    }
}

fn env_f64(name: &str) -> Option<f64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Some(x),
        _ => {
            eprintln!("storage_node bench: ignoring {name}={v:?} (not a positive number)");
            None
        }
    }
}

/// A variable's whitespace-separated words (none when unset).
pub fn env_words(name: &str) -> Vec<String> {
    env_string(name)
        .map(|a| a.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// A non-blank variable, trimmed.
pub fn env_string(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn env_flag(name: &str, default: bool) -> bool {
    match std::env::var(name).as_deref().map(str::trim) {
        Ok("0" | "false" | "no" | "off") => false,
        Ok("1" | "true" | "yes" | "on") => true,
        _ => default,
    }
}
