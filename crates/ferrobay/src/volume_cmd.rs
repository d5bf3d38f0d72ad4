//! `ferrobay volume ...`: local erasure-coded volumes over files and block devices, like
//! mdadm. Every command assembles the volume from its devices (listed in the registry),
//! does its job, and stops the volume cleanly. With `--meta URL` or `--api ADDR` the
//! commands work on cluster volumes instead (`volume_cluster_cmd`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use volume::registry::{VolumeEntry, VolumeRegistry, open_devices};
use volume::{EngineOptions, LevelSpec, Throttle, Volume, VolumeConfig, VolumeStatus};

#[derive(Args, Debug)]
pub struct VolumeArgs {
    /// Directory of the volume registry (default: $FERROBAY_VOLUMES_DIR or
    /// /var/lib/ferrobay/volumes).
    #[arg(long, global = true)]
    pub volumes_dir: Option<PathBuf>,
    /// I/O engine for files and block devices: auto, uring or threads.
    #[arg(long, global = true, default_value = "auto")]
    pub engine: String,
    /// Cluster volumes: the metadata store, etcd://HOST:PORT[,HOST:PORT] or embedded:DIR.
    #[arg(long, global = true, conflicts_with = "api")]
    pub meta: Option<String>,
    /// Cluster volumes: a processor node's HTTP API, ADDR:PORT.
    #[arg(long, global = true)]
    pub api: Option<String>,
    #[command(subcommand)]
    pub command: VolumeCommand,
}

impl VolumeArgs {
    /// Whether the command works on cluster volumes (`--meta` or `--api`).
    pub fn cluster(&self) -> bool {
        self.meta.is_some() || self.api.is_some()
    }
}

#[derive(Subcommand, Debug)]
pub enum VolumeCommand {
    /// Create a volume: raid0, raid1, raid10, raid5, raid6 or K+M (e.g. 4+2).
    Create {
        name: String,
        #[arg(long)]
        level: String,
        /// Stripe unit (default 64k).
        #[arg(long, default_value = "64k")]
        stripe_unit: String,
        /// Member devices, comma separated: file:PATH[:SIZE], /dev/..., ram:SIZE; cluster
        /// volumes: nvme+tcp://ADDR:PORT/SUBNQN/NSID URLs.
        #[arg(long, value_delimiter = ',', required_unless_present = "storage_nodes")]
        members: Vec<String>,
        /// Cluster volumes: one new namespace on each of these storage nodes (comma
        /// separated; one failure domain each).
        #[arg(long, value_delimiter = ',', conflicts_with = "members")]
        storage_nodes: Vec<String>,
        /// Cluster volumes: usable size, e.g. 100G.
        #[arg(long)]
        size: Option<String>,
        /// Cluster volumes: the processor node that should own it.
        #[arg(long)]
        preferred_owner: Option<String>,
        /// Cluster volumes: print the record as JSON.
        #[arg(long)]
        json: bool,
        /// Hot spares (repeatable or comma separated).
        #[arg(long, value_delimiter = ',')]
        spare: Vec<String>,
        /// Failure domain of each member, comma separated (e.g. the storage node).
        #[arg(long, value_delimiter = ',')]
        domains: Vec<String>,
        /// Overwrite devices that already belong to a volume.
        #[arg(long)]
        force: bool,
        /// Skip zeroing the members (only for devices known to be zero, e.g. new sparse files).
        #[arg(long)]
        assume_clean: bool,
    },
    /// Volumes in the registry.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Assemble and show state, members, dirty regions, rebuild progress.
    Status {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Assemble from the members (fencing stale ones, resyncing dirty regions) and report.
    Assemble {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Mark a member failed (the volume runs degraded).
    FailMember { name: String, member: usize },
    /// Replace a member with a new device and rebuild onto it.
    ReplaceMember {
        name: String,
        member: usize,
        /// The new device.
        device: String,
        #[command(flatten)]
        throttle: ThrottleArgs,
    },
    /// Rebuild failed or stale members onto spares / returning members.
    Rebuild {
        name: String,
        #[command(flatten)]
        throttle: ThrottleArgs,
    },
    /// Read every stripe, verify parity, repair mismatches.
    Scrub {
        name: String,
        #[command(flatten)]
        throttle: ThrottleArgs,
        #[arg(long)]
        json: bool,
    },
    /// Flush, clear the bitmap and mark the volume clean.
    Stop { name: String },
    /// Cluster volumes: hand the volume over to another processor node (clean takeover,
    /// no resync).
    Move {
        name: String,
        /// The processor node to move it to.
        #[arg(long)]
        to: String,
        /// Wait until it owns the volume.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits.
        #[arg(long, default_value_t = 60)]
        timeout_s: u64,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct ThrottleArgs {
    /// Background speed: a share of member bandwidth (20%), a rate (100M per second) or
    /// "unlimited".
    #[arg(long, default_value = "20%")]
    pub throttle: String,
}

fn parse_throttle(s: &str) -> anyhow::Result<Throttle> {
    if s == "unlimited" {
        return Ok(Throttle::Unlimited);
    }
    if let Some(p) = s.strip_suffix('%') {
        let f: f64 = p
            .parse()
            .map_err(|_| anyhow::anyhow!("invalid --throttle {s:?}"))?;
        if !(f > 0.0 && f <= 100.0) {
            anyhow::bail!("invalid --throttle {s:?}: a share must be in (0%, 100%]");
        }
        return Ok(Throttle::Fraction(f / 100.0));
    }
    let bytes = blockdev::parse_size_bytes(s).map_err(|_| {
        anyhow::anyhow!("invalid --throttle {s:?} (expected 20%, 100M or unlimited)")
    })?;
    Ok(Throttle::BytesPerSec(bytes))
}

fn registry(a: &VolumeArgs) -> VolumeRegistry {
    VolumeRegistry::new(
        a.volumes_dir
            .clone()
            .unwrap_or_else(VolumeRegistry::default_dir),
    )
}

async fn assemble(
    reg: &VolumeRegistry,
    name: &str,
    engine: blockdev::IoEngine,
    options: EngineOptions,
) -> anyhow::Result<(VolumeEntry, Volume)> {
    Ok(volume::registry::assemble_registered(reg, name, engine, options).await?)
}

/// Opens a registered volume as a block device (for `ferrobay bench --target volume:NAME`).
pub async fn open_volume(name: &str, engine: blockdev::IoEngine) -> anyhow::Result<Arc<Volume>> {
    let reg = VolumeRegistry::new(VolumeRegistry::default_dir());
    let (_, vol) = assemble(&reg, name, engine, EngineOptions::default()).await?;
    Ok(Arc::new(vol))
}

fn status_text(s: &VolumeStatus) -> String {
    let mut out = format!(
        "volume {} ({}): {:?}, {} bytes, layout {:?}, generation {}, {} of {} regions dirty\n",
        s.name,
        s.uuid,
        s.state,
        s.size_bytes,
        s.layout,
        s.generation,
        s.dirty_regions,
        s.region_count
    );
    for m in &s.members {
        out += &format!(
            "  member {:>2}  {:<40} {:?}  domain {}\n",
            m.index,
            m.device.as_deref().unwrap_or("-"),
            m.state,
            if m.failure_domain.is_empty() {
                "-"
            } else {
                &m.failure_domain
            }
        );
    }
    for m in &s.spares {
        out += &format!(
            "  spare  {:>2}  {:<40} {:?}\n",
            m.index,
            m.device.as_deref().unwrap_or("-"),
            m.state
        );
    }
    if let Some(r) = &s.rebuild {
        out += &format!(
            "  rebuild: member {} {}/{} bytes{}\n",
            r.member,
            r.bytes_done,
            r.bytes_total,
            if r.partial {
                " (dirty regions only)"
            } else {
                ""
            }
        );
    }
    if let Some(p) = &s.scrub {
        out += &format!(
            "  scrub: {:?} {}/{} bytes, {:.0} MB/s{}\n",
            p.phase,
            p.bytes_done,
            p.bytes_total,
            p.rate_bytes_per_sec / 1e6,
            p.eta_secs
                .map(|e| format!(", ETA {e:.0} s"))
                .unwrap_or_default()
        );
    }
    if let Some(r) = &s.last_resync {
        out += &format!(
            "  last resync: {} regions, {} bytes checked, {} stripes rewritten, {:.2} s\n",
            r.regions, r.bytes_resynced, r.stripes_rewritten, r.duration_secs
        );
    }
    for n in &s.notes {
        out += &format!("  note: {n}\n");
    }
    out
}

fn print_status(s: &VolumeStatus, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(s)?);
    } else {
        print!("{}", status_text(s));
    }
    Ok(())
}

/// Follows a rebuild to its end with a progress bar (terminal) or log lines.
async fn follow_rebuild(vol: &Volume) -> anyhow::Result<()> {
    let mut rx = vol.start_rebuild().await?;
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let b = indicatif::ProgressBar::new(1);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "rebuild [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    let waiter = vol.wait_rebuild();
    tokio::pin!(waiter);
    let mut last_log = std::time::Instant::now();
    let done = loop {
        tokio::select! {
            d = &mut waiter => break d,
            changed = rx.changed() => {
                if changed.is_err() { break vol.wait_rebuild().await; }
                let p = rx.borrow().clone();
                if let Some(b) = &bar {
                    b.set_length(p.bytes_total);
                    b.set_position(p.bytes_done);
                    b.set_message(p.eta_secs.map(|e| format!("ETA {e:.0}s")).unwrap_or_default());
                } else if last_log.elapsed() > Duration::from_secs(5) {
                    last_log = std::time::Instant::now();
                    tracing::info!(member = p.member, done = p.bytes_done, total = p.bytes_total, eta_s = ?p.eta_secs, "rebuild progress");
                }
            }
        }
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(p) = done {
        println!(
            "rebuild of member {} finished: {} bytes{}",
            p.member,
            p.bytes_done,
            if p.partial {
                " (dirty regions only)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

pub async fn run(a: VolumeArgs) -> anyhow::Result<ExitCode> {
    if a.cluster() {
        return crate::volume_cluster_cmd::run(a).await;
    }
    let reg = registry(&a);
    let engine = crate::bench_cmd::parse_engine(&a.engine)?;
    match a.command {
        VolumeCommand::Create {
            name,
            level,
            stripe_unit,
            members,
            spare,
            domains,
            force,
            assume_clean,
            storage_nodes,
            size,
            preferred_owner,
            json: _,
        } => {
            if !storage_nodes.is_empty() || size.is_some() || preferred_owner.is_some() {
                return Err(crate::cluster::usage(
                    "--storage-nodes, --size and --preferred-owner are for cluster volumes: \
                     add --meta URL or --api ADDR",
                ));
            }
            let level_spec: LevelSpec = level
                .parse()
                .map_err(|e| anyhow::anyhow!("--level {level:?}: {e}"))?;
            if reg.load(&name).is_ok() && !force {
                anyhow::bail!(
                    "volume {name:?} already exists in {} (use --force to recreate)",
                    reg.dir().display()
                );
            }
            let mut cfg = VolumeConfig::new(level_spec);
            cfg.stripe_unit_bytes = blockdev::parse_size_bytes(&stripe_unit)?;
            cfg.failure_domains = domains;
            cfg.force = force;
            cfg.assume_clean = assume_clean;
            let devs = open_devices(&members, engine).await?;
            let spares = open_devices(&spare, engine).await?;
            let vol = Volume::create(&name, cfg, devs, spares)
                .await
                .with_context(|| format!("create volume {name}"))?;
            let entry = VolumeEntry {
                name: name.clone(),
                uuid: vol.uuid(),
                level,
                members,
                spares: spare,
            };
            reg.save(&entry, force)?;
            vol.stop().await?;
            print_status(&vol.status(), false)?;
        }
        VolumeCommand::List { json } => {
            let list = reg.list()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                println!("{:<20} {:<8} {:<36} MEMBERS", "NAME", "LEVEL", "UUID");
                for e in list {
                    println!(
                        "{:<20} {:<8} {:<36} {}",
                        e.name,
                        e.level,
                        e.uuid,
                        e.members.join(",")
                    );
                }
            }
        }
        VolumeCommand::Status { name, json } | VolumeCommand::Assemble { name, json } => {
            let opts = EngineOptions {
                auto_rebuild: false,
                ..EngineOptions::default()
            };
            let (_, vol) = assemble(&reg, &name, engine, opts).await?;
            print_status(&vol.status(), json)?;
            vol.stop().await?;
        }
        VolumeCommand::FailMember { name, member } => {
            let opts = EngineOptions {
                auto_rebuild: false,
                ..EngineOptions::default()
            };
            let (_, vol) = assemble(&reg, &name, engine, opts).await?;
            vol.fail_member(member).await?;
            print_status(&vol.status(), false)?;
            vol.stop().await?;
        }
        VolumeCommand::ReplaceMember {
            name,
            member,
            device,
            throttle,
        } => {
            let opts = EngineOptions {
                auto_rebuild: false,
                throttle: parse_throttle(&throttle.throttle)?,
                ..EngineOptions::default()
            };
            let (mut entry, vol) = assemble(&reg, &name, engine, opts).await?;
            let dev = open_devices(std::slice::from_ref(&device), engine)
                .await?
                .remove(0);
            vol.replace_member(member, dev).await?;
            if let Some(slot) = entry.members.get_mut(member) {
                *slot = device;
            }
            reg.save(&entry, true)?;
            follow_rebuild(&vol).await?;
            print_status(&vol.status(), false)?;
            vol.stop().await?;
        }
        VolumeCommand::Rebuild { name, throttle } => {
            let opts = EngineOptions {
                auto_rebuild: false,
                throttle: parse_throttle(&throttle.throttle)?,
                ..EngineOptions::default()
            };
            let (_, vol) = assemble(&reg, &name, engine, opts).await?;
            follow_rebuild(&vol).await?;
            print_status(&vol.status(), false)?;
            vol.stop().await?;
        }
        VolumeCommand::Scrub {
            name,
            throttle,
            json,
        } => {
            let opts = EngineOptions {
                auto_rebuild: false,
                throttle: parse_throttle(&throttle.throttle)?,
                ..EngineOptions::default()
            };
            let (_, vol) = assemble(&reg, &name, engine, opts).await?;
            let report = vol.scrub().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!(
                    "scrub of {name}: {} stripes ({} bytes) checked, {} mismatches, {} repaired, {} skipped",
                    report.stripes_checked,
                    report.bytes_checked,
                    report.mismatches,
                    report.repaired,
                    report.skipped
                );
            }
            vol.stop().await?;
            if report.mismatches > report.repaired {
                return Ok(ExitCode::FAILURE);
            }
        }
        VolumeCommand::Stop { name } => {
            let opts = EngineOptions {
                auto_rebuild: false,
                ..EngineOptions::default()
            };
            let (_, vol) = assemble(&reg, &name, engine, opts).await?;
            vol.stop().await?;
            println!("volume {name} stopped clean");
        }
        VolumeCommand::Move { .. } => {
            return Err(crate::cluster::usage(
                "volume move works on cluster volumes: add --meta URL or --api ADDR",
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttles() {
        assert_eq!(parse_throttle("20%").unwrap(), Throttle::Fraction(0.2));
        assert_eq!(parse_throttle("unlimited").unwrap(), Throttle::Unlimited);
        assert_eq!(
            parse_throttle("100M").unwrap(),
            Throttle::BytesPerSec(100 << 20)
        );
        assert!(parse_throttle("0%").is_err());
        assert!(parse_throttle("fast").is_err());
    }
}
