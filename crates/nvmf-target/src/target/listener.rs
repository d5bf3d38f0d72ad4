//! Listeners (ports): what each serves, its handle, and the ANA state of each group
//! through it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::TargetError;
use crate::ana::{ANA_MAX_GROUPS, AnaState, ListenerAna};
use crate::sync::{lock, read};
use crate::target::Target;
use crate::target::admission::ListenerConns;

/// What a listener serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerOptions {
    /// Serve only the discovery subsystem here (e.g. port 8009) and leave this listener out
    /// of discovery log entries.
    pub discovery_only: bool,
    /// Require TLS 1.3 with an NVMe/TCP PSK (the handshake right after TCP connect, before
    /// ICReq); discovery log entries for this port say so (TREQ required, TSAS TLS 1.3).
    pub tls: bool,
}

pub(crate) struct ListenerInfo {
    pub portid: u16,
    pub addr: SocketAddr,
    pub opts: ListenerOptions,
    pub stop: Notify,
    pub stopped: AtomicBool,
    /// ANA state of each group through this port.
    pub ana: ListenerAna,
    /// Connections held, for the limits at accept.
    pub conns: ListenerConns,
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
            conns: ListenerConns::default(),
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
    /// Whether hosts must speak TLS here ([`ListenerOptions::tls`]).
    pub fn requires_tls(&self) -> bool {
        self.info.opts.tls
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

impl Target {
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
        self.listen_as(None, addr, opts).await
    }

    /// Listens as `role` (`nvme0`, `discovery`...): in a daemon that hands its sockets
    /// to the binary it upgrades to, the socket of that role it inherited
    /// (`release::sockets`), else a new one.
    pub async fn listen_as(
        &self,
        role: Option<&str>,
        addr: SocketAddr,
        opts: ListenerOptions,
    ) -> Result<ListenerHandle, TargetError> {
        if self.inner.shutting_down.load(Ordering::Acquire) {
            return Err(TargetError::ShutDown);
        }
        let listener = TcpListener::from_std(release::sockets::bind(role, addr)?)?;
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
}
