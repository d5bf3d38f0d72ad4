//! `ferrobay volume ... --meta URL | --api ADDR`: volumes across storage nodes, owned and
//! exported by processor nodes. The work is control::provision's (or a processor node's
//! HTTP API); this file picks the way in, and prints.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use control::api::ApiClient;
use control::provision::replace::{ReplaceMember, ReplaceRequest};
use control::provision::{CreateVolume, VolumeView};
use control::records::{NodeRecord, NodeRole, VolumeRecord, VolumeStatusRecord};
use meta::schema::OwnerRecord;

use crate::cluster::{self, human_bytes, usage};
use crate::volume_cmd::{VolumeArgs, VolumeAuthCommand, VolumeCommand, VolumeQosCommand};

const MOVE_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Where the cluster is reached: the store itself, or a processor node's API.
enum Backend {
    Meta(Arc<dyn meta::MetaStore>),
    /// Boxed: the HTTP client is much larger than the store handle.
    Api(Box<ApiClient>),
}

impl Backend {
    async fn open(a: &VolumeArgs) -> anyhow::Result<Backend> {
        match (&a.meta, &a.api) {
            (Some(url), _) => Ok(Backend::Meta(cluster::open_store(url).await?)),
            (None, Some(addr)) => {
                let token = cluster::client_token(
                    a.api_token_file.as_deref(),
                    &[std::path::Path::new(cluster::UP_TOKEN_FILE)],
                )?;
                Ok(Backend::Api(Box::new(
                    ApiClient::new(addr.clone()).with_token(token),
                )))
            }
            (None, None) => Err(usage("cluster volumes need --meta URL or --api ADDR")),
        }
    }

    async fn create(&self, req: &CreateVolume) -> anyhow::Result<VolumeRecord> {
        Ok(match self {
            Backend::Meta(store) => {
                let host = nvmf_host::HostIdentity::system()?;
                control::provision::create_volume(store.as_ref(), req, &host).await?
            }
            Backend::Api(c) => c.create_volume(req).await?,
        })
    }

    async fn list(&self) -> anyhow::Result<Vec<VolumeView>> {
        Ok(match self {
            Backend::Meta(store) => {
                let records = control::provision::list_volumes(store.as_ref()).await?;
                let mut views = Vec::with_capacity(records.len());
                for r in records {
                    if let Some(v) =
                        control::provision::volume_view(store.as_ref(), &r.name).await?
                    {
                        views.push(v);
                    }
                }
                views
            }
            Backend::Api(c) => c.list_volumes().await?,
        })
    }

    async fn view(&self, name: &str) -> anyhow::Result<VolumeView> {
        let v = match self {
            Backend::Meta(store) => control::provision::volume_view(store.as_ref(), name).await?,
            Backend::Api(c) => c.volume(name).await?,
        };
        v.with_context(|| format!("no volume named {name:?}"))
    }

    async fn request_move(&self, name: &str, to: &str) -> anyhow::Result<()> {
        match self {
            Backend::Meta(store) => {
                control::provision::request_move(store.as_ref(), name, to).await?
            }
            Backend::Api(c) => c.move_volume(name, to).await?,
        }
        Ok(())
    }

    /// Asks for member `slot` of `name` to be replaced by a new namespace on
    /// `storage_node`; the owner swaps it in and rebuilds.
    async fn replace_member(
        &self,
        name: &str,
        slot: usize,
        storage_node: &str,
    ) -> anyhow::Result<ReplaceRequest> {
        Ok(match self {
            Backend::Meta(store) => {
                let host = nvmf_host::HostIdentity::system()?;
                let req = ReplaceMember {
                    storage_node: storage_node.to_string(),
                };
                control::provision::replace::request_replace(
                    store.as_ref(),
                    name,
                    slot,
                    &req,
                    &host,
                )
                .await?
            }
            Backend::Api(c) => c.replace_member(name, slot, storage_node).await?,
        })
    }

    /// Live processor nodes, for the `nvme connect` hint.
    async fn processors(&self) -> anyhow::Result<Vec<NodeRecord>> {
        let nodes = match self {
            Backend::Meta(store) => control::registration::list_nodes(store.as_ref()).await?,
            Backend::Api(c) => c.nodes().await?,
        };
        Ok(nodes
            .into_iter()
            .filter(|n: &NodeRecord| n.role == NodeRole::Processor)
            .collect())
    }
}

pub async fn run(a: VolumeArgs) -> anyhow::Result<ExitCode> {
    let backend = Backend::open(&a).await?;
    match a.command {
        VolumeCommand::Create {
            name,
            level,
            stripe_unit,
            members,
            storage_nodes,
            size,
            preferred_owner,
            json,
            spare,
            domains,
            force,
            assume_clean,
            layout,
            compress,
            log_block,
        } => {
            if !spare.is_empty() || !domains.is_empty() || force || assume_clean {
                return Err(usage(
                    "--spare, --domains, --force and --assume-clean are for local volumes \
                     (without --meta/--api)",
                ));
            }
            let level = cluster::parse_level_arg(&level)?;
            let size = size.ok_or_else(|| usage("cluster volumes need --size, e.g. 100G"))?;
            let size_bytes = cluster::parse_size_arg("--size", &size)?;
            let stripe_unit_bytes = cluster::parse_size_arg("--stripe-unit", &stripe_unit)?;
            let log_block_bytes = match log_block {
                Some(b) => Some(
                    u32::try_from(cluster::parse_size_arg("--log-block", &b)?)
                        .map_err(|_| usage(format!("--log-block {b}: 4k..64k")))?,
                ),
                None => None,
            };
            let req = CreateVolume {
                name: name.clone(),
                level,
                size_bytes,
                stripe_unit_bytes: Some(stripe_unit_bytes),
                storage_nodes,
                members,
                preferred_owner,
                layout: (layout != "in-place").then_some(layout),
                compress,
                log_block_bytes,
            };
            // Refused here in one line (usage), before a storage node is asked.
            control::provision::requested_log(&req).map_err(|e| usage(e.to_string()))?;
            let record = backend
                .create(&req)
                .await
                .with_context(|| format!("create volume {name}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&record)?);
            } else {
                print!("{}", created_text(&record));
                let processors = backend.processors().await.unwrap_or_default();
                print!("{}", connect_hint(&record, &processors));
            }
        }
        VolumeCommand::List { json } => {
            let views = backend.list().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&views)?);
            } else {
                print!("{}", list_table(&views));
            }
        }
        VolumeCommand::Status { name, json } => {
            let v = backend.view(&name).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", status_text(&v));
            }
        }
        VolumeCommand::Move {
            name,
            to,
            wait,
            timeout_s,
            json,
        } => {
            let before = backend.view(&name).await?;
            if before.owner.as_ref().is_some_and(|o| o.node == to) {
                eprintln!("volume {name} is already owned by {to}");
            } else {
                backend
                    .request_move(&name, &to)
                    .await
                    .with_context(|| format!("move volume {name} to {to}"))?;
                if !wait {
                    eprintln!("requested: volume {name} moves to {to}");
                }
            }
            if wait {
                let v = wait_owner(&backend, &name, &to, Duration::from_secs(timeout_s)).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    let epoch = v.owner.as_ref().map_or(0, |o| o.epoch);
                    println!("volume {name} is owned by {to} (epoch {epoch})");
                }
            } else if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&backend.view(&name).await?)?
                );
            }
        }
        VolumeCommand::Qos(cmd) => qos(&backend, cmd).await?,
        VolumeCommand::Auth(cmd) => auth(&backend, cmd).await?,
        VolumeCommand::ReplaceMember {
            name,
            member,
            device,
            throttle: _,
        } => {
            let v = backend.view(&name).await?;
            let slot = member_slot(&v.record, &member)?;
            let r = backend
                .replace_member(&name, slot, &device)
                .await
                .with_context(|| format!("replace member {slot} of volume {name}"))?;
            println!(
                "volume {name}: member {slot} ({}) is being replaced by {} on {}; the owner \
                 rebuilds onto it (`ferrobay volume status {name}` shows the progress)",
                r.old_member, r.member, r.storage_node
            );
        }
        VolumeCommand::Assemble { .. }
        | VolumeCommand::FailMember { .. }
        | VolumeCommand::ReAdd { .. }
        | VolumeCommand::CopyMember { .. }
        | VolumeCommand::Rebuild { .. }
        | VolumeCommand::Scrub { .. }
        | VolumeCommand::Stop { .. } => {
            return Err(usage(
                "this command works on local volumes only (without --meta/--api): the owning \
                 processor node assembles, rebuilds and scrubs cluster volumes (a cluster \
                 volume's member is replaced with `replace-member NAME MEMBER STORAGE_NODE`)",
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `ferrobay volume auth ...`: the hosts' secrets live in the volume's authentication
/// record in the store (`control::volume_auth`), which only --meta reaches: the API
/// never carries them.
async fn auth(backend: &Backend, cmd: VolumeAuthCommand) -> anyhow::Result<()> {
    let Backend::Meta(store) = backend else {
        return Err(usage(
            "volume auth works through the metadata store only (--meta URL): secrets do \
             not travel over the HTTP API",
        ));
    };
    let store = store.as_ref();
    match cmd {
        VolumeAuthCommand::Set {
            name,
            host_nqn,
            dhchap,
            tls_psk,
            concat,
        } => {
            if dhchap.dhchap_secret.is_none() && tls_psk.is_none() {
                return Err(usage("give --dhchap-secret FILE, --tls-psk FILE or both"));
            }
            // Both checked before either is stored.
            let tls = tls_psk
                .as_deref()
                .map(|p| crate::node_cmd::tls_psk_record(&host_nqn, p))
                .transpose()?;
            let dhchap = dhchap
                .dhchap_secret
                .is_some()
                .then(|| crate::node_cmd::dhchap_record(&host_nqn, &dhchap, concat))
                .transpose()?;
            if let Some(rec) = dhchap {
                let both = rec.ctrl_secret.is_some();
                control::volume_auth::set_host(store, &name, rec)
                    .await
                    .with_context(|| {
                        format!("require {host_nqn} to authenticate to volume {name}")
                    })?;
                println!(
                    "volume {name}: host {host_nqn} must authenticate with DH-HMAC-CHAP{}",
                    if both {
                        " (and can authenticate the controller)"
                    } else {
                        ""
                    }
                );
                if concat {
                    println!(
                        "volume {name}: host {host_nqn} must use secure channel concatenation: \
                         authenticate on a plain listener, then TLS (a --tls-listen listener) \
                         with the generated PSK"
                    );
                }
            }
            if let Some(rec) = tls {
                control::volume_auth::set_host_tls(store, &name, rec)
                    .await
                    .with_context(|| format!("require {host_nqn} to use TLS to volume {name}"))?;
                println!(
                    "volume {name}: host {host_nqn} must connect over TLS (a --tls-listen listener)"
                );
            }
        }
        VolumeAuthCommand::Remove { name, host_nqn } => {
            if control::volume_auth::remove_host(store, &name, &host_nqn).await? {
                println!("volume {name}: host {host_nqn} no longer authenticates nor needs TLS");
            } else {
                return Err(anyhow::anyhow!(
                    "volume {name}: host {host_nqn} was not required to authenticate"
                ));
            }
        }
        VolumeAuthCommand::List { name, json } => {
            let hosts = control::volume_auth::auth_hosts(store, &name).await?;
            let concat = control::volume_auth::concat_hosts(store, &name).await?;
            let tls = control::volume_auth::tls_hosts(store, &name).await?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "volume": name,
                        "dhchap_hosts": hosts,
                        "concat_hosts": concat,
                        "tls_hosts": tls,
                    })
                );
            } else if hosts.is_empty() && tls.is_empty() {
                println!("volume {name}: no host must authenticate");
            } else {
                let mut all: Vec<&String> = hosts.iter().chain(&tls).collect();
                all.sort();
                all.dedup();
                let width = all.iter().map(|h| h.len()).max().unwrap_or(0);
                for h in all {
                    let mut how = Vec::new();
                    if hosts.contains(h) {
                        how.push("dh-hmac-chap");
                    }
                    if concat.contains(h) {
                        how.push("concat");
                    }
                    if tls.contains(h) {
                        how.push("tls");
                    }
                    println!("{h:<width$}  {}", how.join(","));
                }
            }
        }
    }
    Ok(())
}

/// `ferrobay volume qos ...`: the limits live in the volume's record (through the store,
/// or through a processor node's API).
async fn qos(backend: &Backend, cmd: VolumeQosCommand) -> anyhow::Result<()> {
    match cmd {
        VolumeQosCommand::Set {
            name,
            host,
            limits,
            json,
        } => {
            let limits = limits.limits()?;
            let host = host.as_deref();
            let q = match backend {
                Backend::Meta(store) => {
                    control::qos::set_volume_qos(store.as_ref(), &name, host, limits).await
                }
                Backend::Api(c) => c.set_volume_qos(&name, host, limits).await,
            }
            .with_context(|| format!("set QoS of volume {name}"))?;
            print_volume_qos(&name, &q, json)?;
        }
        VolumeQosCommand::List { name, json } => {
            let q = match backend {
                Backend::Meta(store) => control::qos::volume_qos(store.as_ref(), &name).await?,
                Backend::Api(c) => c.volume_qos(&name).await?,
            };
            print_volume_qos(&name, &q, json)?;
        }
        VolumeQosCommand::Clear { name, host } => {
            let h = host.as_deref();
            match backend {
                Backend::Meta(store) => {
                    control::qos::clear_volume_qos(store.as_ref(), &name, h).await
                }
                Backend::Api(c) => c.clear_volume_qos(&name, h).await,
            }
            .with_context(|| format!("clear QoS of volume {name}"))?;
            let whose = host.map_or_else(|| "the volume".to_string(), |h| format!("host {h}"));
            println!("cleared the QoS limits of {whose} on volume {name}");
        }
    }
    Ok(())
}

fn print_volume_qos(name: &str, q: &control::records::VolumeQos, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(q)?);
    } else {
        print!("{}", crate::qos_cmd::volume_qos_text(name, q));
    }
    Ok(())
}

/// Polls until `to` owns the volume and has published its status.
async fn wait_owner(
    backend: &Backend,
    name: &str,
    to: &str,
    timeout: Duration,
) -> anyhow::Result<VolumeView> {
    let deadline = Instant::now() + timeout;
    loop {
        let v = backend.view(name).await?;
        let owned = v.owner.as_ref().is_some_and(|o| o.node == to);
        let published = v.status.as_ref().is_some_and(|s| s.owner == to);
        if owned && published {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "{to} does not own volume {name} after {} s (owner now: {})",
                timeout.as_secs(),
                owner_text(v.owner.as_ref())
            );
        }
        tokio::time::sleep(MOVE_POLL_INTERVAL).await;
    }
}

fn owner_text(o: Option<&OwnerRecord>) -> String {
    o.map_or_else(
        || "none".to_string(),
        |o| format!("{} (epoch {})", o.node, o.epoch),
    )
}

/// A serde enum's text (`healthy`, `active`), robust to variants added later.
fn enum_text<T: serde::Serialize + std::fmt::Debug>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(serde_json::Value::Object(m)) if m.len() == 1 => {
            m.keys().next().cloned().unwrap_or_default()
        }
        _ => format!("{v:?}").to_lowercase(),
    }
}

fn state_text(status: Option<&VolumeStatusRecord>) -> String {
    status.map_or_else(|| "offline".to_string(), |s| enum_text(&s.status.state))
}

fn created_text(r: &VolumeRecord) -> String {
    let nodes: Vec<&str> = r
        .members
        .iter()
        .map(|m| {
            m.storage_node
                .as_deref()
                .unwrap_or(m.failure_domain.as_str())
        })
        .collect();
    format!(
        "created volume {} ({}): {}, {} members on {}, stripe unit {}, ANA group {}\n",
        r.name,
        r.uuid,
        r.level,
        r.members.len(),
        nodes.join(", "),
        human_bytes(r.stripe_unit_bytes),
        r.ana_group
    ) + &format!(
        "  size {} ({} bytes), NQN {}\n",
        human_bytes(r.size_bytes),
        r.size_bytes,
        r.nqn()
    ) + &r.log.map_or_else(String::new, |l| {
        format!("  layout {}\n", log_layout_text(&l))
    })
}

/// `log, compression zstd:3, 16.0 KiB blocks`.
fn log_layout_text(l: &control::records::LogLayout) -> String {
    format!(
        "log, compression {}, {} blocks",
        l.compression,
        human_bytes(u64::from(l.block_bytes))
    )
}

/// The list's LAYOUT cell: `in-place`, or `log zstd:3` and the compression ratio the
/// owner last published.
fn layout_cell(v: &VolumeView) -> String {
    let Some(l) = &v.record.log else {
        return "in-place".to_string();
    };
    match v.status.as_ref().and_then(|s| s.status.log.as_ref()) {
        Some(st) => format!("log {} {:.2}x", l.compression, st.compression_ratio),
        None => format!("log {}", l.compression),
    }
}

/// One `nvme connect` per processor listener: native multipath puts them together.
fn connect_hint(r: &VolumeRecord, processors: &[NodeRecord]) -> String {
    let nqn = r.nqn();
    let lines: Vec<String> = processors
        .iter()
        .flat_map(|p| p.nvme_addrs.iter())
        .map(|a| control::devcluster::nvme_connect_command(*a, &nqn))
        .collect();
    if lines.is_empty() {
        return format!(
            "no processor node is running: start one (ferrobay processor run --name p1 \
             --listen ADDR:4420 --meta URL), then connect with\n  nvme connect -t tcp -a ADDR \
             -s 4420 -n {nqn}\n"
        );
    }
    let mut out = String::from("connect from a Linux host (one line per path):\n");
    for l in lines {
        out += &format!("  {l}\n");
    }
    out
}

fn list_table(views: &[VolumeView]) -> String {
    let mut out = format!(
        "{:<16} {:<8} {:<18} {:>10} {:<12} {:>6} {:<11} {:>7}  {}\n",
        "NAME", "LEVEL", "LAYOUT", "SIZE", "OWNER", "EPOCH", "STATE", "MEMBERS", "NQN"
    );
    for v in views {
        let r = &v.record;
        let (active, total) = match &v.status {
            Some(s) => (
                s.status
                    .members
                    .iter()
                    .filter(|m| enum_text(&m.state) == "active")
                    .count(),
                s.status.members.len(),
            ),
            None => (0, r.members.len()),
        };
        let members = if v.status.is_some() {
            format!("{active}/{total}")
        } else {
            format!("-/{total}")
        };
        out += &format!(
            "{:<16} {:<8} {:<18} {:>10} {:<12} {:>6} {:<11} {:>7}  {}\n",
            r.name,
            r.level,
            layout_cell(v),
            human_bytes(r.size_bytes),
            v.owner.as_ref().map_or("-", |o| o.node.as_str()),
            v.owner
                .as_ref()
                .map_or_else(|| "-".into(), |o| o.epoch.to_string()),
            state_text(v.status.as_ref()),
            members,
            r.nqn()
        );
    }
    out
}

fn status_text(v: &VolumeView) -> String {
    let r = &v.record;
    let s = v.status.as_ref();
    let mut out = String::new();
    let mut line = |k: &str, val: String| out += &format!("{k:>16} : {val}\n");
    line("Name", r.name.clone());
    line("UUID", r.uuid.to_string());
    line("NQN", r.nqn());
    line(
        "Level",
        format!(
            "{}, {} members, stripe unit {}",
            r.level,
            r.members.len(),
            human_bytes(r.stripe_unit_bytes)
        ),
    );
    line(
        "Size",
        format!("{} ({} bytes)", human_bytes(r.size_bytes), r.size_bytes),
    );
    // The owner's figures when it publishes them; the record's choice otherwise.
    match (r.log.as_ref(), s.and_then(|s| s.status.log.as_ref())) {
        (_, Some(l)) => {
            for (k, val) in crate::volume_text::log_status_lines(l) {
                line(k, val);
            }
        }
        (Some(l), None) => line("Layout", log_layout_text(l)),
        (None, None) => line("Layout", "in-place".to_string()),
    }
    line("Owner", owner_text(v.owner.as_ref()));
    line(
        "Preferred Owner",
        r.preferred_owner.clone().unwrap_or_else(|| "-".into()),
    );
    line("ANA Group", r.ana_group.to_string());
    match s {
        Some(s) => {
            let st = &s.status;
            line(
                "State",
                format!(
                    "{}{}",
                    enum_text(&st.state),
                    if st.clean { ", clean" } else { ", active" }
                ),
            );
            line("Generation", st.generation.to_string());
            line(
                "Dirty Regions",
                format!(
                    "{} of {} ({} each)",
                    st.dirty_regions,
                    st.region_count,
                    human_bytes(st.region_bytes)
                ),
            );
            if let Some(p) = &st.rebuild {
                let pct = if p.bytes_total == 0 {
                    100.0
                } else {
                    p.bytes_done as f64 * 100.0 / p.bytes_total as f64
                };
                line(
                    "Rebuild",
                    format!(
                        "member {}: {pct:.1}% ({} of {}){}{}, {}",
                        p.member,
                        human_bytes(p.bytes_done),
                        human_bytes(p.bytes_total),
                        match (p.partial, p.in_use_only) {
                            (true, true) => ", dirty regions in use only",
                            (true, false) => ", dirty regions only",
                            (false, true) => ", segments in use only",
                            (false, false) => "",
                        },
                        p.eta_secs
                            .map_or_else(String::new, |e| format!(", ETA {e:.0} s")),
                        enum_text(&p.phase)
                    ),
                );
            }
            if let Some(t) = &s.takeover {
                line(
                    "Takeover",
                    format!(
                        "epoch {} in {} ms, resynced {} regions ({}) in {} ms, {}/{} members fenced{}",
                        t.epoch,
                        t.took_ms,
                        t.resync_regions,
                        human_bytes(t.resync_bytes),
                        t.resync_ms,
                        t.members_fenced,
                        t.members_total,
                        if t.members_unfenceable > 0 {
                            format!(" ({} without reservations)", t.members_unfenceable)
                        } else {
                            String::new()
                        }
                    ),
                );
            }
        }
        None => line(
            "State",
            "offline (no processor node owns it now)".to_string(),
        ),
    }
    out += &format!(
        "\n{:>4} {:<11} {:<10} {:<10} {:<10} {}\n",
        "#", "STATE", "NODE", "DOMAIN", "REBUILT", "MEMBER"
    );
    for (i, m) in r.members.iter().enumerate() {
        let ms = s.and_then(|s| s.status.members.iter().find(|x| x.index == i));
        let state = ms.map_or_else(|| "-".into(), |m| enum_text(&m.state));
        let rebuilt = ms
            .filter(|m| enum_text(&m.state) == "rebuilding")
            .map_or_else(|| "-".into(), |m| human_bytes(m.rebuild_offset_bytes));
        out += &format!(
            "{:>4} {:<11} {:<10} {:<10} {:<10} {}\n",
            i,
            state,
            m.storage_node.as_deref().unwrap_or("-"),
            if m.failure_domain.is_empty() {
                "-"
            } else {
                &m.failure_domain
            },
            rebuilt,
            m.url
        );
    }
    for (i, m) in r.spares.iter().enumerate() {
        out += &format!(
            "{:>4} {:<11} {:<10} {:<10} {:<10} {}\n",
            format!("s{i}"),
            "spare",
            m.storage_node.as_deref().unwrap_or("-"),
            m.failure_domain,
            "-",
            m.url
        );
    }
    if let Some(s) = s {
        for n in &s.status.notes {
            out += &format!("note: {n}\n");
        }
    }
    out
}

/// A cluster volume's member slot named by its index or its URL.
fn member_slot(rec: &VolumeRecord, member: &str) -> anyhow::Result<usize> {
    let count = rec.members.len();
    if let Ok(i) = member.parse::<usize>() {
        if i < count {
            return Ok(i);
        }
        return Err(usage(format!(
            "volume {} has no member {i} (its members are 0..{})",
            rec.name,
            count.saturating_sub(1)
        )));
    }
    rec.members
        .iter()
        .position(|m| m.url == member)
        .ok_or_else(|| {
            usage(format!(
                "volume {} has no member {member:?} (a member is its index or its nvme+tcp:// URL)",
                rec.name
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use control::records::MemberRecord;

    fn record() -> VolumeRecord {
        let member = |n: &str| MemberRecord {
            url: format!("nvme+tcp://127.0.0.1:4420/nqn.2026-01.io.ferrobay:{n}:d0/2"),
            storage_node: Some(n.to_string()),
            failure_domain: n.to_string(),
        };
        VolumeRecord {
            name: "vol1".into(),
            uuid: serde_json::from_value(serde_json::json!("00000000-0000-0000-0000-000000000000"))
                .unwrap(),
            level: "raid5".into(),
            stripe_unit_bytes: 64 << 10,
            size_bytes: 1 << 30,
            block_size_bytes: 4096,
            members: vec![member("n1"), member("n2"), member("n3")],
            spares: vec![],
            ana_group: 3,
            preferred_owner: Some("p1".into()),
            created_unix_ms: 1,
            qos: Default::default(),
            log: None,
        }
    }

    #[test]
    fn log_layout_volumes_say_so() {
        let mut r = record();
        assert!(!created_text(&r).contains("layout"));
        r.log = Some(control::records::LogLayout {
            compression: volume::Compression::Zstd(3),
            block_bytes: 16 << 10,
        });
        let c = created_text(&r);
        assert!(
            c.contains("  layout log, compression zstd:3, 16.0 KiB blocks\n"),
            "{c}"
        );
        let v = VolumeView {
            record: r,
            owner: None,
            status: None,
        };
        let t = list_table(std::slice::from_ref(&v));
        let head = t.lines().next().unwrap();
        let row = t.lines().nth(1).unwrap();
        let col = head.find("LAYOUT").unwrap();
        assert!(row[col..].starts_with("log zstd:3 "), "{t}");
        let s = status_text(&v);
        assert!(
            s.contains("Layout : log, compression zstd:3, 16.0 KiB blocks"),
            "{s}"
        );
    }

    #[test]
    fn offline_and_owned_volumes_read_well() {
        let offline = VolumeView {
            record: record(),
            owner: None,
            status: None,
        };
        let t = list_table(std::slice::from_ref(&offline));
        let row = t.lines().nth(1).unwrap();
        assert!(row.starts_with("vol1 "), "{t}");
        assert!(
            row.contains("1.0 GiB") && row.contains("offline") && row.contains("-/3"),
            "{t}"
        );
        let s = status_text(&offline);
        assert!(s.contains("Owner : none"), "{s}");
        assert!(s.contains("offline (no processor node owns it now)"), "{s}");
        assert_eq!(
            s.lines().filter(|l| l.contains("nvme+tcp://")).count(),
            3,
            "{s}"
        );

        let owned = VolumeView {
            owner: Some(OwnerRecord {
                node: "p2".into(),
                epoch: 7,
            }),
            ..offline
        };
        assert!(status_text(&owned).contains("Owner : p2 (epoch 7)"));
        let row = list_table(std::slice::from_ref(&owned));
        assert!(row.contains(" p2 ") && row.contains(" 7 "), "{row}");
    }

    #[test]
    fn connect_hint_has_one_line_per_path() {
        let r = record();
        let p = |name: &str, port: u16| {
            let mut r = NodeRecord::new(
                name,
                NodeRole::Processor,
                vec![format!("10.0.0.1:{port}").parse().unwrap()],
            );
            r.slot = Some(0);
            r
        };
        let h = connect_hint(&r, &[p("p1", 4420), p("p2", 4421)]);
        assert!(
            h.contains(
                "nvme connect -t tcp -a 10.0.0.1 -s 4420 -n nqn.2026-01.io.ferrobay:vol:vol1"
            ),
            "{h}"
        );
        assert!(h.contains("-s 4421"), "{h}");
        assert!(connect_hint(&r, &[]).contains("no processor node is running"));
    }

    #[test]
    fn enums_print_as_their_wire_names() {
        assert_eq!(enum_text(&volume::VolumeState::Rebuilding), "rebuilding");
        assert_eq!(enum_text(&volume::TaskPhase::Failed("x".into())), "failed");
    }
}
