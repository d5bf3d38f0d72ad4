//! The target: registry of subsystems, namespaces, listeners and connections, and the
//! management API the node layer drives.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use nvme_proto::fabrics::{DISCOVERY_NQN, validate_nqn};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::TargetError;
use crate::ana::{ANA_MAX_GROUPS, AnaState, ListenerAna, ana_limits};
use crate::cmd::identify::MAX_NAMESPACES;
use crate::config::{NamespaceConfig, SubsystemConfig, TargetConfig};
use crate::namespace::{Attachment, CommandSet, Namespace, NamespaceInfo};
use crate::ns_manager::NamespaceManager;
use crate::resv_api::{Reservations, ReservationsFactory};
use crate::stats::{
    HealthCounters, HealthSnapshot, NamespaceStats, PersistentHealth, TargetStats, data_units,
};
use crate::subsystem::{Access, SubsysKind, Subsystem};
use crate::sync::{lock, read, write};
use crate::transport::handle::ConnHandle;

/// What a listener serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerOptions {
    /// Serve only the discovery subsystem here (e.g. port 8009) and leave this listener out
    /// of discovery log entries.
    pub discovery_only: bool,
}

pub(crate) struct ListenerInfo {
    pub portid: u16,
    pub addr: SocketAddr,
    pub opts: ListenerOptions,
    pub stop: Notify,
    pub stopped: AtomicBool,
    /// ANA state of each group through this port.
    pub ana: ListenerAna,
}

impl ListenerInfo {
    pub fn new(portid: u16, addr: SocketAddr, opts: ListenerOptions) -> ListenerInfo {
        ListenerInfo {
            portid,
            addr,
            opts,
            stop: Notify::new(),
            stopped: AtomicBool::new(false),
            ana: ListenerAna::default(),
        }
    }
}

/// A bound listener. Dropping it keeps listening; call [`ListenerHandle::close`] to stop.
#[derive(Clone)]
pub struct ListenerHandle {
    info: Arc<ListenerInfo>,
    target: Target,
}

impl ListenerHandle {
    /// The bound address (with the real port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.info.addr
    }
    /// The port ID reported in discovery log entries.
    pub fn port_id(&self) -> u16 {
        self.info.portid
    }
    /// Sets the ANA state of `group` (1..=[`crate::ANA_MAX_GROUPS`]) on this listener;
    /// its controllers with a namespace of that group get an ANA change event.
    pub fn set_ana_state(&self, group: u32, state: AnaState) -> Result<(), TargetError> {
        self.target.set_listener_ana(&self.info, group, state)
    }

    /// The ANA state of `group` on this listener (optimized unless set).
    pub fn ana_state(&self, group: u32) -> AnaState {
        self.info.ana.state(group)
    }

    /// Stops accepting on this listener (established connections stay).
    pub fn close(&self) {
        self.info.stopped.store(true, Ordering::Release);
        self.info.stop.notify_one();
        lock(&self.target.inner.listeners).retain(|l| !Arc::ptr_eq(l, &self.info));
        self.target.inner.discovery_log_changed();
    }
}

pub(crate) struct TargetInner {
    pub config: TargetConfig,
    pub subsystems: RwLock<BTreeMap<String, Arc<Subsystem>>>,
    pub discovery: Arc<Subsystem>,
    pub listeners: Mutex<Vec<Arc<ListenerInfo>>>,
    next_portid: AtomicU64,
    next_cntlid: Mutex<u16>,
    pub ns_manager: RwLock<Option<Arc<dyn NamespaceManager>>>,
    resv_factory: RwLock<Arc<ReservationsFactory>>,
    pub discovery_genctr: AtomicU64,
    /// Other discovery services this one refers hosts to (discovery log referral entries).
    pub referrals: Mutex<Vec<SocketAddr>>,
    pub conns: Mutex<HashMap<u64, Arc<ConnHandle>>>,
    next_conn_id: AtomicU64,
    pub live_conns: AtomicUsize,
    pub conns_gone: Notify,
    pub health: HealthCounters,
    pub started: Instant,
    pub shutting_down: AtomicBool,
    pub subsystem_serial_seq: AtomicU64,
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
        self.discovery_genctr.fetch_add(1, Ordering::AcqRel);
        for c in self.discovery.live_controllers() {
            c.discovery_changed();
        }
    }

    pub fn register_conn(&self, peer: String, local: String) -> Arc<ConnHandle> {
        let id = self.next_conn_id.fetch_add(1, Ordering::Relaxed);
        let h = Arc::new(ConnHandle::new(id, peer, local));
        lock(&self.conns).insert(id, h.clone());
        self.live_conns.fetch_add(1, Ordering::AcqRel);
        h
    }

    pub fn unregister_conn(&self, h: &ConnHandle) {
        lock(&self.conns).remove(&h.id);
        let busy = h.counters.busy_us.load(Ordering::Relaxed);
        self.health
            .closed_busy_us
            .fetch_add(busy, Ordering::Relaxed);
        if self.live_conns.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.conns_gone.notify_waiters();
        }
    }

    pub fn new_reservations(&self, nqn: &str, nsid: u32) -> Arc<dyn Reservations> {
        let f = read(&self.resv_factory).clone();
        f(nqn, nsid)
    }

    pub fn health_snapshot(&self) -> HealthSnapshot {
        let h = &self.health;
        let (mut rb, mut wb, mut ro, mut wo) = (
            h.removed_read_bytes.load(Ordering::Relaxed),
            h.removed_write_bytes.load(Ordering::Relaxed),
            h.removed_read_ops.load(Ordering::Relaxed),
            h.removed_write_ops.load(Ordering::Relaxed),
        );
        for s in read(&self.subsystems).values() {
            for ns in s.namespaces() {
                let c = ns.counters.snapshot();
                rb += c.read_bytes;
                wb += c.write_bytes;
                ro += c.read_ops;
                wo += c.write_ops;
            }
        }
        let mut busy_us = h.closed_busy_us.load(Ordering::Relaxed);
        for c in lock(&self.conns).values() {
            busy_us += c.counters.busy_us.load(Ordering::Relaxed);
        }
        let uptime_hours = self.started.elapsed().as_secs() / 3600;
        HealthSnapshot {
            data_units_read: data_units(rb),
            data_units_written: data_units(wb),
            host_read_commands: ro,
            host_write_commands: wo,
            controller_busy_minutes: busy_us / 60_000_000,
            power_cycles: h.power_cycles.load(Ordering::Relaxed),
            power_on_hours: h.power_on_hours_base.load(Ordering::Relaxed) + uptime_hours,
            unsafe_shutdowns: h.unsafe_shutdowns.load(Ordering::Relaxed),
            media_errors: h.media_errors.load(Ordering::Relaxed),
            error_log_entries: h.error_log_entries.load(Ordering::Relaxed),
        }
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
                resv_factory: RwLock::new(default_factory),
                discovery_genctr: AtomicU64::new(1),
                referrals: Mutex::new(Vec::new()),
                conns: Mutex::new(HashMap::new()),
                next_conn_id: AtomicU64::new(1),
                live_conns: AtomicUsize::new(0),
                conns_gone: Notify::new(),
                health: HealthCounters::default(),
                started: Instant::now(),
                shutting_down: AtomicBool::new(false),
                subsystem_serial_seq: AtomicU64::new(1),
            }),
        })
    }

    pub fn config(&self) -> &TargetConfig {
        &self.inner.config
    }

    // ---- subsystems ----

    /// Adds an NVM subsystem.
    pub fn add_subsystem(&self, cfg: SubsystemConfig) -> Result<(), TargetError> {
        check_nqn(&cfg.nqn)?;
        if cfg.nqn == DISCOVERY_NQN {
            return Err(TargetError::SubsystemExists(cfg.nqn));
        }
        for h in &cfg.allowed_hosts {
            check_nqn(h)?;
        }
        let serial = if cfg.serial.is_empty() {
            let seq = self
                .inner
                .subsystem_serial_seq
                .fetch_add(1, Ordering::Relaxed);
            format!("{}{:08X}", self.inner.config.serial_prefix, seq)
        } else {
            cfg.serial.clone()
        };
        if serial.len() > 20 || !serial.is_ascii() {
            return Err(TargetError::InvalidConfig(
                "serial must be ≤ 20 ASCII characters",
            ));
        }
        let model = if cfg.model.is_empty() {
            self.inner.config.model.clone()
        } else {
            cfg.model.clone()
        };
        {
            let mut subs = write(&self.inner.subsystems);
            if subs.contains_key(&cfg.nqn) {
                return Err(TargetError::SubsystemExists(cfg.nqn));
            }
            let s = Subsystem::new(
                cfg.nqn.clone(),
                serial,
                model,
                SubsysKind::Nvm,
                Access {
                    allow_any: cfg.allow_any_host,
                    hosts: cfg.allowed_hosts.iter().cloned().collect(),
                },
            );
            subs.insert(cfg.nqn.clone(), Arc::new(s));
        }
        self.inner.discovery_log_changed();
        Ok(())
    }

    /// Removes a subsystem; its controllers are torn down.
    pub fn remove_subsystem(&self, nqn: &str) -> Result<(), TargetError> {
        let s = write(&self.inner.subsystems)
            .remove(nqn)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        s.removed.store(true, Ordering::Release);
        for c in s.live_controllers() {
            c.kill();
        }
        for ns in s.namespaces() {
            self.account_removed(&ns);
        }
        self.inner.discovery_log_changed();
        Ok(())
    }

    /// Replaces the access list of a subsystem. Controllers of hosts no longer allowed are
    /// torn down.
    pub fn set_allowed_hosts(
        &self,
        nqn: &str,
        allow_any_host: bool,
        hosts: &[String],
    ) -> Result<(), TargetError> {
        for h in hosts {
            check_nqn(h)?;
        }
        let s = self
            .inner
            .subsystem(nqn)
            .filter(|s| s.kind == SubsysKind::Nvm)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        s.set_access(Access {
            allow_any: allow_any_host,
            hosts: hosts.iter().cloned().collect(),
        });
        for c in s.live_controllers() {
            if !s.host_allowed(&c.hostnqn) {
                c.kill();
            }
        }
        self.inner.discovery_log_changed();
        Ok(())
    }

    /// NQNs of the NVM subsystems.
    pub fn subsystems(&self) -> Vec<String> {
        read(&self.inner.subsystems).keys().cloned().collect()
    }

    // ---- namespaces ----

    /// Adds a namespace and returns its NSID. Attached controllers get a
    /// namespace-attribute-changed event.
    pub fn add_namespace(&self, nqn: &str, cfg: NamespaceConfig) -> Result<u32, TargetError> {
        let s = self
            .inner
            .subsystem(nqn)
            .filter(|s| s.kind == SubsysKind::Nvm)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        let bs = cfg.block_size_bytes;
        if bs != 512 && bs != 4096 {
            return Err(TargetError::InvalidNamespace(
                "block size must be 512 or 4096".into(),
            ));
        }
        let info = cfg.device.info();
        if !bs.is_multiple_of(info.logical_block_bytes.max(1)) {
            return Err(TargetError::InvalidNamespace(format!(
                "block size {bs} is not a multiple of the device's {}",
                info.logical_block_bytes
            )));
        }
        if cfg.size_bytes == 0 || !cfg.size_bytes.is_multiple_of(u64::from(bs)) {
            return Err(TargetError::InvalidNamespace(
                "size must be a non-zero multiple of the block size".into(),
            ));
        }
        if !cfg
            .offset_bytes
            .is_multiple_of(u64::from(info.logical_block_bytes.max(1)))
        {
            return Err(TargetError::InvalidNamespace(
                "offset must be aligned to the device block".into(),
            ));
        }
        match cfg.offset_bytes.checked_add(cfg.size_bytes) {
            Some(end) if end <= info.size_bytes => {}
            _ => {
                return Err(TargetError::InvalidNamespace(
                    "range exceeds the device".into(),
                ));
            }
        }
        if !(1..=ANA_MAX_GROUPS).contains(&cfg.ana_group) {
            return Err(TargetError::InvalidNamespace(format!(
                "ANA group {} is not in 1..={ANA_MAX_GROUPS}",
                cfg.ana_group
            )));
        }
        let (_, mnan) = ana_limits(self.inner.config.mdts_bytes, MAX_NAMESPACES);
        let nsid = {
            let mut map = write(&s.namespaces);
            if map.len() >= mnan as usize {
                return Err(TargetError::InvalidNamespace(format!(
                    "{nqn} already has the most namespaces the target reports (MNAN {mnan})"
                )));
            }
            let nsid = if cfg.nsid == 0 {
                (1..u32::MAX)
                    .find(|n| !map.contains_key(n))
                    .ok_or_else(|| TargetError::NoFreeNsid(nqn.to_string()))?
            } else {
                cfg.nsid
            };
            if nsid == 0 || nsid == u32::MAX {
                return Err(TargetError::InvalidNamespace(
                    "NSID must be in 1..0xFFFFFFFF".into(),
                ));
            }
            if map.contains_key(&nsid) {
                return Err(TargetError::NamespaceExists {
                    nqn: nqn.to_string(),
                    nsid,
                });
            }
            let reservations = cfg
                .reservations
                .clone()
                .unwrap_or_else(|| self.inner.new_reservations(nqn, nsid));
            let ns = Namespace {
                nsid,
                command_set: CommandSet::Nvm,
                device: cfg.device.clone(),
                offset_bytes: cfg.offset_bytes,
                size_bytes: cfg.size_bytes,
                block_size_bytes: bs,
                lba_shift: bs.trailing_zeros(),
                blocks: cfg.size_bytes / u64::from(bs),
                nguid: cfg.nguid,
                eui64: cfg.eui64,
                uuid: cfg.uuid,
                reservations,
                attachment: RwLock::new(if cfg.attached {
                    Attachment::all()
                } else {
                    Attachment::none()
                }),
                counters: Default::default(),
                ana_group: cfg.ana_group,
                inflight: Default::default(),
            };
            map.insert(nsid, Arc::new(ns));
            nsid
        };
        s.bump_ns_generation();
        if cfg.attached {
            for c in s.live_controllers() {
                c.namespace_changed(nsid);
            }
        }
        Ok(nsid)
    }

    /// Removes a namespace; controllers it was attached to get a namespace-attribute event.
    pub fn remove_namespace(&self, nqn: &str, nsid: u32) -> Result<(), TargetError> {
        let s = self
            .inner
            .subsystem(nqn)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        let ns = write(&s.namespaces)
            .remove(&nsid)
            .ok_or(TargetError::NoSuchNamespace {
                nqn: nqn.to_string(),
                nsid,
            })?;
        s.bump_ns_generation();
        self.account_removed(&ns);
        for c in s.live_controllers() {
            if ns.is_attached_to(&c.hostnqn) {
                c.namespace_changed(nsid);
            }
        }
        Ok(())
    }

    fn account_removed(&self, ns: &Namespace) {
        let c = ns.counters.snapshot();
        let h = &self.inner.health;
        h.removed_read_bytes
            .fetch_add(c.read_bytes, Ordering::Relaxed);
        h.removed_write_bytes
            .fetch_add(c.write_bytes, Ordering::Relaxed);
        h.removed_read_ops.fetch_add(c.read_ops, Ordering::Relaxed);
        h.removed_write_ops
            .fetch_add(c.write_ops, Ordering::Relaxed);
    }

    /// The namespaces of a subsystem.
    pub fn namespaces(&self, nqn: &str) -> Result<Vec<NamespaceInfo>, TargetError> {
        let s = self
            .inner
            .subsystem(nqn)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        Ok(s.namespaces().iter().map(|ns| ns.info(nqn)).collect())
    }

    /// Sets which controllers a namespace is attached to (for restoring persisted state);
    /// controllers that gain or lose it get a namespace-attribute event.
    pub fn set_namespace_attachment(
        &self,
        nqn: &str,
        nsid: u32,
        attachment: Attachment,
    ) -> Result<(), TargetError> {
        let (s, ns) = self.ns_of(nqn, nsid)?;
        let before = ns.attachment();
        ns.set_attachment(attachment.clone());
        s.bump_ns_generation();
        for c in s.live_controllers() {
            if before.contains(&c.hostnqn) != attachment.contains(&c.hostnqn) {
                c.namespace_changed(nsid);
            }
        }
        Ok(())
    }

    /// Attaches a namespace to the hosts of the given controllers (Namespace Attachment
    /// semantics for dynamic controllers: the host keeps it across reconnects). Returns the
    /// new attachment. Errors: unknown controller → `Err(Status::CONTROLLER_LIST_INVALID)`,
    /// already attached → `Err(Status::NS_ALREADY_ATTACHED)`.
    pub fn attach_namespace(
        &self,
        nqn: &str,
        nsid: u32,
        ctrls: &[u16],
    ) -> Result<Attachment, nvme_proto::Status> {
        self.change_attachment(nqn, nsid, ctrls, true)
    }

    /// Detaches a namespace from the hosts of the given controllers.
    pub fn detach_namespace(
        &self,
        nqn: &str,
        nsid: u32,
        ctrls: &[u16],
    ) -> Result<Attachment, nvme_proto::Status> {
        self.change_attachment(nqn, nsid, ctrls, false)
    }

    fn change_attachment(
        &self,
        nqn: &str,
        nsid: u32,
        ctrls: &[u16],
        attach: bool,
    ) -> Result<Attachment, nvme_proto::Status> {
        use nvme_proto::Status;
        let (s, ns) = self
            .ns_of(nqn, nsid)
            .map_err(|_| Status::INVALID_NAMESPACE.dnr())?;
        let mut hosts = Vec::new();
        for &id in ctrls {
            let c = s
                .controller(id)
                .ok_or(Status::CONTROLLER_LIST_INVALID.dnr())?;
            hosts.push(c.hostnqn.clone());
        }
        let mut a = ns.attachment();
        for h in &hosts {
            let present = a.contains(h);
            if attach && present {
                return Err(Status::NS_ALREADY_ATTACHED.dnr());
            }
            if !attach && !present {
                return Err(Status::NS_NOT_ATTACHED.dnr());
            }
        }
        if !attach && a.all {
            // Detaching some hosts from an all-hosts namespace: keep every other live host.
            a.all = false;
            a.hosts = s
                .live_controllers()
                .iter()
                .map(|c| c.hostnqn.clone())
                .collect();
        }
        for h in hosts {
            if attach {
                a.hosts.insert(h);
            } else {
                a.hosts.remove(&h);
            }
        }
        self.set_namespace_attachment(nqn, nsid, a.clone())
            .map_err(|_| Status::INVALID_NAMESPACE.dnr())?;
        Ok(a)
    }

    fn ns_of(&self, nqn: &str, nsid: u32) -> Result<(Arc<Subsystem>, Arc<Namespace>), TargetError> {
        let s = self
            .inner
            .subsystem(nqn)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        let ns = s.namespace(nsid).ok_or(TargetError::NoSuchNamespace {
            nqn: nqn.to_string(),
            nsid,
        })?;
        Ok((s, ns))
    }

    /// Controller IDs currently connected to a subsystem, with their host NQNs.
    pub fn controllers(&self, nqn: &str) -> Vec<(u16, String)> {
        self.inner
            .subsystem(nqn)
            .map(|s| {
                s.live_controllers()
                    .iter()
                    .map(|c| (c.cntlid, c.hostnqn.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    // ---- ANA ----

    /// Sets the ANA state of `group` (1..=[`crate::ANA_MAX_GROUPS`]) on the listener with
    /// port ID `port_id` ([`ListenerHandle::port_id`]). Controllers connected through that
    /// listener that have a namespace of the group get an ANA change event (unless their
    /// async event configuration disables it); I/O through the listener follows the new
    /// state at once.
    pub fn set_ana_state(
        &self,
        port_id: u16,
        group: u32,
        state: AnaState,
    ) -> Result<(), TargetError> {
        let info = lock(&self.inner.listeners)
            .iter()
            .find(|l| l.portid == port_id)
            .cloned()
            .ok_or(TargetError::NoSuchListener(port_id))?;
        self.set_listener_ana(&info, group, state)
    }

    /// The ANA state of `group` on listener `port_id`, or `None` for an unknown listener.
    pub fn ana_state(&self, port_id: u16, group: u32) -> Option<AnaState> {
        lock(&self.inner.listeners)
            .iter()
            .find(|l| l.portid == port_id)
            .map(|l| l.ana.state(group))
    }

    fn set_listener_ana(
        &self,
        info: &Arc<ListenerInfo>,
        group: u32,
        state: AnaState,
    ) -> Result<(), TargetError> {
        if !(1..=ANA_MAX_GROUPS).contains(&group) {
            return Err(TargetError::InvalidConfig("ANA group must be in 1..=128"));
        }
        if !info.ana.set(group, state) {
            return Ok(());
        }
        tracing::info!(port = info.portid, addr = %info.addr, group, %state, "ANA state changed");
        let subsystems: Vec<_> = read(&self.inner.subsystems).values().cloned().collect();
        for s in subsystems {
            let in_group: Vec<_> = s
                .namespaces()
                .into_iter()
                .filter(|ns| ns.ana_group == group)
                .collect();
            if in_group.is_empty() {
                continue;
            }
            for c in s.live_controllers() {
                if Arc::ptr_eq(&c.listener, info)
                    && in_group.iter().any(|ns| ns.is_attached_to(&c.hostnqn))
                {
                    c.ana_changed();
                }
            }
        }
        Ok(())
    }

    // ---- seams ----

    /// Installs the handler of Namespace Management / Attachment commands.
    pub fn set_namespace_manager(&self, m: Arc<dyn NamespaceManager>) {
        *write(&self.inner.ns_manager) = Some(m);
    }

    /// Sets how namespaces without an explicit reservation object get one.
    pub fn set_reservations_factory(
        &self,
        f: impl Fn(&str, u32) -> Arc<dyn Reservations> + Send + Sync + 'static,
    ) {
        *write(&self.inner.resv_factory) = Arc::new(f);
    }

    /// Feeds the persistent health counters (power cycles, power-on hours before this
    /// start, unsafe shutdowns) kept by the node layer.
    pub fn set_persistent_health(&self, h: PersistentHealth) {
        let c = &self.inner.health;
        c.power_cycles.store(h.power_cycles, Ordering::Relaxed);
        c.power_on_hours_base
            .store(h.power_on_hours, Ordering::Relaxed);
        c.unsafe_shutdowns
            .store(h.unsafe_shutdowns, Ordering::Relaxed);
    }

    /// The SMART/health counters as the health log reports them.
    pub fn health(&self) -> HealthSnapshot {
        self.inner.health_snapshot()
    }

    /// Seconds since this target started (for the node layer's power-on-hours bookkeeping).
    pub fn uptime(&self) -> Duration {
        self.inner.started.elapsed()
    }

    /// A snapshot of all counters for the metrics endpoint.
    pub fn stats(&self) -> TargetStats {
        let mut namespaces = Vec::new();
        for (nqn, s) in read(&self.inner.subsystems).iter() {
            for ns in s.namespaces() {
                namespaces.push(NamespaceStats {
                    subsystem: nqn.clone(),
                    nsid: ns.nsid,
                    device: ns.device.info().name.clone(),
                    size_bytes: ns.size_bytes,
                    stats: ns.counters.snapshot(),
                });
            }
        }
        let mut connections: Vec<_> = lock(&self.inner.conns)
            .values()
            .map(|c| c.snapshot())
            .collect();
        connections.sort_by_key(|c| c.id);
        TargetStats {
            namespaces,
            connections,
            health: self.inner.health_snapshot(),
            discovery_generation: self.inner.discovery_genctr.load(Ordering::Relaxed),
        }
    }
    /// Refers hosts to another discovery service (`nvme discover` and our initiator follow
    /// referral entries), like nvmet's `ports/N/referrals`. `false` if it was already
    /// there. Hosts connected to a discovery controller get a discovery log change event.
    pub fn add_referral(&self, addr: SocketAddr) -> bool {
        let added = {
            let mut r = lock(&self.inner.referrals);
            if r.contains(&addr) {
                false
            } else {
                r.push(addr);
                true
            }
        };
        if added {
            self.inner.discovery_log_changed();
        }
        added
    }

    /// Stops referring hosts to `addr`; `false` if it was not a referral.
    pub fn remove_referral(&self, addr: SocketAddr) -> bool {
        let removed = {
            let mut r = lock(&self.inner.referrals);
            let before = r.len();
            r.retain(|a| *a != addr);
            r.len() != before
        };
        if removed {
            self.inner.discovery_log_changed();
        }
        removed
    }

    /// The discovery services this target refers hosts to.
    pub fn referrals(&self) -> Vec<SocketAddr> {
        lock(&self.inner.referrals).clone()
    }

    /// The current discovery log generation counter.
    pub fn discovery_generation(&self) -> u64 {
        self.inner.discovery_genctr.load(Ordering::Relaxed)
    }

    // ---- listeners ----

    /// Listens on `addr` for NVMe/TCP connections (all subsystems and discovery).
    pub async fn listen(&self, addr: SocketAddr) -> Result<ListenerHandle, TargetError> {
        self.listen_with(addr, ListenerOptions::default()).await
    }

    /// Listens with options (e.g. a discovery-only port).
    pub async fn listen_with(
        &self,
        addr: SocketAddr,
        opts: ListenerOptions,
    ) -> Result<ListenerHandle, TargetError> {
        if self.inner.shutting_down.load(Ordering::Acquire) {
            return Err(TargetError::ShutDown);
        }
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let portid = (self.inner.next_portid.fetch_add(1, Ordering::Relaxed) & 0xFFFF) as u16;
        let info = Arc::new(ListenerInfo::new(portid, local, opts));
        lock(&self.inner.listeners).push(info.clone());
        let target = self.clone();
        let li = info.clone();
        tokio::spawn(async move { target.accept_loop(listener, li).await });
        if !opts.discovery_only {
            self.inner.discovery_log_changed();
        }
        Ok(ListenerHandle {
            info,
            target: self.clone(),
        })
    }

    async fn accept_loop(self, listener: TcpListener, info: Arc<ListenerInfo>) {
        loop {
            let accepted = tokio::select! {
                r = listener.accept() => r,
                _ = info.stop.notified() => return,
            };
            if info.stopped.load(Ordering::Acquire)
                || self.inner.shutting_down.load(Ordering::Acquire)
            {
                return;
            }
            match accepted {
                Ok((sock, peer)) => {
                    let _ = sock.set_nodelay(true);
                    let local = sock.local_addr().unwrap_or(info.addr);
                    let h = self
                        .inner
                        .register_conn(peer.to_string(), local.to_string());
                    let inner = self.inner.clone();
                    let li = info.clone();
                    tokio::spawn(async move {
                        crate::transport::conn::serve(inner.clone(), sock, li, local, h.clone())
                            .await;
                        inner.unregister_conn(&h);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    // EMFILE and friends: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Stops all listeners, closes every connection and waits (up to `timeout`) for the
    /// connection tasks to end.
    pub async fn shutdown(&self, timeout: Duration) {
        self.inner.shutting_down.store(true, Ordering::Release);
        let ls: Vec<_> = lock(&self.inner.listeners).drain(..).collect();
        for l in ls {
            l.stopped.store(true, Ordering::Release);
            l.stop.notify_one();
        }
        let conns: Vec<_> = lock(&self.inner.conns).values().cloned().collect();
        for c in conns {
            c.kill();
        }
        let wait = async {
            loop {
                let gone = self.inner.conns_gone.notified();
                if self.inner.live_conns.load(Ordering::Acquire) == 0 {
                    return;
                }
                gone.await;
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
    }

    /// Number of open connections.
    pub fn connection_count(&self) -> usize {
        self.inner.live_conns.load(Ordering::Acquire)
    }

    /// Serves one connection over any byte stream (used by tests and fuzzing).
    pub async fn serve_stream<S>(&self, stream: S, local: SocketAddr)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let info = Arc::new(ListenerInfo::new(0, local, ListenerOptions::default()));
        let h = self.inner.register_conn("stream".into(), local.to_string());
        crate::transport::conn::serve(self.inner.clone(), stream, info, local, h.clone()).await;
        self.inner.unregister_conn(&h);
    }
}
