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

use crate::queue::stream::QueueStream;
use blockdev::BusyPoll;
use nvme_proto::bytes::le32;
use nvme_proto::sgl::SglDescriptor;
use nvme_proto::tcp::digest::crc32c_append;
use nvme_proto::tcp::{
    CH_BYTES, CommonHeader, FatalError, Framing, PduHeader, TERM_REQ_MAX_DATA_BYTES,
    check_header_digest, data_digest, encode_header, encode_term_req, fes, layout, pdu_type,
};
use nvme_proto::{Completion, Status};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::sync::oneshot;
use tokio::time::Sleep;

mod incoming;

use super::buf::Dir;
use super::core::{Core, Outcome, Submission};
use super::handshake::Negotiated;
use super::rx::{DIRECT_READ_MIN_BYTES, RxBuf, RxState};
use super::slots::{Slots, Xfer};
use super::tx::{DataRef, TxItem, TxQueue};
use crate::error::{HostError, Result, TransportError};

/// Rounds of (submit, send, receive) before the task yields to others.
const ROUNDS_PER_POLL: usize = 8;
/// Socket reads per round.
const READS_PER_ROUND: usize = 16;

pub(crate) struct DriverConfig {
    pub addr: SocketAddr,
    pub qid: u16,
    pub negotiated: Negotiated,
    pub in_capsule_max_bytes: u32,
    /// The queue's default command timeout (sets how often deadlines are checked).
    pub timeout_ms: u64,
    /// Connection generation (from `Core::connected`).
    pub generation: u64,
    pub busy_poll_us: u32,
}

pub(crate) struct Driver {
    io: QueueStream,
    cfg: DriverConfig,
    framing: Framing,
    core: Arc<Core>,
    shutdown_rx: oneshot::Receiver<TransportError>,
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
    /// The time at the start of this poll: deadlines need no finer clock, and reading
    /// the clock per command costs more than the rest of starting it.
    now: Option<Instant>,
}

impl Driver {
    pub fn new(
        io: QueueStream,
        cfg: DriverConfig,
        core: Arc<Core>,
        shutdown_rx: oneshot::Receiver<TransportError>,
    ) -> Driver {
        let framing = Framing {
            digests: cfg.negotiated.digests,
            data_align_bytes: 0,
        };
        // Deadlines are checked every quarter timeout (10 ms .. 1 s).
        let tick = Duration::from_millis((cfg.timeout_ms / 4).clamp(10, 1000));
        let depth = usize::from(core.depth);
        Driver {
            io,
            framing,
            shutdown_rx,
            slots: Slots::new(core.depth),
            core,
            tx: TxQueue::new(depth * 2),
            sent_scratch: Vec::with_capacity(64),
            rbuf: RxBuf::new(),
            rx: RxState::Header,
            last_hdr: [0; TERM_REQ_MAX_DATA_BYTES],
            last_hdr_len: 0,
            timer: Box::pin(tokio::time::sleep(Duration::from_secs(3600))),
            timer_armed: false,
            tick,
            now: None,
            cfg,
        }
    }

    /// Runs until shutdown or a fatal error, then gives every outstanding command back to
    /// the queue (to wait for the next connection, or to fail).
    pub async fn run(mut self) {
        let res = BusyPoll::new(self.cfg.busy_poll_us)
            .run(None, |cx, progressed| self.poll_drive(cx, progressed))
            .await;
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
        } else if self.core.is_closing() {
            tracing::debug!(addr = %self.cfg.addr, qid = self.cfg.qid, "queue closed: {err}");
        } else if matches!(err, TransportError::Reset { .. }) {
            tracing::info!(addr = %self.cfg.addr, qid = self.cfg.qid, "queue closed: {err}");
        } else if err != TransportError::Shutdown {
            tracing::warn!(addr = %self.cfg.addr, qid = self.cfg.qid, "queue failed: {err}");
        }
        let host_err = self.core.transport(err.clone());
        for cid in self.slots.busy_cids() {
            if let Some(s) = self.slots.release(cid) {
                // A command that timed out fails as such when it has no retries left.
                let e = if s.timed_out {
                    HostError::Timeout {
                        addr: self.cfg.addr,
                        qid: self.cfg.qid,
                        cid,
                        command: s.kind,
                        timeout_ms: s.timeout_ms.unwrap_or(0),
                    }
                } else {
                    host_err.clone()
                };
                self.core.connection_lost(cid, s.into_submission(), &e);
            }
        }
        self.core.connection_ended(self.cfg.generation, err);
    }

    /// One turn; sets `progressed` when it did anything before running out of work.
    fn poll_drive(
        &mut self,
        cx: &mut Context<'_>,
        progressed: &mut bool,
    ) -> Poll<Result<(), TransportError>> {
        self.now = None;
        match Pin::new(&mut self.shutdown_rx).poll(cx) {
            // Stopped by the queue's owner, for this reason.
            Poll::Ready(Ok(reason)) => return Poll::Ready(Err(reason)),
            // Every handle is gone.
            Poll::Ready(Err(_)) => return Poll::Ready(Ok(())),
            Poll::Pending => {}
        }
        for round in 0..ROUNDS_PER_POLL {
            *progressed |= round > 0;
            let mut progress = false;
            while let Poll::Ready((tag, sub)) = self.core.poll_next(cx) {
                self.start(tag, sub);
                progress = true;
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

    /// Puts a new command on the wire: CID, SGL, capsule (with in-capsule data if it fits).
    fn start(&mut self, cid: u16, sub: Submission) {
        let kind = self.core.kind(&sub.cmd);
        let framing = self.framing;
        let in_capsule_max = u64::from(self.cfg.in_capsule_max_bytes);
        let Some(s) = self.slots.claim(cid) else {
            // The tag is the CID and the queue hands out free tags only.
            self.core.complete(
                cid,
                Outcome {
                    result: Err(HostError::Usage(format!("CID {cid} is already in use"))),
                    buf: sub.data.buf,
                    resent: false,
                },
            );
            return;
        };
        let Submission {
            mut cmd,
            data,
            timeout_ms,
            retry,
            retries_left,
            init,
        } = sub;
        cmd.set_cid(cid);
        let len = data.len;
        let xfer = match data.dir {
            _ if len == 0 => Xfer::None,
            Dir::None => Xfer::None,
            Dir::ToController => Xfer::ToController {
                in_capsule: len as u64 <= in_capsule_max,
            },
            Dir::FromController => Xfer::FromController,
        };
        // Data::check bounded len to u32.
        let len_u32 = len as u32;
        let in_capsule = xfer == Xfer::ToController { in_capsule: true };
        cmd.set_sgl1(if in_capsule {
            SglDescriptor::in_capsule(0, len_u32)
        } else {
            SglDescriptor::transport(if xfer == Xfer::None { 0 } else { len_u32 })
        });
        let offset = data.offset;
        s.cmd = cmd;
        s.data = data;
        s.timeout_ms = timeout_ms;
        s.retry = retry;
        s.retries_left = retries_left;
        s.init = init;
        s.xfer = xfer;
        s.received_bytes = 0;
        s.r2t_end_bytes = 0;
        s.pending = None;
        s.data_error = None;
        s.deadline = match timeout_ms {
            Some(t) => Some(*self.now.get_or_insert_with(Instant::now) + Duration::from_millis(t)),
            None => None,
        };
        s.timed_out = false;
        s.kind = kind;
        let (dref, ddgst) = if in_capsule {
            let dg = if framing.digests.data {
                s.bytes(offset, len).map(data_digest)
            } else {
                None
            };
            (Some(DataRef { cid, offset, len }), dg)
        } else {
            (None, None)
        };
        s.tx_refs = u32::from(dref.is_some());
        let hdr = encode_header(
            &PduHeader::CapsuleCmd(cmd),
            0,
            if in_capsule { len } else { 0 },
            framing,
        );
        self.tx.push(TxItem {
            hdr,
            data: dref,
            ddgst,
            sent: 0,
        });
        if !self.timer_armed && timeout_ms.is_some() {
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
                    .and_then(|s| s.bytes_mut(pos, remaining))
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
                        .and_then(|s| s.bytes_mut(pos, n))
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
                .and_then(|s| s.bytes(pos, n))
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
        let data_error = s.data_error.take();
        // Commands that may be re-sent are, after an abort or a data digest error (as the
        // Linux host retries statuses without DNR).
        let again = s.retry
            && s.retries_left > 0
            && match (&r, &data_error) {
                (Ok(cqe), _) if is_abort_requested(cqe.status) => true,
                (Ok(cqe), Some(HostError::DataDigest { .. })) => cqe.status.is_success(),
                _ => false,
            };
        if again {
            tracing::debug!(addr = %self.cfg.addr, qid = self.cfg.qid, cid, "re-sending {}", s.kind);
            let mut sub = s.into_submission();
            sub.retries_left -= 1;
            self.core.requeue(cid, sub);
            return;
        }
        let result = match (r, data_error) {
            (Err(e), _) => Err(e),
            (Ok(cqe), Some(e)) if cqe.status.is_success() => Err(e),
            (Ok(cqe), _) => Ok(cqe),
        };
        // Sent more than once: an earlier attempt may have reached the target before its
        // connection died or it was aborted (callers of non-idempotent commands care).
        let resent = s.retry && s.retries_left < super::MAX_RETRIES;
        self.core.complete(
            cid,
            Outcome {
                result,
                buf: s.data.buf.take(),
                resent,
            },
        );
    }

    fn on_timer(&mut self) {
        let now = Instant::now();
        let (addr, qid) = (self.cfg.addr, self.cfg.qid);
        let supervised = self.core.supervised();
        let mut any_deadline = false;
        for (cid, s) in self.slots.iter_mut() {
            let Some(deadline) = s.deadline else {
                continue;
            };
            any_deadline = true;
            if s.timed_out || deadline > now {
                continue;
            }
            s.timed_out = true;
            let timeout_ms = s.timeout_ms.unwrap_or(0);
            tracing::warn!(%addr, qid, cid, "{} timed out after {timeout_ms} ms", s.kind);
            // Bring-up commands fail on their own: the supervisor is the one waiting.
            if supervised && !s.init {
                self.core.report_timeout(cid, s.kind, timeout_ms);
            } else {
                self.core.time_out(
                    cid,
                    HostError::Timeout {
                        addr,
                        qid,
                        cid,
                        command: s.kind,
                        timeout_ms,
                    },
                );
            }
        }
        if any_deadline {
            let at = tokio::time::Instant::now() + self.tick;
            self.timer.as_mut().reset(at);
        } else {
            self.timer_armed = false;
        }
    }
}

fn is_abort_requested(s: Status) -> bool {
    !s.dnr && s.sct == Status::ABORT_REQUESTED.sct && s.sc == Status::ABORT_REQUESTED.sc
}

fn lost_buffer(cid: u16) -> TransportError {
    TransportError::bad(
        fes::INVALID_HEADER_FIELD,
        8,
        format!("data for CID {cid} does not fit its buffer"),
    )
}
