//! One namespace reached through several controllers of the same subsystem (different
//! addresses or ports): a `BlockDevice` that sends each I/O down the best path by ANA
//! state (optimized, then non-optimized, never inaccessible or persistent loss), waits
//! up to ANATT through an ANA transition, and moves an I/O that failed with a path error
//! (connection loss, timeout, ANA status SCT 3) to another path.
//!
//! Paths come and go as with Linux native multipath:
//! - the namespace opens when any path connects; the others are retried in the
//!   background with backoff and join when they connect (`join.rs`);
//! - each path's controller reconnects on its own; a path that gives up (controller-loss
//!   timeout) goes back to being retried in the background;
//! - a path that (re)connects is used only after it showed the same namespace: same NSID,
//!   size, NGUID, EUI-64 and UUID (`identity.rs`); one showing another namespace is
//!   dropped and retried. Its ANA state then decides, as for every path;
//! - dropping the namespace stops every background task.
//!
//! Failover sends a read or write again on another path, so it relies on the same
//! idempotence as reconnect retries: the same data to the same blocks. A write that
//! reached the target before its path failed is written twice with the same data.

mod identity;
mod join;
mod kv;
mod path;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use blockdev::{
    BlockDevice, BlockError, DeviceInfo, DeviceKind, DeviceStats, IoBuf, IoFuture, StatsCounters,
    WriteFlags, check_range,
};
use nvme_proto::opcode::io;
use tokio::sync::Notify;

pub use join::PathAddr;
pub use kv::MultipathKvNamespace;
pub use path::PathInfo;

use crate::controller::{ConnectOptions, Controller, thread_slot};
use crate::error::{HostError, Result};
use crate::host_identity::HostIdentity;
use crate::namespace::RemoteNamespace;
use crate::queue::SubmitOptions;
pub(crate) use identity::NsIdentity;
use join::JoinParams;
use path::{Path, Usable, should_failover};

/// The name of a multipath namespace (devices, messages).
pub(crate) fn multipath_name(subnqn: &str, nsid: u32) -> String {
    format!("nvme+tcp-multipath://{subnqn}/{nsid}")
}

fn usable_text(u: &Usable) -> &'static str {
    match u {
        Usable::Optimized => "optimized",
        Usable::NonOptimized => "non-optimized",
        Usable::Transition { .. } => "ANA transition",
        Usable::Inaccessible => "inaccessible",
        Usable::Unverified => "checking its namespace",
        Usable::Down { recoverable: true } => "down (reconnecting)",
        Usable::Down { recoverable: false } => "lost",
    }
}

/// Which of several equally good paths takes an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathPolicy {
    /// The first in the order of the addresses the namespace was opened with (paths
    /// added later come after them; Linux's default "numa" policy on one node): I/O
    /// returns to it when it recovers or joins.
    #[default]
    First,
    /// Each thread keeps to one of them, spreading threads over the paths.
    Spread,
}

/// Multipath behaviour.
#[derive(Debug, Clone)]
pub struct MultipathOptions {
    pub policy: PathPolicy,
    /// How long an I/O waits for a usable path (all paths reconnecting, inaccessible or
    /// in transition) before it fails with [`HostError::NoPath`]. Linux waits as long as
    /// a controller exists ("queue if no path"); bound it here. Once one I/O has waited
    /// it out, later ones fail at once until a path is usable again.
    pub no_path_timeout_ms: u64,
}

impl Default for MultipathOptions {
    fn default() -> Self {
        MultipathOptions {
            policy: PathPolicy::First,
            no_path_timeout_ms: 120_000,
        }
    }
}

/// Failing over never re-sends on the same path without a reason: path I/O fails fast
/// and the multipath layer decides.
const PATH_IO: SubmitOptions = SubmitOptions {
    timeout_ms: None,
    no_timeout: false,
    retry: false,
};

/// A path that is not connected and is being retried in the background.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingPath {
    pub addr: PathAddr,
    /// Connect attempts that failed so far (the one at open included).
    pub attempts: u32,
    /// Why the last one failed.
    pub last_error: String,
}

struct Pending {
    path: PendingPath,
    task: tokio::task::JoinHandle<()>,
}

/// A namespace handle one path holds: a block namespace ([`RemoteNamespace`]) or a Key
/// Value namespace ([`crate::KvNamespace`]). The multipath machinery (paths, ANA, identity
/// checks, rejoining) is the same for both.
pub(crate) trait PathNs: Send + Sync + Sized + 'static {
    fn controller(&self) -> &Controller;
    fn nsid(&self) -> u32;
    /// The namespace's ANA group as identified when it was opened.
    fn anagrpid(&self) -> u32;
    /// Opens namespace `nsid` of `ctrl`, or the first active one of this kind.
    fn open(
        ctrl: &Controller,
        nsid: Option<u32>,
    ) -> impl std::future::Future<Output = Result<Self>> + Send;
    /// Reads namespace `nsid`'s identity through `ctrl`.
    fn identity(
        ctrl: &Controller,
        nsid: u32,
    ) -> impl std::future::Future<Output = Result<NsIdentity>> + Send;
}

impl PathNs for RemoteNamespace {
    fn controller(&self) -> &Controller {
        RemoteNamespace::controller(self)
    }
    fn nsid(&self) -> u32 {
        RemoteNamespace::nsid(self)
    }
    fn anagrpid(&self) -> u32 {
        self.id().anagrpid
    }
    async fn open(ctrl: &Controller, nsid: Option<u32>) -> Result<Self> {
        match nsid {
            Some(n) => ctrl.namespace(n).await,
            None => first_block_namespace(ctrl).await,
        }
    }
    async fn identity(ctrl: &Controller, nsid: u32) -> Result<NsIdentity> {
        NsIdentity::read(ctrl, nsid).await
    }
}

/// The first active namespace of `ctrl` that opens as a block namespace. The active list
/// (CNS 02h) holds namespaces of every command set, so a Key Value namespace ahead of the
/// block one is passed over; when none opens, the first one's error says why.
async fn first_block_namespace(ctrl: &Controller) -> Result<RemoteNamespace> {
    let mut first_error = None;
    for nsid in ctrl.active_namespaces().await? {
        match ctrl.namespace(nsid).await {
            Ok(ns) => return Ok(ns),
            // Not a block namespace we can use (another command set, an odd format).
            Err(e @ (HostError::Invalid { .. } | HostError::Status { .. })) => {
                first_error.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(first_error.unwrap_or_else(|| {
        HostError::invalid(
            format!("{} at {}", ctrl.subnqn(), ctrl.addr()),
            "the subsystem has no active namespace",
        )
    }))
}

/// What the namespace, its paths' watchers and its rejoin tasks share. Only the
/// namespace holds it strongly: the tasks end when it is dropped.
pub(crate) struct Shared<N: PathNs> {
    name: String,
    /// Ordered by rank.
    paths: RwLock<Vec<Arc<Path<N>>>>,
    /// Woken whenever a path's controller status changes, a path is checked, joins or
    /// leaves.
    changed: Notify,
    /// The namespace every path must show (read through the first path at open).
    reference: Arc<NsIdentity>,
    join: JoinParams,
    /// Paths being retried, by rank.
    pending: Mutex<BTreeMap<usize, Pending>>,
    /// Rank for paths added with [`MultipathNamespace::add_path`].
    next_rank: AtomicUsize,
    /// An I/O waited the whole no-path timeout and found no path: until a path is usable
    /// again, I/Os with no usable path fail at once instead of each waiting the timeout
    /// (dm-multipath's `no_path_retry`). A shard store whose node is down then costs a
    /// degraded read nothing, not the timeout on every read.
    failing_fast: AtomicBool,
}

impl<N: PathNs> Drop for Shared<N> {
    fn drop(&mut self) {
        for (_, p) in std::mem::take(&mut *lock(&self.pending)) {
            p.task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

impl<N: PathNs> Shared<N> {
    fn new(name: String, reference: NsIdentity, join: JoinParams) -> Arc<Shared<N>> {
        Arc::new(Shared {
            name,
            paths: RwLock::new(Vec::new()),
            changed: Notify::new(),
            reference: Arc::new(reference),
            join,
            pending: Mutex::new(BTreeMap::new()),
            next_rank: AtomicUsize::new(1 << 16),
            failing_fast: AtomicBool::new(false),
        })
    }

    fn insert(&self, path: Arc<Path<N>>) {
        {
            let mut paths = write(&self.paths);
            let at = paths.partition_point(|p| p.rank <= path.rank);
            paths.insert(at, path);
        }
        self.changed.notify_waiters();
    }

    /// Adds a path whose identity was just read and matched.
    fn insert_verified(me: &Arc<Shared<N>>, ns: N, rank: usize, id: &NsIdentity) {
        me.insert(Path::new(ns, rank, Some(id), me));
    }

    /// Starts retrying the path at `rank` in the background (unless it already is, or
    /// the connect options say never to reconnect: `ctrl_loss_tmo_ms` Some(0)).
    fn rejoin(me: &Arc<Shared<N>>, rank: usize, addr: PathAddr, why: String) {
        if me.join.opts.ctrl_loss_tmo_ms == Some(0) {
            tracing::warn!(path = %addr, "path to {} not retried (controller-loss timeout 0): {why}", me.name);
            return;
        }
        let mut pending = lock(&me.pending);
        if pending.contains_key(&rank) {
            return;
        }
        let task = tokio::spawn(join::rejoin_task::<N>(
            Arc::downgrade(me),
            rank,
            addr.clone(),
        ));
        pending.insert(
            rank,
            Pending {
                path: PendingPath {
                    addr,
                    attempts: 1,
                    last_error: why,
                },
                task,
            },
        );
        drop(pending);
        me.changed.notify_waiters();
    }

    /// The rejoin task of `rank` connected its path and checked it: adds it, unless the
    /// path was removed meanwhile (then it is handed back to be disconnected).
    fn rejoined(me: &Arc<Shared<N>>, rank: usize, ns: N, id: &NsIdentity) -> Option<N> {
        // Under the pending lock: `remove_path` sees the path either pending or in.
        let mut pending = lock(&me.pending);
        if pending.remove(&rank).is_none() {
            return Some(ns);
        }
        Shared::insert_verified(me, ns, rank, id);
        None
    }

    fn attempt_failed(&self, rank: usize, addr: &PathAddr, why: String) {
        let mut pending = lock(&self.pending);
        let Some(p) = pending.get_mut(&rank) else {
            return;
        };
        p.path.attempts = p.path.attempts.saturating_add(1);
        if p.path.last_error != why {
            tracing::warn!(path = %addr, attempts = p.path.attempts, "path to {} still not connected: {why}", self.name);
            p.path.last_error = why;
        } else {
            tracing::debug!(path = %addr, attempts = p.path.attempts, "path to {} still not connected: {why}", self.name);
        }
    }

    /// Takes `path` out (it reaches another namespace now, or its controller gave up),
    /// disconnects it and retries its address in the background.
    fn retire(me: &Arc<Shared<N>>, path: &Arc<Path<N>>, why: String) {
        let removed = {
            let mut paths = write(&me.paths);
            let before = paths.len();
            paths.retain(|p| !Arc::ptr_eq(p, path));
            paths.len() != before
        };
        if !removed {
            return;
        }
        tracing::warn!(path = %path.addr(), "path to {} not used any more, reconnecting it from scratch: {why}", me.name);
        let ctrl = path.ns.controller().clone();
        tokio::spawn(async move { ctrl.disconnect().await });
        Shared::rejoin(me, path.rank, PathAddr::from(path.addr()), why);
    }

    /// The path for the next I/O, waiting for one if needed (bounded by the no-path
    /// timeout). Paths in ANA transition are waited for; past ANATT their controller is
    /// reset (see `Path::usable`).
    pub(crate) async fn select(
        &self,
        start: Instant,
        opts: &MultipathOptions,
    ) -> Result<Arc<Path<N>>> {
        let deadline = start + Duration::from_millis(opts.no_path_timeout_ms);
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (mut why, mut may_recover) = {
                let paths = read(&self.paths);
                // The best state any path is in, and how many are in it (no allocation:
                // this runs for every I/O).
                let mut best: Option<Usable> = None;
                let mut n_best = 0usize;
                for p in paths.iter() {
                    let u = p.usable();
                    if !matches!(u, Usable::Optimized | Usable::NonOptimized) {
                        continue;
                    }
                    match best {
                        Some(b) if u > b => {}
                        Some(b) if u == b => n_best += 1,
                        _ => {
                            best = Some(u);
                            n_best = 1;
                        }
                    }
                }
                if let Some(b) = best {
                    let pick = match opts.policy {
                        PathPolicy::First => 0,
                        PathPolicy::Spread => thread_slot() % n_best.max(1),
                    };
                    if let Some(p) = paths.iter().filter(|p| p.usable() == b).nth(pick) {
                        // Read first: no shared write on every I/O.
                        if self.failing_fast.load(Ordering::Relaxed) {
                            self.failing_fast.store(false, Ordering::Relaxed);
                        }
                        return Ok(p.clone());
                    }
                    // A state changed in between: look again.
                    continue;
                }
                let states: Vec<Usable> = paths.iter().map(|p| p.usable()).collect();
                let why: Vec<String> = paths
                    .iter()
                    .zip(&states)
                    .map(|(p, u)| format!("{}: {}", p.addr(), usable_text(u)))
                    .collect();
                let may_recover = states.iter().any(|u| {
                    matches!(
                        u,
                        Usable::Transition { .. }
                            | Usable::Inaccessible
                            | Usable::Unverified
                            | Usable::Down { recoverable: true }
                    )
                });
                (why, may_recover)
            };
            // Looked at without the paths lock held (lock order: pending, then paths).
            let pending = self.pending_paths();
            may_recover |= !pending.is_empty();
            why.extend(pending.iter().map(|p| {
                format!(
                    "{}: not connected ({} attempts; {})",
                    p.addr, p.attempts, p.last_error
                )
            }));
            let why = if why.is_empty() {
                "no paths".to_string()
            } else {
                why.join(", ")
            };
            if !may_recover || self.failing_fast.load(Ordering::Relaxed) {
                // A path that joined between the two looks was seen in neither.
                if futures::FutureExt::now_or_never(changed.as_mut()).is_some() {
                    continue;
                }
                return Err(self.no_path(start, why));
            }
            let wait = deadline.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                self.failing_fast.store(true, Ordering::Relaxed);
                return Err(self.no_path(start, why));
            }
            // Also re-check now and then: ANATT expiry is seen by looking.
            let _ = tokio::time::timeout(wait.min(Duration::from_millis(500)), changed).await;
        }
    }

    fn no_path(&self, start: Instant, detail: String) -> HostError {
        HostError::NoPath {
            name: self.name.clone(),
            waited_ms: start.elapsed().as_millis() as u64,
            detail,
        }
    }

    /// The paths not connected now, retried in the background.
    pub(crate) fn pending_paths(&self) -> Vec<PendingPath> {
        lock(&self.pending)
            .values()
            .map(|p| p.path.clone())
            .collect()
    }

    /// Every connected path, in rank order.
    pub(crate) fn path_infos(&self) -> Vec<PathInfo> {
        read(&self.paths).iter().map(|p| p.info()).collect()
    }

    /// Removes the paths through `addr`, connected or being retried; returns how many.
    pub(crate) fn remove_path(&self, addr: SocketAddr) -> usize {
        let mut n = 0;
        lock(&self.pending).retain(|_, p| {
            let keep = !p.path.addr.is(addr);
            if !keep {
                p.task.abort();
                n += 1;
            }
            keep
        });
        let mut paths = write(&self.paths);
        let before = paths.len();
        paths.retain(|p| p.addr() != addr);
        n + before - paths.len()
    }

    /// Disconnects every path's controller and stops retrying the others.
    pub(crate) async fn disconnect_all(&self) {
        for (_, p) in std::mem::take(&mut *lock(&self.pending)) {
            p.task.abort();
        }
        let paths: Vec<Arc<Path<N>>> = std::mem::take(&mut *write(&self.paths));
        for p in paths {
            p.ns.controller().disconnect().await;
        }
    }
}

/// A namespace over several paths; see the module docs.
pub struct MultipathNamespace {
    shared: Arc<Shared<RemoteNamespace>>,
    subnqn: String,
    nsid: u32,
    info: DeviceInfo,
    opts: MultipathOptions,
    stats: StatsCounters,
}

impl std::fmt::Debug for MultipathNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultipathNamespace")
            .field("name", &self.info.name)
            .field("paths", &self.paths())
            .field("pending", &self.pending_paths())
            .finish()
    }
}

impl MultipathNamespace {
    /// Connects to `subnqn` at every address at once and opens namespace `nsid` through
    /// each. Opens when any path connects; the others are retried in the background and
    /// join when they connect and show the same namespace. Fails with
    /// [`HostError::NoPathConnects`], naming each address and its cause, when none does.
    pub async fn connect(
        addrs: &[SocketAddr],
        subnqn: &str,
        nsid: u32,
        host: &HostIdentity,
        opts: &ConnectOptions,
        mp: MultipathOptions,
    ) -> Result<MultipathNamespace> {
        let addrs = addrs.iter().map(|&a| PathAddr::from(a)).collect();
        Self::connect_to(addrs, subnqn, Some(nsid), host, opts, mp).await
    }

    /// As [`MultipathNamespace::connect`], with addresses that may be host names
    /// (resolved on every attempt) and, when `nsid` is None, the first active namespace
    /// of the first path that connects.
    pub async fn connect_to(
        addrs: Vec<PathAddr>,
        subnqn: &str,
        nsid: Option<u32>,
        host: &HostIdentity,
        opts: &ConnectOptions,
        mp: MultipathOptions,
    ) -> Result<MultipathNamespace> {
        let params = JoinParams {
            subnqn: subnqn.to_string(),
            host: host.clone(),
            opts: opts.clone(),
        };
        let (shared, info) =
            join::open::<RemoteNamespace, _>(addrs, nsid, params, |ns| ns.info().clone()).await?;
        Ok(MultipathNamespace::with(shared, info, mp))
    }

    /// Builds a multipath namespace from opened paths: the same subsystem and NSID, and
    /// the same namespace identifiers, as read through the first.
    pub async fn new(paths: Vec<RemoteNamespace>, opts: MultipathOptions) -> Result<Self> {
        let mut it = paths.into_iter();
        let Some(first) = it.next() else {
            return Err(HostError::Usage("multipath needs at least one path".into()));
        };
        let ctrl = first.controller().clone();
        let reference = NsIdentity::read(&ctrl, first.nsid()).await?;
        let params = JoinParams {
            subnqn: ctrl.subnqn().to_string(),
            host: ctrl.host().clone(),
            opts: ctrl.options().clone(),
        };
        let shared = Shared::new(
            multipath_name(ctrl.subnqn(), first.nsid()),
            reference.clone(),
            params,
        );
        let info = first.info().clone();
        Shared::insert_verified(&shared, first, 0, &reference);
        let mp = MultipathNamespace::with(shared, info, opts);
        for ns in it {
            mp.add_path(ns)?;
        }
        Ok(mp)
    }

    fn with(
        shared: Arc<Shared<RemoteNamespace>>,
        first: DeviceInfo,
        opts: MultipathOptions,
    ) -> MultipathNamespace {
        let subnqn = shared.join.subnqn.clone();
        let nsid = shared.reference.nsid;
        let mut info = first;
        info.name = shared.name.clone();
        info.kind = DeviceKind::Other("nvme-tcp-multipath".into());
        MultipathNamespace {
            shared,
            subnqn,
            nsid,
            info,
            opts,
            stats: StatsCounters::new(),
        }
    }

    /// Adds a path (a namespace opened through another controller of the subsystem),
    /// after the paths the namespace was opened with. It serves I/O once its namespace
    /// identifiers were read and match.
    pub fn add_path(&self, ns: RemoteNamespace) -> Result<()> {
        let bad = |why: String| Err(HostError::Usage(format!("{}: {why}", self.info.name)));
        if ns.controller().subnqn() != self.subnqn || ns.nsid() != self.nsid {
            return bad(format!(
                "path {} is namespace {} of {}",
                ns.controller().addr(),
                ns.nsid(),
                ns.controller().subnqn()
            ));
        }
        if ns.info().size_bytes != self.info.size_bytes
            || ns.info().logical_block_bytes != self.info.logical_block_bytes
        {
            return bad(format!(
                "path {} has another size or block size",
                ns.controller().addr()
            ));
        }
        let rank = self.shared.next_rank.fetch_add(1, Ordering::Relaxed);
        self.shared.insert(Path::new(ns, rank, None, &self.shared));
        Ok(())
    }

    /// Removes the paths through `addr`, connected or being retried; returns how many.
    pub fn remove_path(&self, addr: SocketAddr) -> usize {
        self.shared.remove_path(addr)
    }

    /// Every connected path with its state and how many I/Os it completed, in the order
    /// of the addresses the namespace was opened with.
    pub fn paths(&self) -> Vec<PathInfo> {
        self.shared.path_infos()
    }

    /// The paths not connected now, retried in the background.
    pub fn pending_paths(&self) -> Vec<PendingPath> {
        self.shared.pending_paths()
    }

    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// Moves `buf` through the best path, failing over on path errors.
    async fn transfer(
        &self,
        opcode: u8,
        offset_bytes: u64,
        mut buf: IoBuf,
        fua: bool,
    ) -> Result<IoBuf> {
        let start = Instant::now();
        loop {
            let p = self.shared.select(start, &self.opts).await?;
            let (r, b) =
                p.ns.transfer_raw(opcode, offset_bytes, buf, fua, PATH_IO)
                    .await;
            buf = b;
            match r {
                Ok(()) => {
                    p.count_io();
                    return Ok(buf);
                }
                Err(e) if should_failover(&e) => p.failed(&e),
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs a command without data on the best path, failing over on path errors.
    async fn each_path<'a, F, Fut>(&'a self, op: F) -> Result<()>
    where
        F: Fn(Arc<Path<RemoteNamespace>>) -> Fut,
        Fut: std::future::Future<Output = Result<()>> + 'a,
    {
        let start = Instant::now();
        loop {
            let p = self.shared.select(start, &self.opts).await?;
            match op(p.clone()).await {
                Ok(()) => {
                    p.count_io();
                    return Ok(());
                }
                Err(e) if should_failover(&e) => p.failed(&e),
                Err(e) => return Err(e),
            }
        }
    }

    fn fail(&self, e: HostError, offset_bytes: u64, len_bytes: u64) -> BlockError {
        crate::namespace::device_error(
            &self.stats,
            self.info.size_bytes,
            e,
            offset_bytes,
            len_bytes,
        )
    }
}

impl BlockDevice for MultipathNamespace {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            let len = buf.len() as u64;
            check_range(&self.info, offset_bytes, len)?;
            if len == 0 {
                return Ok(buf);
            }
            let buf = self
                .transfer(io::READ, offset_bytes, buf, false)
                .await
                .map_err(|e| self.fail(e, offset_bytes, len))?;
            self.stats.record_read(len);
            Ok(buf)
        })
    }

    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            let len = buf.len() as u64;
            check_range(&self.info, offset_bytes, len)?;
            if len == 0 {
                return Ok(buf);
            }
            let buf = self
                .transfer(io::WRITE, offset_bytes, buf, flags.fua)
                .await
                .map_err(|e| self.fail(e, offset_bytes, len))?;
            self.stats.record_write(len);
            Ok(buf)
        })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.each_path(|p| async move { p.ns.flush_with(PATH_IO).await })
                .await
                .map_err(|e| self.fail(e, 0, 0))?;
            self.stats.record_flush();
            Ok(())
        })
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            check_range(&self.info, offset_bytes, len_bytes)?;
            if len_bytes == 0 {
                return Ok(());
            }
            if !self.info.supports_write_zeroes {
                return crate::namespace::write_zero_buffers(self, offset_bytes, len_bytes).await;
            }
            self.each_path(|p| async move {
                p.ns.write_zeroes_with(offset_bytes, len_bytes, PATH_IO)
                    .await
            })
            .await
            .map_err(|e| self.fail(e, offset_bytes, len_bytes))
        })
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            check_range(&self.info, offset_bytes, len_bytes)?;
            if len_bytes == 0 || !self.info.supports_discard {
                return Ok(());
            }
            self.each_path(|p| async move {
                p.ns.deallocate_with(offset_bytes, len_bytes, PATH_IO).await
            })
            .await
            .map_err(|e| self.fail(e, offset_bytes, len_bytes))
        })
    }

    fn stats(&self) -> DeviceStats {
        self.stats.snapshot()
    }
}
