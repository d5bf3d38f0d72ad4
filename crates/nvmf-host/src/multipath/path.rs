//! One path of a multipath namespace: its namespace handle, its controller's status,
//! what the multipath layer learnt from I/O on it, and a watcher task that checks after
//! every (re)connect that the path still reaches the same namespace before it is used.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use nvme_proto::Status;
use nvme_proto::log::ana_state;
use nvme_proto::status::sct;
use tokio::sync::watch;

use super::identity::NsIdentity;
use super::{PathNs, Shared};
use crate::controller::{ControllerState, ControllerStatus};
use crate::error::HostError;

/// How long the watcher waits before checking a path's identity again after the check
/// failed without telling anything (a timeout, a connection lost in the middle).
const RECHECK_DELAY: Duration = Duration::from_secs(1);

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
    /// Connected, but not yet checked to reach the same namespace since it (re)connected.
    Unverified,
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

pub(crate) struct Path<N: PathNs> {
    pub ns: N,
    /// Where its address stands in the list the namespace was opened with: paths are
    /// kept in this order (the `First` policy prefers the lowest), also when one comes
    /// back later.
    pub rank: usize,
    status: watch::Receiver<ControllerStatus>,
    /// The namespace's ANA group through this controller, as last identified.
    anagrpid: AtomicU32,
    /// The controller generation (connect count) whose namespace identity was checked;
    /// 0 until the first check. The path serves I/O only while it is the current one.
    verified_generation: AtomicU64,
    /// (generation, ANA change count) when an I/O failed with a path error: the path
    /// is skipped until either moves.
    failed: Mutex<Option<(u64, u64)>>,
    /// When the namespace's group entered the ANA change state, and whether the
    /// controller was reset for staying there beyond ANATT.
    transition: Mutex<Option<(Instant, bool)>>,
    ios: AtomicU64,
    watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl<N: PathNs> Drop for Path<N> {
    fn drop(&mut self) {
        if let Some(w) = lock(&self.watcher).take() {
            w.abort();
        }
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

impl<N: PathNs> Path<N> {
    /// Wraps `ns` and starts its watcher. `verified` is the identity read through it
    /// just now (its controller's current generation is then verified), or None to have
    /// the watcher check it before the path is used.
    pub fn new(
        ns: N,
        rank: usize,
        verified: Option<&NsIdentity>,
        shared: &Arc<Shared<N>>,
    ) -> Arc<Path<N>> {
        let status = ns.controller().watch();
        let (generation, anagrpid) = match verified {
            Some(id) => (status.borrow().generation, id.anagrpid),
            None => (0, ns.anagrpid()),
        };
        let path = Arc::new(Path {
            ns,
            rank,
            status: status.clone(),
            anagrpid: AtomicU32::new(anagrpid),
            verified_generation: AtomicU64::new(generation),
            failed: Mutex::new(None),
            transition: Mutex::new(None),
            ios: AtomicU64::new(0),
            watcher: Mutex::new(None),
        });
        let task = tokio::spawn(watch_path(
            Arc::downgrade(&path),
            Arc::downgrade(shared),
            status,
        ));
        *lock(&path.watcher) = Some(task);
        path
    }

    pub fn addr(&self) -> SocketAddr {
        self.ns.controller().addr()
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
        if self.verified_generation.load(Ordering::Acquire) != st.generation {
            return Usable::Unverified;
        }
        if *lock(&self.failed) == Some((st.generation, ana_chgcnt(&st))) {
            return Usable::Down { recoverable: true };
        }
        let state = st.ana_state_of(self.ns.nsid(), self.anagrpid.load(Ordering::Relaxed));
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
        tracing::warn!(path = %self.addr(), "path error, failing over: {e}");
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
            addr: self.addr(),
            cntlid: st.cntlid,
            state: st.state.clone(),
            ana_state: st.ana_state_of(self.ns.nsid(), self.anagrpid.load(Ordering::Relaxed)),
            usable,
            ios: self.ios.load(Ordering::Relaxed),
        }
    }
}

/// What the watcher learnt from one look at the path.
enum Check {
    /// Nothing to do until the status changes.
    Wait,
    /// The identity check could not be made now; look again a little later.
    Retry,
    /// The path no longer reaches the namespace (another one answers, or its controller
    /// gave up reconnecting): hand its address back to be connected anew.
    Retire(String),
}

/// Runs while the path exists: wakes I/O waiting for a path on every status change of
/// its controller, and checks the namespace's identity after every (re)connect.
async fn watch_path<N: PathNs>(
    path: Weak<Path<N>>,
    shared: Weak<Shared<N>>,
    mut status: watch::Receiver<ControllerStatus>,
) {
    loop {
        let check = look(&path, &shared).await;
        if let Some(s) = shared.upgrade() {
            s.changed.notify_waiters();
        }
        match check {
            Check::Wait => {
                if status.changed().await.is_err() {
                    return;
                }
            }
            Check::Retry => {
                let _ = tokio::time::timeout(RECHECK_DELAY, status.changed()).await;
            }
            Check::Retire(why) => {
                if let (Some(p), Some(s)) = (path.upgrade(), shared.upgrade()) {
                    Shared::retire(&s, &p, why);
                }
                return;
            }
        }
    }
}

async fn look<N: PathNs>(path: &Weak<Path<N>>, shared: &Weak<Shared<N>>) -> Check {
    let (ctrl, nsid, generation, reference) = {
        let (Some(p), Some(s)) = (path.upgrade(), shared.upgrade()) else {
            return Check::Wait;
        };
        let st = p.status.borrow().clone();
        match st.state {
            ControllerState::Live => {}
            ControllerState::Lost { reason } => return Check::Retire(reason),
            ControllerState::Reconnecting { .. } | ControllerState::Closed => return Check::Wait,
        }
        if p.verified_generation.load(Ordering::Acquire) == st.generation {
            return Check::Wait;
        }
        (
            p.ns.controller().clone(),
            p.ns.nsid(),
            st.generation,
            s.reference.clone(),
        )
    };
    match N::identity(&ctrl, nsid).await {
        Ok(id) => match reference.differs(&id) {
            None => {
                if let Some(p) = path.upgrade() {
                    p.anagrpid.store(id.anagrpid, Ordering::Relaxed);
                    p.verified_generation.store(generation, Ordering::Release);
                    tracing::debug!(addr = %ctrl.addr(), generation, "path identity checked");
                }
                Check::Wait
            }
            Some(why) => Check::Retire(why),
        },
        // The controller answered, and not with the namespace: it is gone from this path.
        Err(e @ (HostError::Status { .. } | HostError::Invalid { .. })) => {
            Check::Retire(e.to_string())
        }
        Err(e) => {
            tracing::debug!(addr = %ctrl.addr(), "checking the path's namespace: {e}");
            Check::Retry
        }
    }
}
