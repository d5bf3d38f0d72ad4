//! `ferrobay up`: a whole cluster in one process, for one machine. An embedded metadata
//! store in `DIR/meta`, three storage nodes `n1..n3` (one sparse file drive each under
//! `DIR/nX`, open to the processor node and the gateway only), one processor node `p1`
//! exporting on the address the user asked for, a central discovery controller on that address (port 8009
//! when free), a sample RAID-5 volume across the three storage nodes, and an S3 gateway
//! on KV namespaces of the three storage nodes (EC 2+1, module [`s3`]). Running it again
//! on the same data dir brings the same cluster back: nothing is created twice, the
//! volume assembles clean, the gateway finds its objects and key pair.
//!
//! With [`DevClusterConfig::tls`] (`ferrobay up --tls`, module [`tls`]) the cluster is
//! secure end to end: the storage nodes get TLS listeners and require TLS (with a PSK of
//! its own) of the processor node, which connects to the members over it; the processor
//! node exports the volume on a TLS listener as well and requires TLS of the configured
//! host NQN; every HTTP API and the S3 gateway serve HTTPS with a certificate of the
//! cluster's own CA.

pub mod s3;
pub mod tls;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use meta::MetaStore;
use storage_node::{NodeConfig, StorageNode};

use crate::api::{ApiConfig, ApiServer};
use crate::cdc::{Cdc, CdcConfig, CdcError, DISCOVERY_PORT};
use crate::pool_gateway::PoolGateway;
use crate::processor::{Processor, ProcessorConfig};
use crate::provision::{CreateVolume, create_volume, volume_view};
use crate::records::{processor_hostnqn, s3_hostnqn, volume_nqn};
use crate::registration::LiveRegistration;
use httpapi::auth::Token;

pub use s3::{KeyPair, S3Info};
pub use tls::DevTlsFiles;

/// With TLS, the identity that provisions volumes towards the storage nodes in plain TCP
/// (the processor node's host NQN must use TLS there); the namespaces it makes are
/// attached to every host.
pub const PROVISIONER_HOSTNQN: &str = "nqn.2026-01.io.ferrobay:provisioner:up";

/// Storage nodes of the dev cluster (one failure domain each: RAID-5 needs three).
pub const STORAGE_NODES: [&str; 3] = ["n1", "n2", "n3"];
/// The processor node of the dev cluster.
pub const PROCESSOR: &str = "p1";
/// The sample volume.
pub const DEFAULT_VOLUME: &str = "vol0";
/// How long `start` waits for the processor to own the volume (a first start formats
/// nothing large: the members are new sparse namespaces).
const OWNERSHIP_TIMEOUT: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Drive headroom over a member's share of the volume (superblocks, bitmap, and room
/// for a second small volume).
const DRIVE_HEADROOM_BYTES: u64 = 256 << 20;

/// What to start.
#[derive(Clone, Debug)]
pub struct DevClusterConfig {
    /// Everything lives here: `meta/`, `n1/`..`n3/`.
    pub data_dir: PathBuf,
    /// The address hosts use: the processor's NVMe/TCP listener and the HTTP API. The
    /// storage nodes only serve the processor, on loopback.
    pub addr: IpAddr,
    /// The processor's NVMe/TCP port, the one hosts connect to.
    pub port: u16,
    /// Size of the sample volume when it is created (ignored once it exists).
    pub volume_size_bytes: u64,
    pub volume_name: String,
    /// Lease of every node's registration and of volume ownership.
    pub lease_ttl_ms: u64,
    /// The central discovery controller's port on `addr`: None = 8009, or any free port
    /// when 8009 is taken (and say so); Some(p) = exactly p (0: any free port).
    pub cdc_port: Option<u16>,
    /// The S3 gateway's port (on `addr`).
    pub s3_port: u16,
    /// Size of each storage node's KV namespace for objects, when the pool is created.
    pub s3_namespace_bytes: u64,
    /// Secure end to end (`ferrobay up --tls`); `None`: plain TCP and HTTP.
    pub tls: Option<DevTlsConfig>,
}

/// `ferrobay up --tls`.
#[derive(Clone, Debug)]
pub struct DevTlsConfig {
    /// The processor node's NVMe/TCP TLS port on `addr`.
    pub port: u16,
    /// The host that must use TLS for the volume (`None`: the one kept in `DIR/tls`, else
    /// this machine's `/etc/nvme/hostnqn`, else a new one).
    pub host_nqn: Option<String>,
}

/// The default NVMe/TCP TLS port of `ferrobay up --tls`.
pub const DEFAULT_TLS_PORT: u16 = 4421;

impl DevClusterConfig {
    /// Defaults: 127.0.0.1:4420, a 1 GiB `vol0`.
    pub fn new(data_dir: impl Into<PathBuf>) -> DevClusterConfig {
        DevClusterConfig {
            data_dir: data_dir.into(),
            addr: IpAddr::from([127, 0, 0, 1]),
            port: 4420,
            volume_size_bytes: 1 << 30,
            volume_name: DEFAULT_VOLUME.to_string(),
            lease_ttl_ms: 4000,
            cdc_port: None,
            s3_port: 9000,
            s3_namespace_bytes: 1 << 30,
            tls: None,
        }
    }
}

/// Why the dev cluster did not start or stop cleanly. One line each.
#[derive(Debug, thiserror::Error)]
pub enum DevClusterError {
    #[error(
        "{addr} is already in use (another `ferrobay up` or NVMe/TCP target?); \
         pick another port with --port, e.g. --port {}",
        addr.port().wrapping_add(1).max(1024)
    )]
    PortInUse { addr: SocketAddr },
    #[error(
        "{addr} is already in use (another `ferrobay up`, MinIO or S3 gateway?); \
         pick another S3 port with --s3-port, e.g. --s3-port {}",
        addr.port().wrapping_add(1).max(1024)
    )]
    S3PortInUse { addr: SocketAddr },
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: SocketAddr, reason: String },
    #[error("data dir {path}: {reason}")]
    DataDir { path: PathBuf, reason: String },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(
        "{addr} is already in use (a storage node's discovery port, another CDC?); pick \
         another port with --cdc-port, e.g. --cdc-port 0 for any free one"
    )]
    CdcPortInUse { addr: SocketAddr },
    #[error("{step}: {reason}")]
    Step { step: String, reason: String },
    #[error("{node} did not take volume {volume} within {timeout_s} s (last seen: {last})")]
    NotOwned {
        node: String,
        volume: String,
        timeout_s: u64,
        last: String,
    },
}

fn step(step: impl Into<String>) -> impl FnOnce(&dyn std::fmt::Display) -> DevClusterError {
    let step = step.into();
    move |e| DevClusterError::Step {
        step,
        reason: e.to_string(),
    }
}

/// A running dev cluster. Stop it with [`DevCluster::shutdown`].
pub struct DevCluster {
    store: Arc<dyn MetaStore>,
    nodes: Vec<RunningNode>,
    processor: Option<Processor>,
    /// The API server, when the processor does not run one itself.
    api: Option<ApiServer>,
    volume: String,
    created: bool,
    nvme_addr: SocketAddr,
    api_addr: Option<SocketAddr>,
    /// The cluster's API token, also in `api_token_path` (0600).
    api_token: Token,
    api_token_path: PathBuf,
    cdc: Option<Cdc>,
    /// Why the CDC is not where it would be by default.
    cdc_note: Option<String>,
    s3: Option<PoolGateway>,
    s3_info: Option<S3Info>,
    /// With TLS: the files and the processor's TLS listener.
    tls: Option<(DevTlsFiles, SocketAddr)>,
}

/// Name of the file in the data dir that holds the cluster's API token.
pub const API_TOKEN_FILE: &str = httpapi::auth::TOKEN_FILE;

struct RunningNode {
    node: StorageNode,
    registration: Option<LiveRegistration>,
}

/// Progress lines for a person ("starting storage node n1 ...").
pub type Progress<'a> = &'a (dyn Fn(&str) + Send + Sync);

impl DevCluster {
    /// Starts everything, creates the volume if it does not exist, and waits until the
    /// processor owns it. Whatever started is stopped again when a later step fails.
    pub async fn start(
        cfg: DevClusterConfig,
        progress: Progress<'_>,
    ) -> Result<DevCluster, DevClusterError> {
        validate(&cfg)?;
        std::fs::create_dir_all(&cfg.data_dir).map_err(|e| DevClusterError::DataDir {
            path: cfg.data_dir.clone(),
            reason: e.to_string(),
        })?;
        let data_dir =
            std::fs::canonicalize(&cfg.data_dir).map_err(|e| DevClusterError::DataDir {
                path: cfg.data_dir.clone(),
                reason: e.to_string(),
            })?;
        let meta_dir = data_dir.join("meta");
        progress(&format!(
            "opening the metadata store in {}",
            meta_dir.display()
        ));
        // First the data dir's lock: a second `up` on it is refused for that reason, not
        // for the ports the first one holds.
        let store = open_embedded(&data_dir, &meta_dir).await?;
        // Then, before anything starts: a taken port is the most likely failure, and the
        // cheapest to report.
        let nvme_addr = SocketAddr::new(cfg.addr, cfg.port);
        check_port_free(nvme_addr)?;
        let s3_addr = SocketAddr::new(cfg.addr, cfg.s3_port);
        check_port_free(s3_addr).map_err(|e| match e {
            DevClusterError::PortInUse { addr } => DevClusterError::S3PortInUse { addr },
            other => other,
        })?;
        let tls_dir = data_dir.join(tls::TLS_DIR);
        let tls = match &cfg.tls {
            Some(t) => {
                let addr = SocketAddr::new(cfg.addr, t.port);
                check_port_free(addr)?;
                let files = tls::prepare(&data_dir, cfg.addr, t.host_nqn.as_deref())?;
                // Every HTTP client of this process (the processor node's calls to the
                // storage nodes' APIs) trusts the cluster's CA.
                httpapi::tls::set_default_client(Some(files.client_tls()?));
                Some((files, addr))
            }
            // The processor node's host NQN must use TLS on the drives now.
            None if tls_dir.exists() => {
                return Err(DevClusterError::Config(format!(
                    "{} was started with --tls ({} exists): run `ferrobay up --tls`",
                    data_dir.display(),
                    tls_dir.display()
                )));
            }
            None => None,
        };
        let api_token = crate::auth::cluster_token(store.as_ref())
            .await
            .map_err(|e| step("the API token")(&e))?;
        let api_token_path = data_dir.join(API_TOKEN_FILE);
        api_token
            .write(&api_token_path)
            .map_err(|e| step("the API token")(&e))?;

        let mut cluster = DevCluster {
            store,
            nodes: Vec::new(),
            processor: None,
            api: None,
            volume: cfg.volume_name.clone(),
            created: false,
            nvme_addr,
            api_addr: None,
            api_token,
            api_token_path,
            cdc: None,
            cdc_note: None,
            s3: None,
            s3_info: None,
            tls,
        };
        match cluster.bring_up(&cfg, &data_dir, progress).await {
            Ok(()) => Ok(cluster),
            Err(e) => {
                progress(&format!("start failed ({e}); stopping what was started"));
                if let Err(e2) = cluster.stop_all().await {
                    tracing::warn!("stopping after a failed start: {e2}");
                }
                Err(e)
            }
        }
    }

    async fn bring_up(
        &mut self,
        cfg: &DevClusterConfig,
        data_dir: &Path,
        progress: Progress<'_>,
    ) -> Result<(), DevClusterError> {
        let ttl = Duration::from_millis(cfg.lease_ttl_ms);
        // First, so that it follows every node record from the start.
        self.start_cdc(cfg, progress).await?;
        let drive_bytes = member_share_bytes(cfg.volume_size_bytes)
            + cfg.s3_namespace_bytes
            + DRIVE_HEADROOM_BYTES;
        let secure = match &self.tls {
            Some((files, _)) => Some(Secure {
                http: files.server_tls()?,
                processor_psk: files.processor_psk()?,
            }),
            None => None,
        };
        for name in STORAGE_NODES {
            progress(&format!("starting storage node {name}"));
            let node = start_storage_node(
                name,
                data_dir,
                loopback(cfg.addr),
                drive_bytes,
                &self.api_token,
                secure.as_ref(),
            )
            .await?;
            let mut running = RunningNode {
                node,
                registration: None,
            };
            // The record follows the node's subsystems and access lists (for the CDC).
            let feed = crate::exports::storage_node_feed(&running.node);
            match LiveRegistration::start(self.store.clone(), feed, ttl).await {
                Ok(r) => running.registration = Some(r),
                Err(e) => {
                    let _ = running.node.shutdown().await;
                    return Err(step(format!("register storage node {name}"))(&e));
                }
            }
            let tls_addrs = running.node.tls_addrs();
            progress(&format!(
                "storage node {name} up: nvme {}{}",
                join_addrs(
                    &running
                        .node
                        .nvme_addrs()
                        .into_iter()
                        .filter(|a| !tls_addrs.contains(a))
                        .collect::<Vec<_>>()
                ),
                if tls_addrs.is_empty() {
                    String::new()
                } else {
                    format!(", nvme over TLS {}", join_addrs(&tls_addrs))
                }
            ));
            self.nodes.push(running);
        }

        progress(&format!(
            "starting processor node {PROCESSOR} on {}",
            self.nvme_addr
        ));
        let mut pcfg = ProcessorConfig::new(PROCESSOR);
        pcfg.listen = vec![self.nvme_addr];
        pcfg.api_listen = Some(SocketAddr::new(cfg.addr, 0));
        pcfg.lease_ttl_ms = cfg.lease_ttl_ms;
        if let (Some(s), Some((_, tls_addr))) = (&secure, &self.tls) {
            progress(&format!("the processor node requires TLS on {tls_addr}"));
            pcfg.tls_listen = vec![*tls_addr];
            pcfg.api_tls = Some(s.http.clone());
            pcfg.member_connect.tls = Some(nvmf_host::TlsCredentials::new(s.processor_psk.clone()));
        }
        let processor = Processor::start(self.store.clone(), pcfg)
            .await
            .map_err(|e| listen_error(self.nvme_addr, &e))?;
        self.api_addr = processor.api_addr();
        self.processor = Some(processor);
        if self.api_addr.is_none() {
            let api = start_api(
                self.store.clone(),
                SocketAddr::new(cfg.addr, 0),
                self.api_token.clone(),
            )
            .await?;
            self.api_addr = Some(api.local_addr());
            self.api = Some(api);
        }

        let exists = volume_view(self.store.as_ref(), &cfg.volume_name)
            .await
            .map_err(|e| step(format!("read volume {}", cfg.volume_name))(&e))?
            .is_some();
        if exists {
            progress(&format!(
                "volume {} exists: assembling it from its members",
                cfg.volume_name
            ));
        } else {
            progress(&format!(
                "creating RAID-5 volume {} ({} MiB) across {}",
                cfg.volume_name,
                cfg.volume_size_bytes.div_ceil(1 << 20),
                STORAGE_NODES.join(", ")
            ));
            let req = CreateVolume {
                name: cfg.volume_name.clone(),
                level: "raid5".to_string(),
                size_bytes: cfg.volume_size_bytes,
                storage_nodes: STORAGE_NODES.iter().map(|s| s.to_string()).collect(),
                preferred_owner: Some(PROCESSOR.to_string()),
                // Fields the provisioning side may add later keep their defaults.
                ..CreateVolume::default()
            };
            // With TLS the processor node's host NQN must use TLS on the drives, which
            // provisioning does not: it uses an identity of its own, allowed in plain TCP.
            let hostnqn = match &self.tls {
                Some(_) => PROVISIONER_HOSTNQN.to_string(),
                None => crate::records::processor_hostnqn(PROCESSOR),
            };
            let host = nvmf_host::HostIdentity::from_hostnqn(&hostnqn)
                .map_err(|e| step("host identity")(&e))?;
            create_volume(self.store.as_ref(), &req, &host)
                .await
                .map_err(|e| step(format!("create volume {}", cfg.volume_name))(&e))?;
            self.created = true;
        }

        if let Some((files, _)) = &self.tls {
            progress(&format!(
                "volume {} requires TLS of host {}",
                cfg.volume_name, files.host_nqn
            ));
            let rec = storage_node::state::TlsPskHostRecord {
                host_nqn: files.host_nqn.clone(),
                psk: files.host_psk()?.to_interchange().to_string(),
            };
            crate::volume_auth::set_host_tls(self.store.as_ref(), &cfg.volume_name, rec)
                .await
                .map_err(|e| step(format!("TLS PSK of volume {}", cfg.volume_name))(&e))?;
        }

        progress(&format!(
            "waiting for {PROCESSOR} to own {}",
            cfg.volume_name
        ));
        self.wait_owned(&cfg.volume_name).await?;

        let (gateway, info) = s3::start(
            &self.store,
            data_dir,
            SocketAddr::new(cfg.addr, cfg.s3_port),
            cfg.s3_namespace_bytes,
            secure.as_ref().map(|s| s.http.clone()),
            progress,
        )
        .await?;
        self.s3 = Some(gateway);
        self.s3_info = Some(info);
        Ok(())
    }

    /// The central discovery controller on `addr`: the port asked for, else 8009, else
    /// (8009 taken) any free port, with a note saying so.
    async fn start_cdc(
        &mut self,
        cfg: &DevClusterConfig,
        progress: Progress<'_>,
    ) -> Result<(), DevClusterError> {
        let start = |port: u16| {
            let store = self.store.clone();
            let listen = vec![SocketAddr::new(cfg.addr, port)];
            // Every node of the dev cluster runs in this process.
            let cfg = CdcConfig {
                listen,
                co_located: true,
            };
            async move { Cdc::start(store, cfg).await }
        };
        let cdc = match cfg.cdc_port {
            Some(port) => start(port).await.map_err(|e| cdc_error(&e))?,
            None => {
                let wanted = SocketAddr::new(cfg.addr, DISCOVERY_PORT);
                // The user's NVMe/TCP port wins over the default discovery port.
                let first = if cfg.port == DISCOVERY_PORT {
                    Err(CdcError::PortInUse { addr: wanted })
                } else {
                    start(DISCOVERY_PORT).await
                };
                match first {
                    Ok(c) => c,
                    Err(CdcError::PortInUse { addr }) => {
                        let c = start(0).await.map_err(|e| cdc_error(&e))?;
                        let got = c.addrs().first().copied().unwrap_or(addr);
                        self.cdc_note = Some(format!(
                            "{addr} is in use, so the central discovery controller is on \
                             {got} (pick a port with --cdc-port)"
                        ));
                        c
                    }
                    Err(e) => return Err(cdc_error(&e)),
                }
            }
        };
        progress(&format!(
            "central discovery controller on {}",
            join_addrs(&cdc.addrs())
        ));
        self.cdc = Some(cdc);
        Ok(())
    }

    async fn wait_owned(&self, volume: &str) -> Result<(), DevClusterError> {
        let deadline = Instant::now() + OWNERSHIP_TIMEOUT;
        loop {
            let last = match volume_view(self.store.as_ref(), volume).await {
                Ok(Some(v)) => {
                    let owned = v.owner.as_ref().is_some_and(|o| o.node == PROCESSOR);
                    let published = v.status.as_ref().is_some_and(|s| s.owner == PROCESSOR);
                    if owned && published {
                        return Ok(());
                    }
                    match &v.owner {
                        Some(o) => format!("owner {} epoch {}", o.node, o.epoch),
                        None => "no owner".into(),
                    }
                }
                Ok(None) => "volume record missing".into(),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(DevClusterError::NotOwned {
                    node: PROCESSOR.into(),
                    volume: volume.into(),
                    timeout_s: OWNERSHIP_TIMEOUT.as_secs(),
                    last,
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// The processor's NVMe/TCP address hosts connect to.
    pub fn nvme_addr(&self) -> SocketAddr {
        self.nvme_addr
    }

    /// With TLS: the key and certificate files and the processor's TLS listener.
    pub fn tls(&self) -> Option<(&DevTlsFiles, SocketAddr)> {
        self.tls.as_ref().map(|(f, a)| (f, *a))
    }

    /// With TLS, the Linux host's command lines to connect to the volume over TLS (tlshd
    /// running with `keyrings=.nvme`): insert the derived TLS PSK from the key file, then
    /// connect. They name the key file, never the key.
    pub fn tls_connect_commands(&self) -> Option<(String, String)> {
        let (files, mut addr) = self.tls()?;
        if addr.ip().is_unspecified() {
            addr.set_ip(loopback(addr.ip()));
        }
        let nqn = self.volume_nqn();
        let host = &files.host_nqn;
        Some((
            format!(
                "nvme check-tls-key --keydata=\"$(cat {})\" --hostnqn={host} --subsysnqn={nqn} \
                 --identity=0 --insert",
                files.host_psk.display()
            ),
            format!(
                "{} --hostnqn={host} --tls",
                nvme_connect_command(addr, &nqn)
            ),
        ))
    }

    /// The processor's HTTP API (`ferrobay volume ... --api ADDR`).
    /// The cluster's API token (every API call but /metrics and /healthz needs it).
    pub fn api_token(&self) -> &Token {
        &self.api_token
    }

    /// Where the API token is kept (0600), for people and scripts.
    pub fn api_token_path(&self) -> &Path {
        &self.api_token_path
    }

    pub fn api_addr(&self) -> Option<SocketAddr> {
        self.api_addr
    }

    pub fn volume(&self) -> &str {
        &self.volume
    }

    pub fn volume_nqn(&self) -> String {
        volume_nqn(&self.volume)
    }

    /// The central discovery controller's address (hosts: `nvme discover`,
    /// `nvme connect-all`).
    pub fn cdc_addr(&self) -> Option<SocketAddr> {
        let mut a = self.cdc.as_ref()?.addrs().first().copied()?;
        if a.ip().is_unspecified() {
            a.set_ip(loopback(a.ip()));
        }
        Some(a)
    }

    /// Why the CDC is not on port 8009, when it is not.
    pub fn cdc_note(&self) -> Option<&str> {
        self.cdc_note.as_deref()
    }

    /// The Linux host's command lines to find and connect every volume through the CDC:
    /// `nvme discover ...` and `nvme connect-all ...`.
    pub fn discover_commands(&self) -> Option<(String, String)> {
        let a = self.cdc_addr()?;
        let args = format!("-t tcp -a {} -s {}", a.ip(), a.port());
        Some((
            format!("nvme discover {args}"),
            format!("nvme connect-all {args}"),
        ))
    }

    /// Whether this start created the volume (false: it existed already).
    pub fn created_volume(&self) -> bool {
        self.created
    }

    /// The S3 gateway: endpoint, key pair, pool.
    pub fn s3(&self) -> Option<&S3Info> {
        self.s3_info.as_ref()
    }

    /// The metadata store (embedded, owned by this process).
    pub fn store(&self) -> &Arc<dyn MetaStore> {
        &self.store
    }

    /// The Linux host's command line to connect to the volume in plain TCP (from this machine when
    /// the processor listens on every address).
    pub fn connect_command(&self) -> String {
        let mut addr = self.nvme_addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(loopback(addr.ip()));
        }
        nvme_connect_command(addr, &self.volume_nqn())
    }

    /// Stops the processor (the volume is stopped clean: no other processor runs), then
    /// the storage nodes.
    pub async fn shutdown(mut self, progress: Progress<'_>) -> Result<(), DevClusterError> {
        progress("stopping");
        let r = self.stop_all().await;
        if r.is_ok() {
            progress("stopped cleanly");
        }
        r
    }

    async fn stop_all(&mut self) -> Result<(), DevClusterError> {
        let mut first_error = None;
        if let Some(gw) = self.s3.take() {
            gw.shutdown().await;
        }
        // Hosts stop discovering before the nodes leave.
        if let Some(c) = self.cdc.take() {
            c.stop().await;
        }
        if let Some(api) = self.api.take() {
            api.stop().await;
        }
        if let Some(p) = self.processor.take()
            && let Err(e) = p.shutdown().await
        {
            first_error.get_or_insert(step(format!("stop processor {PROCESSOR}"))(&e));
        }
        // Reverse order of start; registrations first so nothing looks for a node that is
        // about to go.
        while let Some(mut n) = self.nodes.pop() {
            if let Some(r) = n.registration.take() {
                r.stop().await;
            }
            let name = n.node.name().to_string();
            if let Err(e) = n.node.shutdown().await {
                first_error.get_or_insert(step(format!("stop storage node {name}"))(&e));
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Starts the cluster, calls `ready` once the volume is served, runs until `stop`
/// completes, and shuts down cleanly.
pub async fn run(
    cfg: DevClusterConfig,
    progress: Progress<'_>,
    ready: impl FnOnce(&DevCluster),
    stop: impl Future<Output = ()>,
) -> Result<(), DevClusterError> {
    let cluster = DevCluster::start(cfg, progress).await?;
    ready(&cluster);
    stop.await;
    cluster.shutdown(progress).await
}

/// Serves the processor node's HTTP API from `store` on `addr`, for a processor node
/// that does not serve it itself.
pub async fn start_api(
    store: Arc<dyn MetaStore>,
    addr: SocketAddr,
    token: Token,
) -> Result<ApiServer, DevClusterError> {
    let host = nvmf_host::HostIdentity::from_hostnqn(&crate::records::processor_hostnqn(PROCESSOR))
        .map_err(|e| step("host identity")(&e))?;
    let cfg = ApiConfig {
        store,
        host,
        token,
        node_name: PROCESSOR.to_string(),
        metrics: None,
        health: None,
        upgrade: None,
    };
    ApiServer::start(addr, cfg)
        .await
        .map_err(|e| step("start the HTTP API")(&e))
}

/// The embedded store (one process at a time: a second `ferrobay up` on the same data
/// dir stops here, before it touches anything).
async fn open_embedded(
    data_dir: &Path,
    meta_dir: &Path,
) -> Result<Arc<dyn MetaStore>, DevClusterError> {
    std::fs::create_dir_all(meta_dir).map_err(|e| DevClusterError::DataDir {
        path: meta_dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    match meta::EmbeddedStore::open(meta_dir, meta::EmbeddedOptions::default()).await {
        Ok(s) => Ok(Arc::new(s)),
        Err(e) => {
            let reason = match e {
                meta::MetaError::InUse(_) => {
                    "in use by another process (another `ferrobay up`?)".to_string()
                }
                other => format!("metadata store: {other}"),
            };
            Err(DevClusterError::DataDir {
                path: data_dir.to_path_buf(),
                reason,
            })
        }
    }
}

/// `nvme connect -t tcp -a ADDR -s PORT -n NQN`.
pub fn nvme_connect_command(addr: SocketAddr, nqn: &str) -> String {
    format!(
        "nvme connect -t tcp -a {} -s {} -n {nqn}",
        addr.ip(),
        addr.port()
    )
}

fn validate(cfg: &DevClusterConfig) -> Result<(), DevClusterError> {
    if cfg.port == 0 {
        return Err(DevClusterError::Config(
            "--port 0: hosts need a known port; pick one, e.g. --port 4420".into(),
        ));
    }
    if let Some(t) = &cfg.tls {
        if t.port == 0 {
            return Err(DevClusterError::Config(
                "--tls-port 0: hosts need a known port; pick one, e.g. --tls-port 4421".into(),
            ));
        }
        if t.port == cfg.port || t.port == cfg.s3_port {
            return Err(DevClusterError::Config(format!(
                "--tls-port {} is the NVMe/TCP or S3 port too: pick another",
                t.port
            )));
        }
    }
    meta::schema::validate_name(&cfg.volume_name)
        .map_err(|e| DevClusterError::Config(e.to_string()))?;
    if cfg.volume_size_bytes < (16 << 20) {
        return Err(DevClusterError::Config(format!(
            "volume size {} bytes is too small (at least 16M)",
            cfg.volume_size_bytes
        )));
    }
    // The RAID-5 volume across the three storage nodes must have members that can exist.
    let params = volume::LevelSpec::Raid5
        .params(
            STORAGE_NODES.len(),
            volume::layout::DEFAULT_STRIPE_UNIT_BYTES,
        )
        .map_err(|e| DevClusterError::Config(e.to_string()))?;
    crate::provision::sizing::member_bytes_for(&params, cfg.volume_size_bytes, None)
        .map_err(|e| DevClusterError::Config(e.to_string()))?;
    if cfg.s3_port == 0 {
        return Err(DevClusterError::Config(
            "--s3-port 0: S3 clients need a known port; pick one, e.g. --s3-port 9000".into(),
        ));
    }
    if cfg.s3_port == cfg.port {
        return Err(DevClusterError::Config(format!(
            "--s3-port {} is the NVMe/TCP port too: pick another",
            cfg.s3_port
        )));
    }
    if cfg.s3_namespace_bytes < crate::provision::objpool::MIN_NAMESPACE_BYTES {
        return Err(DevClusterError::Config(format!(
            "S3 namespace size {} bytes is too small (at least 64M)",
            cfg.s3_namespace_bytes
        )));
    }
    if cfg.lease_ttl_ms < 1000 {
        return Err(DevClusterError::Config(
            "lease TTL below 1000 ms is not supported".into(),
        ));
    }
    Ok(())
}

/// The loopback address of `ip`'s family.
fn loopback(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::from([127, 0, 0, 1]),
        IpAddr::V6(_) => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
    }
}

/// Each of the three members holds half of a RAID-5 volume's data.
fn member_share_bytes(volume_bytes: u64) -> u64 {
    let data_members = (STORAGE_NODES.len() - 1) as u64;
    volume_bytes.div_ceil(data_members)
}

/// Binds the address the way the target will (SO_REUSEADDR, so a port whose old
/// connections sit in TIME_WAIT is free) and lets it go again.
fn check_port_free(addr: SocketAddr) -> Result<(), DevClusterError> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .map_err(|e| DevClusterError::Listen {
        addr,
        reason: e.to_string(),
    })?;
    let bound = socket
        .set_reuseaddr(true)
        .and_then(|()| socket.bind(addr))
        .and_then(|()| socket.listen(1));
    match bound {
        Ok(_listener) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            Err(DevClusterError::PortInUse { addr })
        }
        Err(e) => Err(DevClusterError::Listen {
            addr,
            reason: e.to_string(),
        }),
    }
}

fn cdc_error(e: &CdcError) -> DevClusterError {
    match e {
        CdcError::PortInUse { addr } => DevClusterError::CdcPortInUse { addr: *addr },
        other => step("start the central discovery controller")(other),
    }
}

/// A processor that fails to start because its port was taken between the check and the
/// bind still gets the port message.
fn listen_error(addr: SocketAddr, e: &dyn std::fmt::Display) -> DevClusterError {
    let text = e.to_string();
    if text.contains("in use") {
        DevClusterError::PortInUse { addr }
    } else {
        step(format!("start processor {PROCESSOR}"))(&text)
    }
}

/// Where a storage node's NVMe/TCP listener was on its first start, kept in its data
/// dir: the volume records name members by address, so the node must come back there.
const NVME_ADDR_FILE: &str = "devcluster-nvme-addr";

/// What a secure dev cluster's nodes get: the HTTPS certificate and the processor node's
/// TLS PSK.
struct Secure {
    http: httpapi::tls::ServerTls,
    processor_psk: nvme_proto::tls_key::ConfiguredPsk,
}

async fn start_storage_node(
    name: &str,
    data_dir: &Path,
    ip: IpAddr,
    drive_bytes: u64,
    token: &Token,
    secure: Option<&Secure>,
) -> Result<StorageNode, DevClusterError> {
    let dir = data_dir.join(name);
    let drive_path = dir.join("d0.img");
    let addr_path = dir.join(NVME_ADDR_FILE);
    let saved_addr = match std::fs::read_to_string(&addr_path) {
        Ok(s) => Some(
            s.trim()
                .parse::<SocketAddr>()
                .map_err(|e| DevClusterError::DataDir {
                    path: addr_path.clone(),
                    reason: format!("not an address: {e}"),
                })?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(DevClusterError::DataDir {
                path: addr_path,
                reason: e.to_string(),
            });
        }
    };
    let mut cfg = NodeConfig::new(name, &dir);
    cfg.listen = vec![saved_addr.unwrap_or_else(|| SocketAddr::new(ip, 0))];
    // Not the default 8009: three nodes share one address.
    cfg.discovery_listen = Some(SocketAddr::new(ip, 0));
    cfg.http_listen = Some(SocketAddr::new(ip, 0));
    cfg.api_token = Some(token.clone());
    if let Some(s) = secure {
        // A new port each start: the processor node finds it in the node record.
        cfg.tls_listen = vec![SocketAddr::new(ip, 0)];
        cfg.http_tls = Some(s.http.clone());
    }
    // The drive stays whole and free for the volume's namespaces (Namespace Management
    // over the fabric), as for any storage node in a cluster.
    cfg.default_namespace = false;
    // A new node gets its drive; a known one brings back the drive of its state (so a
    // later --volume-size does not clash with the size the drive was made with).
    let fresh = !drive_path.exists();
    if fresh {
        let spec = format!("d0=file:{}:{drive_bytes}", drive_path.display());
        let drive = storage_node::parse_node_drive(&spec)
            .map_err(|e| step(format!("storage node {name} drive"))(&e))?;
        cfg.drives = vec![drive];
    }
    let node = StorageNode::start(cfg)
        .await
        .map_err(|e| step(format!("start storage node {name}"))(&e))?;
    let prepared = match remember_addr(&node, saved_addr, &addr_path) {
        Ok(()) => cluster_hosts_only(&node, secure.map(|s| &s.processor_psk)).await,
        Err(e) => Err(e),
    };
    if let Err(e) = prepared {
        let _ = node.shutdown().await;
        return Err(step(format!("prepare storage node {name}"))(&e));
    }
    Ok(node)
}

/// The drives serve the cluster's own hosts only: the processor node (it carves the
/// volumes' namespaces and fences them) and the S3 gateway (its KV namespaces): a host
/// that discovers the cluster through the CDC finds the volumes, not the members under
/// them. Kept in the node state. `processor_psk`: the processor node must
/// connect over TLS with it, and volumes are provisioned as [`PROVISIONER_HOSTNQN`].
async fn cluster_hosts_only(
    node: &StorageNode,
    processor_psk: Option<&nvme_proto::tls_key::ConfiguredPsk>,
) -> Result<(), String> {
    let processor = processor_hostnqn(PROCESSOR);
    let mut plain = vec![s3_hostnqn(s3::GATEWAY)];
    match processor_psk {
        Some(_) => plain.push(PROVISIONER_HOSTNQN.to_string()),
        None => plain.push(processor.clone()),
    }
    for s in node.subsystems() {
        for host in &plain {
            if s.allow_any_host || !s.allowed_hosts.contains(host) {
                node.allow_host(&s.nqn, host)
                    .await
                    .map_err(|e| format!("allow {host} on {}: {e}", s.nqn))?;
            }
        }
        if let Some(psk) = processor_psk {
            let rec = storage_node::state::TlsPskHostRecord {
                host_nqn: processor.clone(),
                psk: psk.to_interchange().to_string(),
            };
            // Before the processor node starts: no live controller to disconnect.
            node.allow_host_tls(&s.nqn, rec)
                .await
                .map_err(|e| format!("require TLS of {processor} on {}: {e}", s.nqn))?;
        }
    }
    Ok(())
}

/// On the first start, keeps where the listener is (the volume record names it).
fn remember_addr(
    node: &StorageNode,
    saved_addr: Option<SocketAddr>,
    addr_path: &Path,
) -> Result<(), String> {
    if saved_addr.is_none() {
        let addr = node
            .nvme_addrs()
            .first()
            .copied()
            .ok_or_else(|| "no NVMe/TCP listener".to_string())?;
        blockdev::write_atomic(addr_path, addr.to_string().as_bytes())
            .map_err(|e| format!("write {}: {e}", addr_path.display()))?;
    }
    Ok(())
}

fn join_addrs(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_command_is_nvme_cli_syntax() {
        let addr: SocketAddr = "127.0.0.1:4420".parse().unwrap();
        assert_eq!(
            nvme_connect_command(addr, &volume_nqn("vol0")),
            "nvme connect -t tcp -a 127.0.0.1 -s 4420 -n nqn.2026-01.io.ferrobay:vol:vol0"
        );
    }

    #[test]
    fn taken_port_is_reported_with_the_way_out() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let e = rt.block_on(async { check_port_free(addr) }).unwrap_err();
        assert!(matches!(e, DevClusterError::PortInUse { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("already in use") && text.contains("--port"),
            "{text}"
        );
        drop(l);
        rt.block_on(async { check_port_free(addr) }).unwrap();
    }

    #[test]
    fn bad_configs_are_refused() {
        let mut c = DevClusterConfig::new("/tmp/x");
        c.port = 0;
        assert!(validate(&c).is_err());
        let mut c = DevClusterConfig::new("/tmp/x");
        c.volume_size_bytes = 1 << 20;
        assert!(validate(&c).is_err());
        let mut c = DevClusterConfig::new("/tmp/x");
        c.volume_name = "a/b".into();
        assert!(validate(&c).is_err());
        let mut c = DevClusterConfig::new("/tmp/x");
        c.volume_size_bytes = u64::MAX;
        assert!(validate(&c).is_err());
        let tls = |port| DevTlsConfig {
            port,
            host_nqn: None,
        };
        for port in [0, 4420, 9000] {
            let mut c = DevClusterConfig::new("/tmp/x");
            c.tls = Some(tls(port));
            let e = validate(&c).unwrap_err().to_string();
            assert!(e.contains("--tls-port"), "{e}");
        }
        let mut c = DevClusterConfig::new("/tmp/x");
        c.tls = Some(tls(DEFAULT_TLS_PORT));
        validate(&c).unwrap();
        validate(&DevClusterConfig::new("/tmp/x")).unwrap();
    }

    #[test]
    fn drives_hold_a_member_share() {
        assert_eq!(member_share_bytes(1 << 30), 512 << 20);
        assert_eq!(member_share_bytes(3), 2);
    }
}
