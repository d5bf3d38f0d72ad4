//! `ferrobay cdc run`: a central discovery controller (control::cdc) until Ctrl-C / SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use control::cdc::{Cdc, CdcConfig};

use crate::cluster;

#[derive(Args, Debug)]
pub struct CdcArgs {
    #[command(subcommand)]
    pub command: CdcCommand,
}

#[derive(Subcommand, Debug)]
pub enum CdcCommand {
    /// Run a central discovery controller: one NVMe/TCP discovery log with every
    /// subsystem of every storage and processor node (per host, by access list) and a
    /// referral to each node's own discovery controller, kept current from the cluster's
    /// node records, until Ctrl-C / SIGTERM. Hosts: `nvme discover` / `nvme connect-all`
    /// against it.
    Run(RunArgs),
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// NVMe/TCP discovery listen address (repeatable); port 0 picks a free port.
    #[arg(long, default_value = "0.0.0.0:8009")]
    pub listen: Vec<SocketAddr>,
    /// The cluster's metadata store: etcd://HOST:PORT[,HOST:PORT] or embedded:DIR.
    #[arg(long)]
    pub meta: String,
}

async fn run_cdc(a: RunArgs) -> anyhow::Result<ExitCode> {
    let stop = cluster::stop_signal();
    let store = cluster::open_store(&a.meta).await?;
    let cdc = Cdc::start(store, CdcConfig::new(a.listen))
        .await
        .context("start the central discovery controller")?;
    let addrs: Vec<String> = cdc.addrs().iter().map(ToString::to_string).collect();
    tracing::info!(listen = ?addrs, "central discovery controller ready");
    stop.await;
    tracing::info!("stopping the central discovery controller");
    cdc.stop().await;
    Ok(ExitCode::SUCCESS)
}

pub async fn run(a: CdcArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        CdcCommand::Run(r) => run_cdc(r).await,
    }
}
