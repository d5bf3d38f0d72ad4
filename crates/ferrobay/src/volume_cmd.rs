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
    /// With --api: file with the API token (default: $FERROBAY_API_TOKEN, else
    /// ./ferrobay-data/api-token when it exists, as `ferrobay up` leaves it).
    #[arg(long, global = true, requires = "api")]
    pub api_token_file: Option<std::path::PathBuf>,
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
        /// Print the result as JSON (cluster volumes: the record; local: the status).
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
        /// Data layout: `in-place` (default) or `log` (full-stripe writes only, inline
        /// compression; raid5, raid6 and K+M).
        #[arg(long, default_value = "in-place")]
        layout: String,
        /// With `--layout log`: off, lz4, zstd or zstd:LEVEL (1..22).
        #[arg(long)]
        compress: Option<String>,
        /// With `--layout log`: logical block, the unit of compression (4k..64k; default
        /// 4k).
        #[arg(long)]
        log_block: Option<String>,
    },
    /// Volumes in the registry.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show state, members, dirty regions as the members' superblocks record them.
    /// Reads only: changes nothing on the members (`assemble` acts).
    Status {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Assemble from the members (degraded if some are missing or unreadable, within
    /// what the layout survives; fencing stale ones, resyncing dirty regions), then stop
    /// cleanly and report.
    Assemble {
        name: String,
        #[arg(long)]
        json: bool,
        /// When too few current members are present, count members that left earlier
        /// (failed, but fully current when they left) as current, like mdadm --force:
        /// regions written since they left may read stale data.
        #[arg(long)]
        force: bool,
    },
    /// Take a member out (mdadm --fail): it stays failed, also across assemblies, until
    /// `re-add` or `replace-member`. MEMBER: its index or its device spec.
    FailMember { name: String, member: String },
    /// Put a failed member's own device back (mdadm --re-add): only the regions written
    /// since it left are rebuilt. MEMBER: its index or its device spec.
    ReAdd {
        name: String,
        member: String,
        #[command(flatten)]
        throttle: ThrottleArgs,
    },
    /// Replace a member with a new device and rebuild onto it. MEMBER: its index or its
    /// device spec. Cluster volumes (--meta/--api): DEVICE is a storage node that gets a
    /// new namespace for it; the owning processor node swaps it in and rebuilds.
    ReplaceMember {
        name: String,
        member: String,
        /// The new device (local volumes), or a storage node (cluster volumes).
        device: String,
        #[command(flatten)]
        throttle: ThrottleArgs,
    },
    /// Copy an active member onto a new device or a spare while it stays in service
    /// (mdadm --replace): the copy takes its place at the end, with no degraded window.
    /// For a drive that is failing but not dead yet. MEMBER: its index or its device spec.
    CopyMember {
        name: String,
        member: String,
        /// The device to copy onto; without it, the volume's first spare.
        device: Option<String>,
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
    /// Cluster volumes: QoS limits of the volume and of hosts on it (docs/qos.md).
    #[command(subcommand)]
    Qos(VolumeQosCommand),
    /// Cluster volumes: hosts that must authenticate with DH-HMAC-CHAP to the volume, or
    /// connect to it over TLS, on every processor node (docs/security.md). With --meta.
    #[command(subcommand)]
    Auth(VolumeAuthCommand),
}

#[derive(Subcommand, Debug)]
pub enum VolumeAuthCommand {
    /// Require HOST_NQN to authenticate to the volume with --dhchap-secret FILE (and,
    /// for hosts that authenticate the controller too, --dhchap-ctrl-secret FILE),
    /// and/or to connect over TLS with --tls-psk FILE; replaces what the host had for
    /// what is given. Hosts not listed are not affected.
    Set {
        name: String,
        host_nqn: String,
        #[command(flatten)]
        dhchap: crate::node_cmd::DhchapArgs,
        /// The host must connect over TLS (a processor node's `--tls-listen` listener)
        /// with the PSKs derived from this configured PSK: FILE holding the
        /// `NVMeTLSkey-1:..` line (`ferrobay gen-tls-key > FILE`).
        #[arg(long, value_name = "FILE")]
        tls_psk: Option<std::path::PathBuf>,
        /// The host must use secure channel concatenation (`nvme connect --concat`): it
        /// authenticates with its DH-HMAC-CHAP secret on a plain-TCP admin queue of a
        /// processor node, then connects over TLS (that node's `--tls-listen` listener)
        /// with the PSK that generated; no configured PSK is needed.
        #[arg(long, requires = "dhchap_secret")]
        concat: bool,
    },
    /// No longer require HOST_NQN to authenticate to the volume, nor to use TLS.
    Remove { name: String, host_nqn: String },
    /// The hosts that must authenticate to the volume or use TLS (never their secrets).
    List {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum VolumeQosCommand {
    /// Set the limits of the volume (all hosts together) or of one host on it; they
    /// replace what that key had.
    Set {
        name: String,
        /// Limit this host's commands on the volume instead of the volume as a whole.
        #[arg(long)]
        host: Option<String>,
        #[command(flatten)]
        limits: crate::qos_cmd::QosLimitArgs,
        #[arg(long)]
        json: bool,
    },
    /// The volume's limits and their generation.
    List {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove the limits of the volume (or of one host on it).
    Clear {
        name: String,
        #[arg(long)]
        host: Option<String>,
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

/// Options for a command that assembles, acts and stops (no rebuild unless asked).
fn command_options(throttle: Option<&ThrottleArgs>) -> anyhow::Result<EngineOptions> {
    Ok(EngineOptions {
        auto_rebuild: false,
        throttle: match throttle {
            Some(t) => parse_throttle(&t.throttle)?,
            None => Throttle::default(),
        },
        ..EngineOptions::default()
    })
}

fn print_status(s: &VolumeStatus, json: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let text = if json {
        serde_json::to_string_pretty(s)? + "\n"
    } else {
        crate::volume_text::status_text(s)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Stops `vol` cleanly and prints the volume as `volume status` shows it now, with what
/// happened while it ran (notes, resync) first.
async fn stop_and_report(
    reg: &VolumeRegistry,
    name: &str,
    engine: blockdev::IoEngine,
    vol: &Volume,
    json: bool,
) -> anyhow::Result<()> {
    let ran = vol.status();
    vol.stop().await?;
    let (_, mut st) = volume::registry::examine_registered(reg, name, engine).await?;
    st.last_resync = ran.last_resync;
    st.last_scrub = ran.last_scrub;
    // The log layout's figures, after the checkpoint of the clean stop.
    st.log = vol.status().log;
    let mut notes = ran.notes;
    for n in std::mem::take(&mut st.notes) {
        // Examine's pointer to these figures: here they are.
        if st.log.is_some() && n.starts_with("log layout,") {
            continue;
        }
        if !notes.contains(&n) {
            notes.push(n);
        }
    }
    st.notes = notes;
    print_status(&st, json)
}

/// Follows a rebuild to its end with a progress bar (terminal) or log lines.
/// Shows a proactive copy's progress until it ends; an error if it did not complete.
async fn follow_copy(
    vol: &Volume,
    mut rx: tokio::sync::watch::Receiver<volume::CopyProgress>,
) -> anyhow::Result<()> {
    let mut last_log = std::time::Instant::now();
    loop {
        let p = rx.borrow().clone();
        if p.phase != volume::TaskPhase::Running {
            break;
        }
        if last_log.elapsed() > Duration::from_secs(5) {
            last_log = std::time::Instant::now();
            tracing::info!(member = p.member, target = %p.target, done = p.bytes_done, total = p.bytes_total, eta_s = ?p.eta_secs, "copy progress");
        }
        if rx.changed().await.is_err() {
            break;
        }
    }
    match vol.wait_copy().await {
        Some(p) if p.phase == volume::TaskPhase::Done => {
            println!(
                "member {} copied onto {} ({}), which took its place",
                p.member,
                p.target,
                crate::cluster::human_bytes(p.bytes_done)
            );
            Ok(())
        }
        Some(p) => anyhow::bail!(
            "the copy of member {} did not complete: {:?}",
            p.member,
            p.phase
        ),
        None => anyhow::bail!("no copy ran"),
    }
}

/// `r`, the result of a command on the assembled `vol`, after stopping `vol` cleanly if it
/// is an error: a refused or failed command (nothing to rebuild, an unknown member, a
/// device that does not open) leaves the volume as clean as it found it (dropping it
/// would leave it "not cleanly stopped", to be resynced at the next assembly). Stopping
/// twice is harmless, so a command that stopped the volume before failing is covered too.
async fn stop_if_failed<T>(vol: &Volume, r: anyhow::Result<T>) -> anyhow::Result<T> {
    if r.is_err()
        && let Err(e) = vol.stop().await
    {
        tracing::warn!("volume not stopped cleanly after the error: {e}");
    }
    r
}

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
            "rebuild of member {} finished: {}{}",
            p.member,
            crate::cluster::human_bytes(p.bytes_done),
            match (p.partial, p.in_use_only) {
                (true, true) => " (dirty regions in use only)",
                (true, false) => " (dirty regions only)",
                (false, true) => " (segments in use only)",
                (false, false) => "",
            }
        );
    }
    Ok(())
}

/// `--layout`, `--compress` and `--log-block` as a `VolumeConfig::log`.
fn log_config(
    layout: &str,
    compress: Option<&str>,
    log_block: Option<&str>,
) -> anyhow::Result<Option<volume::LogConfig>> {
    match layout {
        "in-place" | "inplace" => {
            if compress.is_some_and(|c| c != "off") {
                return Err(crate::cluster::usage(
                    "--compress needs --layout log (in-place volumes are not compressed)",
                ));
            }
            if log_block.is_some() {
                return Err(crate::cluster::usage("--log-block needs --layout log"));
            }
            Ok(None)
        }
        "log" => {
            let compression: volume::Compression = compress
                .unwrap_or("off")
                .parse()
                .map_err(|e: String| anyhow::anyhow!("--compress: {e}"))?;
            let log_block = log_block.unwrap_or("4k");
            let block = blockdev::parse_size_bytes(log_block)?;
            let mut c = volume::LogConfig::new(compression);
            c.block_bytes = u32::try_from(block)
                .ok()
                .filter(|&b| volume::LogParams::block_bytes_valid(b))
                .ok_or_else(|| {
                    anyhow::anyhow!("--log-block {log_block}: a power of two from 4k to 64k")
                })?;
            Ok(Some(c))
        }
        other => Err(crate::cluster::usage(format!(
            "--layout {other:?}: in-place or log"
        ))),
    }
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
            json,
            layout,
            compress,
            log_block,
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
            cfg.log = log_config(&layout, compress.as_deref(), log_block.as_deref())?;
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
            stop_and_report(&reg, &name, engine, &vol, json).await?;
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
        VolumeCommand::Status { name, json } => {
            let (_, st) = volume::registry::examine_registered(&reg, &name, engine).await?;
            print_status(&st, json)?;
        }
        VolumeCommand::Assemble { name, json, force } => {
            let opts = EngineOptions {
                force_stale: force,
                ..command_options(None)?
            };
            let (_, vol) = assemble(&reg, &name, engine, opts).await?;
            stop_and_report(&reg, &name, engine, &vol, json).await?;
        }
        VolumeCommand::FailMember { name, member } => {
            let (entry, vol) = assemble(&reg, &name, engine, command_options(None)?).await?;
            let r = async {
                let i = volume::registry::resolve_member(&entry, &vol.status(), &member, engine)
                    .await?;
                vol.fail_member(i)
                    .await
                    .with_context(|| format!("fail member {i} of {name}"))?;
                eprintln!(
                    "member {i} of {name} failed: it stays out until `volume re-add {name} {i}` or `volume replace-member`"
                );
                stop_and_report(&reg, &name, engine, &vol, false).await
            }
            .await;
            stop_if_failed(&vol, r).await?;
        }
        VolumeCommand::ReAdd {
            name,
            member,
            throttle,
        } => {
            let (mut entry, vol) =
                assemble(&reg, &name, engine, command_options(Some(&throttle))?).await?;
            let r = async {
                let st = vol.status();
                let i = volume::registry::resolve_member(&entry, &st, &member, engine).await?;
                let (spec, dev) =
                    volume::registry::member_device(&entry, &st, i, &member, engine).await?;
                vol.re_add_member(i, dev)
                    .await
                    .with_context(|| format!("re-add member {i} of {name}"))?;
                if entry.members.get(i) != Some(&spec) && i < entry.members.len() {
                    entry.members[i] = spec;
                    reg.save(&entry, true)?;
                }
                follow_rebuild(&vol).await?;
                stop_and_report(&reg, &name, engine, &vol, false).await
            }
            .await;
            stop_if_failed(&vol, r).await?;
        }
        VolumeCommand::ReplaceMember {
            name,
            member,
            device,
            throttle,
        } => {
            let (mut entry, vol) =
                assemble(&reg, &name, engine, command_options(Some(&throttle))?).await?;
            let r = async {
                let i = volume::registry::resolve_member(&entry, &vol.status(), &member, engine)
                    .await?;
                let dev = open_devices(std::slice::from_ref(&device), engine)
                    .await?
                    .remove(0);
                vol.replace_member(i, dev)
                    .await
                    .with_context(|| format!("replace member {i} of {name}"))?;
                if let Some(slot) = entry.members.get_mut(i) {
                    *slot = device;
                }
                reg.save(&entry, true)?;
                follow_rebuild(&vol).await?;
                stop_and_report(&reg, &name, engine, &vol, false).await
            }
            .await;
            stop_if_failed(&vol, r).await?;
        }
        VolumeCommand::CopyMember {
            name,
            member,
            device,
            throttle,
        } => {
            let (mut entry, vol) =
                assemble(&reg, &name, engine, command_options(Some(&throttle))?).await?;
            let r = async {
                let i = volume::registry::resolve_member(&entry, &vol.status(), &member, engine)
                    .await?;
                let (rx, new_spec) = match &device {
                    Some(d) => {
                        let dev = open_devices(std::slice::from_ref(d), engine)
                            .await?
                            .remove(0);
                        (vol.copy_member(i, dev).await, d.clone())
                    }
                    None => {
                        // The volume's spares come in the registry's order: the first free
                        // one is the one the copy takes.
                        let j = vol
                            .status()
                            .spares
                            .iter()
                            .position(|s| s.state == volume::MemberState::Spare);
                        let spec = j
                            .and_then(|j| entry.spares.get(j).cloned())
                            .unwrap_or_default();
                        (vol.copy_member_onto_spare(i).await, spec)
                    }
                };
                let rx = rx.with_context(|| format!("copy member {i} of {name}"))?;
                follow_copy(&vol, rx).await?;
                let done = vol.wait_copy().await;
                if done
                    .as_ref()
                    .is_some_and(|p| p.phase == volume::TaskPhase::Done)
                {
                    entry.spares.retain(|s| *s != new_spec);
                    if let Some(slot) = entry.members.get_mut(i) {
                        *slot = new_spec;
                    }
                    reg.save(&entry, true)?;
                }
                stop_and_report(&reg, &name, engine, &vol, false).await
            }
            .await;
            stop_if_failed(&vol, r).await?;
        }
        VolumeCommand::Rebuild { name, throttle } => {
            let (_, vol) = assemble(&reg, &name, engine, command_options(Some(&throttle))?).await?;
            let r = async {
                follow_rebuild(&vol).await?;
                stop_and_report(&reg, &name, engine, &vol, false).await
            }
            .await;
            stop_if_failed(&vol, r).await?;
        }
        VolumeCommand::Scrub {
            name,
            throttle,
            json,
        } => {
            let (_, vol) = assemble(&reg, &name, engine, command_options(Some(&throttle))?).await?;
            let r = async {
                let report = vol.scrub().await?;
                vol.stop().await?;
                anyhow::Ok(report)
            }
            .await;
            let report = stop_if_failed(&vol, r).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!(
                    "scrub of {name}: {} stripes ({}) checked, {} mismatches, {} repaired, {} skipped",
                    report.stripes_checked,
                    crate::cluster::human_bytes(report.bytes_checked),
                    report.mismatches,
                    report.repaired,
                    report.skipped
                );
            }
            if report.mismatches > report.repaired {
                return Ok(ExitCode::FAILURE);
            }
        }
        VolumeCommand::Stop { name } => {
            let (_, vol) = assemble(&reg, &name, engine, command_options(None)?).await?;
            vol.stop().await?;
            if vol.status().clean {
                println!("volume {name} stopped clean");
            } else {
                println!("volume {name} stopped (degraded or resync pending: not marked clean)");
            }
        }
        VolumeCommand::Move { .. } => {
            return Err(crate::cluster::usage(
                "volume move works on cluster volumes: add --meta URL or --api ADDR",
            ));
        }
        VolumeCommand::Qos(_) => {
            return Err(crate::cluster::usage(
                "volume qos works on cluster volumes: add --meta URL or --api ADDR",
            ));
        }
        VolumeCommand::Auth(_) => {
            return Err(crate::cluster::usage(
                "volume auth works on cluster volumes: add --meta URL",
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
