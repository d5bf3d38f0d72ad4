//! One NVMe/TCP queue pair: a command table that outlives TCP connections, and for each
//! connection (ICReq/ICResp) a driver task that owns the socket and moves commands, data
//! and completions.
//!
//! Callers hand a [`Command`] and a [`Payload`] (an owned [`IoBuf`] moving in and out) to
//! [`QueuePair::submit`]; the command takes a free CID from a pre-allocated table, the
//! driver sends the capsule (with in-capsule data when it fits), answers R2Ts with
//! H2CData, receives C2HData straight into the caller's buffer, and wakes the caller.
//! Nothing is allocated per command.

mod buf;
mod core;
mod driver;
mod handshake;
mod rx;
mod slots;
mod stream;
mod tx;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use blockdev::IoBuf;
use nvme_proto::tcp::Digests;
use nvme_proto::{Command, Completion};
use tokio::sync::{Notify, oneshot};

use crate::error::{CommandKind, HostError, Result, TransportError};

pub(crate) use self::buf::{Data, DataBuf, Dir, SplitBuf};
pub(crate) use self::core::{Outcome, Submission, TimedOut};
pub use handshake::{MIN_MAXH2CDATA_BYTES, Negotiated, check_icresp};

/// In-capsule data limit on admin and fabrics queues, whatever IOCCSZ says (as Linux's
/// NVME_TCP_ADMIN_CCSZ).
pub const ADMIN_IN_CAPSULE_BYTES: u32 = 8192;
/// Fewest queue entries a queue may have (one command outstanding plus the empty slot).
pub const MIN_QUEUE_SIZE: u16 = 2;
/// Re-sends of an idempotent command after aborts or data digest errors (Linux's
/// nvme_max_retries is 5).
pub const MAX_RETRIES: u8 = 3;

/// How to open one queue.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    /// 0 for the admin queue.
    pub qid: u16,
    /// Submission queue entries; at most `queue_size - 1` commands are outstanding.
    pub queue_size: u16,
    pub digests: Digests,
    /// Writes up to this size travel inside the command capsule; larger ones wait for R2T.
    pub in_capsule_max_bytes: u32,
    /// Default per-command timeout.
    pub command_timeout_ms: u64,
    /// Limit on TCP connect plus ICReq/ICResp (and the TLS handshake).
    pub connect_timeout_ms: u64,
    /// TLS 1.3 with this PSK (identity and key already derived, see
    /// [`crate::TlsCredentials`]); None: plain TCP.
    pub tls: Option<tls_psk::Psk>,
    /// Opt-in busy polling of the driver task (`blockdev::BusyPoll`); 0: never.
    pub busy_poll_us: u32,
}

impl QueueOptions {
    /// Options for an admin queue with Linux's defaults (32 entries, 8 KiB in-capsule,
    /// 60 s admin timeout).
    pub fn admin(digests: Digests) -> Self {
        QueueOptions {
            qid: 0,
            queue_size: 32,
            digests,
            in_capsule_max_bytes: ADMIN_IN_CAPSULE_BYTES,
            command_timeout_ms: 60_000,
            connect_timeout_ms: 10_000,
            tls: None,
            busy_poll_us: 0,
        }
    }
}

/// Per-command choices for [`QueuePair::submit_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubmitOptions {
    /// Timeout of this command; None: the queue's default.
    pub timeout_ms: Option<u64>,
    /// No timeout at all (Asynchronous Event Requests).
    pub no_timeout: bool,
    /// The command is idempotent: on a controller-managed queue it waits through a
    /// reconnect and is sent again, and it is re-sent after an abort or a data digest
    /// error. Reads and writes of the same data are; reservation commands are not.
    pub retry: bool,
}

impl SubmitOptions {
    /// An idempotent command with the queue's default timeout.
    pub const RETRY: SubmitOptions = SubmitOptions {
        timeout_ms: None,
        no_timeout: false,
        retry: true,
    };
}

/// The data a command moves, as an owned buffer window `buf[offset..offset + len]`.
#[derive(Debug)]
pub enum Payload {
    None,
    /// Host to controller (Write, Compare, DSM, Connect, reservation commands).
    ToController {
        buf: IoBuf,
        offset: usize,
        len: usize,
    },
    /// Controller to host (Read, Identify, Get Log Page, Reservation Report).
    FromController {
        buf: IoBuf,
        offset: usize,
        len: usize,
    },
}

impl Payload {
    /// The whole buffer goes to the controller.
    pub fn write(buf: IoBuf) -> Self {
        let len = buf.len();
        Payload::ToController {
            buf,
            offset: 0,
            len,
        }
    }
    /// The whole buffer is filled by the controller.
    pub fn read(buf: IoBuf) -> Self {
        let len = buf.len();
        Payload::FromController {
            buf,
            offset: 0,
            len,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::ToController { len, .. } | Payload::FromController { len, .. } => *len,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The internal form: the owned buffer and its window.
    pub(crate) fn into_data(self) -> Data {
        match self {
            Payload::None => Data::NONE,
            Payload::ToController { buf, offset, len } => {
                Data::owned(buf, offset, len, Dir::ToController)
            }
            Payload::FromController { buf, offset, len } => {
                Data::owned(buf, offset, len, Dir::FromController)
            }
        }
    }
}

/// A completed command: its CQE and the payload buffer coming back.
#[derive(Debug)]
pub struct Completed {
    pub cqe: Completion,
    pub buf: Option<IoBuf>,
}

/// The connection a queue has now.
struct Conn {
    /// Sending (or dropping) it stops the driver, which ends with this reason.
    stop: oneshot::Sender<TransportError>,
    driver: tokio::task::JoinHandle<()>,
}

struct Inner {
    core: Arc<self::core::Core>,
    /// Data bytes of the commands submitted and not yet completed (for queue choice).
    inflight_bytes: AtomicU64,
    addr: SocketAddr,
    opts: QueueOptions,
    conn: Mutex<Option<Conn>>,
    negotiated: Mutex<Option<Negotiated>>,
    in_capsule_max_bytes: AtomicU32,
    /// The PSK of the next connection (starts as `opts.tls`; secure channel concatenation
    /// replaces it before each reconnect).
    tls: Mutex<Option<tls_psk::Psk>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A handle to one queue. Cloning is cheap; the connection closes when the last clone is
/// dropped or [`QueuePair::close`] is called.
#[derive(Clone)]
pub struct QueuePair {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("addr", &self.inner.addr)
            .field("qid", &self.inner.opts.qid)
            .field("depth", &self.inner.core.depth)
            .finish()
    }
}

impl QueuePair {
    /// Connects over TCP (TCP_NODELAY), exchanges ICReq/ICResp and starts the driver task.
    /// The fabrics Connect command is the caller's next step. The queue ends with its
    /// connection.
    pub async fn connect(addr: SocketAddr, opts: &QueueOptions) -> Result<QueuePair> {
        let q = QueuePair::detached(addr, opts)?;
        q.attach().await?;
        q.open_gate();
        Ok(q)
    }

    /// A queue without a connection yet (see [`QueuePair::attach`]).
    pub(crate) fn detached(addr: SocketAddr, opts: &QueueOptions) -> Result<QueuePair> {
        if opts.queue_size < MIN_QUEUE_SIZE {
            return Err(HostError::Usage(format!(
                "queue size {} is below {MIN_QUEUE_SIZE}",
                opts.queue_size
            )));
        }
        // At most queue_size - 1 commands are outstanding (a full SQ keeps one slot empty).
        let depth = opts.queue_size - 1;
        Ok(QueuePair {
            inner: Arc::new(Inner {
                core: self::core::Core::new(addr, opts.qid, depth),
                inflight_bytes: AtomicU64::new(0),
                addr,
                opts: opts.clone(),
                conn: Mutex::new(None),
                negotiated: Mutex::new(None),
                in_capsule_max_bytes: AtomicU32::new(opts.in_capsule_max_bytes),
                tls: Mutex::new(opts.tls.clone()),
            }),
        })
    }

    /// Opens a new connection for this queue (ending the previous one). Only commands
    /// submitted with `init` go out until [`QueuePair::open_gate`].
    pub(crate) async fn attach(&self) -> Result<()> {
        self.detach(TransportError::Shutdown).await;
        let addr = self.inner.addr;
        let opts = &self.inner.opts;
        let timeout = Duration::from_millis(opts.connect_timeout_ms.max(1));
        let fail = |reason: String| HostError::Connect { addr, reason };
        let tcp = handshake::connect_tcp(addr, timeout).await.map_err(fail)?;
        let tls = lock(&self.inner.tls).clone();
        let mut stream = match &tls {
            None => stream::QueueStream::Tcp(tcp),
            Some(psk) => stream::tls_connect(tcp, psk, timeout).await.map_err(fail)?,
        };
        let negotiated = handshake::exchange_ic(&mut stream, opts.digests, timeout)
            .await
            .map_err(fail)?;
        if let Some(e) = self
            .inner
            .core
            .error()
            .filter(|_| self.inner.core.is_dead())
        {
            return Err(e);
        }
        let generation = self.inner.core.connected();
        let (stop, stop_rx) = oneshot::channel();
        let d = driver::Driver::new(
            stream,
            driver::DriverConfig {
                addr,
                qid: opts.qid,
                negotiated,
                in_capsule_max_bytes: self.inner.in_capsule_max_bytes.load(Ordering::Relaxed),
                timeout_ms: opts.command_timeout_ms,
                generation,
                busy_poll_us: opts.busy_poll_us,
            },
            self.inner.core.clone(),
            stop_rx,
        );
        let driver = tokio::spawn(d.run());
        *lock(&self.inner.negotiated) = Some(negotiated);
        *lock(&self.inner.conn) = Some(Conn { stop, driver });
        Ok(())
    }

    /// The TLS PSK of the next [`QueuePair::attach`] (None: plain TCP).
    pub(crate) fn set_tls(&self, psk: Option<tls_psk::Psk>) {
        *lock(&self.inner.tls) = psk;
    }

    /// Lets ordinary commands out on the current connection.
    pub(crate) fn open_gate(&self) {
        self.inner.core.open_gate();
    }

    /// Ends the current connection (if any) with `reason` and waits for its driver:
    /// commands on it wait for the next connection or fail, as `retry` says.
    pub(crate) async fn detach(&self, reason: TransportError) {
        let conn = lock(&self.inner.conn).take();
        if let Some(c) = conn {
            let _ = c.stop.send(reason);
            let _ = c.driver.await;
        }
    }

    /// Hands reconnects and timeouts to a supervisor (the controller) woken via `notify`.
    pub(crate) fn supervise(&self, notify: Arc<Notify>) {
        self.inner.core.supervise(notify);
    }

    /// "Queue shut down", the error of a closed queue.
    pub(crate) fn closed_error(&self) -> HostError {
        self.inner.core.transport(TransportError::Shutdown)
    }

    /// Fails queued and future commands with `err` for good.
    pub(crate) fn fail_all(&self, err: HostError) {
        self.inner.core.set_closing();
        self.inner.core.fail_all(err);
    }

    pub(crate) fn take_timeouts(&self) -> Vec<TimedOut> {
        self.inner.core.take_timeouts()
    }
    pub(crate) fn still_outstanding(&self, t: &TimedOut) -> bool {
        self.inner.core.still_outstanding(t)
    }
    pub(crate) fn set_in_capsule_max_bytes(&self, n: u32) {
        self.inner.in_capsule_max_bytes.store(n, Ordering::Relaxed);
    }
    /// Whether a connection is up (it may still be in bring-up).
    pub fn is_connected(&self) -> bool {
        self.inner.core.is_connected()
    }
    /// Connections opened so far.
    pub fn generation(&self) -> u64 {
        self.inner.core.generation()
    }

    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }
    pub fn qid(&self) -> u16 {
        self.inner.opts.qid
    }
    /// Most commands outstanding at once.
    pub fn depth(&self) -> u16 {
        self.inner.core.depth
    }
    /// What the last ICResp settled (digests off and 0 before any connection).
    pub fn negotiated(&self) -> Negotiated {
        lock(&self.inner.negotiated).unwrap_or(Negotiated {
            digests: Digests::default(),
            maxh2cdata_bytes: 0,
        })
    }
    pub fn in_capsule_max_bytes(&self) -> u32 {
        self.inner.in_capsule_max_bytes.load(Ordering::Relaxed)
    }
    pub fn command_timeout_ms(&self) -> u64 {
        self.inner.opts.command_timeout_ms
    }

    /// Why the queue cannot take commands now (its connection ended, or it is closed).
    pub fn error(&self) -> Option<HostError> {
        self.inner.core.error()
    }

    /// Submits `cmd` (its CID and SGL are filled in here) with the queue's default timeout.
    /// Returns the CQE whatever its status; see [`QueuePair::submit_checked`].
    pub async fn submit(&self, cmd: Command, payload: Payload) -> Result<Completed> {
        self.submit_with(cmd, payload, SubmitOptions::default())
            .await
    }

    /// As [`QueuePair::submit`], but a non-success status becomes [`HostError::Status`].
    pub async fn submit_checked(&self, cmd: Command, payload: Payload) -> Result<Completed> {
        self.submit_checked_with(cmd, payload, SubmitOptions::default())
            .await
    }

    /// [`QueuePair::submit_checked`] with per-command options.
    pub async fn submit_checked_with(
        &self,
        cmd: Command,
        payload: Payload,
        opts: SubmitOptions,
    ) -> Result<Completed> {
        let kind = self.kind(&cmd);
        let done = self.submit_with(cmd, payload, opts).await?;
        if done.cqe.status.is_success() {
            Ok(done)
        } else {
            Err(HostError::Status {
                command: kind,
                status: done.cqe.status,
            })
        }
    }

    /// The kind of `cmd` on this queue, for error messages.
    pub fn kind(&self, cmd: &Command) -> CommandKind {
        self.inner.core.kind(cmd)
    }

    /// Submits with an explicit timeout (covering both the wait for a free slot and the
    /// command itself).
    pub async fn submit_with_timeout(
        &self,
        cmd: Command,
        payload: Payload,
        timeout_ms: u64,
    ) -> Result<Completed> {
        let opts = SubmitOptions {
            timeout_ms: Some(timeout_ms),
            ..SubmitOptions::default()
        };
        self.submit_with(cmd, payload, opts).await
    }

    /// Submits with per-command options.
    pub async fn submit_with(
        &self,
        cmd: Command,
        payload: Payload,
        opts: SubmitOptions,
    ) -> Result<Completed> {
        let o = self
            .submit_data(cmd, payload.into_data(), opts, false)
            .await;
        o.result.map(|cqe| Completed {
            cqe,
            buf: o.buf.and_then(DataBuf::into_owned),
        })
    }

    /// Submits on the init lane: served first, also while the gate is closed (controller
    /// bring-up, and the controller's own admin commands).
    pub(crate) async fn submit_init(&self, cmd: Command, payload: Payload) -> Result<Completed> {
        let o = self
            .submit_data(cmd, payload.into_data(), SubmitOptions::default(), true)
            .await;
        o.result.map(|cqe| Completed {
            cqe,
            buf: o.buf.and_then(DataBuf::into_owned),
        })
    }

    /// [`QueuePair::submit_init`] with a non-success status as [`HostError::Status`].
    pub(crate) async fn submit_init_checked(
        &self,
        cmd: Command,
        payload: Payload,
    ) -> Result<Completed> {
        let kind = self.kind(&cmd);
        let done = self.submit_init(cmd, payload).await?;
        if done.cqe.status.is_success() {
            Ok(done)
        } else {
            Err(HostError::Status {
                command: kind,
                status: done.cqe.status,
            })
        }
    }

    /// The allocation-free path: submits `data` and returns the outcome with the buffer
    /// (also on errors, so an idempotent command can be sent elsewhere). `init` commands
    /// go first, also before the gate opens (Connect and controller bring-up).
    pub(crate) async fn submit_data(
        &self,
        cmd: Command,
        data: Data,
        opts: SubmitOptions,
        init: bool,
    ) -> Outcome {
        if let Err(e) = data.check() {
            return Outcome {
                result: Err(HostError::Usage(e)),
                buf: data.buf,
                resent: false,
            };
        }
        let timeout_ms = if opts.no_timeout {
            None
        } else {
            Some(
                opts.timeout_ms
                    .unwrap_or(self.inner.opts.command_timeout_ms),
            )
        };
        let slot_wait = match timeout_ms {
            Some(t) if !opts.retry => Some(Duration::from_millis(t)),
            _ => None,
        };
        let len = data.len as u64;
        let sub = Submission {
            cmd,
            data,
            timeout_ms,
            retry: opts.retry,
            retries_left: if opts.retry { MAX_RETRIES } else { 0 },
            init,
        };
        let _inflight = Inflight::add(&self.inner.inflight_bytes, len);
        self.inner.core.submit(sub, slot_wait).await
    }

    /// Data bytes of commands submitted and not completed yet.
    pub fn inflight_bytes(&self) -> u64 {
        self.inner.inflight_bytes.load(Ordering::Relaxed)
    }

    /// Stops the queue for good: queued and outstanding commands fail with "queue shut
    /// down", the TCP connection closes. Waits for the driver to finish.
    pub async fn close(&self) {
        self.fail_all(self.inner.core.transport(TransportError::Shutdown));
        self.detach(TransportError::Shutdown).await;
    }
}

/// Counts a command's bytes as in flight until dropped (also when the caller gives up).
struct Inflight<'a> {
    counter: &'a AtomicU64,
    len: u64,
}

impl<'a> Inflight<'a> {
    fn add(counter: &'a AtomicU64, len: u64) -> Self {
        counter.fetch_add(len, Ordering::Relaxed);
        Inflight { counter, len }
    }
}

impl Drop for Inflight<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.len, Ordering::Relaxed);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropping `conn` drops the stop sender: the driver ends.
        self.core.set_closing();
        self.core
            .fail_all(self.core.transport(TransportError::Shutdown));
    }
}
