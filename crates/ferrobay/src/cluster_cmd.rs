//! `ferrobay version` and `ferrobay cluster upgrade` (docs/upgrade.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::cluster::{self, usage};

#[derive(Args, Debug)]
pub struct VersionArgs {
    /// Print {"version", "protocol", "oldest_protocol"} as JSON (what an upgrade probes).
    #[arg(long)]
    pub json: bool,
}

pub fn version(a: &VersionArgs) -> anyhow::Result<ExitCode> {
    let me = release::BuildInfo::this();
    if a.json {
        println!("{}", serde_json::to_string(&me)?);
    } else {
        println!("{}", me.describe());
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Rolling upgrade: every storage node, then every processor node, re-executes as
    /// BINARY, one at a time, while hosts keep their I/O (processor nodes hand their
    /// volumes to another processor node first; each storage node's volumes are healthy
    /// again before the next restarts).
    Upgrade(UpgradeArgs),
}

#[derive(Args, Debug)]
pub struct UpgradeArgs {
    /// The new ferrobay binary: an absolute path, the same on every node's machine.
    #[arg(long)]
    pub binary: PathBuf,
    /// The metadata store, etcd://HOST:PORT[,HOST:PORT] or embedded:DIR.
    #[arg(long)]
    pub meta: String,
    /// How long the volumes may take to be healthy again after each storage node's
    /// restart (a partial rebuild of what was written meanwhile), seconds.
    #[arg(long, default_value_t = 600)]
    pub settle_timeout_s: u64,
    /// How long each node may take to restart, seconds.
    #[arg(long, default_value_t = 120)]
    pub restart_timeout_s: u64,
    /// Print the report as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

pub async fn run(a: ClusterArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        ClusterCommand::Upgrade(u) => upgrade(u).await,
    }
}

async fn upgrade(a: UpgradeArgs) -> anyhow::Result<ExitCode> {
    let binary = if a.binary.is_absolute() {
        a.binary.clone()
    } else {
        std::path::absolute(&a.binary)
            .map_err(|e| usage(format!("--binary {}: {e}", a.binary.display())))?
    };
    if a.settle_timeout_s == 0 || a.restart_timeout_s == 0 {
        return Err(usage(
            "--settle-timeout-s and --restart-timeout-s: at least 1",
        ));
    }
    let store = cluster::open_store(&a.meta).await?;
    let token = control::auth::cluster_token(store.as_ref()).await?;
    let mut opts = control::upgrade::UpgradeOptions::new(binary);
    opts.token = Some(token.as_str().to_string());
    opts.settle_timeout = Duration::from_secs(a.settle_timeout_s);
    opts.restart_timeout = Duration::from_secs(a.restart_timeout_s);
    let mut progress = |line: &str| eprintln!("{line}");
    let report = control::upgrade::rolling_upgrade(store, &opts, &mut progress).await?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        for n in &report.nodes {
            println!(
                "{:<12} {:<9} {} -> {}  restart {:.1} s  settle {:.1} s{}",
                n.node,
                format!("{:?}", n.role).to_lowercase(),
                n.from_version,
                n.to_version,
                n.restart_ms as f64 / 1000.0,
                n.settle_ms as f64 / 1000.0,
                if n.volumes_moved.is_empty() {
                    String::new()
                } else {
                    format!("  moved {}", n.volumes_moved.join(","))
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
