//! The target: the registry of subsystems, namespaces, listeners and connections, and the
//! management API the node layer drives. [`Target`] is the one facade; its methods live
//! with what they manage:
//! - `subsystems`: NVM subsystems and their access lists
//! - `namespaces`: namespaces and their attachment to hosts
//! - `listener`: listeners (ports) and the ANA state of each group through them
//! - `accept`: the accept loop that starts a connection task per accepted socket
//! - `admission`: connection limits at accept, handshake-timeout bookkeeping
//! - `connections`: the registry of live connections, shutdown
//! - `referrals`: discovery referrals and the discovery log generation
//! - `discovery`: entries from a [`crate::DiscoveryLogSource`], change notifications
//! - `health`: SMART counters and the metrics snapshot
//! - `qos`: QoS limits, the QoS clock and statistics, the contention controller's task

mod accept;
mod admission;
mod connections;
mod discovery;
mod health;
mod listener;
mod namespaces;
mod qos;
mod referrals;
mod subsystems;
mod tls;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use nvme_proto::fabrics::{DISCOVERY_NQN, validate_nqn};

use crate::TargetError;
use crate::config::TargetConfig;
use crate::discovery_source::DiscoveryLogSource;
use crate::ext_telemetry::TelemetrySource;
use crate::media_health::{MediaHealth, MediaHealthSource};
use crate::ns_manager::NamespaceManager;
use crate::resv_api::{Reservations, ReservationsFactory};
use crate::stats::HealthCounters;
use crate::subsystem::{Access, SubsysKind, Subsystem};
use crate::sync::{lock, read, write};

use admission::Admission;
use connections::ConnRegistry;
pub(crate) use listener::ListenerInfo;
pub use listener::{ListenerHandle, ListenerOptions};
pub use qos::QOS_CONTROL_PERIOD;
pub use subsystems::SubsystemAccess;

pub(crate) struct TargetInner {
    pub config: TargetConfig,
    pub subsystems: RwLock<BTreeMap<String, Arc<Subsystem>>>,
    pub discovery: Arc<Subsystem>,
    pub listeners: Mutex<Vec<Arc<ListenerInfo>>>,
    next_portid: AtomicU64,
    next_cntlid: Mutex<u16>,
    pub ns_manager: RwLock<Option<Arc<dyn NamespaceManager>>>,
    media_health: RwLock<Option<Arc<dyn MediaHealthSource>>>,
    telemetry: RwLock<Option<Arc<dyn TelemetrySource>>>,
    resv_factory: RwLock<Arc<ReservationsFactory>>,
    pub discovery_genctr: AtomicU64,
    /// Entries the discovery log shows beyond this target's own (a central discovery
    /// controller's cluster view).
    pub discovery_source: RwLock<Option<Arc<dyn DiscoveryLogSource>>>,
    /// The discovery generation, for whoever follows changes of what the target exports
    /// (subsystems, access lists, listeners, referrals).
    pub discovery_changes: tokio::sync::watch::Sender<u64>,
    /// Other discovery services this one refers hosts to (discovery log referral entries).
    pub referrals: Mutex<Vec<SocketAddr>>,
    pub conns: ConnRegistry,
    /// Connection limits and handshake timeouts: counters and warning throttles.
    pub admission: Admission,
    pub health: HealthCounters,
    pub started: Instant,
    pub shutting_down: AtomicBool,
    pub subsystem_serial_seq: AtomicU64,
    /// Times a connection polled again instead of sleeping (`busy_poll_us`).
    pub busy_poll_turns: AtomicU64,
    /// QoS limits, contention caps and the QoS clock.
    pub qos: crate::qos::registry::QosRegistry,
    /// The contention controller, while any minimum is configured.
    pub qos_controller: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl TargetInner {
    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        if nqn == DISCOVERY_NQN {
            return Some(self.discovery.clone());
        }
        read(&self.subsystems).get(nqn).cloned()
    }

    /// Picks a free controller ID in the configured range for `subsys`.
    pub fn alloc_cntlid(&self, subsys: &Subsystem) -> Option<u16> {
        let (lo, hi) = (self.config.cntlid_min, self.config.cntlid_max);
        let mut next = lock(&self.next_cntlid);
        let used: BTreeSet<u16> = {
            let mut g = lock(&subsys.controllers);
            g.retain(|_, w| w.strong_count() > 0);
            g.keys().copied().collect()
        };
        let span = u32::from(hi - lo) + 1;
        for _ in 0..span {
            let c = if *next < lo || *next > hi { lo } else { *next };
            *next = if c >= hi { lo } else { c + 1 };
            if !used.contains(&c) {
                return Some(c);
            }
        }
        None
    }

    /// Bumps the discovery generation and tells discovery controllers.
    pub fn discovery_log_changed(&self) {
        let generation = self.discovery_genctr.fetch_add(1, Ordering::AcqRel) + 1;
        self.discovery_changes.send_replace(generation);
        for c in self.discovery.live_controllers() {
            c.discovery_changed();
        }
    }

    /// The drives' own reading for subsystem `subnqn` (not reported without a source).
    pub fn media_health(&self, subnqn: &str) -> MediaHealth {
        let source = read(&self.media_health).clone();
        source.map_or_else(MediaHealth::default, |s| s.media_health(subnqn))
    }

    /// The extended SMART page of subsystem `subsys` (all namespaces, or `nsid`).
    pub fn ext_smart(&self, subsys: &Subsystem, nsid: Option<u32>) -> nvme_proto::log::ExtSmartLog {
        let source = read(&self.telemetry).clone();
        match source {
            Some(s) => s.ext_smart(&subsys.nqn, nsid),
            None => crate::ext_telemetry::own_records(
                subsys,
                nsid,
                u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            ),
        }
    }

    pub fn new_reservations(&self, nqn: &str, nsid: u32) -> Arc<dyn Reservations> {
        let f = read(&self.resv_factory).clone();
        f(nqn, nsid)
    }
}

/// The NVMe/TCP target. Cheap to clone; all clones drive the same target.
#[derive(Clone)]
pub struct Target {
    pub(crate) inner: Arc<TargetInner>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").finish_non_exhaustive()
    }
}

fn check_nqn(nqn: &str) -> Result<(), TargetError> {
    validate_nqn(nqn).map_err(|e| TargetError::InvalidNqn {
        nqn: nqn.to_string(),
        reason: e.to_string(),
    })
}

impl Target {
    /// A target with no subsystems and no listeners.
    pub fn new(config: TargetConfig) -> Result<Target, TargetError> {
        config.validate()?;
        let discovery = Arc::new(Subsystem::new(
            DISCOVERY_NQN.to_string(),
            format!("{}DISC", config.serial_prefix),
            "Ferrobay Discovery".to_string(),
            SubsysKind::Discovery,
            Access {
                allow_any: true,
                hosts: BTreeSet::new(),
            },
        ));
        // Reservations work out of the box (in memory); the node layer installs a factory
        // with a persistent store for Persist Through Power Loss.
        let default_factory: Arc<ReservationsFactory> = Arc::new(|_: &str, _: u32| {
            Arc::new(crate::reservation::ReservationState::default()) as Arc<dyn Reservations>
        });
        Ok(Target {
            inner: Arc::new(TargetInner {
                next_cntlid: Mutex::new(config.cntlid_min),
                config,
                subsystems: RwLock::new(BTreeMap::new()),
                discovery,
                listeners: Mutex::new(Vec::new()),
                next_portid: AtomicU64::new(1),
                ns_manager: RwLock::new(None),
                media_health: RwLock::new(None),
                telemetry: RwLock::new(None),
                resv_factory: RwLock::new(default_factory),
                discovery_genctr: AtomicU64::new(1),
                discovery_source: RwLock::new(None),
                discovery_changes: tokio::sync::watch::Sender::new(1),
                referrals: Mutex::new(Vec::new()),
                conns: ConnRegistry::default(),
                admission: Admission::default(),
                health: HealthCounters::default(),
                started: Instant::now(),
                shutting_down: AtomicBool::new(false),
                subsystem_serial_seq: AtomicU64::new(1),
                busy_poll_turns: AtomicU64::new(0),
                qos: Default::default(),
                qos_controller: Mutex::new(None),
            }),
        })
    }

    pub fn config(&self) -> &TargetConfig {
        &self.inner.config
    }

    /// Installs the handler of Namespace Management / Attachment commands.
    pub fn set_namespace_manager(&self, m: Arc<dyn NamespaceManager>) {
        *write(&self.inner.ns_manager) = Some(m);
    }

    /// Installs where the SMART log's temperature and spare come from (without one they
    /// are not reported).
    pub fn set_media_health_source(&self, s: Arc<dyn MediaHealthSource>) {
        *write(&self.inner.media_health) = Some(s);
    }

    /// Installs where the extended SMART and telemetry log pages get their records
    /// (without one: the target's own namespace counters).
    pub fn set_telemetry_source(&self, s: Arc<dyn TelemetrySource>) {
        *write(&self.inner.telemetry) = Some(s);
    }

    /// Sets how namespaces without an explicit reservation object get one.
    pub fn set_reservations_factory(
        &self,
        f: impl Fn(&str, u32) -> Arc<dyn Reservations> + Send + Sync + 'static,
    ) {
        *write(&self.inner.resv_factory) = Arc::new(f);
    }
}
