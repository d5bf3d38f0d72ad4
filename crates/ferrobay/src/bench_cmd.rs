//! `ferrobay bench`.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use bench::kv::{KvBenchConfig, KvPattern};
use bench::{BenchConfig, Pattern, Progress};
use blockdev::BlockDevice;
use clap::Args;
use nvmf_host::{ConnectOptions, MultipathOptions, NvmeTcpUrl};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// What to measure: nvme+tcp://ADDR:PORT[,ADDR:PORT...]/SUBNQN[/NSID][?digest=hd,dd], file:PATH,
    /// /dev/..., ram:SIZE, null:SIZE or volume:NAME (a registered local volume). Several
    /// addresses: one multipath device that opens when any of them connects.
    #[arg(long)]
    pub target: String,
    /// randread (default), randwrite, read, write or randrw; with --kv: store (default),
    /// retrieve or mixed.
    #[arg(long)]
    pub rw: Option<String>,
    /// Percentage of reads for randrw (of Retrieves for --kv mixed).
    #[arg(long, default_value_t = 70)]
    pub mix: u8,
    /// Key Value mode: Stores and Retrieves on a KV namespace (an nvme+tcp URL) instead of
    /// block I/O (docs/bench.md, "KV mode").
    #[arg(long)]
    pub kv: bool,
    /// --kv: size of every value (e.g. 4k, 1M).
    #[arg(long, default_value = "4k")]
    pub value_size: String,
    /// --kv: keys 0..N, split among the jobs (16-byte keys derived from the index).
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Block size (e.g. 4k, 128k, 1M).
    #[arg(long, default_value = "4k")]
    pub bs: String,
    #[arg(long, default_value_t = 32)]
    pub iodepth: u32,
    /// Workers, each with its own slice of the range.
    #[arg(long, default_value_t = 1)]
    pub jobs: u32,
    /// Run time (e.g. 10s, 500ms, 1m). Without it and without --size, one pass over the range.
    #[arg(long)]
    pub runtime: Option<String>,
    /// Bytes per job to transfer (e.g. 1G).
    #[arg(long)]
    pub size: Option<String>,
    #[arg(long, default_value = "0")]
    pub offset: String,
    /// Length of the region to use (default: to the end).
    #[arg(long)]
    pub range: Option<String>,
    /// Stamp every written block, check every block read, and read back every block
    /// written before reporting (docs/bench.md).
    #[arg(long)]
    pub verify: bool,
    /// Only read back and check what an earlier --verify run wrote (one sequential pass;
    /// any --bs, whatever block size wrote it).
    #[arg(long)]
    pub verify_only: bool,
    /// Generation stamped into written blocks (use the same one for --verify-only).
    #[arg(long, default_value_t = 1)]
    pub generation: u32,
    #[arg(long, default_value_t = 0x00f3_2202_6b1e_55ed)]
    pub seed: u64,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// I/O engine for files and block devices: auto, uring or threads.
    #[arg(long, default_value = "auto")]
    pub engine: String,
    /// Host NQN for nvme+tcp targets (default: /etc/nvme/hostnqn, else one derived from
    /// this machine).
    #[arg(long)]
    pub hostnqn: Option<String>,
    /// nvme+tcp targets: connect over TLS with the configured PSK in FILE
    /// (`NVMeTLSkey-1:..`, as `nvme connect --tls`); the address must be a TLS listener.
    #[arg(long, value_name = "FILE")]
    pub tls_psk: Option<std::path::PathBuf>,
    /// nvme+tcp targets: authenticate with the DH-HMAC-CHAP host secret in FILE
    /// (`DHHC-1:..`, as `nvme connect --dhchap-secret`).
    #[arg(long, value_name = "FILE")]
    pub dhchap_secret: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub busy_poll: crate::cli::BusyPollArg,
}

/// How nvme+tcp targets are connected: Linux's defaults plus the host's secrets.
fn connect_options(a: &BenchArgs) -> anyhow::Result<ConnectOptions> {
    let tls = match &a.tls_psk {
        Some(p) => Some(nvmf_host::TlsCredentials::new(
            crate::processor_cmd::read_tls_psk_file(p)?,
        )),
        None => None,
    };
    let dhchap = match &a.dhchap_secret {
        Some(p) => Some(nvmf_host::DhchapCredentials::new(
            crate::processor_cmd::read_secret_file(p, "--dhchap-secret")?,
        )),
        None => None,
    };
    Ok(ConnectOptions {
        tls,
        dhchap,
        busy_poll_us: a.busy_poll.us,
        ..ConnectOptions::default()
    })
}

/// A run time: humantime's forms (`500ms`, `10s`, `1.5s`, `2m`, `1h 30m`), or a plain
/// number of seconds (`3`).
pub fn parse_duration_ms(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let bad = || anyhow::anyhow!("invalid duration {s:?} (expected e.g. 500ms, 10s, 2m)");
    let d = match s.parse::<f64>() {
        Ok(secs) => std::time::Duration::try_from_secs_f64(secs).map_err(|_| bad())?,
        Err(_) => humantime::parse_duration(s).map_err(|_| bad())?,
    };
    u64::try_from(d.as_millis()).map_err(|_| bad())
}

pub fn parse_engine(s: &str) -> anyhow::Result<blockdev::IoEngine> {
    Ok(match s {
        "auto" => blockdev::IoEngine::Auto,
        "uring" | "io_uring" => blockdev::IoEngine::Uring,
        "threads" | "threadpool" => blockdev::IoEngine::ThreadPool,
        other => anyhow::bail!("unknown --engine {other:?} (expected auto, uring or threads)"),
    })
}

fn runtime_ms(a: &BenchArgs) -> anyhow::Result<u64> {
    Ok(a.runtime
        .as_deref()
        .map(parse_duration_ms)
        .transpose()?
        .unwrap_or(0))
}

fn config(a: &BenchArgs) -> anyhow::Result<BenchConfig> {
    let size = |s: &str| blockdev::parse_size_bytes(s).map_err(anyhow::Error::from);
    Ok(BenchConfig {
        pattern: Pattern::parse(a.rw.as_deref().unwrap_or("randread"), a.mix)?,
        block_size_bytes: size(&a.bs)?,
        iodepth: a.iodepth,
        jobs: a.jobs,
        runtime_ms: runtime_ms(a)?,
        size_bytes: a.size.as_deref().map(size).transpose()?.unwrap_or(0),
        offset_bytes: size(&a.offset)?,
        range_bytes: a.range.as_deref().map(size).transpose()?.unwrap_or(0),
        verify: a.verify || a.verify_only,
        verify_only: a.verify_only,
        seed: a.seed,
        generation: a.generation,
    })
}

/// Opens what `--target` names.
async fn open_target(
    target: &str,
    engine: blockdev::IoEngine,
    hostnqn: Option<&str>,
    connect: &ConnectOptions,
) -> anyhow::Result<Arc<dyn BlockDevice>> {
    if target.starts_with("nvme+tcp://") {
        return crate::discover_cmd::open_remote(target, hostnqn, connect).await;
    }
    let spec = blockdev::parse_drive_spec(target)?;
    blockdev::open_drive(&spec, engine)
        .await
        .with_context(|| format!("open {target}"))
}

fn kv_config(a: &BenchArgs) -> anyhow::Result<KvBenchConfig> {
    for (given, flag) in [
        (a.verify_only, "--verify-only (use --rw retrieve --verify)"),
        (a.size.is_some(), "--size"),
        (a.range.is_some(), "--range"),
        (a.offset != "0", "--offset"),
    ] {
        if given {
            anyhow::bail!("{flag} is not available with --kv");
        }
    }
    Ok(KvBenchConfig {
        pattern: KvPattern::parse(a.rw.as_deref().unwrap_or("store"), a.mix)?,
        value_size_bytes: blockdev::parse_size_bytes(&a.value_size)?,
        keys: a.keys,
        key_base: 0,
        iodepth: a.iodepth,
        jobs: a.jobs,
        runtime_ms: runtime_ms(a)?,
        verify: a.verify,
        seed: a.seed,
        generation: a.generation,
    })
}

fn exit_code(report: &bench::Report) -> ExitCode {
    if report.errors > 0 || report.verify_failures() > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn print_report(report: &bench::Report, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}

/// `--kv`: the KV load on the namespace the URL names.
async fn run_kv(a: &BenchArgs) -> anyhow::Result<ExitCode> {
    let cfg = kv_config(a)?;
    if !a.target.starts_with(nvmf_host::url::SCHEME) {
        anyhow::bail!(
            "--kv needs an nvme+tcp://ADDR:PORT/SUBNQN/NSID target (a Key Value namespace), not {}",
            a.target
        );
    }
    let url = NvmeTcpUrl::parse(&a.target)?;
    let host = crate::discover_cmd::host_identity(a.hostnqn.as_deref())?;
    let ns = url
        .open_kv(&host, &connect_options(a)?, MultipathOptions::default())
        .await
        .with_context(|| format!("open {}", a.target))?;
    let ns = Arc::new(ns);
    let progress = if a.json {
        Progress::Silent
    } else {
        Progress::auto(cfg.runtime_ms)
    };
    let report = bench::kv::run_kv(ns.clone(), &cfg, &a.target, &progress).await;
    ns.disconnect().await;
    let report = report?;
    print_report(&report, a.json)?;
    Ok(exit_code(&report))
}

pub async fn run(a: BenchArgs) -> anyhow::Result<ExitCode> {
    if a.kv {
        return run_kv(&a).await;
    }
    let cfg = config(&a)?;
    let engine = parse_engine(&a.engine)?;
    // A volume is stopped cleanly after the run (bitmap cleared, clean flag set).
    let (dev, volume): (Arc<dyn BlockDevice>, _) = match a.target.strip_prefix("volume:") {
        Some(name) => {
            let v = crate::volume_cmd::open_volume(name, engine).await?;
            (v.clone(), Some(v))
        }
        None => (
            open_target(
                &a.target,
                engine,
                a.hostnqn.as_deref(),
                &connect_options(&a)?,
            )
            .await?,
            None,
        ),
    };
    let progress = if a.json {
        Progress::Silent
    } else {
        Progress::auto(cfg.runtime_ms)
    };
    let report = bench::run(dev, &cfg, &a.target, &progress).await?;
    if let Some(v) = volume {
        v.stop().await.context("stop the volume after the run")?;
    }
    print_report(&report, a.json)?;
    Ok(exit_code(&report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("500ms").unwrap(), 500);
        assert_eq!(parse_duration_ms("10s").unwrap(), 10_000);
        assert_eq!(parse_duration_ms("2m").unwrap(), 120_000);
        assert_eq!(parse_duration_ms("3").unwrap(), 3000);
        assert_eq!(parse_duration_ms("1.5s").unwrap(), 1500);
        assert_eq!(parse_duration_ms("1m 30s").unwrap(), 90_000);
        assert!(parse_duration_ms("abc").is_err());
        assert!(parse_duration_ms("-1").is_err());
        assert!(parse_duration_ms("1e30").is_err());
        assert!(parse_duration_ms("5x").is_err());
    }
}
