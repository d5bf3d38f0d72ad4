//! `ferrobay node ...`: run a storage node and manage it through its HTTP port.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use nvmf_target::TargetConfig;
use storage_node::api::{
    AttachRequest, CreateNamespaceRequest, DEFAULT_HTTP_PORT, KvCreateOptions,
};
use storage_node::{NodeClient, NodeConfig, StorageNode};

#[derive(Args, Debug)]
pub struct NodeArgs {
    #[command(subcommand)]
    pub command: NodeCommand,
}

#[derive(Subcommand, Debug)]
pub enum NodeCommand {
    /// Run a storage node: export its drives over NVMe/TCP until Ctrl-C / SIGTERM.
    Run(RunArgs),
    /// List, create, delete, attach or detach namespaces.
    #[command(subcommand)]
    Ns(NsCommand),
    /// Subsystems and the hosts allowed to connect to them.
    #[command(subcommand)]
    Host(HostCommand),
    /// SMART/health summary of the node and each drive.
    Health(ApiArgs),
    /// Per drive and namespace: operations, bytes, latency percentiles per operation
    /// class, errors by kind, queue depth, the drive's SMART reading and grade.
    Telemetry(ApiArgs),
    /// Each drive's failure-prediction grade (ok, suspect, failing), since when and why
    /// (docs/prediction.md).
    Predictions(ApiArgs),
    /// QoS limits per namespace and host (docs/qos.md).
    #[command(subcommand)]
    Qos(QosCommand),
}

#[derive(Subcommand, Debug)]
pub enum QosCommand {
    /// Set the limits of a namespace (all hosts together), of one host on a namespace
    /// (--host), or of one host on the whole subsystem (no NSID, --host); they replace
    /// what that key had.
    Set {
        #[command(flatten)]
        api: ApiArgs,
        #[command(flatten)]
        key: QosKeyArgs,
        #[command(flatten)]
        limits: crate::qos_cmd::QosLimitArgs,
    },
    /// Every limit with the commands it held back, and the caps in force.
    List(ApiArgs),
    /// Remove the limits of a key.
    Clear {
        #[command(flatten)]
        api: ApiArgs,
        #[command(flatten)]
        key: QosKeyArgs,
    },
}

/// The key of `node qos set|clear`: a namespace, or one host on it or on the subsystem.
#[derive(Args, Debug)]
pub struct QosKeyArgs {
    nqn: String,
    nsid: Option<u32>,
    #[arg(long)]
    host: Option<String>,
}

impl QosKeyArgs {
    fn key(self) -> nvmf_target::QosKey {
        nvmf_target::QosKey {
            subsystem_nqn: self.nqn,
            nsid: self.nsid,
            host_nqn: self.host,
        }
    }
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Node name: part of every default NQN (nqn.2026-01.io.ferrobay:<name>:<drive>).
    #[arg(long)]
    pub name: String,
    /// Where the node keeps its state (subsystems, namespaces, identifiers, reservations).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// NVMe/TCP listen address (repeatable); port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:4420")]
    pub listen: Vec<SocketAddr>,
    /// NVMe/TCP listen address that requires TLS 1.3 with a PSK (repeatable): the TLS
    /// handshake comes right after TCP connect (`nvme connect --tls`); hosts get their PSK
    /// with `node host allow --tls-psk`.
    #[arg(long)]
    pub tls_listen: Vec<SocketAddr>,
    /// Discovery-only listener (default: port 8009 on the first listen address).
    #[arg(long)]
    pub discovery_listen: Option<SocketAddr>,
    /// HTTP port for /metrics and the control API (default: port 9420 on the first listen
    /// address's IP).
    #[arg(long)]
    pub http_listen: Option<SocketAddr>,
    /// HTTPS for the HTTP port (the NVMe/TCP TLS of --tls-listen uses PSKs instead).
    #[command(flatten)]
    pub http_tls: crate::cluster::ServerTlsArgs,
    /// A drive, `[NAME=]SPEC` with SPEC one of ram:SIZE, null:SIZE, file:PATH[:SIZE], /dev/...
    /// or volume:NAME (a local volume, see --volumes-dir) (repeatable). Omit on restart to
    /// bring up the drives in the data dir.
    #[arg(long)]
    pub drive: Vec<String>,
    /// Directory of the local volume registry that `volume:NAME` drives are found in, as
    /// `ferrobay volume --volumes-dir` (default: $FERROBAY_VOLUMES_DIR or
    /// /var/lib/ferrobay/volumes).
    #[arg(long)]
    pub volumes_dir: Option<PathBuf>,
    /// File with the bearer token the HTTP API requires (made 0600 with a new token if
    /// missing). Default: $FERROBAY_API_TOKEN, else with --meta the cluster's token, else
    /// DATA_DIR/api-token (made on first start). The node keeps its token in
    /// DATA_DIR/api-token either way.
    #[arg(long)]
    pub api_token_file: Option<PathBuf>,
    /// Controller IDs this node hands out, MIN-MAX (disjoint per node exporting one NQN).
    #[arg(long, default_value = "1-32767")]
    pub cntlid_range: String,
    /// I/O engine for files and block devices: auto, uring or threads.
    #[arg(long, default_value = "auto")]
    pub engine: String,
    /// Register in a cluster's metadata store (etcd://HOST:PORT[,HOST:PORT] or
    /// embedded:DIR) as a storage node, under a lease kept alive while the node runs, so
    /// that `volume create --storage-nodes` finds it. Implies --no-default-namespace
    /// unless --default-namespace is given.
    #[arg(long)]
    pub meta: Option<String>,
    /// TTL of that registration lease.
    #[arg(long, default_value_t = 4000, requires = "meta")]
    pub lease_ttl_ms: u64,
    /// New drives come up with their subsystem but no namespace: the whole capacity stays
    /// free for `ns create` and for `volume create --storage-nodes`. The default with
    /// --meta. Drives already in the data dir keep their namespaces.
    #[arg(long, overrides_with = "default_namespace")]
    pub no_default_namespace: bool,
    /// New drives get one namespace spanning them (nsid 1, attached to every host), ready
    /// for `nvme connect`. The default without --meta; give it to have it with --meta too.
    #[arg(long, overrides_with = "no_default_namespace")]
    pub default_namespace: bool,
    /// Most NVMe/TCP connections (one per queue) one listener holds at once; more are
    /// closed at accept.
    #[arg(long, default_value_t = TargetConfig::default().max_connections_per_listener,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_listener: u32,
    /// Most connections one host address holds on one listener at once.
    #[arg(long, default_value_t = TargetConfig::default().max_connections_per_host,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_host: u32,
    /// A connection must send ICReq and complete a Connect within this time, else it is
    /// closed.
    #[arg(long, default_value_t = TargetConfig::default().handshake_timeout_ms,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub handshake_timeout_ms: u32,
    #[command(flatten)]
    pub busy_poll: crate::cli::BusyPollArg,
}

impl RunArgs {
    /// Whether new drives get a namespace spanning them: as asked (the last of
    /// --default-namespace / --no-default-namespace wins), else only outside a cluster,
    /// where provisioning carves the drives itself.
    pub fn wants_default_namespace(&self) -> bool {
        match (self.default_namespace, self.no_default_namespace) {
            (true, _) => true,
            (_, true) => false,
            (false, false) => self.meta.is_none(),
        }
    }
}

/// Where to reach a running node's control API.
#[derive(Args, Debug)]
pub struct ApiArgs {
    /// The node's HTTP address: ADDR:PORT, http://ADDR:PORT or https://ADDR:PORT (a
    /// bare ADDR:PORT is https with --ca-cert).
    #[arg(long, conflicts_with = "data_dir")]
    pub api: Option<String>,
    /// The node's data dir: its HTTP address is read from DATA_DIR/endpoints.json, its
    /// API token from DATA_DIR/api-token.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// File with the node's API token (default: $FERROBAY_API_TOKEN, else
    /// DATA_DIR/api-token).
    #[arg(long)]
    pub api_token_file: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum NsCommand {
    List(ApiArgs),
    /// Carve a new namespace out of a drive: NVM (blocks), or Key Value with --kv.
    Create {
        #[command(flatten)]
        api: ApiArgs,
        /// Size, e.g. 10G (a KV namespace is rounded up to whole MiB).
        #[arg(long)]
        size: String,
        /// A Key Value namespace (NVMe KV command set): a log-structured store formatted
        /// on the extent; hosts see it as /dev/ngXnY.
        #[arg(long, conflicts_with = "block_size")]
        kv: bool,
        /// Largest value of a KV namespace, e.g. 2M (default 2M, at most 4M).
        #[arg(long, requires = "kv")]
        max_value_size: Option<String>,
        /// Most keys of a KV namespace (default: one per 8 KiB, at least 1024).
        #[arg(long, requires = "kv")]
        max_keys: Option<u64>,
        /// Drive to carve from (its default subsystem gets the namespace).
        #[arg(long, conflicts_with = "subsystem")]
        drive: Option<String>,
        /// Subsystem NQN to add the namespace to.
        #[arg(long)]
        subsystem: Option<String>,
        /// 512 or 4096.
        #[arg(long)]
        block_size: Option<u32>,
        #[arg(long)]
        nsid: Option<u32>,
        /// Create detached (attach later with `ns attach`).
        #[arg(long)]
        detached: bool,
    },
    Delete {
        #[command(flatten)]
        api: ApiArgs,
        nqn: String,
        nsid: u32,
    },
    /// Make a namespace visible to every host (default) or to the given host NQNs.
    Attach {
        #[command(flatten)]
        api: ApiArgs,
        nqn: String,
        nsid: u32,
        #[arg(long = "host")]
        hosts: Vec<String>,
    },
    Detach {
        #[command(flatten)]
        api: ApiArgs,
        nqn: String,
        nsid: u32,
        #[arg(long = "host")]
        hosts: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum HostCommand {
    /// Subsystems with their allowed hosts and connected controllers.
    List(ApiArgs),
    /// Allow a host NQN to connect to a subsystem (turns off allow-any-host); with
    /// --dhchap-secret the host must also authenticate with DH-HMAC-CHAP.
    Allow {
        #[command(flatten)]
        api: ApiArgs,
        nqn: String,
        host_nqn: String,
        #[command(flatten)]
        dhchap: DhchapArgs,
        /// The host must connect over TLS (a `--tls-listen` listener) with the PSKs derived
        /// from this configured PSK: FILE holding the `NVMeTLSkey-1:..` line
        /// (`ferrobay gen-tls-key > FILE`, or `nvme gen-tls-key`).
        #[arg(long, value_name = "FILE")]
        tls_psk: Option<PathBuf>,
        /// The host must use secure channel concatenation (`nvme connect --concat`): it
        /// authenticates with its DH-HMAC-CHAP secret on a plain-TCP admin queue, then
        /// connects over TLS (a `--tls-listen` listener) with the PSK that generated; no
        /// configured PSK is needed.
        #[arg(long, requires = "dhchap_secret")]
        concat: bool,
    },
    Deny {
        #[command(flatten)]
        api: ApiArgs,
        nqn: String,
        host_nqn: String,
    },
    /// Let any host connect (on) or only allowed ones (off).
    AllowAny {
        #[command(flatten)]
        api: ApiArgs,
        nqn: String,
        #[arg(value_parser = ["on", "off"])]
        mode: String,
    },
}

/// DH-HMAC-CHAP options of `node host allow`. Secrets are a file holding the `DHHC-1:..`
/// line (`ferrobay gen-dhchap-key > FILE`), or the `DHHC-1:..` string itself (which then
/// shows in the process list: prefer files).
#[derive(Args, Debug, Default)]
pub struct DhchapArgs {
    /// The host's secret: FILE or DHHC-1:.. (what the host passes to
    /// `nvme connect --dhchap-secret`).
    #[arg(long, value_name = "FILE|DHHC-1:..")]
    pub dhchap_secret: Option<String>,
    /// The controller's secret, for hosts that authenticate the controller too
    /// (`nvme connect --dhchap-ctrl-secret`): FILE or DHHC-1:..
    #[arg(long, value_name = "FILE|DHHC-1:..", requires = "dhchap_secret")]
    pub dhchap_ctrl_secret: Option<String>,
    /// Accepted hash functions, preferred first (sha256,sha384,sha512).
    #[arg(long, value_delimiter = ',', requires = "dhchap_secret")]
    pub dhchap_hash: Vec<String>,
    /// Accepted DH groups, preferred first (ffdhe2048,...,ffdhe8192,null).
    #[arg(long, value_delimiter = ',', requires = "dhchap_secret")]
    pub dhchap_dhgroup: Vec<String>,
}

/// A secret given as FILE or as the DHHC-1 string, checked here so that a typo is caught
/// before it reaches the node. Errors never contain the secret.
fn read_dhchap_secret(arg: &str, what: &str) -> anyhow::Result<String> {
    let text = if arg.starts_with("DHHC-1:") {
        arg.to_string()
    } else {
        std::fs::read_to_string(arg).with_context(|| format!("{what}: reading {arg}"))?
    };
    let text = text.trim().to_string();
    nvme_proto::auth::DhchapSecret::parse(&text).with_context(|| format!("{what} ({arg})"))?;
    Ok(text)
}

/// A configured TLS PSK from FILE, checked (CRC, length) before it reaches the node. Errors
/// never contain the key.
fn read_tls_psk(path: &std::path::Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--tls-psk: reading {}", path.display()))?;
    let text = text.trim().to_string();
    nvme_proto::tls_key::ConfiguredPsk::parse(&text)
        .with_context(|| format!("--tls-psk ({})", path.display()))?;
    Ok(text)
}

fn host_request(host_nqn: &str, d: &DhchapArgs) -> anyhow::Result<storage_node::api::HostRequest> {
    let mut r = storage_node::api::HostRequest::new(host_nqn);
    if let Some(s) = &d.dhchap_secret {
        r.dhchap_secret = Some(read_dhchap_secret(s, "--dhchap-secret")?);
    }
    if let Some(s) = &d.dhchap_ctrl_secret {
        r.dhchap_ctrl_secret = Some(read_dhchap_secret(s, "--dhchap-ctrl-secret")?);
    }
    for h in &d.dhchap_hash {
        nvme_proto::auth::HashId::parse(h)
            .with_context(|| format!("--dhchap-hash {h:?}: expected sha256, sha384 or sha512"))?;
    }
    for g in &d.dhchap_dhgroup {
        nvme_proto::auth::DhGroup::parse(g).with_context(|| {
            format!("--dhchap-dhgroup {g:?}: expected ffdhe2048..ffdhe8192 or null")
        })?;
    }
    r.dhchap_hashes = d.dhchap_hash.clone();
    r.dhchap_dhgroups = d.dhchap_dhgroup.clone();
    Ok(r)
}

/// The DH-HMAC-CHAP record `--dhchap-secret` (required) and its companions give for
/// `host_nqn` (`ferrobay volume auth set`; `concat`: secure channel concatenation);
/// checked here, errors never show a secret.
pub fn dhchap_record(
    host_nqn: &str,
    d: &DhchapArgs,
    concat: bool,
) -> anyhow::Result<storage_node::state::DhchapHostRecord> {
    let r = host_request(host_nqn, d)?;
    let secret = r
        .dhchap_secret
        .ok_or_else(|| crate::cluster::usage("--dhchap-secret FILE is required"))?;
    Ok(storage_node::state::DhchapHostRecord {
        host_nqn: host_nqn.to_string(),
        secret,
        ctrl_secret: r.dhchap_ctrl_secret,
        hashes: r.dhchap_hashes,
        dhgroups: r.dhchap_dhgroups,
        concat,
    })
}

/// The TLS PSK record `--tls-psk FILE` gives for `host_nqn` (`ferrobay volume auth set`);
/// checked here, errors never show the key.
pub fn tls_psk_record(
    host_nqn: &str,
    path: &std::path::Path,
) -> anyhow::Result<storage_node::state::TlsPskHostRecord> {
    Ok(storage_node::state::TlsPskHostRecord {
        host_nqn: host_nqn.to_string(),
        psk: read_tls_psk(path)?,
    })
}

/// The endpoints file a running node writes into its data dir.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Endpoints {
    nvme_tcp: Vec<String>,
    discovery: Option<String>,
    http: Option<String>,
}

const ENDPOINTS_FILE: &str = "endpoints.json";

fn parse_cntlid_range(s: &str) -> anyhow::Result<(u16, u16)> {
    let (a, b) = s
        .split_once('-')
        .with_context(|| format!("invalid --cntlid-range {s:?} (expected MIN-MAX, e.g. 1-999)"))?;
    let min: u16 = a
        .trim()
        .parse()
        .with_context(|| format!("invalid --cntlid-range {s:?}"))?;
    let max: u16 = b
        .trim()
        .parse()
        .with_context(|| format!("invalid --cntlid-range {s:?}"))?;
    if min == 0 || max < min || max > 0xFFEF {
        anyhow::bail!("invalid --cntlid-range {s:?}: need 1 <= MIN <= MAX <= 65519");
    }
    Ok((min, max))
}

fn write_endpoints(dir: &Path, e: &Endpoints) -> anyhow::Result<()> {
    crate::cluster::write_json_file(&dir.join(ENDPOINTS_FILE), e)
}

async fn run_node(a: RunArgs) -> anyhow::Result<ExitCode> {
    crate::reexec::daemon_started();
    serve_node(a).await.map_err(crate::reexec::fall_back)
}

async fn serve_node(a: RunArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = NodeConfig::new(a.name.clone(), a.data_dir.clone());
    cfg.listen = a.listen.clone();
    cfg.tls_listen = a.tls_listen.clone();
    cfg.discovery_listen = a.discovery_listen;
    cfg.http_listen = Some(a.http_listen.unwrap_or_else(|| {
        SocketAddr::new(
            a.listen.first().map_or([127, 0, 0, 1].into(), |l| l.ip()),
            DEFAULT_HTTP_PORT,
        )
    }));
    cfg.http_tls = a.http_tls.load()?;
    cfg.drives = a
        .drive
        .iter()
        .map(|d| storage_node::parse_node_drive(d).map_err(anyhow::Error::from))
        .collect::<anyhow::Result<_>>()?;
    let (min, max) = parse_cntlid_range(&a.cntlid_range)?;
    cfg.target.cntlid_min = min;
    cfg.target.cntlid_max = max;
    cfg.target.max_connections_per_listener = a.max_connections_per_listener;
    cfg.target.max_connections_per_host = a.max_connections_per_host;
    cfg.target.handshake_timeout_ms = a.handshake_timeout_ms;
    cfg.target.busy_poll_us = a.busy_poll.us;
    cfg.engine = crate::bench_cmd::parse_engine(&a.engine)?;
    cfg.default_namespace = a.wants_default_namespace();
    cfg.volumes_dir = a.volumes_dir.clone();
    if a.lease_ttl_ms < 1000 {
        return Err(crate::cluster::usage(format!(
            "--lease-ttl-ms {}: at least 1000",
            a.lease_ttl_ms
        )));
    }
    let stop = crate::cluster::stop_signal();
    // The store first: a bad --meta fails before the node takes its ports.
    let store = match &a.meta {
        Some(url) => Some(crate::cluster::open_store(url).await?),
        None => None,
    };
    // The API token: given, else the cluster's (in a cluster, processor nodes call this
    // node with it), else the one in the data dir (made on first start).
    cfg.api_token = match (
        crate::cluster::daemon_token(a.api_token_file.as_deref())?,
        &store,
    ) {
        (Some(t), _) => Some(t),
        (None, Some(store)) => Some(control::auth::cluster_token(store.as_ref()).await?),
        (None, None) => None,
    };

    let node = StorageNode::start(cfg).await?;
    let registration = match &store {
        Some(store) => match register(store.clone(), &node, a.lease_ttl_ms).await {
            Ok(r) => Some(r),
            Err(e) => {
                let _ = node.shutdown().await;
                return Err(e);
            }
        },
        None => None,
    };
    let endpoints = Endpoints {
        nvme_tcp: node.nvme_addrs().iter().map(ToString::to_string).collect(),
        discovery: node.discovery_addr().map(|a| a.to_string()),
        // A client reading the data dir learns the scheme too.
        http: node.http_addr().map(|addr| match a.http_tls.tls_cert {
            Some(_) => format!("https://{addr}"),
            None => addr.to_string(),
        }),
    };
    write_endpoints(&a.data_dir, &endpoints)?;
    for s in node.subsystems() {
        tracing::info!(nqn = %s.nqn, drive = %s.drive, namespaces = ?s.namespaces, "exporting");
    }
    tracing::info!(
        nvme_tcp = ?endpoints.nvme_tcp,
        discovery = ?endpoints.discovery,
        http = ?endpoints.http,
        "node {} ready", a.name
    );
    crate::reexec::mark_ready();
    let ended = crate::reexec::wait(stop, node.upgrade_signal()).await;
    tracing::info!("stopping node {}", a.name);
    if let Some(r) = registration {
        r.stop().await;
    }
    let _ = std::fs::remove_file(a.data_dir.join(ENDPOINTS_FILE));
    node.shutdown().await?;
    match ended {
        crate::reexec::Ended::Stopped => Ok(ExitCode::SUCCESS),
        // Only returns if the new binary could not be executed at all.
        crate::reexec::Ended::Upgrade(req) => Err(crate::reexec::exec(&req.binary)),
    }
}

/// Puts the node's record (role storage, its addresses, its subsystems with their allowed
/// hosts) under a lease kept alive, and current, until
/// [`control::registration::LiveRegistration::stop`].
async fn register(
    store: std::sync::Arc<dyn meta::MetaStore>,
    node: &StorageNode,
    lease_ttl_ms: u64,
) -> anyhow::Result<control::registration::LiveRegistration> {
    let r = control::registration::LiveRegistration::start(
        store,
        control::exports::storage_node_feed(node),
        std::time::Duration::from_millis(lease_ttl_ms),
    )
    .await
    .with_context(|| format!("register storage node {}", node.name()))?;
    tracing::info!(node = %node.name(), "registered in the metadata store");
    Ok(r)
}

fn client(a: &ApiArgs) -> anyhow::Result<NodeClient> {
    let addr = match (&a.api, &a.data_dir) {
        (Some(api), _) => api.clone(),
        (None, Some(dir)) => {
            let path = dir.join(ENDPOINTS_FILE);
            let s = std::fs::read_to_string(&path)
                .with_context(|| format!("read {} (is the node running?)", path.display()))?;
            let e: Endpoints =
                serde_json::from_str(&s).with_context(|| format!("parse {}", path.display()))?;
            e.http
                .with_context(|| format!("{} names no HTTP address", path.display()))?
        }
        (None, None) => format!("127.0.0.1:{DEFAULT_HTTP_PORT}"),
    };
    let default_token = a.data_dir.as_ref().map(|d| StorageNode::api_token_path(d));
    let token = crate::cluster::client_token(
        a.api_token_file.as_deref(),
        &default_token
            .iter()
            .map(PathBuf::as_path)
            .collect::<Vec<_>>(),
    )?;
    Ok(NodeClient::new(addr).with_token(token))
}

fn print<T: serde::Serialize>(
    json: bool,
    v: &T,
    text: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(v)?);
    } else {
        print!("{}", text(v));
    }
    Ok(())
}

fn attach_request(hosts: Vec<String>) -> AttachRequest {
    AttachRequest {
        all: hosts.is_empty(),
        hosts,
    }
}

async fn ns(cmd: NsCommand) -> anyhow::Result<ExitCode> {
    use storage_node::text::namespaces_table;
    match cmd {
        NsCommand::List(api) => {
            let v = client(&api)?.list_namespaces().await?;
            print(api.json, &v, |v| namespaces_table(v))?;
        }
        NsCommand::Create {
            api,
            size,
            kv,
            max_value_size,
            max_keys,
            drive,
            subsystem,
            block_size,
            nsid,
            detached,
        } => {
            if drive.is_none() && subsystem.is_none() {
                anyhow::bail!("ns create needs --drive NAME or --subsystem NQN");
            }
            let kv = if kv {
                let max_value_bytes = match max_value_size {
                    Some(s) => Some(
                        u32::try_from(blockdev::parse_size_bytes(&s)?)
                            .with_context(|| format!("--max-value-size {s}: at most 4M"))?,
                    ),
                    None => None,
                };
                Some(KvCreateOptions {
                    max_value_bytes,
                    max_keys,
                })
            } else {
                None
            };
            let req = CreateNamespaceRequest {
                subsystem_nqn: subsystem,
                drive,
                size_bytes: blockdev::parse_size_bytes(&size)?,
                block_size_bytes: block_size,
                nsid,
                attach: detached.then(Default::default),
                kv,
            };
            let v = client(&api)?.create_namespace(&req).await?;
            print(api.json, &v, |v| namespaces_table(std::slice::from_ref(v)))?;
        }
        NsCommand::Delete { api, nqn, nsid } => {
            client(&api)?.delete_namespace(&nqn, nsid).await?;
            println!("deleted namespace {nsid} of {nqn}");
        }
        NsCommand::Attach {
            api,
            nqn,
            nsid,
            hosts,
        } => {
            let v = client(&api)?
                .attach_namespace(&nqn, nsid, &attach_request(hosts))
                .await?;
            print(api.json, &v, |v| namespaces_table(std::slice::from_ref(v)))?;
        }
        NsCommand::Detach {
            api,
            nqn,
            nsid,
            hosts,
        } => {
            let v = client(&api)?
                .detach_namespace(&nqn, nsid, &attach_request(hosts))
                .await?;
            print(api.json, &v, |v| namespaces_table(std::slice::from_ref(v)))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn host(cmd: HostCommand) -> anyhow::Result<ExitCode> {
    use storage_node::text::subsystems_table;
    let (api, v) = match cmd {
        HostCommand::List(api) => {
            let v = client(&api)?.subsystems().await?;
            return print(api.json, &v, |v| subsystems_table(v)).map(|_| ExitCode::SUCCESS);
        }
        HostCommand::Allow {
            api,
            nqn,
            host_nqn,
            dhchap,
            tls_psk,
            concat,
        } => {
            let mut req = host_request(&host_nqn, &dhchap)?;
            req.dhchap_concat = concat;
            if let Some(path) = &tls_psk {
                req.tls_psk = Some(read_tls_psk(path)?);
            }
            let v = client(&api)?.allow_host_with(&nqn, &req).await?;
            (api, v)
        }
        HostCommand::Deny { api, nqn, host_nqn } => {
            let v = client(&api)?.deny_host(&nqn, &host_nqn).await?;
            (api, v)
        }
        HostCommand::AllowAny { api, nqn, mode } => {
            let v = client(&api)?.set_allow_any_host(&nqn, mode == "on").await?;
            (api, v)
        }
    };
    print(api.json, &v, |v| subsystems_table(std::slice::from_ref(v)))?;
    Ok(ExitCode::SUCCESS)
}

async fn qos(cmd: QosCommand) -> anyhow::Result<ExitCode> {
    use crate::qos_cmd::node_qos_text;
    match cmd {
        QosCommand::Set { api, key, limits } => {
            let limits = limits.limits()?;
            let key = key.key();
            let e = client(&api)?
                .set_qos(&key, &limits)
                .await
                .with_context(|| format!("set QoS limits of {key}"))?;
            print(api.json, &e, |e| {
                node_qos_text(&storage_node::api::QosList {
                    limits: vec![e.clone()],
                    caps: Vec::new(),
                })
            })?;
        }
        QosCommand::List(api) => {
            let v = client(&api)?.qos_list().await?;
            print(api.json, &v, node_qos_text)?;
        }
        QosCommand::Clear { api, key } => {
            let key = key.key();
            let had = client(&api)?
                .clear_qos(&key)
                .await
                .with_context(|| format!("clear QoS limits of {key}"))?;
            print(api.json, &had, |_| {
                format!("cleared the QoS limits of {key}\n")
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn run(a: NodeArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        NodeCommand::Run(r) => run_node(r).await,
        NodeCommand::Ns(c) => ns(c).await,
        NodeCommand::Host(c) => host(c).await,
        NodeCommand::Qos(c) => qos(c).await,
        NodeCommand::Health(api) => {
            let h = client(&api)?.health().await?;
            print(api.json, &h, storage_node::text::health_text)?;
            Ok(ExitCode::SUCCESS)
        }
        NodeCommand::Telemetry(api) => {
            let t = client(&api)?.telemetry().await?;
            print(api.json, &t, storage_node::text::telemetry_text)?;
            Ok(ExitCode::SUCCESS)
        }
        NodeCommand::Predictions(api) => {
            let p = client(&api)?.predictions().await?;
            print(api.json, &p, storage_node::text::predictions_text)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cntlid_ranges() {
        assert_eq!(parse_cntlid_range("1-999").unwrap(), (1, 999));
        assert!(parse_cntlid_range("0-5").is_err());
        assert!(parse_cntlid_range("9-5").is_err());
        assert!(parse_cntlid_range("x").is_err());
    }

    #[derive(clap::Parser, Debug)]
    struct RunOnly {
        #[command(flatten)]
        run: RunArgs,
    }

    fn default_namespace(extra: &[&str]) -> bool {
        use clap::Parser;
        let args = ["x", "--name", "n1", "--data-dir", "/d"];
        RunOnly::try_parse_from(args.iter().chain(extra))
            .unwrap()
            .run
            .wants_default_namespace()
    }

    #[test]
    fn default_namespace_follows_meta_unless_told() {
        let meta = ["--meta", "etcd://h:1"];
        assert!(default_namespace(&[]));
        assert!(!default_namespace(&meta));
        assert!(!default_namespace(&["--no-default-namespace"]));
        assert!(default_namespace(&[
            "--default-namespace",
            "--meta",
            "etcd://h:1"
        ]));
        // The last one given wins, as with any on/off pair.
        assert!(default_namespace(&[
            "--no-default-namespace",
            "--default-namespace"
        ]));
        assert!(!default_namespace(&[
            "--default-namespace",
            "--no-default-namespace",
            "--meta",
            "etcd://h:1"
        ]));
    }
}
