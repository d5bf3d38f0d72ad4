//! The members of an owned volume as this processor node reaches them: NVMe/TCP
//! namespaces opened with the node's own host identity, each wrapped so that the first
//! Reservation Conflict fences the whole volume at once (no member I/O leaves this node
//! after that, not even background work of the volume engine).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use blockdev::{
    BlockDevice, BlockError, DeviceInfo, DeviceStats, IoBuf, IoFuture, IoObserver, IoOp, WriteFlags,
};
use meta::schema::{NODES, list_json};
use nvmf_host::{ConcatOptions, ConnectOptions, NvmeTcpUrl, RemoteNamespace};
use tokio::sync::watch;

use super::Ctx;
use super::error::ProcessorError;
use crate::records::{NodeRecord, NodeRole};

/// Member connections of a processor node: short timeouts so that a dead storage node
/// is noticed in seconds (its member fails and the volume goes on degraded) instead of
/// the minutes a host-side default would wait.
pub fn member_connect_defaults() -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        kato_ms: 2_000,
        io_timeout_ms: 4_000,
        admin_timeout_ms: 5_000,
        connect_timeout_ms: 3_000,
        reconnect_delay_ms: 250,
        reconnect_delay_max_ms: 1_000,
        ctrl_loss_tmo_ms: Some(3_000),
        ..ConnectOptions::default()
    }
}

/// Set once a member said another host holds the reservation: this node was fenced.
#[derive(Debug)]
pub(crate) struct FenceLatch {
    fenced: AtomicBool,
    tx: watch::Sender<bool>,
}

impl FenceLatch {
    pub fn new() -> Arc<FenceLatch> {
        Arc::new(FenceLatch {
            fenced: AtomicBool::new(false),
            tx: watch::Sender::new(false),
        })
    }

    /// Closes the latch: every later member I/O fails without being sent.
    pub fn close(&self, why: &str) {
        if !self.fenced.swap(true, Ordering::AcqRel) {
            tracing::warn!("processor: member I/O stopped: {why}");
            self.tx.send_replace(true);
        }
    }

    pub fn is_closed(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// Resolves once the latch is closed.
    pub async fn closed(&self) {
        let mut rx = self.tx.subscribe();
        let _ = rx.wait_for(|f| *f).await;
    }
}

/// One member namespace behind the fence latch. Its name is the member URL, so the
/// volume's status names members the way the volume record does.
pub(crate) struct MemberDevice {
    ns: Arc<RemoteNamespace>,
    info: DeviceInfo,
    latch: Arc<FenceLatch>,
}

impl MemberDevice {
    pub fn new(ns: Arc<RemoteNamespace>, url: &str, latch: Arc<FenceLatch>) -> MemberDevice {
        let mut info = ns.info().clone();
        info.name = url.to_string();
        MemberDevice { ns, info, latch }
    }

    fn check(&self) -> Result<(), BlockError> {
        if self.latch.is_closed() {
            Err(BlockError::ReservationConflict)
        } else {
            Ok(())
        }
    }

    fn seen<T>(&self, r: Result<T, BlockError>) -> Result<T, BlockError> {
        self.watch(r.as_ref().err());
        r
    }

    /// Closes the latch on a Reservation Conflict (nvmf-host reports NVMe Reservation
    /// Conflict, and preempt-and-abort, as this).
    fn watch(&self, error: Option<&BlockError>) {
        if let Some(BlockError::ReservationConflict) = error {
            self.latch.close(&format!(
                "{}: reservation conflict (fenced)",
                self.info.name
            ));
        }
    }
}

/// Watches the member's reads and writes for the Reservation Conflict that fences.
impl IoObserver for MemberDevice {
    fn begin(&self) -> u64 {
        0
    }

    fn end(&self, _op: IoOp, _bytes: u64, _token: u64, error: Option<&BlockError>) {
        self.watch(error);
    }

    fn cancelled(&self, _token: u64) {}
}

impl BlockDevice for MemberDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    // Reads and writes: the namespace's own future with the latch watching it (no wrapper
    // future: nothing is allocated per member I/O).
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        let len = buf.len() as u64;
        match self.check() {
            Ok(()) => self
                .ns
                .read(offset_bytes, buf)
                .observed(self, IoOp::Read, len),
            Err(e) => IoFuture::ready(Err(e)),
        }
    }
    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        let len = buf.len() as u64;
        match self.check() {
            Ok(()) => self
                .ns
                .write(offset_bytes, buf, flags)
                .observed(self, IoOp::Write, len),
            Err(e) => IoFuture::ready(Err(e)),
        }
    }
    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check()?;
            self.seen(self.ns.flush().await)
        })
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check()?;
            self.seen(self.ns.write_zeroes(offset_bytes, len_bytes).await)
        })
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check()?;
            self.seen(self.ns.discard(offset_bytes, len_bytes).await)
        })
    }
    fn stats(&self) -> DeviceStats {
        self.ns.stats()
    }
}

/// Connects to a member URL with this node's identity and member options, over TLS when
/// [`tls_route`] finds the member's TLS listeners: with the configured PSK, or, with
/// `member_concat`, with the PSK that authentication on the URL's plain listener generates.
pub(crate) async fn open_member(
    ctx: &Ctx,
    url: &str,
) -> Result<Arc<RemoteNamespace>, ProcessorError> {
    let mut parsed = NvmeTcpUrl::parse(url)?;
    let mut opts = ctx.cfg.member_connect.clone();
    opts.busy_poll_us = ctx.cfg.busy_poll_us;
    let concat = ctx.cfg.member_concat && opts.dhchap.is_some();
    if concat || opts.tls.is_some() {
        let nodes = match list_json::<NodeRecord, _>(ctx.store.as_ref(), NODES).await {
            Ok(l) => l.items.into_iter().map(|(_, v)| v.value).collect(),
            Err(e) => {
                tracing::warn!(node = %ctx.name, url, "processor: node records unreadable, member connected in plain TCP: {e}");
                Vec::new()
            }
        };
        match (tls_route(&parsed, &nodes), concat) {
            (Some(addrs), true) => {
                // The exchange runs on the URL's plain listener; the queues go over TLS.
                opts.tls = None;
                opts.concat = Some(ConcatOptions { tls_addr: addrs[0] });
            }
            (Some(addrs), false) => set_paths(&mut parsed, &addrs),
            (None, _) => {
                tracing::debug!(node = %ctx.name, url, "processor: no TLS listener known for the member: plain TCP");
                opts.tls = None;
            }
        }
    }
    Ok(Arc::new(parsed.open(&ctx.host, &opts).await?))
}

/// The TLS listeners of the storage node that `url` names: the node whose record lists one
/// of the URL's addresses (plain or TLS, IP literals only) and any TLS listener. A member
/// URL keeps the addresses it was made with (usually the node's plain listeners), so a
/// processor node with a TLS PSK finds the TLS ones here (node record format 3).
pub(crate) fn tls_route(url: &NvmeTcpUrl, nodes: &[NodeRecord]) -> Option<Vec<SocketAddr>> {
    let wanted: Vec<SocketAddr> = url
        .path_addrs()
        .iter()
        .filter_map(|p| Some(SocketAddr::new(p.host.parse::<IpAddr>().ok()?, p.port)))
        .collect();
    nodes
        .iter()
        .filter(|n| n.role == NodeRole::Storage && !n.tls_addrs.is_empty())
        .find(|n| {
            wanted
                .iter()
                .any(|a| n.nvme_addrs.contains(a) || n.tls_addrs.contains(a))
        })
        .map(|n| n.tls_addrs.clone())
}

/// Points `url` at `addrs` (at least one).
fn set_paths(url: &mut NvmeTcpUrl, addrs: &[SocketAddr]) {
    let mut it = addrs.iter().map(|a| (a.ip().to_string(), a.port()));
    if let Some((host, port)) = it.next() {
        url.host = host;
        url.port = port;
        url.more_paths = it.collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storage(name: &str, plain: &str, tls: &[&str]) -> NodeRecord {
        let mut r = NodeRecord::new(name, NodeRole::Storage, vec![plain.parse().unwrap()]);
        r.tls_addrs = tls.iter().map(|a| a.parse().unwrap()).collect();
        r
    }

    #[test]
    fn members_are_routed_to_their_nodes_tls_listeners() {
        let nodes = vec![
            storage("n1", "10.0.0.1:4420", &["10.0.0.1:4430"]),
            storage("n2", "10.0.0.2:4420", &[]),
            storage("n3", "10.0.0.3:4420", &["10.0.0.3:4430", "10.0.0.4:4430"]),
        ];
        let route = |u: &str| tls_route(&NvmeTcpUrl::parse(u).unwrap(), &nodes);
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            route("nvme+tcp://10.0.0.1:4420/nqn.2026-01.io.ferrobay:n1:d0/1"),
            Some(vec![a("10.0.0.1:4430")])
        );
        // Already the TLS listener: the same.
        assert_eq!(
            route("nvme+tcp://10.0.0.1:4430/nqn.2026-01.io.ferrobay:n1:d0/1"),
            Some(vec![a("10.0.0.1:4430")])
        );
        // A node without TLS listeners, an unknown target, a host name: plain TCP.
        assert_eq!(
            route("nvme+tcp://10.0.0.2:4420/nqn.2026-01.io.ferrobay:n2:d0/1"),
            None
        );
        assert_eq!(
            route("nvme+tcp://10.9.9.9:4420/nqn.2014-08.org.x:y/1"),
            None
        );
        assert_eq!(route("nvme+tcp://jbof:4420/nqn.2014-08.org.x:y/1"), None);
        let mut u =
            NvmeTcpUrl::parse("nvme+tcp://10.0.0.3:4420/nqn.2026-01.io.ferrobay:n3:d0/1").unwrap();
        let addrs = tls_route(&u, &nodes).unwrap();
        set_paths(&mut u, &addrs);
        assert_eq!(
            u.to_string(),
            "nvme+tcp://10.0.0.3:4430,10.0.0.4:4430/nqn.2026-01.io.ferrobay:n3:d0/1"
        );
    }
}
