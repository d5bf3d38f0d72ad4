//! Processor nodes: diskless nodes that own erasure-coded volumes whose members live on
//! storage nodes, and export each volume over NVMe/TCP from every processor node, with
//! one ANA group per volume (optimized on the owner, inaccessible elsewhere).
//!
//! - [`Processor::start`] claims the node's slot (its cntlid range), opens one
//!   `nvmf_target::Target` with its listeners, registers the node under a lease and
//!   follows `/ferrobay/volumes/`: every volume gets subsystem `volume_nqn(name)` with
//!   namespace 1 = an [`ExportDevice`] (inaccessible until owned).
//! - Ownership (`volume_task`): a standby acquires a volume whose owner record is gone
//!   (the handoff target and the preferred owner at once, others after a grace), then
//!   takes it over (`takeover`): connect the members with this node's host NQN, fence
//!   them with a reservation (`fence`), assemble (dirty-region resync),
//!   attach, ANA optimized, publish its status every second (`status`), put returning
//!   members back (`monitor`).
//! - Loss: the lease may be lost, or a member answered Reservation Conflict: ANA
//!   inaccessible at once, member I/O stopped, volume dropped without a write, back to
//!   standby (with a fresh lease).
//! - Handoff (`handoff`): `volume move` or [`Processor::shutdown`]: ANA change, drain,
//!   clean stop, release; the new owner needs no resync.
//! - Heartbeat (`heartbeat`): a standby keeps Keep Alive going to each owner node over
//!   NVMe/TCP; an owner declared dead has its records seized before its lease ends (the
//!   members' reservations fence it; the lease stays the arbiter of last resort).
//!
//! See the "Processor nodes" section of `docs/cluster.md`.

mod error;
mod export_device;
mod fence;
mod handoff;
mod heartbeat;
mod log_metrics;
mod member_ops;
mod members;
mod monitor;
mod node;
mod qos_events;
mod status;
mod takeover;
mod volume_task;
mod volumes;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use meta::schema::validate_name;
use meta::{LeaseId, LeaseState, MetaStore, wait_lost};
use nvmf_host::{ConnectOptions, HostIdentity};
use nvmf_target::{AnaState, ListenerHandle, Target, TargetConfig};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::ControlError;
use crate::api::{ApiConfig, ApiServer};
use crate::exports::subsystem_records;
use crate::records::{NodeRecord, NodeRole, cntlid_range, processor_hostnqn, reservation_key};
use crate::registration::{RecordFeed, Registration, claim_processor_slot, publish_record};

pub use error::ProcessorError;
pub use export_device::ExportDevice;
pub use fence::{FenceOutcome, fence_member, supports_reservations};
pub use members::member_connect_defaults;
pub use takeover::TakeoverReport;

/// How a processor node runs.
#[derive(Clone, Debug)]
pub struct ProcessorConfig {
    /// Node name (unique in the cluster): its host NQN, reservation key and slot.
    pub name: String,
    /// NVMe/TCP listeners hosts connect to (port 0 picks one).
    pub listen: Vec<SocketAddr>,
    /// NVMe/TCP listeners that require TLS 1.3 with a PSK, beside the plain ones: hosts
    /// given a TLS PSK for a volume (`crate::volume_auth`) must connect here.
    pub tls_listen: Vec<SocketAddr>,
    /// HTTP control API, if any.
    pub api_listen: Option<SocketAddr>,
    /// The bearer token the API requires; `None`: the cluster's token
    /// ([`crate::auth::cluster_token`]).
    pub api_token: Option<httpapi::auth::Token>,
    /// Serve the API over TLS with this certificate (`None`: plain HTTP).
    pub api_tls: Option<httpapi::tls::ServerTls>,
    /// Lease of the registration and of every ownership (default 4000 ms).
    pub lease_ttl_ms: u64,
    /// How the node connects to members (see [`member_connect_defaults`]).
    pub member_connect: ConnectOptions,
    /// Secure channel concatenation towards the members (needs `member_connect.dhchap`):
    /// authenticate on a storage node's plain listener, then reach the member over its
    /// TLS listener (from the node record) with the PSK that generated.
    pub member_concat: bool,
    /// Runtime knobs of assembled volumes.
    pub engine: volume::EngineOptions,
    /// How long a node that is neither the handoff target nor the preferred owner waits
    /// before claiming a free volume (default 1000 ms).
    pub standby_grace_ms: u64,
    /// How often volume records, owners and handoff requests are re-read (default 200 ms).
    pub poll_ms: u64,
    /// How often a standby sends Keep Alive to the owners of the volumes it stands by
    /// for, over one NVMe/TCP connection per owner node (default 100 ms).
    pub heartbeat_interval_ms: u64,
    /// Keep Alives in a row left unanswered before an owner is declared dead and its
    /// volumes are seized without waiting for its lease (default 3); a closed or refused
    /// connection declares it dead at once. 0: no heartbeats, failover by lease only.
    pub heartbeat_misses: u32,
    /// Longest wait for in-flight I/O at a handoff (default 5000 ms).
    pub drain_timeout_ms: u64,
    /// How often a `qos_throttling` event may be written per owned volume (default
    /// 60 000 ms).
    pub qos_event_interval_ms: u64,
    /// Busy polling of the export's connections and the member queues
    /// (`TargetConfig::busy_poll_us`, `ConnectOptions::busy_poll_us`); 0: event-driven.
    pub busy_poll_us: u32,
    /// Test seam: act as if cut off from the store (ignore the lease and the owner
    /// record); only fencing by the members stops this node. Never set in production.
    #[doc(hidden)]
    pub ignore_ownership_loss: bool,
    /// Member health grading (fail-slow against the other members of each volume).
    pub prediction: telemetry::PredictionConfig,
    /// When a failing member is copied onto a spare (`crate::health`).
    pub proactive: crate::health::ProactivePolicy,
}

impl ProcessorConfig {
    pub fn new(name: impl Into<String>) -> ProcessorConfig {
        let engine = volume::EngineOptions {
            member_timeout: Duration::from_secs(10),
            ..volume::EngineOptions::default()
        };
        ProcessorConfig {
            name: name.into(),
            listen: Vec::new(),
            tls_listen: Vec::new(),
            api_listen: None,
            api_token: None,
            api_tls: None,
            lease_ttl_ms: 4000,
            member_connect: member_connect_defaults(),
            member_concat: false,
            engine,
            standby_grace_ms: 1000,
            poll_ms: 200,
            heartbeat_interval_ms: 100,
            heartbeat_misses: 3,
            drain_timeout_ms: 5000,
            qos_event_interval_ms: 60_000,
            busy_poll_us: 0,
            ignore_ownership_loss: false,
            prediction: telemetry::PredictionConfig::default(),
            proactive: crate::health::ProactivePolicy::default(),
        }
    }
}

/// The current lease of the node, as the volume tasks see it.
#[derive(Clone, Debug)]
pub(crate) struct LeaseInfo {
    pub id: LeaseId,
    pub state: watch::Receiver<LeaseState>,
}

impl LeaseInfo {
    pub fn is_alive(&self) -> bool {
        matches!(*self.state.borrow(), LeaseState::Alive { .. })
    }
}

/// Members are sampled and graded this often.
const HEALTH_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// What every task of the node shares.
pub(crate) struct Ctx {
    pub name: String,
    pub store: Arc<dyn MetaStore>,
    pub cfg: ProcessorConfig,
    pub target: Target,
    pub ports: Vec<u16>,
    pub host: HostIdentity,
    pub key: u64,
    pub lease: watch::Sender<Option<LeaseInfo>>,
    /// Volumes owned now, with how the takeover went.
    pub owned: Arc<Mutex<BTreeMap<String, TakeoverReport>>>,
    /// Why the last takeover of a volume failed, until one succeeds.
    pub failures: Mutex<BTreeMap<String, String>>,
    /// Set by `shutdown`: owners hand over to a live standby.
    pub shutting_down: watch::Sender<bool>,
    /// The owned volumes' members: telemetry, grades, proactive copies.
    pub health: Arc<crate::health::HealthMonitor>,
    /// The QoS generation of each volume record applied to the target.
    pub qos_applied: Mutex<BTreeMap<String, u64>>,
    /// Liveness probes of the owners this node stands by for.
    pub heartbeats: heartbeat::Heartbeats,
}

impl Ctx {
    /// Sets `group`'s ANA state on every listener (each change raises the ANA change
    /// event on the controllers that see the group).
    pub fn set_ana(&self, group: u32, state: AnaState) {
        for &port in &self.ports {
            if let Err(e) = self.target.set_ana_state(port, group, state) {
                tracing::warn!(port, group, %state, "processor: ANA state not set: {e}");
            }
        }
    }

    pub fn poll(&self) -> Duration {
        Duration::from_millis(self.cfg.poll_ms.max(10))
    }

    pub fn owned_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, TakeoverReport>> {
        self.owned.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn failures_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn qos_applied_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.qos_applied.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running processor node.
pub struct Processor {
    ctx: Arc<Ctx>,
    slot: u16,
    /// The plain listeners, then the TLS ones.
    listeners: Vec<ListenerHandle>,
    api: Option<ApiServer>,
    volumes: Arc<volumes::Volumes>,
    volumes_task: JoinHandle<()>,
    health_task: JoinHandle<()>,
    qos_events_task: JoinHandle<()>,
    lease_task: Option<JoinHandle<()>>,
    lease_stop: watch::Sender<bool>,
    /// Raised by `POST /api/v1/node/upgrade` (docs/upgrade.md).
    upgrade: release::UpgradeSignal,
}

impl std::fmt::Debug for Processor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processor")
            .field("name", &self.ctx.name)
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl Processor {
    /// Starts the node: slot, target and listeners, registration, and the volumes found
    /// in the store (their subsystems exist when this returns; ownership follows in the
    /// background).
    pub async fn start(
        store: Arc<dyn MetaStore>,
        cfg: ProcessorConfig,
    ) -> Result<Processor, ControlError> {
        Ok(Processor::start_inner(store, cfg).await?)
    }

    async fn start_inner(
        store: Arc<dyn MetaStore>,
        cfg: ProcessorConfig,
    ) -> Result<Processor, ProcessorError> {
        validate_name(&cfg.name).map_err(|e| ProcessorError::Config(e.to_string()))?;
        if cfg.listen.is_empty() {
            return Err(ProcessorError::Config(
                "a processor node needs at least one listen address".into(),
            ));
        }
        if cfg.lease_ttl_ms < 500 {
            return Err(ProcessorError::Config(format!(
                "lease TTL {} ms is too short (at least 500)",
                cfg.lease_ttl_ms
            )));
        }
        let host = HostIdentity::from_hostnqn(&processor_hostnqn(&cfg.name))?;
        let slot = claim_processor_slot(store.as_ref(), &cfg.name).await?;
        let (cntlid_min, cntlid_max) = cntlid_range(slot);
        let target = Target::new(TargetConfig {
            cntlid_min,
            cntlid_max,
            busy_poll_us: cfg.busy_poll_us,
            ..TargetConfig::default()
        })?;
        let mut listeners = Vec::new();
        for (i, addr) in cfg.listen.iter().enumerate() {
            let role = format!("nvme{i}");
            listeners.push(
                target
                    .listen_as(Some(&role), *addr, nvmf_target::ListenerOptions::default())
                    .await?,
            );
        }
        for (i, addr) in cfg.tls_listen.iter().enumerate() {
            let role = format!("nvme-tls{i}");
            let opts = nvmf_target::ListenerOptions {
                tls: true,
                ..Default::default()
            };
            listeners.push(target.listen_as(Some(&role), *addr, opts).await?);
        }
        let ports: Vec<u16> = listeners.iter().map(ListenerHandle::port_id).collect();
        let owned: Arc<Mutex<BTreeMap<String, TakeoverReport>>> = Arc::default();
        let health = Arc::new(crate::health::HealthMonitor::new(
            cfg.prediction.clone(),
            cfg.proactive.clone(),
            telemetry::Retention::default(),
            Arc::new(telemetry::MonotonicClock::new()),
        ));
        let upgrade = release::UpgradeSignal::new();
        let api = match cfg.api_listen {
            Some(addr) => Some(
                ApiServer::start_tls(
                    addr,
                    ApiConfig {
                        store: store.clone(),
                        host: host.clone(),
                        token: match &cfg.api_token {
                            Some(t) => t.clone(),
                            None => crate::auth::cluster_token(store.as_ref())
                                .await
                                .map_err(|e| ProcessorError::Config(e.to_string()))?,
                        },
                        node_name: cfg.name.clone(),
                        metrics: Some(metrics_fn(
                            cfg.name.clone(),
                            owned.clone(),
                            health.clone(),
                            target.clone(),
                        )),
                        health: Some(health.clone()),
                        upgrade: Some(upgrade.clone()),
                    },
                    cfg.api_tls.clone(),
                )
                .await?,
            ),
            None => None,
        };
        let (tls, plain): (Vec<&ListenerHandle>, Vec<&ListenerHandle>) =
            listeners.iter().partition(|l| l.requires_tls());
        let mut record = NodeRecord::new(
            cfg.name.clone(),
            NodeRole::Processor,
            plain.iter().map(|l| l.local_addr()).collect(),
        );
        record.tls_addrs = tls.iter().map(|l| l.local_addr()).collect();
        record.api_addr = api.as_ref().map(ApiServer::local_addr);
        record.slot = Some(slot);
        record.started_unix_ms = crate::events::now_unix_ms();
        // The record lists the volume subsystems as they are exported (and access lists
        // as they change), for the central discovery controller.
        let exporter = target.clone();
        let feed = RecordFeed::following(&target, move || {
            let mut r = record.clone();
            r.subsystems = subsystem_records(&exporter);
            r
        });
        let registration = node::register(&store, &feed.current(), cfg.lease_ttl_ms).await?;
        let ctx = Arc::new(Ctx {
            health: health.clone(),
            name: cfg.name.clone(),
            key: reservation_key(&cfg.name),
            store,
            cfg,
            target,
            ports,
            host,
            lease: watch::Sender::new(None),
            owned,
            failures: Mutex::default(),
            shutting_down: watch::Sender::new(false),
            qos_applied: Mutex::default(),
            heartbeats: heartbeat::Heartbeats::default(),
        });
        let (lease_stop, stop_rx) = watch::channel(false);
        let lease_task = tokio::spawn(lease_loop(ctx.clone(), registration, feed, stop_rx));
        let volumes = Arc::new(volumes::Volumes::default());
        volumes::sync(&ctx, &volumes).await;
        let volumes_task = tokio::spawn(volumes::run(ctx.clone(), volumes.clone()));
        let events_store = ctx.store.clone();
        let node_name = ctx.name.clone();
        let health_task = tokio::spawn(async move {
            let mut every = tokio::time::interval(HEALTH_SAMPLE_INTERVAL);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                every.tick().await;
                for e in health.tick().await {
                    crate::events::spawn_emit(
                        events_store.clone(),
                        crate::health::to_event(&node_name, &e),
                    );
                }
            }
        });
        let qos_events_task = tokio::spawn(qos_events::run(ctx.clone()));
        tracing::info!(
            node = %ctx.name,
            slot,
            addrs = ?listeners.iter().map(ListenerHandle::local_addr).collect::<Vec<_>>(),
            "processor node started"
        );
        Ok(Processor {
            ctx,
            slot,
            listeners,
            api,
            volumes,
            volumes_task,
            health_task,
            qos_events_task,
            lease_task: Some(lease_task),
            lease_stop,
            upgrade,
        })
    }

    /// Where an upgrade request arrives; the daemon waits on it next to its stop signal.
    pub fn upgrade_signal(&self) -> &release::UpgradeSignal {
        &self.upgrade
    }

    pub fn name(&self) -> &str {
        &self.ctx.name
    }

    /// The owned volumes' member health: grades, series, events (for the API).
    pub fn health(&self) -> &Arc<crate::health::HealthMonitor> {
        &self.ctx.health
    }

    /// The slot that fixes this node's controller ID range.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The plain NVMe/TCP listeners' addresses (with the ports actually bound).
    pub fn nvme_addrs(&self) -> Vec<SocketAddr> {
        self.listener_addrs(false)
    }

    /// The addresses of the listeners that require TLS (`ProcessorConfig::tls_listen`).
    pub fn tls_addrs(&self) -> Vec<SocketAddr> {
        self.listener_addrs(true)
    }

    fn listener_addrs(&self, tls: bool) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter(|l| l.requires_tls() == tls)
            .map(ListenerHandle::local_addr)
            .collect()
    }

    /// The HTTP API's address (with the port actually bound), if it serves one.
    pub fn api_addr(&self) -> Option<SocketAddr> {
        self.api.as_ref().map(ApiServer::local_addr)
    }

    /// Volumes this node owns now, by name.
    pub fn owned_volumes(&self) -> Vec<String> {
        self.ctx.owned_lock().keys().cloned().collect()
    }

    /// How the takeover of an owned volume went.
    pub fn takeover_report(&self, volume: &str) -> Option<TakeoverReport> {
        self.ctx.owned_lock().get(volume).cloned()
    }

    /// Why this node's last attempt to take `volume` over failed (e.g. too few members
    /// answer), until an attempt succeeds.
    pub fn takeover_failure(&self, volume: &str) -> Option<String> {
        self.ctx.failures_lock().get(volume).cloned()
    }

    /// The generation of `volume`'s QoS limits (its record's `qos.generation`) in force
    /// on this node's target, once the volume is exported.
    pub fn qos_generation(&self, volume: &str) -> Option<u64> {
        self.ctx.qos_applied_lock().get(volume).copied()
    }

    /// The node's current lease, if it holds one.
    pub fn lease_id(&self) -> Option<LeaseId> {
        self.ctx.lease.borrow().as_ref().map(|l| l.id)
    }

    /// The ANA state of `group` on each listener, in `nvme_addrs` order, then the TLS
    /// listeners in `tls_addrs` order.
    pub fn ana_states(&self, group: u32) -> Vec<AnaState> {
        self.ctx
            .ports
            .iter()
            .filter_map(|&p| self.ctx.target.ana_state(p, group))
            .collect()
    }

    /// The NVMe/TCP target (ANA states, controllers, statistics).
    pub fn target(&self) -> &Target {
        &self.ctx.target
    }

    /// Stops the node cleanly: each owned volume is handed over to a live standby
    /// processor node if there is one (it takes over without resync), else stopped clean;
    /// then the lease is revoked (the node record goes) and the listeners close.
    pub async fn shutdown(mut self) -> Result<(), ControlError> {
        self.ctx.shutting_down.send_replace(true);
        self.volumes_task.abort();
        self.health_task.abort();
        self.qos_events_task.abort();
        volumes::stop_all(&self.ctx, &self.volumes).await;
        self.lease_stop.send_replace(true);
        if let Some(t) = self.lease_task.take() {
            let _ = t.await;
        }
        if let Some(api) = self.api.take() {
            api.stop().await;
        }
        self.close_target().await;
        tracing::info!(node = %self.ctx.name, "processor node stopped");
        Ok(())
    }

    /// Stops the node as a crash would: no handoff, no clean stop, no write to any
    /// member, the lease left to expire, every connection of its target ended (as the
    /// kernel ends a dead process's: hosts and heartbeats see it at once). For tests and
    /// for a fatal error.
    pub fn kill(mut self) {
        self.kill_now();
    }

    fn kill_now(&mut self) {
        self.volumes_task.abort();
        self.health_task.abort();
        self.qos_events_task.abort();
        volumes::abort_all(&self.ctx, &self.volumes);
        if let Some(t) = self.lease_task.take() {
            t.abort();
        }
        for nqn in self.ctx.target.subsystems() {
            let _ = self.ctx.target.remove_subsystem(&nqn);
        }
        for l in &self.listeners {
            l.close();
        }
        // As a dead process's sockets: hosts and heartbeats see the connections end.
        self.ctx.target.close_connections();
    }

    async fn close_target(&self) {
        for nqn in self.ctx.target.subsystems() {
            let _ = self.ctx.target.remove_subsystem(&nqn);
        }
        for l in &self.listeners {
            l.close();
        }
        self.ctx.target.shutdown(Duration::from_secs(2)).await;
    }
}

impl Drop for Processor {
    fn drop(&mut self) {
        // Dropped without shutdown: like a crash (the lease expires on its own).
        if self.lease_task.is_some() {
            self.kill_now();
        }
    }
}

/// Keeps the node registered: on a lost lease every volume task sees `None` (and goes
/// standby); a fresh lease and node record follow. The record is rewritten whenever the
/// node's exports change.
async fn lease_loop(
    ctx: Arc<Ctx>,
    mut reg: Registration,
    mut feed: RecordFeed,
    mut stop: watch::Receiver<bool>,
) {
    let mut unpublished: Option<NodeRecord> = None;
    loop {
        ctx.lease.send_replace(Some(LeaseInfo {
            id: reg.lease_id(),
            state: reg.subscribe(),
        }));
        let ignore = ctx.cfg.ignore_ownership_loss;
        loop {
            tokio::select! {
                reason = wait_lost(reg.subscribe()), if !ignore => {
                    tracing::warn!(node = %ctx.name, ?reason, "processor: lease lost; volumes go standby");
                    break;
                }
                () = stopped(&mut stop) => {
                    ctx.lease.send_replace(None);
                    reg.stop().await;
                    return;
                }
                record = feed.changed() => {
                    unpublished = publish_record(ctx.store.as_ref(), &mut reg, record).await;
                }
                () = tokio::time::sleep(node::REPUBLISH_DELAY), if unpublished.is_some() => {
                    if let Some(record) = unpublished.take() {
                        unpublished = publish_record(ctx.store.as_ref(), &mut reg, record).await;
                    }
                }
            }
        }
        ctx.lease.send_replace(None);
        unpublished = None;
        drop(reg);
        reg = loop {
            tokio::select! {
                () = tokio::time::sleep(node::REREGISTER_DELAY) => {}
                () = stopped(&mut stop) => return,
            }
            match node::register(&ctx.store, &feed.current(), ctx.cfg.lease_ttl_ms).await {
                Ok(r) => break r,
                Err(e) => tracing::warn!(node = %ctx.name, "processor: registration failed: {e}"),
            }
        };
        tracing::info!(node = %ctx.name, "processor: registered again with a fresh lease");
    }
}

/// The node's own families of `/metrics`.
fn metrics_fn(
    node: String,
    owned: Arc<Mutex<BTreeMap<String, TakeoverReport>>>,
    health: Arc<crate::health::HealthMonitor>,
    target: Target,
) -> crate::api::MetricsFn {
    Arc::new(move |page: &mut httpapi::metrics::Page| {
        health.add_metrics(page, &node);
        storage_node::http::qos_metrics::add_qos_families(page, &node, &target.qos_stats());
        // The volumes as hosts see them through this node (throughput, latency: what the
        // dashboard charts), named like a storage node's namespaces.
        storage_node::http::metrics::namespace_families(page, &node, &target.stats().namespaces);
        // The log layout's figures of the owned volumes that have one.
        let logs: Vec<(String, volume::LogStatus)> = health
            .watched()
            .into_iter()
            .filter_map(|(name, v)| v.log().map(|l| (name, l.status())))
            .collect();
        log_metrics::add_log_families(page, &node, &logs);
        let owned = owned.lock().unwrap_or_else(|p| p.into_inner());
        page.gauge(
            "ferrobay_processor_owned_volumes",
            "Volumes this processor node owns now.",
        )
        .add(&[("node", &node)], owned.len() as u64);
        let took = page.gauge(
            "ferrobay_processor_takeover_seconds",
            "How long the takeover of an owned volume took, from ownership acquired to ANA optimized.",
        );
        for (v, r) in owned.iter() {
            let epoch = r.epoch.to_string();
            took.add_f64(
                &[("node", &node), ("volume", v), ("epoch", &epoch)],
                r.took_ms as f64 / 1000.0,
            );
        }
        let resync = page.gauge(
            "ferrobay_processor_takeover_resync_bytes",
            "Volume bytes in the dirty regions the takeover of an owned volume resynced.",
        );
        for (v, r) in owned.iter() {
            resync.add(&[("node", &node), ("volume", v)], r.resync_bytes);
        }
    })
}

/// Resolves once `stop` says true (or its sender is gone), without keeping a borrow.
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}
