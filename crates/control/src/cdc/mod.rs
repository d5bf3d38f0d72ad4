//! The central discovery controller (CDC, `ferrobay cdc run`, also inside `ferrobay up`):
//! an NVMe/TCP discovery controller (the well-known discovery NQN, Identify DCTYPE
//! "central") whose log lists every subsystem of every storage node and processor node
//! of the cluster, on every NVMe/TCP listener of the node that exports it, filtered per
//! host by the subsystem's access list, plus a referral to each node's own discovery
//! controller (`docs/cdc.md`).
//!
//! - [`view`]: node records to log entries and who may see them (pure).
//! - `follow`: the node records followed by a watch; a change bumps the generation and
//!   raises the discovery log change event on persistent discovery connections (which
//!   keep themselves alive with KATO and wait with an Asynchronous Event Request; the
//!   nvmf-target discovery controller does both).
//!
//! The nodes publish what they export in their records ([`crate::exports`]); the CDC
//! hosts no subsystem and holds no state of its own: run as many as you like.

mod follow;
pub mod view;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use meta::MetaStore;
use nvmf_target::{
    DiscoveryControllerType, ListenerHandle, ListenerOptions, Target, TargetConfig, TargetError,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use view::ClusterView;

/// The discovery port (IANA: NVMe-oF discovery over TCP).
pub const DISCOVERY_PORT: u16 = 8009;

/// How a CDC runs.
#[derive(Clone, Debug)]
pub struct CdcConfig {
    /// NVMe/TCP listeners hosts discover on (port 0 picks one).
    pub listen: Vec<SocketAddr>,
    /// Every node runs on this machine (`ferrobay up`): a node listening on a wildcard
    /// address is reached at the address the host reached the CDC on. Otherwise such a
    /// listener cannot be listed (the CDC does not know the node's address).
    pub co_located: bool,
}

impl CdcConfig {
    /// Listeners for a CDC of nodes that run anywhere.
    pub fn new(listen: Vec<SocketAddr>) -> CdcConfig {
        CdcConfig {
            listen,
            co_located: false,
        }
    }
}

/// Why a CDC did not start. One line each.
#[derive(Debug, thiserror::Error)]
pub enum CdcError {
    #[error("a central discovery controller needs at least one listen address")]
    NoListener,
    #[error("{addr} is already in use (a storage node's discovery port, another CDC?)")]
    PortInUse { addr: SocketAddr },
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: SocketAddr, reason: String },
    #[error("discovery target: {0}")]
    Target(#[from] TargetError),
}

/// A running central discovery controller. Stop it with [`Cdc::stop`].
pub struct Cdc {
    target: Target,
    listeners: Vec<ListenerHandle>,
    served: Arc<follow::Served>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Cdc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cdc")
            .field("addrs", &self.addrs())
            .finish_non_exhaustive()
    }
}

impl Cdc {
    /// Listens, then follows the node records of `store` in the background (the log is
    /// empty until the first listing arrives; a store out of reach is retried).
    pub async fn start(store: Arc<dyn MetaStore>, cfg: CdcConfig) -> Result<Cdc, CdcError> {
        if cfg.listen.is_empty() {
            return Err(CdcError::NoListener);
        }
        let target = Target::new(TargetConfig {
            discovery_controller_type: DiscoveryControllerType::Central,
            serial_prefix: "FBCDC".to_string(),
            model: "Ferrobay Central Discovery".to_string(),
            ..TargetConfig::default()
        })?;
        let served = Arc::new(follow::Served::default());
        target.set_discovery_log_source(served.clone());
        let mut listeners = Vec::new();
        for addr in &cfg.listen {
            let opts = ListenerOptions {
                discovery_only: true,
                ..Default::default()
            };
            match target.listen_with(*addr, opts).await {
                Ok(l) => listeners.push(l),
                Err(e) => {
                    for l in &listeners {
                        l.close();
                    }
                    return Err(listen_error(*addr, e));
                }
            }
        }
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(follow::run(
            store,
            served.clone(),
            target.clone(),
            cfg.co_located,
            stop_rx,
        ));
        let addrs: Vec<SocketAddr> = listeners.iter().map(ListenerHandle::local_addr).collect();
        tracing::info!(?addrs, "central discovery controller listening");
        Ok(Cdc {
            target,
            listeners,
            served,
            stop,
            task: Some(task),
        })
    }

    /// The listeners' addresses (with the ports actually bound).
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .map(ListenerHandle::local_addr)
            .collect()
    }

    /// The cluster view being served.
    pub fn view(&self) -> Arc<ClusterView> {
        self.served.view()
    }

    /// The log's generation counter (GENCTR) as hosts read it.
    pub fn generation(&self) -> u64 {
        self.target
            .discovery_generation()
            .wrapping_add(self.served.generation())
    }

    /// The discovery target (statistics, connections).
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Stops following the records, closes the listeners and the hosts' connections.
    pub async fn stop(mut self) {
        self.stop.send_replace(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        for l in &self.listeners {
            l.close();
        }
        self.target.shutdown(Duration::from_secs(2)).await;
        tracing::info!("central discovery controller stopped");
    }
}

impl Drop for Cdc {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            for l in &self.listeners {
                l.close();
            }
        }
    }
}

fn listen_error(addr: SocketAddr, e: TargetError) -> CdcError {
    match &e {
        TargetError::Io(io) if io.kind() == std::io::ErrorKind::AddrInUse => {
            CdcError::PortInUse { addr }
        }
        _ => CdcError::Listen {
            addr,
            reason: e.to_string(),
        },
    }
}
