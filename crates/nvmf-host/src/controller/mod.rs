//! A controller: the admin queue plus N I/O queues, each its own TCP connection, kept
//! alive across connection loss.
//!
//! Connect follows the Linux host (see `session.rs`), then a supervisor task owns the
//! controller's health: Keep Alive every KATO/2, one Asynchronous Event Request always
//! outstanding, per-command timeouts answered with Abort and, when that does not help, a
//! controller reset; a lost connection (or a failed Keep Alive) starts a reconnect with
//! exponential backoff until the controller-loss timeout. Commands marked for retry (the
//! namespace's reads and writes) wait through a reconnect and are sent again; everything
//! else fails at once. State and events are published on a watch channel
//! ([`Controller::watch`]).

mod admin;
mod auth;
mod concat;
mod enable;
mod events;
mod fabrics;
mod keepalive;
mod session;
mod status;
mod supervisor;

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use nvme_proto::Command;
use nvme_proto::fabrics::{Cap, DISCOVERY_NQN, PropertySize, Vs, validate_nqn};
use nvme_proto::identify::IdentifyController;
use nvme_proto::identify::controller::bits as idbits;
use nvme_proto::tcp::Digests;
use tokio::sync::{Notify, watch};

pub use admin::LOG_PAGE_CHUNK_BYTES;
pub use auth::DhchapCredentials;
pub use concat::ConcatOptions;
pub use status::{ControllerState, ControllerStatus, ana_state_name};

use crate::error::{HostError, Result};
use crate::host_identity::HostIdentity;
use crate::namespace::RemoteNamespace;
use crate::queue::{
    ADMIN_IN_CAPSULE_BYTES, Completed, Payload, QueueOptions, QueuePair, SubmitOptions,
};
use session::{Params, Session};

/// In-flight data on a thread's own I/O queue above which its transfers go to the least
/// loaded queue (small I/O keeps to one queue; streams spread over connections).
pub const SPILL_INFLIGHT_BYTES: u64 = 256 * 1024;
/// Admin queue entries (Linux NVME_AQ_DEPTH).
pub const ADMIN_QUEUE_SIZE: u16 = 32;
/// Largest transfer when MDTS is 0 ("no limit"). Linux 6.1 nvmet reports MDTS 0 on TCP
/// yet answers Data SGL Length Invalid to any Read or Write above 4 MiB (seen in
/// tests/kernel_target.rs), so "no limit" is taken as 4 MiB.
pub const UNLIMITED_MDTS_BYTES: u32 = 4 << 20;

/// How to connect, and how hard to hold on.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// I/O queues to ask for (0: admin queue only). The controller may grant fewer.
    pub io_queues: u16,
    /// I/O queue entries; capped by CAP.MQES + 1 and MAXCMD.
    pub queue_size: u16,
    pub digests: Digests,
    /// Keep Alive Timeout sent in Connect; 0 disables keep-alive.
    pub kato_ms: u32,
    /// Per-command timeout of I/O commands; past it the command is aborted and, if that
    /// does not bring its completion, the controller is reset.
    pub io_timeout_ms: u64,
    pub admin_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// Wait for CSTS.SHST after CC.SHN at most this long.
    pub shutdown_timeout_ms: u64,
    /// Pause before the second reconnect attempt (the first is immediate); it doubles
    /// per attempt up to `reconnect_delay_max_ms` (nvme-cli `-c`, `--reconnect-delay`).
    pub reconnect_delay_ms: u64,
    pub reconnect_delay_max_ms: u64,
    /// Give up reconnecting this long after the connection was lost: commands waiting
    /// for the reconnect then fail with [`HostError::ControllerLost`]. None: never give
    /// up; Some(0): no reconnect at all (nvme-cli `-l`, `--ctrl-loss-tmo`).
    pub ctrl_loss_tmo_ms: Option<u64>,
    /// Ask every queue to run without SQ flow control (Connect CATTR bit 2, nvme-cli
    /// `--disable-sqflow`): the target may then complete reads with the C2HData SUCCESS
    /// flag instead of a separate CapsuleResp.
    pub disable_sqflow: bool,
    /// DH-HMAC-CHAP secrets, used when the target asks for authentication (AUTHREQ.ATR
    /// in the Connect response); without them such a target is refused.
    pub dhchap: Option<DhchapCredentials>,
    /// TLS 1.3 with the PSK derived from this configured PSK (nvme-cli `--tls`): every
    /// queue's TCP connection starts with the handshake.
    pub tls: Option<TlsCredentials>,
    /// Secure channel concatenation (nvme-cli `--concat`): authenticate with DH-HMAC-CHAP
    /// on a plain-TCP admin queue to the address given, then connect every queue over TLS
    /// to `tls_addr` with the PSK that authentication generated; every reconnect does it
    /// again. Needs `dhchap`; excludes `tls`.
    pub concat: Option<ConcatOptions>,
    /// Opt-in busy polling of the I/O queues' drivers (`blockdev::BusyPoll`): a driver
    /// that made progress polls its socket this long before it sleeps; 0 (the default)
    /// never polls. It helps only on a runtime with one worker thread.
    pub busy_poll_us: u32,
}

/// A host's configured TLS PSK (`NVMeTLSkey-1:..`) and the PSK identity version it offers
/// (0: `NVMe0R0h <hostnqn> <subnqn>`, what Linux 6.12 looks up; 1: with the PSK digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsCredentials {
    pub psk: nvme_proto::tls_key::ConfiguredPsk,
    pub identity_version: u8,
}

impl TlsCredentials {
    pub fn new(psk: nvme_proto::tls_key::ConfiguredPsk) -> Self {
        TlsCredentials {
            psk,
            identity_version: 0,
        }
    }

    /// The TLS PSK and identity for `hostnqn` connecting to `subnqn`.
    pub fn tls_psk(&self, hostnqn: &str, subnqn: &str) -> Result<tls_psk::Psk> {
        let (identity, key) = self
            .psk
            .tls_psk(self.identity_version, hostnqn, subnqn)
            .map_err(|e| HostError::Usage(format!("TLS PSK: {e}")))?;
        tls_psk::Psk::new(identity, &key, self.psk.hash().tls_alg())
            .map_err(|e| HostError::Usage(format!("TLS PSK: {e}")))
    }
}

impl Default for ConnectOptions {
    /// Linux's defaults: one I/O queue per CPU (here at most 8), 128 entries, no digests,
    /// KATO 5 s, 30 s I/O and 60 s admin timeouts, controller-loss timeout 600 s; the
    /// reconnect delay starts at 1 s (Linux: a fixed 10 s) and doubles up to 10 s.
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
            reconnect_delay_ms: 1_000,
            reconnect_delay_max_ms: 10_000,
            ctrl_loss_tmo_ms: Some(600_000),
            disable_sqflow: false,
            dhchap: None,
            tls: None,
            concat: None,
            busy_poll_us: 0,
        }
    }
}

/// Background tasks of the current connection.
#[derive(Default)]
struct Tasks {
    supervisor: Option<tokio::task::JoinHandle<()>>,
    keepalive: Option<tokio::task::JoinHandle<()>>,
    events: Option<tokio::task::JoinHandle<()>>,
}

impl Tasks {
    fn stop_connection_tasks(&mut self) {
        for h in [self.keepalive.take(), self.events.take()]
            .into_iter()
            .flatten()
        {
            h.abort();
        }
    }
}

pub(crate) struct Inner {
    addr: SocketAddr,
    subnqn: String,
    host: HostIdentity,
    opts: ConnectOptions,
    admin: QueuePair,
    io: Vec<QueuePair>,
    io_queue_size: u16,
    session: RwLock<Arc<Session>>,
    status: watch::Sender<ControllerStatus>,
    /// Wakes the supervisor: a queue lost its connection or a command timed out.
    notify: Arc<Notify>,
    /// A reset someone asked for (failed Keep Alive, `Controller::reset`).
    reset_request: Mutex<Option<String>>,
    tasks: Mutex<Tasks>,
    closed: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    fn params(&self) -> Params<'_> {
        Params {
            addr: self.addr,
            subnqn: &self.subnqn,
            host: &self.host,
            opts: &self.opts,
        }
    }
    fn session(&self) -> Arc<Session> {
        self.session
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    fn queues(&self) -> impl Iterator<Item = &QueuePair> {
        self.io.iter().chain(std::iter::once(&self.admin))
    }
    fn request_reset(&self, reason: String) {
        lock(&self.reset_request).get_or_insert(reason);
        self.notify.notify_one();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        // I/O queues first: the target tears the controller down with its admin queue,
        // and what it closes then is no news.
        for q in self.queues() {
            q.fail_all(q.closed_error());
        }
        let mut t = lock(&self.tasks);
        t.stop_connection_tasks();
        if let Some(h) = t.supervisor.take() {
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
            .field("cntlid", &self.cntlid())
            .field("io_queues", &self.inner.io.len())
            .finish()
    }
}

impl Controller {
    /// Connects to subsystem `subnqn` at `addr` as `host`, enables the controller, opens
    /// the I/O queues and starts supervising them. A first connect that fails is an error
    /// (no retries), as with `nvme connect`.
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
        let p = Params {
            addr,
            subnqn,
            host,
            opts,
        };
        let (queue_addr, tls) = match (&opts.tls, &opts.concat) {
            (_, Some(c)) => (c.tls_addr, Some(concat::generate_tls_psk(&p).await?)),
            (Some(c), None) => (addr, Some(c.tls_psk(&host.hostnqn, subnqn)?)),
            (None, None) => (addr, None),
        };
        let admin = QueuePair::detached(
            queue_addr,
            &QueueOptions {
                qid: 0,
                queue_size: ADMIN_QUEUE_SIZE,
                digests: opts.digests,
                in_capsule_max_bytes: ADMIN_IN_CAPSULE_BYTES,
                command_timeout_ms: opts.admin_timeout_ms,
                connect_timeout_ms: opts.connect_timeout_ms,
                tls: tls.clone(),
                busy_poll_us: 0,
            },
        )?;
        // Supervised from the start: a connection lost during bring-up leaves the queue
        // waiting for a reconnect instead of dead.
        let notify = Arc::new(Notify::new());
        admin.supervise(notify.clone());
        let want = if subnqn == DISCOVERY_NQN {
            0
        } else {
            opts.io_queues
        };
        let s = match session::bring_up_admin(&admin, &p, want).await {
            Ok(s) => s,
            Err(e) => {
                admin.close().await;
                return Err(e);
            }
        };
        let mut io_queue_size = opts.queue_size.min(s.cap.mqes.saturating_add(1));
        if s.id.maxcmd > 0 {
            io_queue_size = io_queue_size.min(s.id.maxcmd);
        }
        let io_queue_size = io_queue_size.max(crate::queue::MIN_QUEUE_SIZE);
        let in_capsule = session::io_in_capsule_bytes(&s.id);
        let mut io = Vec::with_capacity(usize::from(s.io_granted));
        for qid in 1..=s.io_granted {
            let q = QueuePair::detached(
                queue_addr,
                &QueueOptions {
                    qid,
                    queue_size: io_queue_size,
                    digests: opts.digests,
                    in_capsule_max_bytes: in_capsule,
                    command_timeout_ms: opts.io_timeout_ms,
                    connect_timeout_ms: opts.connect_timeout_ms,
                    tls: tls.clone(),
                    busy_poll_us: opts.busy_poll_us,
                },
            )?;
            q.supervise(notify.clone());
            io.push(q);
        }
        if let Err(e) = session::connect_io_queues(&io, &p, s.cntlid).await {
            for q in io.iter().chain([&admin]) {
                q.close().await;
            }
            return Err(e);
        }
        for q in io.iter().chain([&admin]) {
            q.open_gate();
        }
        let mut status = ControllerStatus::new(s.cntlid);
        status.state = ControllerState::Live;
        status.generation = 1;
        status.ana = s.ana.clone();
        let (status_tx, _) = watch::channel(status);
        let inner = Arc::new(Inner {
            addr,
            subnqn: subnqn.to_string(),
            host: host.clone(),
            opts: opts.clone(),
            admin,
            io,
            io_queue_size,
            session: RwLock::new(Arc::new(s)),
            status: status_tx,
            notify,
            reset_request: Mutex::new(None),
            tasks: Mutex::new(Tasks::default()),
            closed: AtomicBool::new(false),
        });
        supervisor::start_connection_tasks(&inner);
        let sup = tokio::spawn(supervisor::run(
            Arc::downgrade(&inner),
            inner.notify.clone(),
        ));
        lock(&inner.tasks).supervisor = Some(sup);
        Ok(Controller { inner })
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
    /// The controller ID of the current connection (it may change on reconnect).
    pub fn cntlid(&self) -> u16 {
        self.inner.session().cntlid
    }
    pub fn cap(&self) -> Cap {
        self.inner.session().cap
    }
    pub fn vs(&self) -> Vs {
        self.inner.session().vs
    }
    /// Identify Controller as read during the last (re)connect.
    pub fn id(&self) -> Arc<IdentifyController> {
        self.inner.session().id.clone()
    }
    pub fn is_discovery(&self) -> bool {
        self.inner.subnqn == DISCOVERY_NQN
            || self.inner.session().id.cntrltype == idbits::CNTRLTYPE_DISCOVERY
    }
    /// Largest data transfer of one command (from MDTS and CAP.MPSMIN).
    pub fn max_transfer_bytes(&self) -> u32 {
        self.inner.session().max_transfer_bytes
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
    /// ANA Transition Time: how long a group may stay in the change state.
    pub fn anatt(&self) -> Duration {
        Duration::from_secs(u64::from(self.inner.session().id.anatt.max(1)))
    }

    /// The current state and event information.
    pub fn status(&self) -> ControllerStatus {
        self.inner.status.borrow().clone()
    }
    /// A receiver that sees every change of [`Controller::status`]: state changes
    /// (reconnecting, live, lost) and asynchronous events (ANA, namespaces, discovery).
    pub fn watch(&self) -> watch::Receiver<ControllerStatus> {
        self.inner.status.subscribe()
    }

    /// The I/O queue for the calling thread: each thread keeps to one queue (as the
    /// Linux host maps CPUs to queues), so threads do not contend on a queue.
    pub fn pick_io_queue(&self) -> Result<&QueuePair> {
        let n = self.inner.io.len();
        if n == 0 {
            return Err(HostError::Usage(format!(
                "controller {} of {} has no I/O queues",
                self.cntlid(),
                self.inner.subnqn
            )));
        }
        Ok(&self.inner.io[thread_slot() % n])
    }

    /// The I/O queue for a transfer of `len_bytes` from the calling thread: the thread's
    /// own queue while it has less than [`SPILL_INFLIGHT_BYTES`] in flight, else the
    /// least loaded queue, so that bandwidth-bound transfers from one thread still use
    /// several connections.
    pub fn pick_io_queue_for(&self, len_bytes: u64) -> Result<&QueuePair> {
        let own = self.pick_io_queue()?;
        if own.inflight_bytes() + len_bytes <= SPILL_INFLIGHT_BYTES {
            return Ok(own);
        }
        Ok(self
            .inner
            .io
            .iter()
            .min_by_key(|q| q.inflight_bytes())
            .unwrap_or(own))
    }

    /// Opens namespace `nsid` as a block device.
    pub async fn namespace(&self, nsid: u32) -> Result<RemoteNamespace> {
        RemoteNamespace::open(self, nsid).await
    }

    /// I/O pass-through on the calling thread's I/O queue (not retried after a
    /// reconnect; see [`Controller::submit_io_with`]).
    pub async fn submit_io(&self, cmd: Command, data: Payload) -> Result<Completed> {
        self.pick_io_queue()?.submit(cmd, data).await
    }

    /// I/O pass-through with per-command options (`retry` for idempotent commands).
    pub async fn submit_io_with(
        &self,
        cmd: Command,
        data: Payload,
        opts: SubmitOptions,
    ) -> Result<Completed> {
        self.pick_io_queue()?.submit_with(cmd, data, opts).await
    }

    pub async fn property_get(&self, ofst: u32, size: PropertySize) -> Result<u64> {
        fabrics::property_get(self.admin(), ofst, size).await
    }

    pub async fn property_set(&self, ofst: u32, size: PropertySize, value: u64) -> Result<()> {
        fabrics::property_set(self.admin(), ofst, size, value).await
    }

    /// Reads the ANA log again and publishes it (as an ANA change event would). Used
    /// after an I/O got an ANA path status.
    pub async fn refresh_ana(&self) -> Result<()> {
        let sess = self.inner.session();
        if sess.id.cmic & idbits::CMIC_ANA == 0 {
            return Ok(());
        }
        let log = session::read_ana_log(self.admin(), &sess.id, sess.max_transfer_bytes).await?;
        self.inner
            .status
            .send_modify(|s| s.ana = Some(Arc::new(log)));
        Ok(())
    }

    /// Resets the controller now: closes every connection and reconnects (as
    /// `nvme reset`). Commands marked for retry wait through it.
    pub fn reset(&self, reason: &str) {
        self.inner
            .request_reset(format!("reset requested: {reason}"));
    }

    /// Waits until the controller is live (true), or lost or closed (false).
    pub async fn wait_live(&self) -> bool {
        let mut rx = self.watch();
        let r = rx
            .wait_for(|s| {
                matches!(
                    s.state,
                    ControllerState::Live | ControllerState::Lost { .. } | ControllerState::Closed
                )
            })
            .await;
        r.is_ok_and(|s| s.is_live())
    }

    /// Normal shutdown (CC.SHN, wait for CSTS.SHST complete), then disconnect.
    pub async fn shutdown(&self) -> Result<()> {
        self.stop_tasks();
        let timeout = Duration::from_millis(self.inner.opts.shutdown_timeout_ms);
        let r = enable::shutdown(self.admin(), timeout).await;
        self.disconnect().await;
        r
    }

    /// Closes every queue (I/O first) without telling the controller; outstanding
    /// commands fail with "queue shut down", nothing reconnects.
    pub async fn disconnect(&self) {
        self.stop_tasks();
        for q in self.inner.queues() {
            q.close().await;
        }
        self.inner
            .status
            .send_modify(|s| s.state = ControllerState::Closed);
    }

    fn stop_tasks(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let mut t = lock(&self.inner.tasks);
        t.stop_connection_tasks();
        if let Some(h) = t.supervisor.take() {
            h.abort();
        }
    }
}

static NEXT_THREAD_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_SLOT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// A small number per thread, handed out in order of first use.
pub(crate) fn thread_slot() -> usize {
    THREAD_SLOT.with(|c| match c.get() {
        Some(s) => s,
        None => {
            let s = NEXT_THREAD_SLOT.fetch_add(1, Ordering::Relaxed);
            c.set(Some(s));
            s
        }
    })
}
