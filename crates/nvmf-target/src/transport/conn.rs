//! One NVMe/TCP connection (= one queue), served by one task that owns both socket halves.
//!
//! The task reads PDUs into a reusable buffer, starts commands (I/O commands become futures
//! in a `FuturesUnordered` polled by the same task), and writes every response that is ready
//! in one vectored write. Fatal transport errors end only this connection, with a
//! C2HTermReq.

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use blockdev::IoBuf;
use futures::stream::{FuturesUnordered, Stream};
use nvme_proto::opcode::{DataDirection, admin, direction, fabrics_direction};
use nvme_proto::sgl::TcpDataLocation;
use nvme_proto::tcp::{
    CH_BYTES, CommonHeader, DIGEST_BYTES, DataHeader, Digests, FatalError, Framing, IcResp,
    PduHeader, PduLayout, R2t, check_header_digest, crc32c, encode_header, encode_term_req, layout,
    pdu_flags, pdu_type,
};
use nvme_proto::{Command, Completion, Status};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::cmd::{CmdFuture, Dispatch, Outcome};
use crate::config::ADMIN_IN_CAPSULE_BYTES;
use crate::controller::{Controller, ErrorRecord};
use crate::stats::OpKind;
use crate::sync::lock;
use crate::target::{ListenerInfo, TargetInner};
use crate::transport::handle::{ConnHandle, ConnRequest};
use crate::transport::rx::RxBuf;
use crate::transport::tx::TxQueue;

/// Stop reading new PDUs while this much output waits for the socket.
const TX_HIGH_WATER_BYTES: usize = 8 << 20;
/// Outstanding commands accepted before Connect.
const PRE_CONNECT_QUEUE_DEPTH: u32 = 32;
/// How long a connection that sent a termination request waits for the host to close.
const LINGER: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    AwaitIcReq,
    Established,
    Closing,
}

/// Why processing stopped.
pub(crate) enum Stop {
    /// Send a C2HTermReq with this error and the offending header, then close.
    Fatal(FatalError, Vec<u8>),
    /// Close without a termination request (host sent H2CTermReq).
    Close,
}

impl Stop {
    fn fatal(err: FatalError, pdu: &[u8], hlen: usize) -> Stop {
        let n = hlen.clamp(CH_BYTES, 128).min(pdu.len());
        Stop::Fatal(err, pdu[..n].to_vec())
    }
}

/// The queue this connection became with Connect.
pub(crate) struct QueueState {
    pub ctrl: Arc<Controller>,
    pub qid: u16,
    /// 0's based queue size.
    pub sqsize: u16,
    pub sqflow_disabled: bool,
}

struct Incoming {
    buf: IoBuf,
    received: u32,
    total: u32,
    r2t_sent: bool,
    failed: Option<Status>,
}

enum SlotState {
    Free,
    AwaitData(Incoming),
    Running,
    /// An Asynchronous Event Request the host gave up on: it sent a new command with the
    /// same CID (SPDK cancels its AERs locally at detach and reuses their CIDs for the
    /// shutdown). Its completion, if it ever comes, is dropped.
    Retired,
}

struct Slot {
    cmd: Command,
    /// Transfer length the host's SGL asks for (C2H) or sends (H2C).
    xfer_len: u32,
    state: SlotState,
    /// Ends a running AER early (see [`SlotState::Retired`]).
    cancel: Option<tokio::sync::oneshot::Sender<()>>,
}

/// A command future tagged with its slot, so completions find their command.
struct Tagged {
    slot: u16,
    fut: CmdFuture,
}

impl Future for Tagged {
    type Output = (u16, Outcome);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let slot = self.slot;
        self.fut.as_mut().poll(cx).map(|o| (slot, o))
    }
}

pub(crate) struct Core {
    pub target: Arc<TargetInner>,
    pub handle: Arc<ConnHandle>,
    pub listener: Arc<ListenerInfo>,
    pub local: SocketAddr,
    pub phase: Phase,
    pub digests: Digests,
    pub framing: Framing,
    pub maxr2t: u32,
    pub q: Option<QueueState>,
    /// Largest in-capsule data accepted now (8 KiB until an I/O queue Connect).
    pub max_icd_bytes: usize,
    slots: Vec<Slot>,
    free_slots: Vec<u16>,
    cids: Box<[u64]>,
    outstanding: u32,
    inflight: FuturesUnordered<Tagged>,
    pub tx: TxQueue,
    r2t_wait: VecDeque<u16>,
    r2t_bytes: usize,
    sq_head: u16,
    busy_since: Option<Instant>,
    /// A termination request was queued: linger after sending it.
    fatal: bool,
    /// The host closed its sending side.
    peer_eof: bool,
    /// Asynchronous Event Requests among the running commands.
    aers_running: usize,
    pub ns_cache: crate::cmd::io::NsCache,
    pub shard: usize,
}

pub(crate) struct Conn<S> {
    io: S,
    rx: RxBuf,
    core: Core,
}

/// Serves one connection until the peer closes, a fatal error, or a kill.
pub(crate) async fn serve<S>(
    target: Arc<TargetInner>,
    io: S,
    listener: Arc<ListenerInfo>,
    local: SocketAddr,
    handle: Arc<ConnHandle>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let cfg = &target.config;
    let rx_cap = (cfg.in_capsule_bytes.max(cfg.maxh2cdata_bytes) as usize) + 1024;
    let mut conn = Conn {
        io,
        rx: RxBuf::new(rx_cap),
        core: Core {
            shard: handle.id as usize,
            target: target.clone(),
            handle: handle.clone(),
            listener,
            local,
            phase: Phase::AwaitIcReq,
            digests: Digests::default(),
            framing: Framing::default(),
            maxr2t: 0,
            q: None,
            max_icd_bytes: ADMIN_IN_CAPSULE_BYTES as usize,
            slots: Vec::new(),
            free_slots: Vec::new(),
            cids: vec![0u64; 1024].into_boxed_slice(),
            outstanding: 0,
            inflight: FuturesUnordered::new(),
            tx: TxQueue::new(),
            r2t_wait: VecDeque::new(),
            r2t_bytes: 0,
            sq_head: 0,
            busy_since: None,
            fatal: false,
            peer_eof: false,
            aers_running: 0,
            ns_cache: Default::default(),
        },
    };
    let ended = {
        let run = poll_fn(|cx| conn.poll_run(cx));
        tokio::select! {
            biased;
            _ = handle.killed() => RunEnd::Killed,
            e = run => e,
        }
    };
    match &ended {
        RunEnd::Fatal => {
            // The termination request is flushed; let the host read it before the socket
            // closes (closing with unread input would reset the connection).
            let _ = tokio::time::timeout(LINGER, async {
                let _ = conn.io.shutdown().await;
                let mut sink = [0u8; 4096];
                while let Ok(n) = conn.io.read(&mut sink).await {
                    if n == 0 {
                        break;
                    }
                }
            })
            .await;
        }
        RunEnd::Closed => {
            let _ = tokio::time::timeout(LINGER, conn.io.shutdown()).await;
        }
        RunEnd::PeerClosed | RunEnd::Killed | RunEnd::Io => {}
    }
    conn.core.teardown();
    conn.core.drain_inflight();
}

pub(crate) enum RunEnd {
    PeerClosed,
    Closed,
    Fatal,
    Killed,
    Io,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<RunEnd> {
        self.core.handle.waker.register(cx.waker());
        loop {
            // Before reading more PDUs: data that arrives next must find aborted commands
            // already marked.
            let mut progress = self.core.serve_requests();
            while let Poll::Ready(Some((slot, out))) =
                Pin::new(&mut self.core.inflight).poll_next(cx)
            {
                if self
                    .core
                    .slots
                    .get(usize::from(slot))
                    .is_some_and(|s| is_aer(&s.cmd))
                {
                    self.core.aers_running = self.core.aers_running.saturating_sub(1);
                }
                self.core.complete(slot, out);
                progress = true;
            }
            if self.core.phase != Phase::Closing
                && !self.core.peer_eof
                && self.core.tx.queued_bytes() < TX_HIGH_WATER_BYTES
            {
                match self.rx.poll_fill(&mut self.io, cx) {
                    // The host closed its sending side: finish what is running, then close.
                    Poll::Ready(Ok(0)) => {
                        self.core.peer_eof = true;
                        progress = true;
                    }
                    Poll::Ready(Ok(_)) => {
                        progress = true;
                        if let Err(stop) = self.core.process(&mut self.rx) {
                            match stop {
                                Stop::Fatal(err, hdr) => {
                                    tracing::info!(conn = self.core.handle.id, peer = %self.core.handle.peer,
                                        fes = err.fes, fei = err.fei, reason = err.reason, "fatal transport error");
                                    self.core.tx.push_vec(encode_term_req(true, &err, &hdr));
                                    self.core.fatal = true;
                                }
                                Stop::Close => return Poll::Ready(RunEnd::PeerClosed),
                            }
                            self.core.phase = Phase::Closing;
                        }
                    }
                    Poll::Ready(Err(_)) => return Poll::Ready(RunEnd::Io),
                    Poll::Pending => {}
                }
            }
            if !self.core.tx.is_empty() {
                match self.core.tx.poll_flush(&mut self.io, cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(_)) => return Poll::Ready(RunEnd::Io),
                    Poll::Pending => {}
                }
            }
            if self.core.phase == Phase::Closing && self.core.tx.is_empty() {
                return Poll::Ready(if self.core.fatal {
                    RunEnd::Fatal
                } else {
                    RunEnd::Closed
                });
            }
            // After end of stream only AERs (which may wait forever) may be left running.
            if self.core.peer_eof
                && self.core.tx.is_empty()
                && self.core.inflight.len() <= self.core.aers_running
            {
                return Poll::Ready(RunEnd::PeerClosed);
            }
            if !progress {
                return Poll::Pending;
            }
        }
    }
}

fn is_aer(cmd: &Command) -> bool {
    cmd.opcode() == admin::ASYNC_EVENT_REQUEST
}

fn is_host_pdu(t: u8) -> bool {
    matches!(
        t,
        pdu_type::IC_REQ | pdu_type::H2C_TERM_REQ | pdu_type::CAPSULE_CMD | pdu_type::H2C_DATA
    )
}

impl Core {
    /// Parses and handles every complete PDU in `rx`.
    fn process(&mut self, rx: &mut RxBuf) -> Result<(), Stop> {
        loop {
            if self.phase == Phase::Closing {
                return Ok(());
            }
            let avail = rx.data();
            if avail.len() < CH_BYTES {
                return Ok(());
            }
            let mut chb = [0u8; CH_BYTES];
            chb.copy_from_slice(&avail[..CH_BYTES]);
            let ch = CommonHeader::decode(&chb);
            let l = self
                .validate_header(&ch)
                .map_err(|e| Stop::fatal(e, avail, ch.hlen as usize))?;
            if avail.len() < l.total_len {
                if !rx.fits(l.total_len) {
                    return Err(Stop::fatal(
                        FatalError::limit_exceeded("PDU larger than the receive buffer"),
                        avail,
                        ch.hlen as usize,
                    ));
                }
                rx.make_room(l.total_len);
                return Ok(());
            }
            let pdu = &avail[..l.total_len];
            if l.has_hdgst {
                check_header_digest(pdu, l.hlen).map_err(|e| Stop::fatal(e, pdu, l.hlen))?;
            }
            self.handle_pdu(&ch, &l, pdu)?;
            rx.consume(l.total_len);
        }
    }

    fn validate_header(&self, ch: &CommonHeader) -> Result<PduLayout, FatalError> {
        if !is_host_pdu(ch.pdu_type) {
            return Err(FatalError::header_field(
                0,
                "PDU type not valid from a host",
            ));
        }
        match self.phase {
            Phase::AwaitIcReq => {
                if ch.pdu_type != pdu_type::IC_REQ && ch.pdu_type != pdu_type::H2C_TERM_REQ {
                    return Err(FatalError::sequence("PDU before ICReq"));
                }
                layout(ch, None, 0)
            }
            _ => {
                if ch.pdu_type == pdu_type::IC_REQ {
                    return Err(FatalError::sequence("second ICReq"));
                }
                let (valid_flags, max) = match ch.pdu_type {
                    pdu_type::CAPSULE_CMD => {
                        (pdu_flags::HDGST | pdu_flags::DDGST, self.max_icd_bytes)
                    }
                    pdu_type::H2C_DATA => (
                        pdu_flags::HDGST | pdu_flags::DDGST | pdu_flags::LAST_PDU,
                        self.target.config.maxh2cdata_bytes as usize,
                    ),
                    _ => (0xFF, 0),
                };
                if ch.flags & !valid_flags != 0 {
                    return Err(FatalError::header_field(1, "invalid PDU flags"));
                }
                layout(ch, Some(self.digests), max)
            }
        }
    }

    fn handle_pdu(&mut self, ch: &CommonHeader, l: &PduLayout, pdu: &[u8]) -> Result<(), Stop> {
        let hdr = PduHeader::decode(ch, pdu).map_err(|e| Stop::fatal(e, pdu, l.hlen))?;
        let data = pdu
            .get(l.data_offset..l.data_offset + l.data_len)
            .unwrap_or(&[]);
        let ddgst_ok = if l.has_ddgst && l.data_len > 0 {
            let d = pdu
                .get(l.data_offset + l.data_len..l.data_offset + l.data_len + DIGEST_BYTES)
                .unwrap_or(&[]);
            d.len() == DIGEST_BYTES && crc32c(data).to_le_bytes() == d
        } else {
            true
        };
        match hdr {
            PduHeader::IcReq(req) => {
                if req.pfv != 0 {
                    return Err(Stop::fatal(
                        FatalError::unsupported(8, "unsupported PFV"),
                        pdu,
                        l.hlen,
                    ));
                }
                if req.hpda > 31 {
                    return Err(Stop::fatal(
                        FatalError::unsupported(10, "HPDA out of range"),
                        pdu,
                        l.hlen,
                    ));
                }
                self.digests = req.digests;
                self.maxr2t = req.maxr2t;
                self.framing = Framing {
                    digests: req.digests,
                    data_align_bytes: (usize::from(req.hpda) + 1) * 4,
                };
                let resp = PduHeader::IcResp(IcResp {
                    pfv: 0,
                    cpda: 0,
                    digests: req.digests,
                    maxh2cdata: self.target.config.maxh2cdata_bytes,
                });
                let e = encode_header(&resp, 0, 0, Framing::default());
                self.tx.push_bytes(e.as_bytes());
                self.phase = Phase::Established;
                Ok(())
            }
            PduHeader::H2CTermReq(t) => {
                tracing::info!(
                    conn = self.handle.id,
                    fes = t.fes,
                    fei = t.fei,
                    "host terminated the connection"
                );
                Err(Stop::Close)
            }
            PduHeader::CapsuleCmd(cmd) => self.on_capsule(cmd, data, ddgst_ok, pdu, l.hlen),
            PduHeader::H2CData(d) => self.on_h2c_data(d, ch.flags, data, ddgst_ok, pdu, l.hlen),
            _ => Err(Stop::fatal(
                FatalError::header_field(0, "unexpected PDU type"),
                pdu,
                l.hlen,
            )),
        }
    }

    fn queue_limit(&self) -> u32 {
        match &self.q {
            Some(q) => u32::from(q.sqsize) + 1,
            None => PRE_CONNECT_QUEUE_DEPTH,
        }
    }

    /// The host reused the CID of an outstanding AER on the admin queue: the AER is
    /// forgotten (as the host already did) and the CID is free again. `false` if `cid`
    /// belongs to anything else.
    fn retire_aer(&mut self, cid: u16) -> bool {
        let admin_queue = self.q.as_ref().is_some_and(|q| q.qid == 0);
        if !admin_queue {
            return false;
        }
        let Some(s) = self.slots.iter_mut().find(|s| {
            matches!(s.state, SlotState::Running) && s.cmd.cid() == cid && is_aer(&s.cmd)
        }) else {
            return false;
        };
        s.state = SlotState::Retired;
        if let Some(c) = s.cancel.take() {
            let _ = c.send(());
        }
        self.set_cid(cid, false);
        self.outstanding = self.outstanding.saturating_sub(1);
        tracing::debug!(
            conn = self.handle.id,
            cid,
            "AER retired: the host reused its CID"
        );
        true
    }

    fn cid_in_use(&self, cid: u16) -> bool {
        self.cids[usize::from(cid >> 6)] & (1u64 << (cid & 63)) != 0
    }

    fn set_cid(&mut self, cid: u16, on: bool) {
        let w = &mut self.cids[usize::from(cid >> 6)];
        if on {
            *w |= 1u64 << (cid & 63);
        } else {
            *w &= !(1u64 << (cid & 63));
        }
    }

    fn alloc_slot(&mut self, cmd: Command, xfer_len: u32) -> u16 {
        let s = Slot {
            cmd,
            xfer_len,
            state: SlotState::Running,
            cancel: None,
        };
        match self.free_slots.pop() {
            Some(i) => {
                self.slots[usize::from(i)] = s;
                i
            }
            None => {
                self.slots.push(s);
                (self.slots.len() - 1) as u16
            }
        }
    }

    fn on_capsule(
        &mut self,
        cmd: Command,
        data: &[u8],
        ddgst_ok: bool,
        pdu: &[u8],
        hlen: usize,
    ) -> Result<(), Stop> {
        let cid = cmd.cid();
        if self.outstanding >= self.queue_limit() {
            return Err(Stop::fatal(
                FatalError::sequence("queue depth exceeded"),
                pdu,
                hlen,
            ));
        }
        if self.cid_in_use(cid) && !self.retire_aer(cid) {
            return Err(Stop::fatal(
                FatalError::header_field(CH_BYTES as u32 + 2, "command identifier already in use"),
                pdu,
                hlen,
            ));
        }
        if let Some(q) = &self.q {
            self.sq_head = ((u32::from(self.sq_head) + 1) % (u32::from(q.sqsize) + 1)) as u16;
        }
        self.handle.counters.add(&self.handle.counters.commands, 1);
        let dir = if cmd.opcode() == admin::FABRICS {
            fabrics_direction(cmd.fctype())
        } else {
            direction(cmd.opcode())
        };
        let sgl = cmd.sgl1();
        let loc = sgl.tcp_location();
        // Data in the capsule beyond what the command describes is a transport error.
        if !data.is_empty() {
            match loc {
                Some(TcpDataLocation::InCapsule { offset, length })
                    if dir == DataDirection::HostToController
                        && offset
                            .checked_add(u64::from(length))
                            .is_some_and(|e| e >= data.len() as u64) => {}
                _ => {
                    return Err(Stop::fatal(
                        FatalError::out_of_range("in-capsule data beyond the command's data"),
                        pdu,
                        hlen,
                    ));
                }
            }
        }
        let xfer_len = match (dir, loc) {
            (DataDirection::None, _) => 0,
            (_, Some(TcpDataLocation::InCapsule { length, .. })) => length,
            (_, Some(TcpDataLocation::Transport { length })) => length,
            (_, None) => sgl.length,
        };
        self.set_cid(cid, true);
        self.outstanding += 1;
        self.mark_busy();
        let slot = self.alloc_slot(cmd, xfer_len);
        if !ddgst_ok {
            self.finish_now(slot, Outcome::status(Status::DATA_TRANSFER_ERROR));
            return Ok(());
        }
        match (dir, loc) {
            (DataDirection::None, _) => self.run(slot, None),
            // No supported command moves data both ways.
            (DataDirection::Bidirectional, _) => {
                self.finish_now(slot, Outcome::status(Status::INVALID_OPCODE.dnr()))
            }
            (_, None) => self.finish_now(
                slot,
                Outcome::status(Status::SGL_DESCRIPTOR_TYPE_INVALID.dnr()),
            ),
            (DataDirection::ControllerToHost, Some(TcpDataLocation::InCapsule { .. })) => self
                .finish_now(
                    slot,
                    Outcome::status(Status::SGL_DESCRIPTOR_TYPE_INVALID.dnr()),
                ),
            (DataDirection::ControllerToHost, Some(TcpDataLocation::Transport { .. })) => {
                self.run(slot, None)
            }
            (
                DataDirection::HostToController,
                Some(TcpDataLocation::InCapsule { offset, length }),
            ) => {
                let start = usize::try_from(offset).unwrap_or(usize::MAX);
                match start
                    .checked_add(length as usize)
                    .and_then(|end| data.get(start..end))
                {
                    Some(bytes) => {
                        let mut buf = self.tx.pool.get(bytes.len());
                        buf.copy_from_slice(bytes);
                        self.run(slot, Some(buf));
                    }
                    None => {
                        let st = if start > data.len() {
                            Status::SGL_OFFSET_INVALID.dnr()
                        } else {
                            Status::DATA_SGL_LENGTH_INVALID.dnr()
                        };
                        self.finish_now(slot, Outcome::status(st));
                    }
                }
            }
            (DataDirection::HostToController, Some(TcpDataLocation::Transport { length })) => {
                if length == 0 {
                    self.run(slot, Some(IoBuf::new_zeroed(0)));
                } else if length > self.target.config.mdts_bytes {
                    self.finish_now(
                        slot,
                        Outcome::status(Status::INVALID_FIELD.dnr()).with_loc(24),
                    );
                } else if self.q.is_none() && cmd.opcode() != admin::FABRICS {
                    self.finish_now(slot, Outcome::status(Status::COMMAND_SEQUENCE_ERROR));
                } else {
                    let buf = self.tx.pool.get(length as usize);
                    self.slots[usize::from(slot)].state = SlotState::AwaitData(Incoming {
                        buf,
                        received: 0,
                        total: length,
                        r2t_sent: false,
                        failed: None,
                    });
                    self.r2t_wait.push_back(slot);
                    self.pump_r2t();
                }
            }
        }
        Ok(())
    }

    /// Sends R2Ts for waiting writes while the buffered-write budget allows.
    fn pump_r2t(&mut self) {
        let budget = self.target.config.max_r2t_buffer_bytes;
        while let Some(&slot) = self.r2t_wait.front() {
            let Some(s) = self.slots.get_mut(usize::from(slot)) else {
                self.r2t_wait.pop_front();
                continue;
            };
            let SlotState::AwaitData(inc) = &mut s.state else {
                self.r2t_wait.pop_front();
                continue;
            };
            let total = inc.total as usize;
            if self.r2t_bytes > 0 && self.r2t_bytes + total > budget {
                return;
            }
            self.r2t_wait.pop_front();
            inc.r2t_sent = true;
            self.r2t_bytes += total;
            let r2t = PduHeader::R2t(R2t {
                cccid: s.cmd.cid(),
                ttag: slot,
                offset: 0,
                length: inc.total,
            });
            let e = encode_header(&r2t, 0, 0, self.framing);
            self.tx.push_bytes(e.as_bytes());
        }
    }

    fn on_h2c_data(
        &mut self,
        d: DataHeader,
        flags: u8,
        data: &[u8],
        ddgst_ok: bool,
        pdu: &[u8],
        hlen: usize,
    ) -> Result<(), Stop> {
        let slot = d.ttag;
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            return Err(Stop::fatal(
                FatalError::header_field(10, "H2CData with an unknown TTAG"),
                pdu,
                hlen,
            ));
        };
        let cid = s.cmd.cid();
        let SlotState::AwaitData(inc) = &mut s.state else {
            return Err(Stop::fatal(
                FatalError::header_field(10, "H2CData without an R2T"),
                pdu,
                hlen,
            ));
        };
        if !inc.r2t_sent {
            return Err(Stop::fatal(
                FatalError::header_field(10, "H2CData without an R2T"),
                pdu,
                hlen,
            ));
        }
        if d.cccid != cid {
            return Err(Stop::fatal(
                FatalError::header_field(8, "H2CData CCCID does not match the TTAG"),
                pdu,
                hlen,
            ));
        }
        if d.length as usize != data.len() {
            return Err(Stop::fatal(
                FatalError::header_field(16, "DATAL does not match the PDU length"),
                pdu,
                hlen,
            ));
        }
        let end = u64::from(d.offset) + u64::from(d.length);
        if end > u64::from(inc.total) {
            return Err(Stop::fatal(
                FatalError::out_of_range("H2CData beyond the command's data"),
                pdu,
                hlen,
            ));
        }
        if d.offset != inc.received {
            return Err(Stop::fatal(
                FatalError::sequence("H2CData out of order"),
                pdu,
                hlen,
            ));
        }
        let last = end == u64::from(inc.total);
        if last != (flags & pdu_flags::LAST_PDU != 0) {
            return Err(Stop::fatal(
                FatalError::sequence("LAST_PDU flag does not match the data end"),
                pdu,
                hlen,
            ));
        }
        if let Some(dst) = inc.buf.get_mut(d.offset as usize..end as usize) {
            dst.copy_from_slice(data);
        }
        inc.received = end as u32;
        if !ddgst_ok {
            inc.failed = Some(Status::DATA_TRANSFER_ERROR);
        }
        if last {
            let SlotState::AwaitData(inc) = std::mem::replace(&mut s.state, SlotState::Running)
            else {
                return Ok(());
            };
            self.r2t_bytes = self.r2t_bytes.saturating_sub(inc.total as usize);
            match inc.failed {
                Some(st) => {
                    self.tx.pool.put(inc.buf);
                    self.finish_now(slot, Outcome::status(st));
                }
                None => self.run(slot, Some(inc.buf)),
            }
            self.pump_r2t();
        }
        Ok(())
    }

    /// Executes the command in `slot` with its host data (if any).
    fn run(&mut self, slot: u16, data: Option<IoBuf>) {
        let (cmd, xfer_len) = match self.slots.get(usize::from(slot)) {
            Some(s) => (s.cmd, s.xfer_len),
            None => return,
        };
        let d = if cmd.opcode() == admin::FABRICS {
            self.exec_fabrics(&cmd, data)
        } else {
            match &self.q {
                None => Dispatch::Now(Outcome::status(Status::COMMAND_SEQUENCE_ERROR)),
                Some(q) if q.qid == 0 => self.exec_admin(&cmd, data, xfer_len),
                Some(_) => self.exec_io(&cmd, data, xfer_len),
            }
        };
        match d {
            Dispatch::Now(o) => self.finish_now(slot, o),
            Dispatch::Later(mut fut) => {
                if is_aer(&cmd) {
                    self.aers_running += 1;
                    // Retiring the AER (its CID reused) ends it, giving its event slot
                    // back to the controller.
                    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                    if let Some(s) = self.slots.get_mut(usize::from(slot)) {
                        s.cancel = Some(tx);
                    }
                    fut = Box::pin(async move {
                        tokio::select! {
                            o = fut => o,
                            Ok(()) = rx => Outcome::status(Status::ABORT_REQUESTED),
                        }
                    });
                }
                self.inflight.push(Tagged { slot, fut })
            }
        }
    }

    fn finish_now(&mut self, slot: u16, o: Outcome) {
        self.complete(slot, o);
    }

    /// Sends the completion (and data) of the command in `slot` and frees the slot.
    fn complete(&mut self, slot: u16, mut o: Outcome) {
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            return;
        };
        let cmd = s.cmd;
        let xfer_len = s.xfer_len as usize;
        if matches!(s.state, SlotState::Retired) {
            // Its CID and queue-depth share went back to the host when it was retired.
            s.state = SlotState::Free;
            self.free_slots.push(slot);
            if let Some(b) = o.spare.take() {
                self.tx.pool.put(b);
            }
            if let Some(b) = o.data.take() {
                self.tx.pool.put(b);
            }
            return;
        }
        if let SlotState::AwaitData(inc) = std::mem::replace(&mut s.state, SlotState::Free) {
            // Completed before its data arrived (cannot happen today; keep the budget right).
            if inc.r2t_sent {
                self.r2t_bytes = self.r2t_bytes.saturating_sub(inc.total as usize);
            }
            self.tx.pool.put(inc.buf);
        }
        self.free_slots.push(slot);
        let cid = cmd.cid();
        self.set_cid(cid, false);
        self.outstanding = self.outstanding.saturating_sub(1);
        if self.outstanding == 0 {
            self.mark_idle();
        }
        if let Some(b) = o.spare.take() {
            self.tx.pool.put(b);
        }
        let c = &self.handle.counters;
        if !o.status.is_success() {
            c.add(&c.errors, 1);
            self.log_error(&cmd, &o);
        } else if let Some(a) = o.acct {
            match a.kind {
                OpKind::Read => {
                    c.add(&c.read_ops, 1);
                    c.add(&c.read_bytes, a.bytes);
                }
                OpKind::Write => {
                    c.add(&c.write_ops, 1);
                    c.add(&c.write_bytes, a.bytes);
                }
                OpKind::Other => {}
            }
        }
        let (qid, sqflow_disabled) = match &self.q {
            Some(q) => (q.qid, q.sqflow_disabled),
            None => (0, false),
        };
        let mut cqe = Completion::new(cid, o.status);
        cqe.dw0 = o.dw0;
        cqe.dw1 = o.dw1;
        cqe.sqid = qid;
        cqe.sqhd = self.sq_head;
        let mut need_resp = true;
        if let Some(mut buf) = o.data.take() {
            if o.status.is_success() && xfer_len > 0 {
                if buf.len() != xfer_len {
                    // Pad or cut to what the host asked for (log pages, identify).
                    let mut b = self.tx.pool.get_zeroed(xfer_len);
                    let n = buf.len().min(xfer_len);
                    b[..n].copy_from_slice(&buf[..n]);
                    self.tx.pool.put(buf);
                    buf = b;
                }
                let success = sqflow_disabled && cqe.dw0 == 0 && cqe.dw1 == 0 && !o.close_after;
                self.push_c2h(cid, buf, success);
                need_resp = !success;
            } else {
                self.tx.pool.put(buf);
            }
        }
        if need_resp {
            let e = encode_header(&PduHeader::CapsuleResp(cqe), 0, 0, self.framing);
            self.tx.push_bytes(e.as_bytes());
        }
        if o.close_after {
            self.phase = Phase::Closing;
        }
    }

    /// Queues C2HData PDUs carrying `buf`, split at the configured chunk size.
    fn push_c2h(&mut self, cid: u16, buf: IoBuf, success: bool) {
        let total = buf.len();
        let chunk = self.target.config.c2h_chunk_bytes as usize;
        let id = self.tx.hold(buf);
        let mut off = 0;
        while off < total {
            let n = chunk.min(total - off);
            let last = off + n == total;
            let mut flags = 0;
            if last {
                flags |= pdu_flags::LAST_PDU;
                if success {
                    flags |= pdu_flags::SUCCESS;
                }
            }
            let h = PduHeader::C2HData(DataHeader {
                cccid: cid,
                ttag: 0,
                offset: off as u32,
                length: n as u32,
            });
            let e = encode_header(&h, flags, n, self.framing);
            self.tx.push_bytes(e.as_bytes());
            self.tx.push_buf_range(id, off, off + n);
            if self.digests.data {
                let d = crc32c(self.tx.held_slice(id, off, off + n)).to_le_bytes();
                self.tx.push_bytes(&d);
            }
            off += n;
        }
        self.tx.release(id);
    }

    fn mark_busy(&mut self) {
        if self.busy_since.is_none() {
            self.busy_since = Some(Instant::now());
            self.handle
                .counters
                .in_flight
                .store(u64::from(self.outstanding), Relaxed);
        } else {
            self.handle
                .counters
                .in_flight
                .store(u64::from(self.outstanding), Relaxed);
        }
    }

    fn mark_idle(&mut self) {
        self.handle.counters.in_flight.store(0, Relaxed);
        if let Some(t) = self.busy_since.take() {
            let c = &self.handle.counters;
            c.add(&c.busy_us, t.elapsed().as_micros() as u64);
        }
    }

    fn log_error(&self, cmd: &Command, o: &Outcome) {
        // Commands that never reached a controller have no error log.
        let Some(q) = &self.q else { return };
        if o.status == Status::COMMAND_SEQUENCE_ERROR && cmd.opcode() == admin::ASYNC_EVENT_REQUEST
        {
            return;
        }
        q.ctrl.add_error(ErrorRecord {
            error_count: 0,
            sqid: q.qid,
            cid: cmd.cid(),
            status_field: o.status.to_field(),
            param_error_location: o.err_loc,
            lba: o.err_lba,
            nsid: o.err_nsid,
        });
        self.target.health.error_log_entries.fetch_add(1, Relaxed);
    }

    /// Serves the requests other tasks queued on this connection; true if any.
    fn serve_requests(&mut self) -> bool {
        let Some(reqs) = self.handle.take_requests() else {
            return false;
        };
        for r in reqs {
            match r {
                ConnRequest::AbortNs { nsid, status } => {
                    let io_queue = self.q.as_ref().is_some_and(|q| q.qid != 0);
                    if !io_queue {
                        continue;
                    }
                    let waiting: Vec<u16> = self
                        .slots
                        .iter()
                        .enumerate()
                        .filter(|(_, s)| {
                            matches!(s.state, SlotState::AwaitData(_)) && s.cmd.nsid() == nsid
                        })
                        .map(|(i, _)| i as u16)
                        .collect();
                    if !waiting.is_empty() {
                        tracing::debug!(conn = self.handle.id, nsid, count = waiting.len(),
                            %status, "aborting commands that had not started");
                    }
                    for slot in waiting {
                        self.abort_waiting(slot, status);
                    }
                }
                ConnRequest::AbortCid { cid, reply } => {
                    let _ = reply.send(self.abort_cid(cid, Status::ABORT_REQUESTED));
                }
            }
        }
        true
    }

    /// Aborts command `cid` if it has not started executing; true if it was aborted.
    pub(crate) fn abort_cid(&mut self, cid: u16, status: Status) -> bool {
        if !self.cid_in_use(cid) {
            return false;
        }
        let slot = self
            .slots
            .iter()
            .position(|s| s.cmd.cid() == cid && matches!(s.state, SlotState::AwaitData(_)));
        match slot {
            Some(i) => self.abort_waiting(i as u16, status),
            None => false,
        }
    }

    /// Aborts a command waiting for its data. Without an R2T sent it completes now;
    /// with one, the host is already sending: the data is received and discarded, and the
    /// command completes with `status` instead of executing.
    fn abort_waiting(&mut self, slot: u16, status: Status) -> bool {
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            return false;
        };
        let SlotState::AwaitData(inc) = &mut s.state else {
            return false;
        };
        if inc.r2t_sent {
            inc.failed.get_or_insert(status);
            return true;
        }
        self.r2t_wait.retain(|&w| w != slot);
        self.finish_now(slot, Outcome::status(status));
        true
    }

    pub(crate) fn ctrl(&self) -> Option<&Arc<Controller>> {
        self.q.as_ref().map(|q| &q.ctrl)
    }

    /// Lets the commands still running finish in the background instead of dropping
    /// them: a dropped device future may still reach the media, and the in-flight counts
    /// that preempt-and-abort waits on must stay up until it has.
    fn drain_inflight(&mut self) {
        let mut rest = std::mem::take(&mut self.inflight);
        if rest.is_empty() {
            return;
        }
        let conn = self.handle.id;
        tokio::spawn(async move {
            let n = rest.len();
            while futures::StreamExt::next(&mut rest).await.is_some() {}
            tracing::debug!(
                conn,
                commands = n,
                "commands of a closed connection finished"
            );
        });
    }

    fn teardown(&mut self) {
        self.mark_idle();
        let Some(q) = self.q.take() else { return };
        if q.qid == 0 {
            q.ctrl.kill();
            lock(&q.ctrl.subsys.controllers).remove(&q.ctrl.cntlid);
        } else {
            let mut st = lock(&q.ctrl.state);
            if st
                .io_queues
                .get(&q.qid)
                .is_some_and(|h| Arc::ptr_eq(h, &self.handle))
            {
                st.io_queues.remove(&q.qid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use nvme_proto::tcp::CAPSULE_CMD_HLEN;

    #[test]
    fn capsule_header_len() {
        assert_eq!(CAPSULE_CMD_HLEN, 72);
    }
}
