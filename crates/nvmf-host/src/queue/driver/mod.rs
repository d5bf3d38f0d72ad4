//! The task that owns one queue's socket.
//!
//! A single hand-written poll loop: it takes submissions while a CID is free, writes the
//! transmit queue with vectored writes, parses received PDUs (large C2H data goes straight
//! into the command's buffer), and checks command deadlines. Owning everything in one task
//! means no locks on the command table and no cross-task wakeups per PDU.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use nvme_proto::Completion;
use nvme_proto::bytes::le32;
use nvme_proto::sgl::SglDescriptor;
use nvme_proto::tcp::digest::crc32c_append;
use nvme_proto::tcp::{
    CH_BYTES, CommonHeader, FatalError, Framing, PduHeader, TERM_REQ_MAX_DATA_BYTES,
    check_header_digest, data_digest, encode_header, encode_term_req, fes, layout, pdu_type,
};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Sleep;

mod incoming;

use super::handshake::Negotiated;
use super::rx::{DIRECT_READ_MIN_BYTES, RxBuf, RxState};
use super::slots::{Slots, Xfer};
use super::tx::{DataRef, TxItem, TxQueue};
use super::{Completed, Payload, Shared, Submission};
use crate::error::{CommandKind, HostError, Result, TransportError};

/// Rounds of (submit, send, receive) before the task yields to others.
const ROUNDS_PER_POLL: usize = 8;
/// Socket reads per round.
const READS_PER_ROUND: usize = 16;

pub(crate) struct DriverConfig {
    pub addr: SocketAddr,
    pub qid: u16,
    pub depth: u16,
    pub negotiated: Negotiated,
    pub in_capsule_max_bytes: u32,
    pub timeout_ms: u64,
}

pub(crate) struct Driver {
    io: TcpStream,
    cfg: DriverConfig,
    framing: Framing,
    sub_rx: mpsc::Receiver<Submission>,
    shutdown_rx: oneshot::Receiver<()>,
    shared: Arc<Shared>,
    slots: Slots,
    tx: TxQueue,
    /// CIDs whose data PDUs were fully written by the last write (reused, never shrinks).
    sent_scratch: Vec<u16>,
    rbuf: RxBuf,
    rx: RxState,
    /// The header of the PDU being handled, for the H2CTermReq if it is bad.
    last_hdr: [u8; TERM_REQ_MAX_DATA_BYTES],
    last_hdr_len: usize,
    timer: Pin<Box<Sleep>>,
    timer_armed: bool,
    tick: Duration,
}

impl Driver {
    pub fn new(
        io: TcpStream,
        cfg: DriverConfig,
        sub_rx: mpsc::Receiver<Submission>,
        shutdown_rx: oneshot::Receiver<()>,
        shared: Arc<Shared>,
    ) -> Driver {
        let framing = Framing {
            digests: cfg.negotiated.digests,
            data_align_bytes: 0,
        };
        // Deadlines are checked every quarter timeout (10 ms .. 1 s).
        let tick = Duration::from_millis((cfg.timeout_ms / 4).clamp(10, 1000));
        let depth = usize::from(cfg.depth);
        Driver {
            io,
            framing,
            sub_rx,
            shutdown_rx,
            shared,
            slots: Slots::new(cfg.depth),
            tx: TxQueue::new(depth * 2),
            sent_scratch: Vec::with_capacity(64),
            rbuf: RxBuf::new(),
            rx: RxState::Header,
            last_hdr: [0; TERM_REQ_MAX_DATA_BYTES],
            last_hdr_len: 0,
            timer: Box::pin(tokio::time::sleep(Duration::from_secs(3600))),
            timer_armed: false,
            tick,
            cfg,
        }
    }

    /// Runs until shutdown or a fatal error, then fails whatever is outstanding.
    pub async fn run(mut self) {
        let res = std::future::poll_fn(|cx| self.poll_drive(cx)).await;
        let err = match res {
            Ok(()) => TransportError::Shutdown,
            Err(e) => e,
        };
        if let TransportError::BadPdu { fes, fei, reason } = &err {
            tracing::warn!(addr = %self.cfg.addr, qid = self.cfg.qid, "{reason}: sending H2CTermReq");
            let f = FatalError {
                fes: *fes,
                fei: *fei,
                reason: "",
            };
            let term = encode_term_req(false, &f, &self.last_hdr[..self.last_hdr_len]);
            let _ = tokio::time::timeout(Duration::from_secs(1), self.io.write_all(&term)).await;
        } else if err != TransportError::Shutdown {
            tracing::warn!(addr = %self.cfg.addr, qid = self.cfg.qid, "queue failed: {err}");
        }
        self.shared.set_error(err.clone());
        self.sub_rx.close();
        let host_err = HostError::Transport {
            addr: self.cfg.addr,
            qid: self.cfg.qid,
            reason: err,
        };
        for cid in self.slots.busy_cids() {
            if let Some(mut s) = self.slots.release(cid)
                && let Some(reply) = s.reply.take()
            {
                let _ = reply.send(Err(host_err.clone()));
            }
        }
        while let Ok(sub) = self.sub_rx.try_recv() {
            let _ = sub.reply.send(Err(host_err.clone()));
        }
    }

    fn poll_drive(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        if Pin::new(&mut self.shutdown_rx).poll(cx).is_ready() {
            return Poll::Ready(Ok(()));
        }
        for _ in 0..ROUNDS_PER_POLL {
            let mut progress = false;
            while self.slots.has_free() {
                match self.sub_rx.poll_recv(cx) {
                    Poll::Ready(Some(sub)) => {
                        self.start(sub);
                        progress = true;
                    }
                    Poll::Ready(None) => return Poll::Ready(Ok(())),
                    Poll::Pending => break,
                }
            }
            progress |= self.pump_tx(cx)?;
            progress |= self.pump_rx(cx)?;
            if self.timer_armed && self.timer.as_mut().poll(cx).is_ready() {
                self.on_timer();
                progress = true;
            }
            if !progress {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn kind(&self, opcode: u8, fctype: u8) -> CommandKind {
        CommandKind {
            admin: self.cfg.qid == 0,
            opcode,
            fctype,
        }
    }

    /// Puts a new command on the wire: CID, SGL, capsule (with in-capsule data if it fits).
    fn start(&mut self, sub: Submission) {
        let Some(cid) = self.slots.alloc() else {
            // poll_drive only takes submissions while a CID is free.
            let _ = sub.reply.send(Err(HostError::Usage("no free CID".into())));
            return;
        };
        let Submission {
            mut cmd,
            payload,
            reply,
            deadline,
            timeout_ms,
        } = sub;
        cmd.set_cid(cid);
        let kind = self.kind(cmd.opcode(), cmd.fctype());
        let (xfer, buf, offset, len) = match payload {
            Payload::None => (Xfer::None, None, 0, 0),
            Payload::ToController { buf, offset, len } if len > 0 => {
                let in_capsule = len as u64 <= u64::from(self.cfg.in_capsule_max_bytes);
                (Xfer::ToController { in_capsule }, Some(buf), offset, len)
            }
            Payload::FromController { buf, offset, len } if len > 0 => {
                (Xfer::FromController, Some(buf), offset, len)
            }
            Payload::ToController { buf, .. } | Payload::FromController { buf, .. } => {
                (Xfer::None, Some(buf), 0, 0)
            }
        };
        // Payload::check bounded len to u32.
        let len_u32 = len as u32;
        let in_capsule = xfer == Xfer::ToController { in_capsule: true };
        cmd.set_sgl1(if in_capsule {
            SglDescriptor::in_capsule(0, len_u32)
        } else {
            SglDescriptor::transport(len_u32)
        });
        let (data, ddgst) = if in_capsule {
            let dg = match (&buf, self.framing.digests.data) {
                (Some(b), true) => b.get(offset..offset + len).map(data_digest),
                _ => None,
            };
            (Some(DataRef { cid, offset, len }), dg)
        } else {
            (None, None)
        };
        let hdr = encode_header(
            &PduHeader::CapsuleCmd(cmd),
            0,
            if in_capsule { len } else { 0 },
            self.framing,
        );
        if let Some(s) = self.slots.busy_mut(cid) {
            s.reply = Some(reply);
            s.buf = buf;
            s.xfer = xfer;
            s.buf_offset = offset;
            s.len_bytes = len_u32;
            s.received_bytes = 0;
            s.r2t_end_bytes = 0;
            s.tx_refs = u32::from(data.is_some());
            s.pending = None;
            s.data_error = None;
            s.deadline = deadline;
            s.timeout_ms = timeout_ms;
            s.timed_out = false;
            s.kind = kind;
        }
        self.tx.push(TxItem {
            hdr,
            data,
            ddgst,
            sent: 0,
        });
        if !self.timer_armed {
            self.timer_armed = true;
            let at = tokio::time::Instant::now() + self.tick;
            self.timer.as_mut().reset(at);
        }
    }

    fn pump_tx(&mut self, cx: &mut Context<'_>) -> Result<bool, TransportError> {
        let mut progress = false;
        while !self.tx.is_empty() {
            self.sent_scratch.clear();
            let scratch = &mut self.sent_scratch;
            match self
                .tx
                .poll_write(&mut self.io, &self.slots, cx, |cid| scratch.push(cid))
            {
                Poll::Pending => break,
                Poll::Ready(Err(e)) => return Err(TransportError::io("send", &e)),
                Poll::Ready(Ok(0)) => break,
                Poll::Ready(Ok(_)) => progress = true,
            }
            for i in 0..self.sent_scratch.len() {
                let cid = self.sent_scratch[i];
                self.data_sent(cid);
            }
        }
        Ok(progress)
    }

    /// A PDU carrying `cid`'s data is fully written: the buffer may go back once the
    /// last such PDU is out.
    fn data_sent(&mut self, cid: u16) {
        let Some(s) = self.slots.busy_mut(cid) else {
            return;
        };
        s.tx_refs = s.tx_refs.saturating_sub(1);
        if s.tx_refs == 0
            && let Some(r) = s.pending.take()
        {
            self.finish(cid, r);
        }
    }

    fn pump_rx(&mut self, cx: &mut Context<'_>) -> Result<bool, TransportError> {
        let mut progress = false;
        for _ in 0..READS_PER_ROUND {
            progress |= self.parse_buffered()?;
            // Large C2H data goes straight into the command's buffer.
            if let RxState::Data {
                cid,
                pos,
                remaining,
                ..
            } = self.rx
                && self.rbuf.is_empty()
                && remaining >= DIRECT_READ_MIN_BYTES
            {
                let dst = self
                    .slots
                    .busy_mut(cid)
                    .and_then(|s| s.buf.as_mut())
                    .and_then(|b| b.get_mut(pos..pos + remaining))
                    .ok_or_else(|| lost_buffer(cid))?;
                let mut rb = ReadBuf::new(dst);
                match Pin::new(&mut self.io).poll_read(cx, &mut rb) {
                    Poll::Pending => return Ok(progress),
                    Poll::Ready(Err(e)) => return Err(TransportError::io("receive", &e)),
                    Poll::Ready(Ok(())) => {}
                }
                let n = rb.filled().len();
                if n == 0 {
                    return Err(TransportError::ClosedMidPdu {
                        pdu_type: pdu_type::C2H_DATA,
                    });
                }
                progress = true;
                self.data_received(n)?;
                continue;
            }
            let spare = self.rbuf.spare();
            if spare.is_empty() {
                // Cannot happen (headers are far smaller than the buffer); never read 0
                // bytes and mistake it for EOF.
                return Err(TransportError::bad(
                    fes::INVALID_HEADER_FIELD,
                    0,
                    "receive buffer full without a complete PDU header",
                ));
            }
            let mut rb = ReadBuf::new(spare);
            match Pin::new(&mut self.io).poll_read(cx, &mut rb) {
                Poll::Pending => return Ok(progress),
                Poll::Ready(Err(e)) => return Err(TransportError::io("receive", &e)),
                Poll::Ready(Ok(())) => {}
            }
            let n = rb.filled().len();
            if n == 0 {
                return Err(self.eof_error());
            }
            self.rbuf.filled(n);
            progress = true;
        }
        // Budget used up: report progress so the caller comes back.
        progress |= self.parse_buffered()?;
        Ok(progress)
    }

    fn eof_error(&self) -> TransportError {
        match self.rx {
            RxState::Header if self.rbuf.is_empty() => TransportError::Closed,
            RxState::Header => TransportError::ClosedMidPdu {
                pdu_type: self.rbuf.avail().first().copied().unwrap_or(0),
            },
            RxState::Data { .. } | RxState::Digest { .. } => TransportError::ClosedMidPdu {
                pdu_type: pdu_type::C2H_DATA,
            },
        }
    }

    /// Parses what the staging buffer holds. Returns whether anything was consumed.
    fn parse_buffered(&mut self) -> Result<bool, TransportError> {
        let mut progress = false;
        loop {
            match self.rx {
                RxState::Header => {
                    let avail = self.rbuf.avail();
                    let Some(chb) = avail.first_chunk::<CH_BYTES>() else {
                        return Ok(progress);
                    };
                    let ch = CommonHeader::decode(chb);
                    self.last_hdr_len = avail.len().min(CH_BYTES);
                    self.last_hdr[..self.last_hdr_len].copy_from_slice(&avail[..self.last_hdr_len]);
                    let lay = layout(&ch, Some(self.framing.digests), u32::MAX as usize)?;
                    let is_term =
                        matches!(ch.pdu_type, pdu_type::C2H_TERM_REQ | pdu_type::H2C_TERM_REQ);
                    let head = if is_term || lay.data_len == 0 {
                        lay.total_len
                    } else {
                        lay.data_offset
                    };
                    if avail.len() < head {
                        return Ok(progress);
                    }
                    self.last_hdr_len = head.min(TERM_REQ_MAX_DATA_BYTES);
                    self.last_hdr[..self.last_hdr_len].copy_from_slice(&avail[..self.last_hdr_len]);
                    if lay.has_hdgst {
                        check_header_digest(avail, lay.hlen)?;
                    }
                    let hdr = PduHeader::decode(&ch, avail)?;
                    self.rbuf.consume(head);
                    progress = true;
                    self.on_header(hdr, &ch, &lay)?;
                }
                RxState::Data {
                    cid,
                    pos,
                    remaining,
                    ddgst,
                    crc,
                    ..
                } => {
                    if self.rbuf.is_empty() {
                        return Ok(progress);
                    }
                    let n = remaining.min(self.rbuf.len());
                    let src = &self.rbuf.avail()[..n];
                    let dst = self
                        .slots
                        .busy_mut(cid)
                        .and_then(|s| s.buf.as_mut())
                        .and_then(|b| b.get_mut(pos..pos + n))
                        .ok_or_else(|| lost_buffer(cid))?;
                    dst.copy_from_slice(src);
                    if ddgst && let RxState::Data { crc: c, .. } = &mut self.rx {
                        *c = crc32c_append(crc, src);
                    }
                    self.rbuf.consume(n);
                    progress = true;
                    self.advance_data(n)?;
                }
                RxState::Digest { cid, crc, success } => {
                    let avail = self.rbuf.avail();
                    if avail.len() < 4 {
                        return Ok(progress);
                    }
                    let got = le32(avail, 0);
                    self.rbuf.consume(4);
                    progress = true;
                    self.rx = RxState::Header;
                    if got != crc {
                        self.data_digest_error(cid);
                    }
                    self.data_pdu_done(cid, success)?;
                }
            }
        }
    }

    /// `n` bytes were read directly into the destination of the current data PDU.
    fn data_received(&mut self, n: usize) -> Result<(), TransportError> {
        if let RxState::Data {
            cid,
            pos,
            ddgst: true,
            crc,
            ..
        } = self.rx
        {
            let src = self
                .slots
                .get(cid)
                .and_then(|s| s.buf.as_ref())
                .and_then(|b| b.get(pos..pos + n))
                .ok_or_else(|| lost_buffer(cid))?;
            let c = crc32c_append(crc, src);
            if let RxState::Data { crc, .. } = &mut self.rx {
                *crc = c;
            }
        }
        self.advance_data(n)
    }

    fn advance_data(&mut self, n: usize) -> Result<(), TransportError> {
        let RxState::Data {
            cid,
            pos,
            remaining,
            pdu_len,
            crc,
            ddgst,
            success,
        } = self.rx
        else {
            return Ok(());
        };
        let remaining = remaining - n;
        if remaining > 0 {
            self.rx = RxState::Data {
                cid,
                pos: pos + n,
                remaining,
                pdu_len,
                crc,
                ddgst,
                success,
            };
            return Ok(());
        }
        if let Some(s) = self.slots.busy_mut(cid) {
            s.received_bytes += pdu_len;
        }
        if ddgst {
            self.rx = RxState::Digest { cid, crc, success };
            Ok(())
        } else {
            self.rx = RxState::Header;
            self.data_pdu_done(cid, success)
        }
    }

    /// The command has its answer; deliver it once no PDU still reads its buffer.
    fn complete(&mut self, cid: u16, r: Result<Completion>) {
        let Some(s) = self.slots.busy_mut(cid) else {
            return;
        };
        if s.tx_refs > 0 {
            s.pending = Some(r);
            return;
        }
        self.finish(cid, r);
    }

    fn finish(&mut self, cid: u16, r: Result<Completion>) {
        let Some(mut s) = self.slots.release(cid) else {
            return;
        };
        let Some(reply) = s.reply.take() else {
            // It timed out earlier; the caller has gone.
            return;
        };
        let out = match (r, s.data_error.take()) {
            (Err(e), _) => Err(e),
            (Ok(cqe), Some(e)) if cqe.status.is_success() => Err(e),
            (Ok(cqe), _) => Ok(Completed {
                cqe,
                buf: s.buf.take(),
            }),
        };
        let _ = reply.send(out);
    }

    fn on_timer(&mut self) {
        let now = Instant::now();
        let (addr, qid) = (self.cfg.addr, self.cfg.qid);
        for (cid, s) in self.slots.iter_mut() {
            if !s.timed_out && s.deadline <= now {
                s.timed_out = true;
                if let Some(reply) = s.reply.take() {
                    tracing::warn!(%addr, qid, cid, "{} timed out", s.kind);
                    let _ = reply.send(Err(HostError::Timeout {
                        addr,
                        qid,
                        cid,
                        command: s.kind,
                        timeout_ms: s.timeout_ms,
                    }));
                }
            }
        }
        if self.slots.active() > 0 {
            let at = tokio::time::Instant::now() + self.tick;
            self.timer.as_mut().reset(at);
        } else {
            self.timer_armed = false;
        }
    }
}

fn lost_buffer(cid: u16) -> TransportError {
    TransportError::bad(
        fes::INVALID_HEADER_FIELD,
        8,
        format!("data for CID {cid} does not fit its buffer"),
    )
}
