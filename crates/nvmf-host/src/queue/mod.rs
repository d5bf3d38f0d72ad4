//! One NVMe/TCP queue pair: a TCP connection, its ICReq/ICResp, and a driver task that owns
//! the socket and moves commands, data and completions.
//!
//! Callers hand a [`Command`] and a [`Payload`] (an owned [`IoBuf`] moving in and out) to
//! [`QueuePair::submit`]; the driver picks a free CID, sends the capsule (with in-capsule
//! data when it fits), answers R2Ts with H2CData, receives C2HData straight into the
//! caller's buffer, and completes the command through a oneshot channel.

mod driver;
mod handshake;
mod rx;
mod slots;
mod tx;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use blockdev::IoBuf;
use nvme_proto::tcp::Digests;
use nvme_proto::{Command, Completion};
use tokio::sync::{mpsc, oneshot};

use crate::error::{CommandKind, HostError, Result, TransportError};

pub use handshake::{MIN_MAXH2CDATA_BYTES, Negotiated, check_icresp};

/// In-capsule data limit on admin and fabrics queues, whatever IOCCSZ says (as Linux's
/// NVME_TCP_ADMIN_CCSZ).
pub const ADMIN_IN_CAPSULE_BYTES: u32 = 8192;
/// Fewest queue entries a queue may have (one command outstanding plus the empty slot).
pub const MIN_QUEUE_SIZE: u16 = 2;

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
    /// Limit on TCP connect plus ICReq/ICResp.
    pub connect_timeout_ms: u64,
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
        }
    }
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
    fn check(&self) -> std::result::Result<(), String> {
        match self {
            Payload::None => Ok(()),
            Payload::ToController { buf, offset, len }
            | Payload::FromController { buf, offset, len } => {
                let end = offset.checked_add(*len);
                if end.is_none_or(|e| e > buf.len()) {
                    return Err(format!(
                        "payload window {offset}+{len} outside a buffer of {} bytes",
                        buf.len()
                    ));
                }
                if u32::try_from(*len).is_err() {
                    return Err(format!("payload of {len} bytes exceeds 4 GiB"));
                }
                Ok(())
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

/// What the driver receives for each command.
pub(crate) struct Submission {
    pub cmd: Command,
    pub payload: Payload,
    pub reply: oneshot::Sender<Result<Completed>>,
    pub deadline: Instant,
    pub timeout_ms: u64,
}

/// State shared between handles and the driver: the error that ended the queue.
#[derive(Default)]
pub(crate) struct Shared {
    pub error: Mutex<Option<TransportError>>,
}

impl Shared {
    pub fn set_error(&self, e: TransportError) {
        if let Ok(mut g) = self.error.lock()
            && g.is_none()
        {
            *g = Some(e);
        }
    }
    pub fn error(&self) -> Option<TransportError> {
        self.error.lock().ok().and_then(|g| g.clone())
    }
}

struct Inner {
    sub_tx: mpsc::Sender<Submission>,
    /// Dropping (or firing) it stops the driver.
    shutdown: Mutex<Option<oneshot::Sender<()>>>,
    shared: Arc<Shared>,
    addr: SocketAddr,
    qid: u16,
    negotiated: Negotiated,
    depth: u16,
    in_capsule_max_bytes: u32,
    timeout_ms: u64,
    driver: Mutex<Option<tokio::task::JoinHandle<()>>>,
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
            .field("qid", &self.inner.qid)
            .field("depth", &self.inner.depth)
            .finish()
    }
}

impl QueuePair {
    /// Connects over TCP (TCP_NODELAY), exchanges ICReq/ICResp and starts the driver task.
    /// The fabrics Connect command is the caller's next step.
    pub async fn connect(addr: SocketAddr, opts: &QueueOptions) -> Result<QueuePair> {
        if opts.queue_size < MIN_QUEUE_SIZE {
            return Err(HostError::Usage(format!(
                "queue size {} is below {MIN_QUEUE_SIZE}",
                opts.queue_size
            )));
        }
        let timeout = Duration::from_millis(opts.connect_timeout_ms.max(1));
        let fail = |reason: String| HostError::Connect { addr, reason };
        let mut stream = handshake::connect_tcp(addr, timeout).await.map_err(fail)?;
        let negotiated = handshake::exchange_ic(&mut stream, opts.digests, timeout)
            .await
            .map_err(fail)?;
        // At most queue_size - 1 commands are outstanding (a full SQ keeps one slot empty).
        let depth = opts.queue_size - 1;
        let (sub_tx, sub_rx) = mpsc::channel(usize::from(depth));
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let shared = Arc::new(Shared::default());
        let d = driver::Driver::new(
            stream,
            driver::DriverConfig {
                addr,
                qid: opts.qid,
                depth,
                negotiated,
                in_capsule_max_bytes: opts.in_capsule_max_bytes,
                timeout_ms: opts.command_timeout_ms,
            },
            sub_rx,
            shutdown_rx,
            shared.clone(),
        );
        let handle = tokio::spawn(d.run());
        Ok(QueuePair {
            inner: Arc::new(Inner {
                sub_tx,
                shutdown: Mutex::new(Some(shutdown_tx)),
                shared,
                addr,
                qid: opts.qid,
                negotiated,
                depth,
                in_capsule_max_bytes: opts.in_capsule_max_bytes,
                timeout_ms: opts.command_timeout_ms,
                driver: Mutex::new(Some(handle)),
            }),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }
    pub fn qid(&self) -> u16 {
        self.inner.qid
    }
    /// Most commands outstanding at once.
    pub fn depth(&self) -> u16 {
        self.inner.depth
    }
    pub fn negotiated(&self) -> Negotiated {
        self.inner.negotiated
    }
    pub fn in_capsule_max_bytes(&self) -> u32 {
        self.inner.in_capsule_max_bytes
    }
    pub fn command_timeout_ms(&self) -> u64 {
        self.inner.timeout_ms
    }

    /// The error that ended this queue, if it has ended.
    pub fn error(&self) -> Option<HostError> {
        self.inner
            .shared
            .error()
            .map(|reason| self.transport(reason))
    }

    fn transport(&self, reason: TransportError) -> HostError {
        HostError::Transport {
            addr: self.inner.addr,
            qid: self.inner.qid,
            reason,
        }
    }

    fn ended(&self) -> HostError {
        self.error()
            .unwrap_or_else(|| self.transport(TransportError::Shutdown))
    }

    /// Submits `cmd` (its CID and SGL are filled in here) with the queue's default timeout.
    /// Returns the CQE whatever its status; see [`QueuePair::submit_checked`].
    pub async fn submit(&self, cmd: Command, payload: Payload) -> Result<Completed> {
        self.submit_with_timeout(cmd, payload, self.inner.timeout_ms)
            .await
    }

    /// As [`QueuePair::submit`], but a non-success status becomes [`HostError::Status`].
    pub async fn submit_checked(&self, cmd: Command, payload: Payload) -> Result<Completed> {
        let kind = self.kind(&cmd);
        let done = self.submit(cmd, payload).await?;
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
        CommandKind {
            admin: self.inner.qid == 0,
            opcode: cmd.opcode(),
            fctype: cmd.fctype(),
        }
    }

    /// Submits with an explicit timeout (covering both the wait for a free slot and the
    /// command itself).
    pub async fn submit_with_timeout(
        &self,
        cmd: Command,
        payload: Payload,
        timeout_ms: u64,
    ) -> Result<Completed> {
        if let Some(e) = self.error() {
            return Err(e);
        }
        payload.check().map_err(HostError::Usage)?;
        let kind = self.kind(&cmd);
        let start = Instant::now();
        let timeout = Duration::from_millis(timeout_ms);
        let (reply, rx) = oneshot::channel();
        let sub = Submission {
            cmd,
            payload,
            reply,
            deadline: start + timeout,
            timeout_ms,
        };
        match self.inner.sub_tx.try_send(sub) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(sub)) => {
                match tokio::time::timeout(timeout, self.inner.sub_tx.send(sub)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return Err(self.ended()),
                    Err(_) => {
                        return Err(HostError::SubmitTimeout {
                            addr: self.inner.addr,
                            qid: self.inner.qid,
                            command: kind,
                            timeout_ms,
                        });
                    }
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(self.ended()),
        }
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(self.ended()),
        }
    }

    /// Stops the driver: outstanding commands fail with "queue shut down" and the TCP
    /// connection closes. Waits for the driver to finish.
    pub async fn close(&self) {
        if let Ok(mut g) = self.inner.shutdown.lock() {
            g.take();
        }
        let handle = self.inner.driver.lock().ok().and_then(|mut g| g.take());
        if let Some(h) = handle {
            let _ = h.await;
        }
    }
}
