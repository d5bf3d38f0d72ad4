//! One NVMe/TCP connection (= one queue), served by one task that owns both socket halves.
//!
//! The task reads PDUs into a reusable buffer, hands them to the connection's [`Session`]
//! (I/O commands become futures in a `FuturesUnordered` polled by the same task), and
//! writes every response that is ready in one vectored write. Fatal transport errors end
//! only this connection, with a C2HTermReq. With `busy_poll_us` set, a connection that
//! ran out of work yields and polls again for that long instead of sleeping
//! (`BusyPoll`). A connection that has not sent ICReq and completed a Connect within
//! `handshake_timeout_ms` is closed; it has no full-size receive buffer before ICReq.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use blockdev::BusyPoll;
use futures::stream::Stream;
use nvme_proto::tcp::{FatalError, encode_term_req};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Sleep;

use crate::target::{ListenerInfo, TargetInner};
use crate::transport::handle::ConnHandle;
use crate::transport::receive::{PRE_ICREQ_RX_BYTES, Phase, Stop};
use crate::transport::rx::RxBuf;
use crate::transport::session::Session;

/// Stop reading new PDUs while this much output waits for the socket.
const TX_HIGH_WATER_BYTES: usize = 8 << 20;
/// How long a connection that sent a termination request waits for the host to close.
const LINGER: Duration = Duration::from_secs(2);

pub(crate) struct Conn<S> {
    io: S,
    rx: RxBuf,
    session: Session,
    /// Fires when ICReq and Connect have not completed in time; dropped once connected.
    handshake_deadline: Option<Pin<Box<Sleep>>>,
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
    let handshake = Duration::from_millis(u64::from(target.config.handshake_timeout_ms));
    let mut conn = Conn {
        io,
        // Grows to full size once ICReq is accepted (`receive`).
        rx: RxBuf::new(PRE_ICREQ_RX_BYTES),
        session: Session::new(target.clone(), handle.clone(), listener, local),
        handshake_deadline: Some(Box::pin(tokio::time::sleep(handshake))),
    };
    let mut busy_poll = BusyPoll::new(target.config.busy_poll_us);
    let ended = {
        let run = busy_poll.run(Some(&target.busy_poll_turns), |cx, progressed| {
            conn.poll_run(cx, progressed)
        });
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
        RunEnd::PeerClosed | RunEnd::Killed | RunEnd::Io | RunEnd::HandshakeTimeout => {}
    }
    conn.session.teardown();
    conn.session.drain_inflight();
}

pub(crate) enum RunEnd {
    PeerClosed,
    Closed,
    Fatal,
    Killed,
    Io,
    /// No ICReq in time (nothing to terminate with), or stuck closing.
    HandshakeTimeout,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// One turn; sets `progressed` when it did anything before running out of work.
    fn poll_run(&mut self, cx: &mut Context<'_>, progressed: &mut bool) -> Poll<RunEnd> {
        if let Some(deadline) = &mut self.handshake_deadline {
            if self.session.ctx.queue.is_some() {
                self.handshake_deadline = None;
            } else if deadline.as_mut().poll(cx).is_ready() {
                self.handshake_deadline = None;
                if let Some(end) = self.session.handshake_timed_out() {
                    return Poll::Ready(end);
                }
            }
        }
        let s = &mut self.session;
        s.ctx.handle.waker.register(cx.waker());
        loop {
            // Before reading more PDUs: data that arrives next must find aborted commands
            // already marked.
            let mut progress = s.serve_requests();
            progress |= s.release_throttled(cx);
            while let Poll::Ready(Some((slot, out))) = Pin::new(&mut s.inflight).poll_next(cx) {
                s.commands.future_done(slot);
                s.complete(slot, out);
                progress = true;
            }
            if s.phase != Phase::Closing && !s.peer_eof && s.tx.queued_bytes() < TX_HIGH_WATER_BYTES
            {
                match self.rx.poll_fill(&mut self.io, cx) {
                    // The host closed its sending side: finish what is running, then close.
                    Poll::Ready(Ok(0)) => {
                        s.peer_eof = true;
                        progress = true;
                    }
                    Poll::Ready(Ok(_)) => {
                        progress = true;
                        if let Err(stop) = s.process(&mut self.rx) {
                            match stop {
                                Stop::Fatal(err, hdr) => {
                                    tracing::info!(conn = s.ctx.handle.id, peer = %s.ctx.handle.peer,
                                        fes = err.fes, fei = err.fei, reason = err.reason, "fatal transport error");
                                    s.tx.push_vec(encode_term_req(true, &err, &hdr));
                                    s.fatal = true;
                                }
                                Stop::Close => return Poll::Ready(RunEnd::PeerClosed),
                            }
                            s.phase = Phase::Closing;
                        }
                    }
                    Poll::Ready(Err(_)) => return Poll::Ready(RunEnd::Io),
                    Poll::Pending => {}
                }
            }
            if !s.tx.is_empty() {
                match s.tx.poll_flush(&mut self.io, cx, &mut s.ctx.pool) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(_)) => return Poll::Ready(RunEnd::Io),
                    Poll::Pending => {}
                }
            }
            if s.phase == Phase::Closing && s.tx.is_empty() {
                return Poll::Ready(if s.fatal {
                    RunEnd::Fatal
                } else {
                    RunEnd::Closed
                });
            }
            // After end of stream only AERs (which may wait forever) may be left running;
            // commands still in the throttle queue have not started and never will.
            if s.peer_eof && s.tx.is_empty() && s.inflight.len() <= s.commands.aers_running() {
                return Poll::Ready(RunEnd::PeerClosed);
            }
            if !progress {
                return Poll::Pending;
            }
            *progressed = true;
        }
    }
}

impl Session {
    /// ICReq and Connect did not complete in time. Before ICReq the connection just
    /// closes; after it, a C2HTermReq (PDU Sequence Error) tells the host why.
    fn handshake_timed_out(&mut self) -> Option<RunEnd> {
        let icreq_received = self.phase != Phase::AwaitIcReq;
        self.ctx
            .target
            .count_handshake_timeout(&self.ctx.handle.peer, icreq_received);
        match self.phase {
            Phase::Established => {
                let err = FatalError::sequence("no Connect within the handshake timeout");
                self.tx.push_vec(encode_term_req(true, &err, &[]));
                self.fatal = true;
                self.phase = Phase::Closing;
                None
            }
            Phase::AwaitIcReq | Phase::Closing => Some(RunEnd::HandshakeTimeout),
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
