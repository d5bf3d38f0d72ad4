//! One path of a multipath namespace: its namespace handle, its controller's status and
//! what the multipath layer learnt from I/O on it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvme_proto::Status;
use nvme_proto::log::ana_state;
use nvme_proto::status::sct;
use tokio::sync::{Notify, watch};

use crate::controller::{ControllerState, ControllerStatus};
use crate::error::HostError;
use crate::namespace::RemoteNamespace;

/// How a path can serve I/O now; the order is the preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Usable {
    Optimized,
    NonOptimized,
    /// ANA change state, seen first at `since`.
    Transition {
        since: Instant,
    },
    Inaccessible,
    /// The controller is not live (reconnecting: may come back), or an I/O failed with
    /// a path error on this connection and ANA state.
    Down {
        recoverable: bool,
    },
}

/// A path as reported by [`super::MultipathNamespace::paths`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathInfo {
    pub addr: SocketAddr,
    pub cntlid: u16,
    pub state: ControllerState,
    /// The namespace's ANA state through this path (`nvme_proto::log::ana_state`).
    pub ana_state: u8,
    /// Whether the next I/O could use it.
    pub usable: bool,
    /// I/Os completed through it.
    pub ios: u64,
}

pub(crate) struct Path {
    pub ns: RemoteNamespace,
    status: watch::Receiver<ControllerStatus>,
    anagrpid: u32,
    /// (generation, ANA change count) when an I/O failed with a path error: the path
    /// is skipped until either moves.
    failed: Mutex<Option<(u64, u64)>>,
    /// When the namespace's group entered the ANA change state, and whether the
    /// controller was reset for staying there beyond ANATT.
    transition: Mutex<Option<(Instant, bool)>>,
    ios: AtomicU64,
    forwarder: tokio::task::JoinHandle<()>,
}

impl Drop for Path {
    fn drop(&mut self) {
        self.forwarder.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn ana_chgcnt(s: &ControllerStatus) -> u64 {
    s.ana.as_ref().map_or(0, |a| a.chgcnt)
}

/// Errors after which the I/O is sent on another path: path errors, and statuses the
/// Linux host retries (abort requested, transient transport error) unless DNR.
pub(crate) fn should_failover(e: &HostError) -> bool {
    if e.is_path_error() || matches!(e, HostError::DataDigest { .. }) {
        return true;
    }
    match e.nvme_status() {
        Some(s) if !s.dnr && s.sct == sct::GENERIC => {
            s.sc == Status::ABORT_REQUESTED.sc || s.sc == Status::TRANSIENT_TRANSPORT_ERROR.sc
        }
        _ => false,
    }
}

impl Path {
    /// Wraps `ns`; status changes of its controller wake `changed`.
    pub fn new(ns: RemoteNamespace, changed: Arc<Notify>) -> Arc<Path> {
        let status = ns.controller().watch();
        let mut rx = status.clone();
        let forwarder = tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                changed.notify_waiters();
            }
        });
        let anagrpid = ns.id().anagrpid;
        Arc::new(Path {
            ns,
            status,
            anagrpid,
            failed: Mutex::new(None),
            transition: Mutex::new(None),
            ios: AtomicU64::new(0),
            forwarder,
        })
    }

    pub fn anatt(&self) -> Duration {
        self.ns.controller().anatt()
    }

    pub fn usable(&self) -> Usable {
        let st = self.status.borrow();
        match &st.state {
            ControllerState::Live => {}
            ControllerState::Reconnecting { .. } => return Usable::Down { recoverable: true },
            ControllerState::Lost { .. } | ControllerState::Closed => {
                return Usable::Down { recoverable: false };
            }
        }
        if *lock(&self.failed) == Some((st.generation, ana_chgcnt(&st))) {
            return Usable::Down { recoverable: true };
        }
        let state = st.ana_state_of(self.ns.nsid(), self.anagrpid);
        drop(st);
        let mut tr = lock(&self.transition);
        if state != ana_state::CHANGE {
            *tr = None;
        }
        match state {
            ana_state::OPTIMIZED => Usable::Optimized,
            ana_state::NON_OPTIMIZED => Usable::NonOptimized,
            ana_state::CHANGE => {
                let (since, reset) = tr.get_or_insert((Instant::now(), false));
                let since = *since;
                if !*reset && since.elapsed() > self.anatt() {
                    // As Linux: a group that stays in transition past ANATT means the
                    // controller is stuck; reset it.
                    *reset = true;
                    self.ns
                        .controller()
                        .reset("ANA transition longer than ANATT");
                }
                Usable::Transition { since }
            }
            _ => Usable::Inaccessible,
        }
    }

    /// An I/O failed on this path with `e`: skip the path until its controller
    /// reconnects or its ANA state changes; re-read ANA after an ANA status.
    pub fn failed(&self, e: &HostError) {
        let key = {
            let st = self.status.borrow();
            (st.generation, ana_chgcnt(&st))
        };
        *lock(&self.failed) = Some(key);
        tracing::warn!(path = %self.ns.controller().addr(), "path error, failing over: {e}");
        if e.nvme_status().is_some_and(|s| s.sct == sct::PATH) {
            let ctrl = self.ns.controller().clone();
            tokio::spawn(async move {
                if let Err(e) = ctrl.refresh_ana().await {
                    tracing::warn!(addr = %ctrl.addr(), "re-reading the ANA log: {e}");
                }
            });
        }
    }

    pub fn count_io(&self) {
        self.ios.fetch_add(1, Ordering::Relaxed);
    }

    pub fn info(&self) -> PathInfo {
        let usable = matches!(self.usable(), Usable::Optimized | Usable::NonOptimized);
        let st = self.status.borrow();
        PathInfo {
            addr: self.ns.controller().addr(),
            cntlid: st.cntlid,
            state: st.state.clone(),
            ana_state: st.ana_state_of(self.ns.nsid(), self.anagrpid),
            usable,
            ios: self.ios.load(Ordering::Relaxed),
        }
    }
}
