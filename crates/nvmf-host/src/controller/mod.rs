//! A controller: the admin queue plus N I/O queues, each its own TCP connection.
//!
//! Connect follows the Linux host: admin queue (ICReq, Connect with CNTLID 0xFFFF and
//! KATO), CAP/VS, CC.EN and CSTS.RDY, Identify Controller with the fabrics checks, Set
//! Features Number of Queues, then one Connect per I/O queue with the admin's CNTLID,
//! and Keep Alive every KATO/2 in the background.

mod admin;
mod enable;
mod fabrics;
mod keepalive;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvme_proto::Command;
use nvme_proto::fabrics::{
    CNTLID_DYNAMIC, Cap, ConnectCommand, ConnectData, DISCOVERY_NQN, PropertySize, Vs, reg,
    validate_nqn,
};
use nvme_proto::identify::IdentifyController;
use nvme_proto::identify::controller::bits as idbits;
use nvme_proto::tcp::Digests;

pub use admin::LOG_PAGE_CHUNK_BYTES;

use crate::error::{HostError, Result};
use crate::host_identity::HostIdentity;
use crate::namespace::RemoteNamespace;
use crate::queue::{ADMIN_IN_CAPSULE_BYTES, Completed, Payload, QueueOptions, QueuePair};

/// Admin queue entries (Linux NVME_AQ_DEPTH).
pub const ADMIN_QUEUE_SIZE: u16 = 32;
/// Largest transfer when MDTS is 0 ("no limit"): what one Read of 65536 512-byte blocks
/// moves, as Linux ends up sending to such targets.
pub const UNLIMITED_MDTS_BYTES: u32 = 32 << 20;

/// How to connect.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// I/O queues to ask for (0: admin queue only). The controller may grant fewer.
    pub io_queues: u16,
    /// I/O queue entries; capped by CAP.MQES + 1 and MAXCMD.
    pub queue_size: u16,
    pub digests: Digests,
    /// Keep Alive Timeout sent in Connect; 0 disables keep-alive.
    pub kato_ms: u32,
    pub io_timeout_ms: u64,
    pub admin_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// Wait for CSTS.SHST after CC.SHN at most this long.
    pub shutdown_timeout_ms: u64,
}

impl Default for ConnectOptions {
    /// Linux's defaults: one I/O queue per CPU (here at most 8), 128 entries, no digests,
    /// KATO 5 s, 30 s I/O and 60 s admin timeouts.
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        ConnectOptions {
            io_queues: cpus.clamp(1, 8) as u16,
            queue_size: 128,
            digests: Digests::default(),
            kato_ms: 5000,
            io_timeout_ms: 30_000,
            admin_timeout_ms: 60_000,
            connect_timeout_ms: 10_000,
            shutdown_timeout_ms: 5_000,
        }
    }
}

struct Inner {
    addr: SocketAddr,
    subnqn: String,
    host: HostIdentity,
    opts: ConnectOptions,
    cntlid: u16,
    cap: Cap,
    vs: Vs,
    id: IdentifyController,
    admin: QueuePair,
    io: Vec<QueuePair>,
    io_queue_size: u16,
    max_transfer_bytes: u32,
    next_io: AtomicUsize,
    keepalive: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut g) = self.keepalive.lock()
            && let Some(h) = g.take()
        {
            h.abort();
        }
    }
}

/// A connected controller. Cheap to clone; the connections close when the last clone is
/// dropped or on [`Controller::disconnect`].
#[derive(Clone)]
pub struct Controller {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("addr", &self.inner.addr)
            .field("subnqn", &self.inner.subnqn)
            .field("cntlid", &self.inner.cntlid)
            .field("io_queues", &self.inner.io.len())
            .finish()
    }
}

impl Controller {
    /// Connects to subsystem `subnqn` at `addr` as `host`, enables the controller and
    /// opens the I/O queues.
    pub async fn connect(
        addr: SocketAddr,
        subnqn: &str,
        host: &HostIdentity,
        opts: &ConnectOptions,
    ) -> Result<Controller> {
        validate_nqn(subnqn)
            .map_err(|e| HostError::Usage(format!("subsystem NQN {subnqn:?}: {e}")))?;
        validate_nqn(&host.hostnqn)
            .map_err(|e| HostError::Usage(format!("host NQN {:?}: {e}", host.hostnqn)))?;
        let admin_opts = QueueOptions {
            qid: 0,
            queue_size: ADMIN_QUEUE_SIZE,
            digests: opts.digests,
            in_capsule_max_bytes: ADMIN_IN_CAPSULE_BYTES,
            command_timeout_ms: opts.admin_timeout_ms,
            connect_timeout_ms: opts.connect_timeout_ms,
        };
        let admin = QueuePair::connect(addr, &admin_opts).await?;
        let data = ConnectData {
            hostid: host.hostid,
            cntlid: CNTLID_DYNAMIC,
            subnqn: subnqn.to_string(),
            hostnqn: host.hostnqn.clone(),
        };
        let cmd = ConnectCommand {
            recfmt: 0,
            qid: 0,
            sqsize: ADMIN_QUEUE_SIZE - 1,
            cattr: 0,
            kato_ms: opts.kato_ms,
        };
        let cntlid = fabrics::connect_queue(&admin, cmd, &data).await?;
        let cap =
            Cap::from_u64(fabrics::property_get(&admin, reg::CAP, PropertySize::Eight).await?);
        let vs =
            Vs::from_u32(fabrics::property_get(&admin, reg::VS, PropertySize::Four).await? as u32);
        enable::enable(&admin, &cap).await?;
        let id = admin::identify_controller(&admin).await?;
        let discovery = subnqn == DISCOVERY_NQN || id.cntrltype == idbits::CNTRLTYPE_DISCOVERY;
        check_identify(addr, cntlid, &id, opts, discovery)?;
        let page_bytes = 1u64 << (12 + u32::from(cap.mpsmin));
        let max_transfer_bytes = if id.mdts == 0 {
            UNLIMITED_MDTS_BYTES
        } else {
            (page_bytes << u32::from(id.mdts).min(20)).min(u64::from(u32::MAX)) as u32
        };
        let mut io_queue_size = opts.queue_size.min(cap.mqes.saturating_add(1));
        if id.maxcmd > 0 {
            io_queue_size = io_queue_size.min(id.maxcmd);
        }
        let io_queue_size = io_queue_size.max(crate::queue::MIN_QUEUE_SIZE);
        let want = if discovery { 0 } else { opts.io_queues };
        let granted = if want > 0 {
            admin::set_number_of_queues(&admin, want).await?
        } else {
            0
        };
        let in_capsule = (id.ioccsz.saturating_mul(16)).saturating_sub(64);
        let io = connect_io_queues(
            addr,
            &data,
            cntlid,
            granted,
            QueueOptions {
                qid: 0,
                queue_size: io_queue_size,
                digests: opts.digests,
                in_capsule_max_bytes: in_capsule,
                command_timeout_ms: opts.io_timeout_ms,
                connect_timeout_ms: opts.connect_timeout_ms,
            },
        )
        .await?;
        let keepalive = (opts.kato_ms > 0).then(|| keepalive::spawn(admin.clone(), opts.kato_ms));
        Ok(Controller {
            inner: Arc::new(Inner {
                addr,
                subnqn: subnqn.to_string(),
                host: host.clone(),
                opts: opts.clone(),
                cntlid,
                cap,
                vs,
                id,
                admin,
                io,
                io_queue_size,
                max_transfer_bytes,
                next_io: AtomicUsize::new(0),
                keepalive: Mutex::new(keepalive),
            }),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }
    pub fn subnqn(&self) -> &str {
        &self.inner.subnqn
    }
    pub fn host(&self) -> &HostIdentity {
        &self.inner.host
    }
    pub fn options(&self) -> &ConnectOptions {
        &self.inner.opts
    }
    /// The controller ID Connect returned.
    pub fn cntlid(&self) -> u16 {
        self.inner.cntlid
    }
    pub fn cap(&self) -> &Cap {
        &self.inner.cap
    }
    pub fn vs(&self) -> Vs {
        self.inner.vs
    }
    /// Identify Controller as read during connect.
    pub fn id(&self) -> &IdentifyController {
        &self.inner.id
    }
    pub fn is_discovery(&self) -> bool {
        self.inner.subnqn == DISCOVERY_NQN || self.inner.id.cntrltype == idbits::CNTRLTYPE_DISCOVERY
    }
    /// Largest data transfer of one command (from MDTS and CAP.MPSMIN).
    pub fn max_transfer_bytes(&self) -> u32 {
        self.inner.max_transfer_bytes
    }
    pub fn admin(&self) -> &QueuePair {
        &self.inner.admin
    }
    pub fn io_queues(&self) -> &[QueuePair] {
        &self.inner.io
    }
    /// Entries of each I/O queue (outstanding commands per queue: one less).
    pub fn io_queue_size(&self) -> u16 {
        self.inner.io_queue_size
    }

    /// The next I/O queue, round robin.
    pub fn pick_io_queue(&self) -> Result<&QueuePair> {
        let n = self.inner.io.len();
        if n == 0 {
            return Err(HostError::Usage(format!(
                "controller {} of {} has no I/O queues",
                self.inner.cntlid, self.inner.subnqn
            )));
        }
        let i = self.inner.next_io.fetch_add(1, Ordering::Relaxed) % n;
        Ok(&self.inner.io[i])
    }

    /// Opens namespace `nsid` as a block device.
    pub async fn namespace(&self, nsid: u32) -> Result<RemoteNamespace> {
        RemoteNamespace::open(self, nsid).await
    }

    /// I/O pass-through on the next I/O queue.
    pub async fn submit_io(&self, cmd: Command, data: Payload) -> Result<Completed> {
        self.pick_io_queue()?.submit(cmd, data).await
    }

    pub async fn property_get(&self, ofst: u32, size: PropertySize) -> Result<u64> {
        fabrics::property_get(self.admin(), ofst, size).await
    }

    pub async fn property_set(&self, ofst: u32, size: PropertySize, value: u64) -> Result<()> {
        fabrics::property_set(self.admin(), ofst, size, value).await
    }

    /// Normal shutdown (CC.SHN, wait for CSTS.SHST complete), then disconnect.
    pub async fn shutdown(&self) -> Result<()> {
        self.stop_keepalive();
        let timeout = Duration::from_millis(self.inner.opts.shutdown_timeout_ms);
        let r = enable::shutdown(self.admin(), timeout).await;
        self.disconnect().await;
        r
    }

    /// Closes every queue (I/O first) without telling the controller; outstanding
    /// commands fail with "queue shut down".
    pub async fn disconnect(&self) {
        self.stop_keepalive();
        for q in &self.inner.io {
            q.close().await;
        }
        self.inner.admin.close().await;
    }

    fn stop_keepalive(&self) {
        if let Ok(mut g) = self.inner.keepalive.lock()
            && let Some(h) = g.take()
        {
            h.abort();
        }
    }
}

/// The checks the Linux host makes on Identify Controller of a fabrics controller.
fn check_identify(
    addr: SocketAddr,
    cntlid: u16,
    id: &IdentifyController,
    opts: &ConnectOptions,
    discovery: bool,
) -> Result<()> {
    let bad = |reason: String| {
        Err(HostError::invalid(
            format!("Identify Controller from {addr}"),
            reason,
        ))
    };
    if id.cntlid != cntlid {
        return bad(format!(
            "CNTLID {} differs from the {} Connect returned",
            id.cntlid, cntlid
        ));
    }
    if id.kas == 0 && opts.kato_ms > 0 {
        return bad("KAS is 0 but keep-alive is mandatory for fabrics".into());
    }
    if id.icdoff != 0 {
        return bad(format!("ICDOFF {} is not supported (must be 0)", id.icdoff));
    }
    if id.sgls & (idbits::SGLS_SUPPORTED | idbits::SGLS_DWORD_ALIGNED) == 0 {
        return bad("SGLS reports no SGL support".into());
    }
    if !discovery && opts.io_queues > 0 && (id.ioccsz < 4 || id.iorcsz < 1) {
        return bad(format!(
            "IOCCSZ {} / IORCSZ {} below the minimum 4 / 1",
            id.ioccsz, id.iorcsz
        ));
    }
    Ok(())
}

/// Connects I/O queues 1..=n concurrently.
async fn connect_io_queues(
    addr: SocketAddr,
    data: &ConnectData,
    cntlid: u16,
    n: u16,
    template: QueueOptions,
) -> Result<Vec<QueuePair>> {
    let mut set = tokio::task::JoinSet::new();
    for qid in 1..=n {
        let data = ConnectData {
            cntlid,
            ..data.clone()
        };
        let opts = QueueOptions {
            qid,
            ..template.clone()
        };
        set.spawn(async move {
            let q = QueuePair::connect(addr, &opts).await?;
            let cmd = ConnectCommand {
                recfmt: 0,
                qid,
                sqsize: opts.queue_size - 1,
                cattr: 0,
                kato_ms: 0,
            };
            let got = fabrics::connect_queue(&q, cmd, &data).await?;
            if got != cntlid {
                return Err(HostError::invalid(
                    format!("Connect of I/O queue {qid} to {addr}"),
                    format!("target answered CNTLID {got}, not the admin queue's {cntlid}"),
                ));
            }
            Ok(q)
        });
    }
    let mut queues = Vec::with_capacity(usize::from(n));
    let mut first_err = None;
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(q)) => queues.push(q),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(HostError::Usage(format!("I/O queue connect task: {e}")));
            }
        }
    }
    if let Some(e) = first_err {
        for q in &queues {
            q.close().await;
        }
        return Err(e);
    }
    queues.sort_by_key(|q| q.qid());
    Ok(queues)
}
