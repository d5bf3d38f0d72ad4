//! One namespace reached through several controllers of the same subsystem (different
//! addresses or ports): a `BlockDevice` that sends each I/O down the best path by ANA
//! state (optimized, then non-optimized, never inaccessible or persistent loss), waits
//! up to ANATT through an ANA transition, and moves an I/O that failed with a path error
//! (connection loss, timeout, ANA status SCT 3) to another path. Each path's controller
//! reconnects on its own; a path is used again once its controller is live and its
//! group accessible.
//!
//! Failover sends a read or write again on another path, so it relies on the same
//! idempotence as reconnect retries: the same data to the same blocks. A write that
//! reached the target before its path failed is written twice with the same data.

mod path;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use blockdev::{
    BlockDevice, BlockError, DeviceInfo, DeviceKind, DeviceStats, IoBuf, IoFuture, StatsCounters,
    WriteFlags, check_range,
};
use nvme_proto::opcode::io;
use tokio::sync::Notify;

pub use path::PathInfo;

use crate::controller::{ConnectOptions, Controller, thread_slot};
use crate::error::{HostError, Result};
use crate::host_identity::HostIdentity;
use crate::namespace::RemoteNamespace;
use crate::queue::SubmitOptions;
use path::{Path, Usable, should_failover};

fn usable_text(u: &Usable) -> &'static str {
    match u {
        Usable::Optimized => "optimized",
        Usable::NonOptimized => "non-optimized",
        Usable::Transition { .. } => "ANA transition",
        Usable::Inaccessible => "inaccessible",
        Usable::Down { recoverable: true } => "down (reconnecting)",
        Usable::Down { recoverable: false } => "lost",
    }
}

/// Which of several equally good paths takes an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathPolicy {
    /// The first in the order paths were added (Linux's default "numa" policy on one
    /// node): I/O returns to it when it recovers.
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
    /// a controller exists ("queue if no path"); bound it here.
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

struct Shared {
    paths: RwLock<Vec<Arc<Path>>>,
    /// Woken whenever a path's controller status changes.
    changed: Arc<Notify>,
}

/// A namespace over several paths; see the module docs.
pub struct MultipathNamespace {
    shared: Arc<Shared>,
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
            .finish()
    }
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

impl MultipathNamespace {
    /// Connects to `subnqn` at each address and opens namespace `nsid` on each. Fails
    /// only when no path connects (the others are logged; add them later with
    /// [`MultipathNamespace::add_path`]).
    pub async fn connect(
        addrs: &[SocketAddr],
        subnqn: &str,
        nsid: u32,
        host: &HostIdentity,
        opts: &ConnectOptions,
        mp: MultipathOptions,
    ) -> Result<MultipathNamespace> {
        let mut paths = Vec::new();
        let mut first_err = None;
        for &a in addrs {
            let r = async {
                let c = Controller::connect(a, subnqn, host, opts).await?;
                c.namespace(nsid).await
            }
            .await;
            match r {
                Ok(ns) => paths.push(ns),
                Err(e) => {
                    tracing::warn!(addr = %a, "path to {subnqn} not connected: {e}");
                    first_err.get_or_insert(e);
                }
            }
        }
        if paths.is_empty() {
            return Err(first_err.unwrap_or_else(|| {
                HostError::Usage("multipath needs at least one address".into())
            }));
        }
        MultipathNamespace::new(paths, mp)
    }

    /// Builds a multipath namespace from opened paths: the same subsystem and NSID, and
    /// (when reported) the same NGUID / EUI-64.
    pub fn new(paths: Vec<RemoteNamespace>, opts: MultipathOptions) -> Result<Self> {
        let Some(first) = paths.first() else {
            return Err(HostError::Usage("multipath needs at least one path".into()));
        };
        let subnqn = first.controller().subnqn().to_string();
        let nsid = first.nsid();
        let mut info = first.info().clone();
        info.name = format!("nvme+tcp-multipath://{subnqn}/{nsid}");
        info.kind = DeviceKind::Other("nvme-tcp-multipath".into());
        let mp = MultipathNamespace {
            shared: Arc::new(Shared {
                paths: RwLock::new(Vec::new()),
                changed: Arc::new(Notify::new()),
            }),
            subnqn,
            nsid,
            info,
            opts,
            stats: StatsCounters::new(),
        };
        for ns in paths {
            mp.add_path(ns)?;
        }
        Ok(mp)
    }

    /// Adds a path (a namespace opened through another controller of the subsystem).
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
        let mut paths = self.shared.paths.write().unwrap_or_else(|p| p.into_inner());
        if let Some(other) = paths.first() {
            let (a, b) = (other.ns.id(), ns.id());
            let same = (a.nguid == [0; 16] || a.nguid == b.nguid)
                && (a.eui64 == [0; 8] || a.eui64 == b.eui64);
            if !same {
                drop(paths);
                return bad(format!(
                    "path {} reports another NGUID/EUI-64",
                    ns.controller().addr()
                ));
            }
        }
        paths.push(Path::new(ns, self.shared.changed.clone()));
        Ok(())
    }

    /// Removes the paths through `addr`; returns how many.
    pub fn remove_path(&self, addr: SocketAddr) -> usize {
        let mut paths = self.shared.paths.write().unwrap_or_else(|p| p.into_inner());
        let before = paths.len();
        paths.retain(|p| p.ns.controller().addr() != addr);
        before - paths.len()
    }

    /// Every path with its state and how many I/Os it completed.
    pub fn paths(&self) -> Vec<PathInfo> {
        read(&self.shared.paths).iter().map(|p| p.info()).collect()
    }

    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// The path for the next I/O, waiting for one if needed (bounded by the no-path
    /// timeout). Paths in ANA transition are waited for; past ANATT their controller is
    /// reset (see `Path::usable`).
    async fn select(&self, start: Instant) -> Result<Arc<Path>> {
        let deadline = start + Duration::from_millis(self.opts.no_path_timeout_ms);
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let why = {
                let paths = read(&self.shared.paths);
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
                    let pick = match self.opts.policy {
                        PathPolicy::First => 0,
                        PathPolicy::Spread => thread_slot() % n_best.max(1),
                    };
                    if let Some(p) = paths.iter().filter(|p| p.usable() == b).nth(pick) {
                        return Ok(p.clone());
                    }
                    // A state changed in between: look again.
                    continue;
                }
                let states: Vec<Usable> = paths.iter().map(|p| p.usable()).collect();
                let may_recover = states.iter().any(|u| {
                    matches!(
                        u,
                        Usable::Transition { .. }
                            | Usable::Inaccessible
                            | Usable::Down { recoverable: true }
                    )
                });
                let why = if paths.is_empty() {
                    "no paths".to_string()
                } else {
                    paths
                        .iter()
                        .zip(&states)
                        .map(|(p, u)| format!("{}: {}", p.ns.controller().addr(), usable_text(u)))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                if !may_recover {
                    return Err(self.no_path(start, why));
                }
                why
            };
            let wait = deadline.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                return Err(self.no_path(start, why));
            }
            // Also re-check now and then: ANATT expiry is seen by looking.
            let _ = tokio::time::timeout(wait.min(Duration::from_millis(500)), changed).await;
        }
    }

    fn no_path(&self, start: Instant, detail: String) -> HostError {
        HostError::NoPath {
            name: self.info.name.clone(),
            waited_ms: start.elapsed().as_millis() as u64,
            detail,
        }
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
            let p = self.select(start).await?;
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
        F: Fn(Arc<Path>) -> Fut,
        Fut: std::future::Future<Output = Result<()>> + 'a,
    {
        let start = Instant::now();
        loop {
            let p = self.select(start).await?;
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
