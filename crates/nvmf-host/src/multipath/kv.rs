//! A Key Value namespace through several controllers: the paths, ANA choice, identity
//! checks and background rejoins of the block multipath namespace, with the KV commands
//! of [`crate::kv`] on top. A command that fails with a path error is sent again on
//! another path (the re-send rules of `crate::kv` apply: a failed-over command counts as
//! re-sent).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use blockdev::IoBuf;

use super::identity::NsIdentity;
use super::join::{self, JoinParams, PathAddr};
use super::path::{Path, should_failover};
use super::{MultipathOptions, PATH_IO, PathInfo, PathNs, PendingPath, Shared};
use crate::controller::{ConnectOptions, Controller};
use crate::error::Result;
use crate::host_identity::HostIdentity;
use crate::kv::{
    Attempt, BufResult, KvError, KvNamespace, KvNamespaceInfo, KvPage, StoreMode,
    list_buffer_bytes, page_of,
};

impl PathNs for KvNamespace {
    fn controller(&self) -> &Controller {
        KvNamespace::controller(self)
    }
    fn nsid(&self) -> u32 {
        KvNamespace::nsid(self)
    }
    fn anagrpid(&self) -> u32 {
        self.info().anagrpid
    }
    async fn open(ctrl: &Controller, nsid: Option<u32>) -> Result<Self> {
        match nsid {
            Some(n) => KvNamespace::open(ctrl, n).await,
            None => KvNamespace::open_first(ctrl).await,
        }
    }
    async fn identity(ctrl: &Controller, nsid: u32) -> Result<NsIdentity> {
        let info = crate::kv::identify(ctrl, nsid).await?;
        Ok(NsIdentity::of_kv(&info))
    }
}

/// One Key Value namespace over several paths; see the module docs.
pub struct MultipathKvNamespace {
    shared: Arc<Shared<KvNamespace>>,
    info: KvNamespaceInfo,
    opts: MultipathOptions,
}

impl std::fmt::Debug for MultipathKvNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultipathKvNamespace")
            .field("name", &self.info.name)
            .field("paths", &self.paths())
            .field("pending", &self.pending_paths())
            .finish()
    }
}

impl MultipathKvNamespace {
    /// Connects to `subnqn` at every address at once and opens KV namespace `nsid` (the
    /// first active KV namespace when None) through each. Opens when any path connects;
    /// the others join in the background once they connect and show the same namespace.
    /// Fails with [`HostError::NoPathConnects`] when no path connects.
    pub async fn connect(
        addrs: Vec<PathAddr>,
        subnqn: &str,
        nsid: Option<u32>,
        host: &HostIdentity,
        opts: &ConnectOptions,
        mp: MultipathOptions,
    ) -> Result<MultipathKvNamespace> {
        let params = JoinParams {
            subnqn: subnqn.to_string(),
            host: host.clone(),
            opts: opts.clone(),
        };
        let (shared, first) =
            join::open::<KvNamespace, _>(addrs, nsid, params, |ns| ns.info().clone()).await?;
        let mut info = first;
        info.name = shared.name.clone();
        Ok(MultipathKvNamespace {
            shared,
            info,
            opts: mp,
        })
    }

    /// What the first path reported at open (the name is the multipath one). The
    /// largest value is that path's; paths to one namespace report the same format.
    pub fn info(&self) -> &KvNamespaceInfo {
        &self.info
    }

    /// Every connected path, in the order of the addresses given.
    pub fn paths(&self) -> Vec<PathInfo> {
        self.shared.path_infos()
    }

    /// The paths not connected now, retried in the background.
    pub fn pending_paths(&self) -> Vec<PendingPath> {
        self.shared.pending_paths()
    }

    /// Removes the paths through `addr`; returns how many.
    pub fn remove_path(&self, addr: SocketAddr) -> usize {
        self.shared.remove_path(addr)
    }

    /// Disconnects every path and stops retrying; later commands fail with no path.
    pub async fn disconnect(&self) {
        self.shared.disconnect_all().await;
    }

    /// Runs `op` on the best path, failing over to another on path errors; `op` gets the
    /// path, the buffer and whether this is a re-send on another path.
    async fn run<T, F, Fut>(&self, mut buf: IoBuf, mut op: F) -> BufResult<T>
    where
        F: FnMut(Arc<Path<KvNamespace>>, IoBuf, Attempt) -> Fut,
        Fut: std::future::Future<Output = BufResult<T>>,
    {
        let start = Instant::now();
        let mut attempt = Attempt::FIRST;
        loop {
            let p = match self.shared.select(start, &self.opts).await {
                Ok(p) => p,
                Err(e) => return (Err(e.into()), buf),
            };
            let (r, back) = op(p.clone(), buf, attempt).await;
            buf = back;
            let cause = r.as_ref().err().and_then(KvError::as_host_error);
            match cause.filter(should_failover) {
                Some(h) => {
                    p.failed(&h);
                    // Whether the command reached the target is unknown.
                    attempt = Attempt::AGAIN;
                }
                None => {
                    if r.is_ok() {
                        p.count_io();
                    }
                    return (r, buf);
                }
            }
        }
    }

    /// As [`KvNamespace::store`], through the best path.
    pub async fn store(&self, key: &[u8], value: IoBuf, mode: StoreMode) -> BufResult<()> {
        self.run(value, |p, v, a| async move {
            p.ns.raw().store(key, v, mode, PATH_IO, a).await
        })
        .await
    }

    /// As [`KvNamespace::retrieve`], through the best path.
    pub async fn retrieve(&self, key: &[u8], buf: IoBuf) -> BufResult<u32> {
        self.run(buf, |p, b, a| async move {
            p.ns.raw().retrieve(key, b, PATH_IO, a).await
        })
        .await
    }

    /// As [`KvNamespace::delete`], through the best path.
    pub async fn delete(&self, key: &[u8]) -> Result<(), KvError> {
        self.run(IoBuf::new_zeroed(0), |p, b, a| async move {
            (p.ns.raw().delete(key, PATH_IO, a).await, b)
        })
        .await
        .0
    }

    /// As [`KvNamespace::exist`], through the best path.
    pub async fn exist(&self, key: &[u8]) -> Result<bool, KvError> {
        self.run(IoBuf::new_zeroed(0), |p, b, a| async move {
            (p.ns.raw().exist(key, PATH_IO, a).await, b)
        })
        .await
        .0
    }

    /// As [`KvNamespace::list_into`], through the best path.
    pub async fn list_into(&self, start: Option<&[u8]>, buf: IoBuf) -> BufResult<u32> {
        self.run(buf, |p, b, a| async move {
            p.ns.raw().list(start, b, PATH_IO, a).await
        })
        .await
    }

    /// As [`KvNamespace::list`], through the best path.
    pub async fn list(&self, start: Option<&[u8]>, max_keys: usize) -> Result<KvPage, KvError> {
        let n = list_buffer_bytes(max_keys).min(self.info.max_transfer_bytes as usize);
        let (r, buf) = self.list_into(start, IoBuf::new_zeroed(n)).await;
        r?;
        page_of(&buf, max_keys)
    }
}
