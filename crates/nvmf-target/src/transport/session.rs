//! The protocol state of one connection (one queue) and what ties its parts together:
//! PDUs come in ([`crate::transport::receive`]), capsules are admitted
//! ([`crate::transport::capsule`]) into the [`CommandTable`], write data is solicited
//! ([`crate::transport::r2t`]), commands run through the command sets
//! ([`QueueContext::execute`]) and complete ([`crate::transport::completion`]). Other
//! tasks' requests (aborts) are served here too.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use blockdev::IoBuf;
use futures::stream::FuturesUnordered;
use nvme_proto::Status;
use nvme_proto::tcp::{Digests, Framing};

use crate::cmd::context::QueueContext;
use crate::cmd::{CmdFuture, Dispatch, Outcome};
use crate::sync::lock;
use crate::target::{ListenerInfo, TargetInner};
use crate::transport::commands::{CommandTable, SlotState, is_aer};
use crate::transport::completion::BusyClock;
use crate::transport::handle::{ConnHandle, ConnRequest};
use crate::transport::r2t::R2tFlow;
use crate::transport::receive::Phase;
use crate::transport::throttle::ThrottleQueue;
use crate::transport::tx::TxQueue;

/// A command future tagged with its slot, so completions find their command.
pub(crate) struct Tagged {
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

pub(crate) struct Session {
    /// What commands see: target, controller binding, buffer pool, namespace cache.
    pub(super) ctx: QueueContext,
    pub(super) phase: Phase,
    pub(super) digests: Digests,
    pub(super) framing: Framing,
    pub(super) maxr2t: u32,
    pub(super) commands: CommandTable,
    /// Futures of the commands that run on the device or wait (AERs, reservations).
    pub(super) inflight: FuturesUnordered<Tagged>,
    pub(super) r2t: R2tFlow,
    /// Commands over a QoS limit, waiting for their turn.
    pub(super) throttle: ThrottleQueue,
    pub(super) tx: TxQueue,
    pub(super) sq_head: u16,
    pub(super) busy: BusyClock,
    /// A termination request was queued: linger after sending it.
    pub(super) fatal: bool,
    /// The host closed its sending side.
    pub(super) peer_eof: bool,
}

impl Session {
    pub fn new(
        target: Arc<TargetInner>,
        handle: Arc<ConnHandle>,
        listener: Arc<ListenerInfo>,
        local: SocketAddr,
    ) -> Session {
        Session {
            ctx: QueueContext::new(target, handle, listener, local),
            phase: Phase::AwaitIcReq,
            digests: Digests::default(),
            framing: Framing::default(),
            maxr2t: 0,
            commands: CommandTable::new(),
            inflight: FuturesUnordered::new(),
            r2t: R2tFlow::default(),
            throttle: ThrottleQueue::default(),
            tx: TxQueue::new(),
            sq_head: 0,
            busy: BusyClock::default(),
            fatal: false,
            peer_eof: false,
        }
    }

    /// Executes the command in `slot` with its host data (if any).
    pub(crate) fn run(&mut self, slot: u16, data: Option<IoBuf>) {
        self.run_admitted(slot, data, false);
    }

    /// Runs the commands of the throttle queue whose turn has come; true if any.
    pub(crate) fn release_throttled(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        while let Some(due) = self.throttle.poll_due(cx) {
            any = true;
            // None: aborted while it waited (its entry was stale).
            if let Some(data) = self.commands.release_throttled(due.slot, due.seq) {
                self.run_admitted(due.slot, data, true);
            }
        }
        any
    }

    fn run_admitted(&mut self, slot: u16, data: Option<IoBuf>, qos_released: bool) {
        let (cmd, xfer_len) = match self.commands.get(slot) {
            Some(s) => (s.cmd, s.xfer_len),
            None => return,
        };
        match self.ctx.execute(&cmd, data, xfer_len, qos_released) {
            Dispatch::Now(o) => self.complete(slot, o),
            Dispatch::Throttled {
                data,
                start_ns,
                gate,
            } => {
                let depth = self
                    .ctx
                    .queue
                    .as_ref()
                    .map_or(1, |q| usize::from(q.sqsize) + 1);
                let seq = self.throttle.push(slot, start_ns, gate, depth);
                if let Some(s) = self.commands.get_mut(slot) {
                    s.state = SlotState::Throttled { data, seq };
                }
            }
            Dispatch::Later(mut fut) => {
                if is_aer(&cmd) {
                    self.commands.aer_started();
                    // Retiring the AER (its CID reused) ends it, giving its event slot
                    // back to the controller.
                    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                    if let Some(s) = self.commands.get_mut(slot) {
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
            Dispatch::AbortOnThisQueue { cid } => {
                let aborted = self.abort_cid(cid, Status::ABORT_REQUESTED);
                self.complete(slot, Outcome::dw0(u32::from(!aborted)));
            }
        }
    }

    /// Serves the requests other tasks queued on this connection; true if any.
    pub(crate) fn serve_requests(&mut self) -> bool {
        let Some(reqs) = self.ctx.handle.take_requests() else {
            return false;
        };
        for r in reqs {
            match r {
                ConnRequest::AbortNs { nsid, status } => {
                    let io_queue = self.ctx.queue.as_ref().is_some_and(|q| q.qid != 0);
                    if !io_queue {
                        continue;
                    }
                    let waiting = self.commands.not_started_on(nsid);
                    if !waiting.is_empty() {
                        tracing::debug!(conn = self.ctx.handle.id, nsid, count = waiting.len(),
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
    fn abort_cid(&mut self, cid: u16, status: Status) -> bool {
        match self.commands.not_started_with_cid(cid) {
            Some(slot) => self.abort_waiting(slot, status),
            None => false,
        }
    }

    /// Aborts a command that has not started. One in the throttle queue completes now
    /// (its queue entry goes stale). One waiting for its data without an R2T sent
    /// completes now; with one, the host is already sending: the data is received and
    /// discarded, and the command completes with `status` instead of executing.
    fn abort_waiting(&mut self, slot: u16, status: Status) -> bool {
        let Some(s) = self.commands.get_mut(slot) else {
            return false;
        };
        if matches!(s.state, SlotState::Throttled { .. }) {
            self.complete(slot, Outcome::status(status));
            return true;
        }
        let SlotState::AwaitData(inc) = &mut s.state else {
            return false;
        };
        if inc.r2t_sent {
            inc.failed.get_or_insert(status);
            return true;
        }
        self.r2t.forget(slot);
        self.complete(slot, Outcome::status(status));
        true
    }

    /// Lets the commands still running finish in the background instead of dropping
    /// them: a dropped device future may still reach the media, and the in-flight counts
    /// that preempt-and-abort waits on must stay up until it has.
    pub(crate) fn drain_inflight(&mut self) {
        let mut rest = std::mem::take(&mut self.inflight);
        if rest.is_empty() {
            return;
        }
        let conn = self.ctx.handle.id;
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

    /// Unbinds the queue from its controller: an admin queue takes the controller down,
    /// an I/O queue leaves it.
    pub(crate) fn teardown(&mut self) {
        self.busy.mark_idle(&self.ctx.handle);
        self.throttle.clear();
        let Some(q) = self.ctx.queue.take() else {
            return;
        };
        if q.qid == 0 {
            q.ctrl.kill();
            lock(&q.ctrl.subsys.controllers).remove(&q.ctrl.cntlid);
        } else {
            let mut st = lock(&q.ctrl.state);
            if st
                .io_queues
                .get(&q.qid)
                .is_some_and(|h| Arc::ptr_eq(h, &self.ctx.handle))
            {
                st.io_queues.remove(&q.qid);
            }
        }
    }
}
