//! The running storage node: drives, catalog, NVMe/TCP target, listeners, HTTP port.

mod drive_telemetry;
mod drives;
mod health;
mod kv;
mod media;
mod nsmgr;
mod ops;
mod qos;
mod resv;

pub use kv::DEFAULT_KV_MAX_VALUE_BYTES;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use blockdev::{BlockDevice, IoEngine};
use nvmf_target::{
    KvNamespaceConfig, ListenerHandle, ListenerOptions, NamespaceConfig, PersistentHealth,
    SubsystemConfig, Target, TargetConfig, TargetError,
};
use rand::SeedableRng;
use uuid::Uuid;

use crate::catalog::{Catalog, CatalogError, Origin};
use crate::extent_device::ExtentDevice;
use crate::naming::{NamingError, NodeDrive};
use crate::state::{
    Attachment, DataDirLock, FsStore, LoadSource, NamespaceKind, NamespaceRecord, StateError,
};
pub use drive_telemetry::{NodeTelemetry, SourceView, TelemetryView};

/// The well-known NVMe/TCP discovery port.
pub const DISCOVERY_PORT: u16 = 8009;
/// Power-on time is persisted this often, so an unsafe shutdown loses at most this much.
const POWER_ON_SAVE_INTERVAL: Duration = Duration::from_secs(600);
/// Drive telemetry is sampled this often (the series store's fine resolution).
const TELEMETRY_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// How long a clean shutdown waits for connections to close.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// How to run a node.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Node name: part of every default NQN; must match the data dir's state.
    pub name: String,
    pub data_dir: PathBuf,
    /// NVMe/TCP listeners (I/O and discovery). Port 0 picks a free port.
    pub listen: Vec<SocketAddr>,
    /// NVMe/TCP listeners that require TLS 1.3 with a PSK (hosts configured with
    /// `node host allow --tls-psk`). Port 0 picks a free port.
    pub tls_listen: Vec<SocketAddr>,
    /// Discovery-only listener; `None`: port 8009 on the first listen address's IP
    /// (skipped when a listen address already uses port 8009).
    pub discovery_listen: Option<SocketAddr>,
    /// The HTTP port (`/metrics`, control API); `None`: no HTTP port.
    pub http_listen: Option<SocketAddr>,
    /// Serve the HTTP port over TLS with this certificate (`None`: plain HTTP).
    pub http_tls: Option<httpapi::tls::ServerTls>,
    /// The bearer token the control API requires; written to `DATA_DIR/api-token` (0600).
    /// `None`: the token already in that file, or a new one made there.
    pub api_token: Option<httpapi::auth::Token>,
    /// Drives as given (`[NAME=]SPEC`); empty: bring up the drives of the state.
    pub drives: Vec<NodeDrive>,
    /// Target tuning, including the controller ID range (`cntlid_min..=cntlid_max`).
    pub target: TargetConfig,
    pub engine: IoEngine,
    /// A drive new to the state gets one namespace spanning it (nsid 1, attached to every
    /// host), ready for `nvme connect`. `false`: it comes up with its subsystem and no
    /// namespace, the whole capacity free for Namespace Management (what a cluster's
    /// provisioning wants). Drives already in the state keep their namespaces either way.
    pub default_namespace: bool,
    /// The local volume registry `volume:NAME` drives are found in (`None`: the default,
    /// `$FERROBAY_VOLUMES_DIR` or `/var/lib/ferrobay/volumes`, as `ferrobay volume`).
    pub volumes_dir: Option<PathBuf>,
    /// Wraps each drive's device (by drive name) before it is metered: for tests that
    /// inject faults on purpose (`None`: the drives as opened).
    pub wrap_drive: Option<DriveWrapper>,
}

/// A function a test gives [`NodeConfig::wrap_drive`]: `(drive name, device) -> device`.
#[derive(Clone)]
pub struct DriveWrapper(
    #[allow(clippy::type_complexity)]
    pub  Arc<dyn Fn(&str, Arc<dyn BlockDevice>) -> Arc<dyn BlockDevice> + Send + Sync>,
);

impl std::fmt::Debug for DriveWrapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DriveWrapper")
    }
}

impl NodeConfig {
    /// Defaults: no listeners, no HTTP, the state's drives, default target settings, a
    /// namespace spanning each new drive.
    pub fn new(name: impl Into<String>, data_dir: impl Into<PathBuf>) -> NodeConfig {
        NodeConfig {
            name: name.into(),
            data_dir: data_dir.into(),
            listen: Vec::new(),
            tls_listen: Vec::new(),
            discovery_listen: None,
            http_listen: None,
            http_tls: None,
            api_token: None,
            drives: Vec::new(),
            target: TargetConfig::default(),
            engine: IoEngine::Auto,
            default_namespace: true,
            volumes_dir: None,
            wrap_drive: None,
        }
    }
}

/// Why a node operation failed. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{0}")]
    Config(String),
    #[error("drive {name} ({spec}): {reason}")]
    Drive {
        name: String,
        spec: String,
        reason: String,
    },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("target: {0}")]
    Target(#[from] TargetError),
    #[error("listen on {addr}: {reason}")]
    Listen { addr: SocketAddr, reason: String },
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Internal(String),
}

impl From<NamingError> for NodeError {
    fn from(e: NamingError) -> NodeError {
        NodeError::Catalog(CatalogError::Naming(e))
    }
}

impl From<StateError> for NodeError {
    fn from(e: StateError) -> NodeError {
        NodeError::Catalog(CatalogError::State(e))
    }
}

/// What kind of failure an error is, for HTTP status codes and NVMe statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    BadRequest,
    NotFound,
    Conflict,
    InsufficientCapacity,
    Internal,
}

impl NodeError {
    pub fn kind(&self) -> ErrorKind {
        use crate::extent::ExtentError as E;
        match self {
            NodeError::BadRequest(_) | NodeError::Config(_) => ErrorKind::BadRequest,
            NodeError::NotFound(_) => ErrorKind::NotFound,
            NodeError::Conflict(_) => ErrorKind::Conflict,
            NodeError::Catalog(c) => match c {
                CatalogError::NoSuchSubsystem(_) | CatalogError::NoSuchNamespace { .. } => {
                    ErrorKind::NotFound
                }
                CatalogError::NamespaceExists { .. }
                | CatalogError::NoFreeNsid(_)
                | CatalogError::DriveExists(_)
                | CatalogError::HostAlreadyAllowed { .. }
                | CatalogError::WrongNode { .. } => ErrorKind::Conflict,
                CatalogError::HostNotAllowed { .. } => ErrorKind::NotFound,
                CatalogError::BadNsid(_)
                | CatalogError::BadBlockSize(_)
                | CatalogError::BadSize { .. }
                | CatalogError::Naming(_)
                | CatalogError::InvalidDhchap(_) => ErrorKind::BadRequest,
                CatalogError::Extent {
                    source: E::InsufficientCapacity { .. } | E::TooFragmented { .. },
                    ..
                } => ErrorKind::InsufficientCapacity,
                CatalogError::Extent { .. } => ErrorKind::BadRequest,
                CatalogError::State(_) | CatalogError::Inconsistent(_) => ErrorKind::Internal,
            },
            NodeError::Drive { .. }
            | NodeError::Target(_)
            | NodeError::Listen { .. }
            | NodeError::Internal(_) => ErrorKind::Internal,
        }
    }
}

pub(crate) struct NodeInner {
    name: String,
    node_uuid: Uuid,
    target: Target,
    /// Shared with the reservation stores of the namespaces.
    catalog: Arc<Mutex<Catalog>>,
    /// Opened drives by UUID.
    drives: BTreeMap<Uuid, Arc<dyn BlockDevice>>,
    /// The stores of the Key Value namespaces, by (subsystem NQN, NSID).
    kv: Mutex<kv::KvNamespaces>,
    /// Set once the listeners are open (after the namespace manager is installed).
    listeners: OnceLock<Listeners>,
    http: Mutex<Option<crate::http::HttpServer>>,
    api_token: httpapi::auth::Token,
    started: Instant,
    /// Up to when power-on time has been added to the state.
    power_on_saved: Mutex<Instant>,
    ticker: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Meters, series and grades of the drives and namespaces.
    telemetry: Arc<NodeTelemetry>,
    telemetry_ticker: Mutex<Option<tokio::task::JoinHandle<()>>>,
    shut_down: std::sync::atomic::AtomicBool,
    /// Held until a clean shutdown has been recorded.
    lock: Mutex<Option<DataDirLock>>,
    /// Set by `POST /api/v1/node/upgrade`; the daemon re-executes on it (docs/upgrade.md).
    upgrade: release::UpgradeSignal,
}

/// The NVMe/TCP listeners and the discovery-only one.
struct Listeners {
    nvme: Vec<ListenerHandle>,
    discovery: Option<ListenerHandle>,
}

/// A running storage node. Cheap to clone.
#[derive(Clone)]
pub struct StorageNode {
    inner: Arc<NodeInner>,
}

impl std::fmt::Debug for StorageNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageNode")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

pub(crate) fn lock_catalog(m: &Mutex<Catalog>) -> MutexGuard<'_, Catalog> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The block device and offset behind a namespace record.
pub(crate) fn namespace_device(
    drive: &Arc<dyn BlockDevice>,
    ns: &NamespaceRecord,
) -> Result<(Arc<dyn BlockDevice>, u64), NodeError> {
    match ns.extents.as_slice() {
        [one] => Ok((drive.clone(), one.offset_bytes)),
        many => {
            let dev = ExtentDevice::new(drive.clone(), many.to_vec()).map_err(|e| {
                NodeError::Internal(format!("namespace {}/{}: {e}", ns.subsystem_nqn, ns.nsid))
            })?;
            Ok((Arc::new(dev), 0))
        }
    }
}

/// The target's view of a persisted attachment, and back.
pub(crate) fn to_target_attachment(a: &Attachment) -> nvmf_target::Attachment {
    match a {
        Attachment::All => nvmf_target::Attachment::all(),
        Attachment::Hosts(h) => nvmf_target::Attachment {
            all: false,
            hosts: h.iter().cloned().collect(),
        },
    }
}

pub(crate) fn from_target_attachment(a: &nvmf_target::Attachment) -> Attachment {
    if a.all {
        Attachment::All
    } else {
        Attachment::Hosts(a.hosts.iter().cloned().collect())
    }
}

impl StorageNode {
    /// Starts a node: loads (or creates) the state in the data dir, opens and checks the
    /// drives, brings every subsystem and namespace up in a new target, and listens.
    pub async fn start(cfg: NodeConfig) -> Result<StorageNode, NodeError> {
        std::fs::create_dir_all(&cfg.data_dir).map_err(|e| {
            NodeError::Config(format!(
                "cannot create data dir {}: {e}",
                cfg.data_dir.display()
            ))
        })?;
        let lock = DataDirLock::acquire(&cfg.data_dir)?;
        let token_path = StorageNode::api_token_path(&cfg.data_dir);
        let api_token = match &cfg.api_token {
            Some(t) => t.write(&token_path).map(|()| t.clone()),
            None => httpapi::auth::Token::load_or_create(&token_path).map(|(t, _)| t),
        }
        .map_err(|e| NodeError::Config(e.to_string()))?;
        let rng = Box::new(rand::rngs::StdRng::from_os_rng());
        let (mut catalog, origin) =
            Catalog::open(Box::new(FsStore::new(&cfg.data_dir)), &cfg.name, rng)?;
        match &origin {
            Origin::Fresh => {
                tracing::info!(node = %cfg.name, dir = %cfg.data_dir.display(), "new node")
            }
            Origin::Loaded {
                generation,
                source: LoadSource::Current,
            } => {
                tracing::info!(node = %cfg.name, generation, "node state loaded")
            }
            Origin::Loaded {
                generation,
                source: LoadSource::Previous { reason },
            } => tracing::warn!(
                node = %cfg.name, generation, %reason,
                "current node state unusable; brought up the previous generation"
            ),
        }

        let plans = drives::plan(catalog.state(), &cfg.drives)?;
        let volumes = volume::registry::VolumeRegistry::new(
            cfg.volumes_dir
                .clone()
                .unwrap_or_else(volume::registry::VolumeRegistry::default_dir),
        );
        let opened = drives::open_all(plans, cfg.engine, &volumes).await?;
        let mut devices = BTreeMap::new();
        for d in opened {
            let uuid = match &d.plan.known {
                Some(k) => k.uuid,
                None => {
                    let info = d.device.info();
                    let add = if cfg.default_namespace {
                        Catalog::add_drive
                    } else {
                        Catalog::add_bare_drive
                    };
                    let nqn = add(
                        &mut catalog,
                        &d.plan.name,
                        &d.plan.spec.to_string(),
                        info.size_bytes,
                        info.logical_block_bytes,
                    )?;
                    let namespaces = if cfg.default_namespace {
                        "one spanning the drive"
                    } else {
                        "none (all capacity free)"
                    };
                    tracing::info!(drive = %d.plan.name, %nqn, namespaces, "new drive");
                    catalog
                        .state()
                        .drive_by_name(&d.plan.name)
                        .map(|r| r.uuid)
                        .ok_or_else(|| NodeError::Internal("drive vanished from state".into()))?
                }
            };
            let device = match &cfg.wrap_drive {
                Some(w) => (w.0)(&d.plan.name, d.device),
                None => d.device,
            };
            devices.insert(uuid, device);
        }

        // Every drive is metered: all I/O to it (its namespaces' included) is counted.
        let node_telemetry = {
            let st = catalog.state();
            let drives: Vec<(Uuid, String, String)> = st
                .drives
                .iter()
                .map(|d| (d.uuid, d.name.clone(), d.spec.clone()))
                .collect();
            Arc::new(NodeTelemetry::new(
                &cfg.name,
                &drives,
                std::path::Path::new("/sys"),
                Arc::new(crate::nvme_smart::KernelNvmeAdmin),
                Arc::new(telemetry::MonotonicClock::new()),
            ))
        };
        let devices: BTreeMap<Uuid, Arc<dyn BlockDevice>> = devices
            .into_iter()
            .map(|(uuid, dev)| match node_telemetry.drive_meter(&uuid) {
                Some(m) => (
                    uuid,
                    Arc::new(telemetry::MeteredDevice::with(
                        dev,
                        m,
                        node_telemetry.clock(),
                    )) as Arc<dyn BlockDevice>,
                ),
                None => (uuid, dev),
            })
            .collect();

        let target = Target::new(cfg.target.clone())?;
        // The counters as they will be once this start is recorded (after bring-up
        // succeeded: a start that fails is not a power cycle).
        let smart = catalog.state().smart.clone();
        target.set_persistent_health(PersistentHealth {
            power_cycles: smart.power_cycles + 1,
            power_on_hours: smart.power_on_seconds / 3600,
            unsafe_shutdowns: smart.unsafe_shutdowns + u64::from(!smart.clean_shutdown),
        });
        // Key Value namespaces: their stores recover before hosts can reach them.
        let kv_entries = kv::open_all(&catalog.state().namespaces, &devices).await;
        let catalog = Arc::new(Mutex::new(catalog));
        target.set_media_health_source(Arc::new(media::NodeMediaHealth::new(
            catalog.clone(),
            std::path::Path::new("/sys"),
            Arc::new(crate::nvme_smart::KernelNvmeAdmin),
        )));
        node_telemetry.set_catalog(catalog.clone());
        target.set_telemetry_source(node_telemetry.clone());
        if let Err(e) = bring_up(&target, &catalog, &devices, &kv_entries, &node_telemetry) {
            target.shutdown(SHUTDOWN_TIMEOUT).await;
            for ((nqn, nsid), entry) in &kv_entries {
                let _ = kv::close(nqn, *nsid, entry).await;
            }
            return Err(e);
        }
        let node_uuid = lock_catalog(&catalog).state().node_uuid;
        let now = Instant::now();
        let inner = Arc::new(NodeInner {
            name: cfg.name.clone(),
            node_uuid,
            target: target.clone(),
            catalog: catalog.clone(),
            drives: devices,
            kv: Mutex::new(kv_entries),
            listeners: OnceLock::new(),
            http: Mutex::new(None),
            api_token,
            started: now,
            power_on_saved: Mutex::new(now),
            ticker: Mutex::new(None),
            telemetry: node_telemetry.clone(),
            telemetry_ticker: Mutex::new(None),
            shut_down: std::sync::atomic::AtomicBool::new(false),
            lock: Mutex::new(Some(lock)),
            upgrade: release::UpgradeSignal::new(),
        });
        // Before listening: a host that connects at once must already see Namespace
        // Management in Identify (OACS) and have its create-ns handled.
        target.set_namespace_manager(Arc::new(nsmgr::NsManager::new(Arc::downgrade(&inner))));
        let (nvme, discovery) = match listen_all(&target, &cfg).await {
            Ok(l) => l,
            Err(e) => {
                target.shutdown(SHUTDOWN_TIMEOUT).await;
                return Err(e);
            }
        };
        if inner.listeners.set(Listeners { nvme, discovery }).is_err() {
            return Err(NodeError::Internal("listeners opened twice".into()));
        }
        let recorded = lock_catalog(&catalog).record_start();
        if let Err(e) = recorded {
            target.shutdown(SHUTDOWN_TIMEOUT).await;
            return Err(e.into());
        }
        let node = StorageNode { inner };
        if let Some(addr) = cfg.http_listen {
            let tls = cfg.http_tls.clone();
            let https = tls.is_some();
            match crate::http::serve(addr, node.clone(), node.inner.api_token.clone(), tls).await {
                Ok(server) => {
                    tracing::info!(addr = %server.local_addr(), https, "HTTP listening");
                    *node.inner.http.lock().unwrap_or_else(|p| p.into_inner()) = Some(server);
                }
                Err(e) => {
                    let _ = node.shutdown().await;
                    return Err(NodeError::Listen {
                        addr,
                        reason: e.to_string(),
                    });
                }
            }
        }
        let weak = Arc::downgrade(&node.inner);
        let ticker = tokio::spawn(async move {
            let mut every = tokio::time::interval(POWER_ON_SAVE_INTERVAL);
            every.tick().await;
            loop {
                every.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let node = StorageNode { inner };
                let r = tokio::task::spawn_blocking(move || node.save_power_on_time()).await;
                if let Ok(Err(e)) = r {
                    tracing::warn!(error = %e, "cannot save power-on time");
                }
            }
        });
        *node.inner.ticker.lock().unwrap_or_else(|p| p.into_inner()) = Some(ticker);
        let meters = node.inner.telemetry.clone();
        let sampler = tokio::spawn(async move {
            let mut every = tokio::time::interval(TELEMETRY_SAMPLE_INTERVAL);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                every.tick().await;
                let m = meters.clone();
                if tokio::task::spawn_blocking(move || m.tick()).await.is_err() {
                    return;
                }
            }
        });
        *node
            .inner
            .telemetry_ticker
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(sampler);
        Ok(node)
    }

    pub(crate) fn catalog(&self) -> MutexGuard<'_, Catalog> {
        lock_catalog(&self.inner.catalog)
    }

    /// Where an upgrade request arrives (`POST /api/v1/node/upgrade`); the daemon waits
    /// on it next to its stop signal.
    pub fn upgrade_signal(&self) -> &release::UpgradeSignal {
        &self.inner.upgrade
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn uuid(&self) -> Uuid {
        self.inner.node_uuid
    }

    /// The NVMe/TCP target (for tests and embedding).
    pub fn target(&self) -> &Target {
        &self.inner.target
    }

    /// Bound NVMe/TCP addresses (real ports when port 0 was asked for): the plain
    /// listeners, then the TLS ones.
    pub fn nvme_addrs(&self) -> Vec<SocketAddr> {
        self.listener_addrs(|_| true)
    }

    /// The bound addresses of the listeners that require TLS (`NodeConfig::tls_listen`).
    pub fn tls_addrs(&self) -> Vec<SocketAddr> {
        self.listener_addrs(ListenerHandle::requires_tls)
    }

    fn listener_addrs(&self, keep: impl Fn(&ListenerHandle) -> bool) -> Vec<SocketAddr> {
        self.inner
            .listeners
            .get()
            .map(|l| {
                l.nvme
                    .iter()
                    .filter(|l| keep(l))
                    .map(|l| l.local_addr())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn discovery_addr(&self) -> Option<SocketAddr> {
        self.inner
            .listeners
            .get()
            .and_then(|l| l.discovery.as_ref())
            .map(|l| l.local_addr())
    }

    /// The bearer token the control API requires (also in [`StorageNode::api_token_path`]).
    pub fn api_token(&self) -> &httpapi::auth::Token {
        &self.inner.api_token
    }

    /// Where the node keeps its API token (0600).
    pub fn api_token_path(data_dir: &std::path::Path) -> PathBuf {
        data_dir.join(httpapi::auth::TOKEN_FILE)
    }

    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.inner
            .http
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|s| s.local_addr())
    }

    /// The drives' and namespaces' telemetry: meters, series, grades (for the API,
    /// `/metrics` and the dashboard).
    pub fn telemetry(&self) -> &Arc<NodeTelemetry> {
        &self.inner.telemetry
    }

    /// Adds the power-on time since the last save to the state (blocking I/O).
    fn save_power_on_time(&self) -> Result<(), NodeError> {
        let mut saved = self
            .inner
            .power_on_saved
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let secs = saved.elapsed().as_secs();
        if secs > 0 {
            self.catalog().add_power_on_seconds(secs)?;
            *saved += Duration::from_secs(secs);
        }
        Ok(())
    }

    /// Stops listening, closes connections, flushes the drives and records a clean
    /// shutdown in the state. Idempotent; the node's operations fail afterwards.
    pub async fn shutdown(&self) -> Result<(), NodeError> {
        if self
            .inner
            .shut_down
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return Ok(());
        }
        let http = self
            .inner
            .http
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(h) = http {
            h.stop().await;
        }
        for ticker in [&self.inner.ticker, &self.inner.telemetry_ticker] {
            if let Some(t) = ticker.lock().unwrap_or_else(|p| p.into_inner()).take() {
                t.abort();
            }
        }
        self.inner.target.shutdown(SHUTDOWN_TIMEOUT).await;
        let mut flush_error = None;
        // No host reaches the KV stores any more: make them durable and checkpoint them.
        let kv_entries = std::mem::take(&mut *self.kv_namespaces());
        for ((nqn, nsid), entry) in &kv_entries {
            if let Err(e) = kv::close(nqn, *nsid, entry).await {
                flush_error = Some(e);
            }
        }
        for dev in self.inner.drives.values() {
            if let Err(e) = dev.flush().await {
                tracing::error!(drive = %dev.info().name, error = %e, "flush at shutdown failed");
                flush_error = Some(format!("flush {}: {e}", dev.info().name));
            }
        }
        if let Some(e) = flush_error {
            // Not clean: the next start counts an unsafe shutdown.
            return Err(NodeError::Internal(e));
        }
        let node = self.clone();
        tokio::task::spawn_blocking(move || {
            let saved = *node
                .inner
                .power_on_saved
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            node.catalog()
                .record_clean_shutdown(saved.elapsed().as_secs())
        })
        .await
        .map_err(|e| NodeError::Internal(e.to_string()))??;
        // The data dir is free for another node from here on.
        self.inner
            .lock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        tracing::info!(node = %self.inner.name, "clean shutdown");
        Ok(())
    }

    pub(crate) fn check_running(&self) -> Result<(), NodeError> {
        if self
            .inner
            .shut_down
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(NodeError::Conflict("the node is shutting down".into()));
        }
        Ok(())
    }

    pub(crate) fn kv_namespaces(&self) -> MutexGuard<'_, kv::KvNamespaces> {
        self.inner.kv.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn drive_device(&self, uuid: Uuid) -> Result<&Arc<dyn BlockDevice>, NodeError> {
        self.inner
            .drives
            .get(&uuid)
            .ok_or_else(|| NodeError::Internal(format!("drive {uuid} is not open")))
    }
}

fn listen_err(addr: SocketAddr, e: TargetError) -> NodeError {
    NodeError::Listen {
        addr,
        reason: e.to_string(),
    }
}

/// Opens the NVMe/TCP listeners and the discovery-only one.
async fn listen_all(
    target: &Target,
    cfg: &NodeConfig,
) -> Result<(Vec<ListenerHandle>, Option<ListenerHandle>), NodeError> {
    let mut nvme_listeners = Vec::new();
    for (i, addr) in cfg.listen.iter().enumerate() {
        let l = target
            .listen_as(Some(&format!("nvme{i}")), *addr, ListenerOptions::default())
            .await
            .map_err(|e| listen_err(*addr, e))?;
        tracing::info!(addr = %l.local_addr(), "NVMe/TCP listening");
        nvme_listeners.push(l);
    }
    for (i, addr) in cfg.tls_listen.iter().enumerate() {
        let opts = ListenerOptions {
            tls: true,
            ..Default::default()
        };
        let l = target
            .listen_as(Some(&format!("nvme-tls{i}")), *addr, opts)
            .await
            .map_err(|e| listen_err(*addr, e))?;
        tracing::info!(addr = %l.local_addr(), "NVMe/TCP listening (TLS required)");
        nvme_listeners.push(l);
    }
    let discovery_addr = match (cfg.discovery_listen, cfg.listen.first()) {
        (Some(a), _) => Some(a),
        (None, Some(first)) if !cfg.listen.iter().any(|a| a.port() == DISCOVERY_PORT) => {
            Some(SocketAddr::new(first.ip(), DISCOVERY_PORT))
        }
        _ => None,
    };
    let discovery_listener = match discovery_addr {
        Some(addr) => {
            let opts = ListenerOptions {
                discovery_only: true,
                ..Default::default()
            };
            let l = target
                .listen_as(Some("discovery"), addr, opts)
                .await
                .map_err(|e| listen_err(addr, e))?;
            tracing::info!(addr = %l.local_addr(), "discovery listening");
            Some(l)
        }
        None => None,
    };
    Ok((nvme_listeners, discovery_listener))
}

/// Adds every subsystem and namespace of the state to the target (KV namespaces over
/// their opened stores in `kv_entries`).
fn bring_up(
    target: &Target,
    catalog: &Arc<Mutex<Catalog>>,
    devices: &BTreeMap<Uuid, Arc<dyn BlockDevice>>,
    kv_entries: &kv::KvNamespaces,
    meters: &NodeTelemetry,
) -> Result<(), NodeError> {
    let state = lock_catalog(catalog).state().clone();
    for s in &state.subsystems {
        target.add_subsystem(SubsystemConfig {
            nqn: s.nqn.clone(),
            serial: s.serial.clone(),
            model: s.model.clone(),
            allow_any_host: s.allow_any_host,
            allowed_hosts: s.allowed_hosts.clone(),
        })?;
        for d in &s.dhchap {
            let cfg = d.to_target_config().map_err(NodeError::Config)?;
            target.set_host_dhchap(&s.nqn, &d.host_nqn, Some(cfg))?;
        }
        for d in &s.tls_psks {
            let psk = d.configured_psk().map_err(NodeError::Config)?;
            target.set_host_tls_psk(&s.nqn, &d.host_nqn, Some(psk))?;
        }
    }
    for ns in &state.namespaces {
        let drive = devices
            .get(&ns.drive_uuid)
            .ok_or_else(|| NodeError::Internal(format!("drive {} is not open", ns.drive_uuid)))?;
        match &ns.kind {
            NamespaceKind::Nvm => {
                target.add_namespace(
                    &ns.subsystem_nqn,
                    namespace_config(drive, ns, catalog, meters)?,
                )?;
            }
            NamespaceKind::Kv(_) => {
                let entry = kv_entries
                    .get(&(ns.subsystem_nqn.clone(), ns.nsid))
                    .ok_or_else(|| {
                        NodeError::Internal(format!(
                            "KV namespace {}/{} was not opened",
                            ns.subsystem_nqn, ns.nsid
                        ))
                    })?;
                let drive_name = drive.info().name.clone();
                target.add_kv_namespace(
                    &ns.subsystem_nqn,
                    kv_namespace_config(&drive_name, ns, entry, catalog)?,
                )?;
            }
        }
        if let Attachment::Hosts(_) = ns.attachment {
            target.set_namespace_attachment(
                &ns.subsystem_nqn,
                ns.nsid,
                to_target_attachment(&ns.attachment),
            )?;
        }
    }
    qos::bring_up(target, &state.qos)
}

/// The target's configuration of a persisted namespace.
pub(crate) fn namespace_config(
    drive: &Arc<dyn BlockDevice>,
    ns: &NamespaceRecord,
    catalog: &Arc<Mutex<Catalog>>,
    meters: &NodeTelemetry,
) -> Result<NamespaceConfig, NodeError> {
    let (device, offset_bytes) = namespace_device(drive, ns)?;
    // The namespace's own meter, on top of its drive's.
    let device: Arc<dyn BlockDevice> = Arc::new(telemetry::MeteredDevice::with(
        device,
        meters.namespace_meter(&ns.subsystem_nqn, ns.nsid, ns.drive_uuid),
        meters.clock(),
    ));
    Ok(NamespaceConfig {
        nsid: ns.nsid,
        device,
        offset_bytes,
        size_bytes: ns.size_bytes,
        block_size_bytes: ns.block_size_bytes,
        nguid: ns.nguid,
        eui64: ns.eui64,
        uuid: *ns.uuid.as_bytes(),
        attached: ns.attachment == Attachment::All,
        reservations: Some(resv::reservations_for(catalog, ns)),
        ana_group: nvmf_target::DEFAULT_ANA_GROUP,
    })
}

/// The target's configuration of a persisted Key Value namespace served by `entry`.
pub(crate) fn kv_namespace_config(
    drive_name: &str,
    ns: &NamespaceRecord,
    entry: &kv::KvEntry,
    catalog: &Arc<Mutex<Catalog>>,
) -> Result<KvNamespaceConfig, NodeError> {
    let NamespaceKind::Kv(params) = &ns.kind else {
        return Err(NodeError::Internal(format!(
            "namespace {}/{} is not a KV namespace",
            ns.subsystem_nqn, ns.nsid
        )));
    };
    // The store's own format decides, when it is open.
    let (max_value_bytes, max_keys) = match &entry.engine {
        Some(e) => {
            let f = e.format_info();
            (f.max_value_bytes, f.max_keys)
        }
        None => (params.max_value_bytes, params.max_keys),
    };
    Ok(KvNamespaceConfig {
        nsid: ns.nsid,
        backend: entry.backend.clone(),
        max_value_bytes,
        max_keys,
        size_bytes: ns.size_bytes,
        device: drive_name.to_string(),
        nguid: ns.nguid,
        eui64: ns.eui64,
        uuid: *ns.uuid.as_bytes(),
        attached: ns.attachment == Attachment::All,
        reservations: Some(resv::reservations_for(catalog, ns)),
        ana_group: nvmf_target::DEFAULT_ANA_GROUP,
    })
}
