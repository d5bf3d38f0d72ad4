//! Opening devices over NVMe/TCP, one measured `bench::run` with the cluster's CPU
//! around it, and the statistics over runs (medians, ratios).

use std::sync::Arc;

use anyhow::{Context, bail};
use bench::{BenchConfig, Pattern, Progress, Report};
use blockdev::BlockDevice;
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl};
use serde::Serialize;
use testkit::stats::median;

use crate::cpu::CpuSnap;
use crate::daemons::Cluster;

const HOST_UUID: [u8; 16] = [
    0x7a, 0x51, 0x0c, 0x3e, 0x91, 0x12, 0x4b, 0x6d, 0x8e, 0x20, 0x44, 0x19, 0xc3, 0x5a, 0x01, 0x77,
];

pub(crate) async fn open(url: &str) -> anyhow::Result<Arc<dyn BlockDevice>> {
    let host = HostIdentity::from_uuid(HOST_UUID);
    NvmeTcpUrl::parse(url)
        .with_context(|| format!("URL {url}"))?
        .open_device(&host, &ConnectOptions::default())
        .await
        .with_context(|| format!("connect {url}"))
}

pub(crate) fn config(pattern: Pattern, bs: u64, qd: u32, runtime_ms: u64) -> BenchConfig {
    BenchConfig {
        pattern,
        block_size_bytes: bs,
        iodepth: qd,
        jobs: 1,
        runtime_ms,
        ..BenchConfig::default()
    }
}

/// One measured run: the initiator's view plus the cluster's CPU.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct RunResult {
    pub(crate) iops: f64,
    pub(crate) mb_per_s: f64,
    pub(crate) lat_p50_us: f64,
    pub(crate) lat_p99_us: f64,
    pub(crate) ios: u64,
    pub(crate) errors: u64,
    pub(crate) elapsed_s: f64,
    /// The owning processor node (p1) in section 1.
    pub(crate) processor_cpu_s: f64,
    /// All three storage nodes.
    pub(crate) storage_cpu_s: f64,
    pub(crate) processor_cpu_s_per_million_ios: f64,
    pub(crate) storage_cpu_s_per_million_ios: f64,
    /// Processor + storage nodes.
    pub(crate) cluster_cpu_s_per_million_ios: f64,
    /// This process (the initiator).
    pub(crate) initiator_cpu_s_per_million_ios: f64,
    /// Busy CPU of the whole machine during the run (others' work shows here).
    pub(crate) machine_busy_cpu_s: f64,
}

pub(crate) fn per_million(cpu_s: f64, ios: u64) -> f64 {
    if ios > 0 {
        cpu_s / ios as f64 * 1e6
    } else {
        0.0
    }
}

impl RunResult {
    pub(crate) fn new(r: &Report, cpu: &CpuSnap, processor: Option<usize>) -> RunResult {
        let ios = r.read_ios + r.write_ios;
        let lat = if r.read_ios >= r.write_ios {
            &r.read_latency
        } else {
            &r.write_latency
        };
        let processor_cpu_s = processor.map_or(0.0, |i| cpu.proc(i));
        let storage_cpu_s = cpu.nodes_total();
        RunResult {
            iops: r.iops,
            mb_per_s: r.mb_per_s,
            lat_p50_us: lat.p50_us,
            lat_p99_us: lat.p99_us,
            ios,
            errors: r.errors,
            elapsed_s: r.elapsed_s,
            processor_cpu_s,
            storage_cpu_s,
            processor_cpu_s_per_million_ios: per_million(processor_cpu_s, ios),
            storage_cpu_s_per_million_ios: per_million(storage_cpu_s, ios),
            cluster_cpu_s_per_million_ios: per_million(processor_cpu_s + storage_cpu_s, ios),
            initiator_cpu_s_per_million_ios: r.cpu_s_per_million_ios,
            machine_busy_cpu_s: cpu.machine_busy_s,
        }
    }
}

/// Field-wise medians (errors and I/Os: sums).
pub(crate) fn median_run(runs: &[RunResult]) -> RunResult {
    let m = |f: fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
    RunResult {
        iops: m(|r| r.iops),
        mb_per_s: m(|r| r.mb_per_s),
        lat_p50_us: m(|r| r.lat_p50_us),
        lat_p99_us: m(|r| r.lat_p99_us),
        ios: runs.iter().map(|r| r.ios).sum(),
        errors: runs.iter().map(|r| r.errors).sum(),
        elapsed_s: m(|r| r.elapsed_s),
        processor_cpu_s: m(|r| r.processor_cpu_s),
        storage_cpu_s: m(|r| r.storage_cpu_s),
        processor_cpu_s_per_million_ios: m(|r| r.processor_cpu_s_per_million_ios),
        storage_cpu_s_per_million_ios: m(|r| r.storage_cpu_s_per_million_ios),
        cluster_cpu_s_per_million_ios: m(|r| r.cluster_cpu_s_per_million_ios),
        initiator_cpu_s_per_million_ios: m(|r| r.initiator_cpu_s_per_million_ios),
        machine_busy_cpu_s: m(|r| r.machine_busy_cpu_s),
    }
}

pub(crate) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// One `bench::run` with the cluster's CPU around it.
pub(crate) async fn measured(
    cluster: &Cluster,
    dev: &Arc<dyn BlockDevice>,
    cfg: &BenchConfig,
    name: &str,
    processor: Option<usize>,
) -> anyhow::Result<RunResult> {
    let before = cluster.cpu();
    let r = bench::run(dev.clone(), cfg, name, &Progress::Silent).await?;
    let cpu = cluster.cpu().since(&before);
    if r.errors > 0 {
        bail!(
            "{name} {}: {} I/O errors, first: {}",
            r.pattern,
            r.errors,
            r.first_error.as_deref().unwrap_or("?")
        );
    }
    Ok(RunResult::new(&r, &cpu, processor))
}

/// Writes the whole device once (so that no read is served from never-written memory).
pub(crate) async fn precondition(dev: &Arc<dyn BlockDevice>, name: &str) -> anyhow::Result<f64> {
    let r = bench::run(
        dev.clone(),
        &config(Pattern::Write, 128 << 10, 8, 0),
        name,
        &Progress::Silent,
    )
    .await?;
    if r.errors > 0 {
        bail!(
            "precondition {name}: {} errors, first: {}",
            r.errors,
            r.first_error.as_deref().unwrap_or("?")
        );
    }
    Ok(r.mb_per_s)
}
