//! Command-line grammar.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::{bench_cmd, discover_cmd, node_cmd, volume_cmd};

#[derive(Parser, Debug)]
#[command(
    name = "ferrobay",
    version,
    about = "Disaggregated flash storage over NVMe/TCP"
)]
pub struct Cli {
    /// Log as JSON lines (structured logs for daemons under a supervisor).
    #[arg(long, global = true)]
    pub log_json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Storage node: export drives over NVMe/TCP, manage its namespaces.
    Node(node_cmd::NodeArgs),
    /// Erasure-coded volumes over local files and block devices (like mdadm).
    Volume(volume_cmd::VolumeArgs),
    /// Read the discovery log of an NVMe/TCP target and print it like `nvme discover`.
    Discover(DiscoverArgs),
    /// Measure a device, a file or an NVMe/TCP namespace (fio-like, with verification).
    Bench(bench_cmd::BenchArgs),
}

#[derive(Args, Debug)]
pub struct DiscoverArgs {
    /// Target address, ADDR[:PORT] (port defaults to 8009, the discovery port).
    pub address: String,
    /// Host NQN to present (default: a stable NQN derived from this machine).
    #[arg(long)]
    pub hostnqn: Option<String>,
    /// Print the entries as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn dispatch(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Node(a) => node_cmd::run(a).await,
        Command::Volume(a) => volume_cmd::run(a).await,
        Command::Discover(a) => discover_cmd::run(a).await,
        Command::Bench(a) => bench_cmd::run(a).await,
    }
}
