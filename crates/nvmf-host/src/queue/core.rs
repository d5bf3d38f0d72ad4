//! The command table a queue's handles and its driver share: one pre-allocated ticket per
//! CID, a free list, and the submission lanes the driver serves. Submitting takes a free
//! tag (the CID), fills its ticket, puts the tag in a lane and waits on the ticket with
//! its waker: nothing is allocated per command.
//!
//! A queue outlives its TCP connections. When a connection ends, commands marked `retry`
//! go back to the front of their lane and wait for the next connection (or for
//! [`Core::fail_all`]); others fail at once with the buffer they carried. Only the `init`
//! lane (Connect and controller bring-up) is served until the owner opens the gate.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use nvme_proto::{Command, Completion};
use tokio::sync::{Notify, Semaphore, TryAcquireError};

use super::buf::{Data, DataBuf};
use crate::error::{CommandKind, HostError, TransportError};

/// What a caller hands to the queue.
pub(crate) struct Submission {
    pub cmd: Command,
    pub data: Data,
    /// None: no timeout (Asynchronous Event Request).
    pub timeout_ms: Option<u64>,
    /// Idempotent: may be sent again after a reconnect, an abort or a data digest error.
    pub retry: bool,
    /// Re-sends left for aborts and data digest errors.
    pub retries_left: u8,
    /// Served before everything else and while the gate is closed (Connect, bring-up).
    pub init: bool,
}

/// How a command ended, with the buffer it carried.
pub(crate) struct Outcome {
    pub result: Result<Completion, HostError>,
    pub buf: Option<DataBuf>,
    /// The command went to the target more than once (re-sent after a reconnect, an
    /// abort or a data digest error): an earlier attempt may have taken effect.
    pub resent: bool,
}

/// Where the queue's connection stands.
#[derive(Clone)]
enum QState {
    Connected {
        generation: u64,
    },
    /// Between connections; `retry` commands wait.
    Disconnected {
        reason: TransportError,
    },
    /// For good: everything fails with this.
    Dead {
        reason: HostError,
    },
}

struct Sched {
    state: QState,
    gate_open: bool,
    init: VecDeque<u16>,
    normal: VecDeque<u16>,
    driver_waker: Option<Waker>,
}

#[derive(Default)]
struct Ticket {
    /// Bumped for every new command on this tag.
    seq: u64,
    sub: Option<Submission>,
    outcome: Option<Outcome>,
    waker: Option<Waker>,
    /// In a lane.
    queued: bool,
    /// Owned by the driver (the CID is on the wire).
    in_driver: bool,
    /// A caller still waits for the outcome.
    caller_waiting: bool,
}

impl Ticket {
    fn idle(&self) -> bool {
        !self.queued && !self.in_driver && !self.caller_waiting
    }
}

/// A command whose deadline passed on a supervised queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimedOut {
    pub cid: u16,
    pub seq: u64,
    pub generation: u64,
    pub kind: CommandKind,
    pub timeout_ms: u64,
}

pub(crate) struct Core {
    pub addr: SocketAddr,
    pub qid: u16,
    pub depth: u16,
    tickets: Box<[Mutex<Ticket>]>,
    free: Mutex<Vec<u16>>,
    permits: Semaphore,
    sched: Mutex<Sched>,
    generation: AtomicU64,
    /// Set when a controller supervises the queue: connections may come back, and timed
    /// out commands are reported instead of failed.
    supervisor: OnceLock<Arc<Notify>>,
    timeouts: Mutex<Vec<TimedOut>>,
    closing: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Core {
    pub fn new(addr: SocketAddr, qid: u16, depth: u16) -> Arc<Core> {
        Arc::new(Core {
            addr,
            qid,
            depth,
            tickets: (0..depth).map(|_| Mutex::new(Ticket::default())).collect(),
            free: Mutex::new((0..depth).rev().collect()),
            permits: Semaphore::new(usize::from(depth)),
            sched: Mutex::new(Sched {
                state: QState::Disconnected {
                    reason: TransportError::NotConnected,
                },
                gate_open: false,
                init: VecDeque::with_capacity(usize::from(depth)),
                normal: VecDeque::with_capacity(usize::from(depth)),
                driver_waker: None,
            }),
            generation: AtomicU64::new(0),
            supervisor: OnceLock::new(),
            timeouts: Mutex::new(Vec::with_capacity(usize::from(depth))),
            closing: AtomicBool::new(false),
        })
    }

    pub fn kind(&self, cmd: &Command) -> CommandKind {
        CommandKind {
            admin: self.qid == 0,
            opcode: cmd.opcode(),
            fctype: cmd.fctype(),
        }
    }

    pub fn transport(&self, reason: TransportError) -> HostError {
        HostError::Transport {
            addr: self.addr,
            qid: self.qid,
            reason,
        }
    }

    /// Hands reconnect and timeout handling to a supervisor woken through `notify`.
    pub fn supervise(&self, notify: Arc<Notify>) {
        let _ = self.supervisor.set(notify);
    }
    pub fn supervised(&self) -> bool {
        self.supervisor.get().is_some()
    }
    fn poke_supervisor(&self) {
        if let Some(n) = self.supervisor.get() {
            n.notify_one();
        }
    }

    /// Why the queue cannot take commands now, if it cannot.
    pub fn error(&self) -> Option<HostError> {
        match &lock(&self.sched).state {
            QState::Connected { .. } => None,
            QState::Disconnected { reason } => Some(self.transport(reason.clone())),
            QState::Dead { reason } => Some(reason.clone()),
        }
    }
    pub fn is_dead(&self) -> bool {
        matches!(lock(&self.sched).state, QState::Dead { .. })
    }
    pub fn is_connected(&self) -> bool {
        matches!(lock(&self.sched).state, QState::Connected { .. })
    }
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn release_tag(&self, tag: u16) {
        lock(&self.free).push(tag);
        self.permits.add_permits(1);
    }

    /// Whether `sub` may not be queued now; the error to fail it with.
    fn refuse(&self, s: &Sched, sub: &Submission) -> Option<HostError> {
        match &s.state {
            QState::Dead { reason } => Some(reason.clone()),
            QState::Disconnected { reason } if !sub.retry || sub.init => {
                Some(self.transport(reason.clone()))
            }
            _ => None,
        }
    }

    /// Runs one command to its outcome. `slot_wait` bounds the wait for a free CID.
    pub async fn submit(&self, sub: Submission, slot_wait: Option<Duration>) -> Outcome {
        if let Some(e) = self.refuse(&lock(&self.sched), &sub) {
            return Outcome {
                result: Err(e),
                buf: sub.data.buf,
                resent: false,
            };
        }
        match self.permits.try_acquire() {
            Ok(p) => p.forget(),
            Err(TryAcquireError::NoPermits) => {
                let acquire = self.permits.acquire();
                let got = match slot_wait {
                    Some(d) => tokio::time::timeout(d, acquire).await.ok(),
                    None => Some(acquire.await),
                };
                match got {
                    Some(Ok(p)) => p.forget(),
                    Some(Err(_)) | None => {
                        let e = HostError::SubmitTimeout {
                            addr: self.addr,
                            qid: self.qid,
                            command: self.kind(&sub.cmd),
                            timeout_ms: slot_wait.map_or(0, |d| d.as_millis() as u64),
                        };
                        return Outcome {
                            result: Err(e),
                            buf: sub.data.buf,
                            resent: false,
                        };
                    }
                }
            }
            Err(TryAcquireError::Closed) => {
                return Outcome {
                    result: Err(self.transport(TransportError::Shutdown)),
                    buf: sub.data.buf,
                    resent: false,
                };
            }
        }
        // A permit guarantees a free tag.
        let Some(tag) = lock(&self.free).pop() else {
            self.permits.add_permits(1);
            return Outcome {
                result: Err(HostError::Usage("command table out of tags".into())),
                buf: sub.data.buf,
                resent: false,
            };
        };
        let init = sub.init;
        let sub = {
            let mut s = lock(&self.sched);
            if let Some(e) = self.refuse(&s, &sub) {
                drop(s);
                self.release_tag(tag);
                return Outcome {
                    result: Err(e),
                    buf: sub.data.buf,
                    resent: false,
                };
            }
            {
                let mut t = lock(&self.tickets[usize::from(tag)]);
                t.seq += 1;
                t.sub = Some(sub);
                t.outcome = None;
                t.queued = true;
                t.caller_waiting = true;
            }
            if init {
                s.init.push_back(tag);
            } else {
                s.normal.push_back(tag);
            }
            s.driver_waker.take()
        };
        if let Some(w) = sub {
            w.wake();
        }
        Wait {
            core: self,
            tag,
            done: false,
        }
        .await
    }

    /// The next command for the driver, or Pending (the driver is woken on submission).
    pub fn poll_next(&self, cx: &mut Context<'_>) -> Poll<(u16, Submission)> {
        loop {
            let tag = {
                let mut s = lock(&self.sched);
                let next = match s.init.pop_front() {
                    Some(t) => Some(t),
                    None if s.gate_open => s.normal.pop_front(),
                    None => None,
                };
                match next {
                    Some(t) => t,
                    None => {
                        if !s
                            .driver_waker
                            .as_ref()
                            .is_some_and(|w| w.will_wake(cx.waker()))
                        {
                            s.driver_waker = Some(cx.waker().clone());
                        }
                        return Poll::Pending;
                    }
                }
            };
            let mut t = lock(&self.tickets[usize::from(tag)]);
            t.queued = false;
            let sub = t.sub.take();
            match sub {
                Some(sub) if t.caller_waiting => {
                    t.in_driver = true;
                    return Poll::Ready((tag, sub));
                }
                // The caller gave up before the command was sent.
                _ => {
                    if t.idle() {
                        drop(t);
                        self.release_tag(tag);
                    }
                }
            }
        }
    }

    /// The driver is done with `tag`: deliver `outcome` (unless the caller has gone or
    /// already has an answer, e.g. a timeout).
    pub fn complete(&self, tag: u16, outcome: Outcome) {
        let Some(m) = self.tickets.get(usize::from(tag)) else {
            return;
        };
        let mut t = lock(m);
        t.in_driver = false;
        let mut wake = None;
        if t.caller_waiting && t.outcome.is_none() {
            t.outcome = Some(outcome);
            wake = t.waker.take();
        }
        let idle = t.idle();
        drop(t);
        if idle {
            self.release_tag(tag);
        }
        if let Some(w) = wake {
            w.wake();
        }
    }

    /// An unsupervised command timed out: the caller gets `err` now, the CID stays with
    /// the driver until the target answers or the connection ends.
    pub fn time_out(&self, tag: u16, err: HostError) {
        let Some(m) = self.tickets.get(usize::from(tag)) else {
            return;
        };
        let mut t = lock(m);
        if t.caller_waiting && t.outcome.is_none() {
            t.outcome = Some(Outcome {
                result: Err(err),
                buf: None,
                resent: false,
            });
            if let Some(w) = t.waker.take() {
                drop(t);
                w.wake();
            }
        }
    }

    /// A supervised command's deadline passed: tell the supervisor.
    pub fn report_timeout(&self, tag: u16, kind: CommandKind, timeout_ms: u64) {
        let Some(m) = self.tickets.get(usize::from(tag)) else {
            return;
        };
        let seq = lock(m).seq;
        lock(&self.timeouts).push(TimedOut {
            cid: tag,
            seq,
            generation: self.generation(),
            kind,
            timeout_ms,
        });
        self.poke_supervisor();
    }

    pub fn take_timeouts(&self) -> Vec<TimedOut> {
        std::mem::take(&mut *lock(&self.timeouts))
    }

    /// Whether the command a timeout was reported for is still on the wire.
    pub fn still_outstanding(&self, t: &TimedOut) -> bool {
        self.generation() == t.generation
            && self.tickets.get(usize::from(t.cid)).is_some_and(|m| {
                let g = lock(m);
                g.seq == t.seq && g.in_driver
            })
    }

    /// Sends `sub` again on this queue (front of its lane): after an abort or a data
    /// digest error, or after the connection it was on ended.
    pub fn requeue(&self, tag: u16, sub: Submission) {
        let Some(m) = self.tickets.get(usize::from(tag)) else {
            return;
        };
        let init = sub.init;
        {
            let mut t = lock(m);
            t.in_driver = false;
            if !t.caller_waiting {
                let idle = t.idle();
                drop(t);
                if idle {
                    self.release_tag(tag);
                }
                return;
            }
            t.sub = Some(sub);
            t.queued = true;
        }
        let waker = {
            let mut s = lock(&self.sched);
            if init {
                s.init.push_front(tag);
            } else {
                s.normal.push_front(tag);
            }
            // A queue that died meanwhile fails it right away.
            if let QState::Dead { reason } = &s.state {
                let reason = reason.clone();
                drop(s);
                self.fail_queued(&reason);
                return;
            }
            s.driver_waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The connection carrying `tag` ended with `err`: retry-able commands wait for the
    /// next connection of a supervised queue, the rest fail with their buffer back.
    /// Each such re-send uses one of the command's retries (as Linux counts requeues).
    pub fn connection_lost(&self, tag: u16, mut sub: Submission, err: &HostError) {
        if sub.retry
            && sub.retries_left > 0
            && !sub.init
            && self.supervised()
            && !self.closing.load(Ordering::Acquire)
        {
            sub.retries_left -= 1;
            self.requeue(tag, sub);
        } else {
            self.complete(
                tag,
                Outcome {
                    result: Err(err.clone()),
                    buf: sub.data.buf,
                    resent: false,
                },
            );
        }
    }

    /// A new connection (generation returned) serves the init lane.
    pub fn connected(&self) -> u64 {
        let g = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let mut s = lock(&self.sched);
        if !matches!(s.state, QState::Dead { .. }) {
            s.state = QState::Connected { generation: g };
            s.gate_open = false;
        }
        g
    }

    /// Lets the driver take ordinary commands.
    pub fn open_gate(&self) {
        let w = {
            let mut s = lock(&self.sched);
            s.gate_open = true;
            s.driver_waker.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }

    /// Connection `generation` ended with `reason` (after the driver gave its commands
    /// back). An unsupervised queue dies with it.
    pub fn connection_ended(&self, generation: u64, reason: TransportError) {
        let supervised = self.supervised() && !self.closing.load(Ordering::Acquire);
        {
            let mut s = lock(&self.sched);
            match s.state {
                QState::Connected { generation: g } if g == generation => {}
                _ => return,
            }
            s.gate_open = false;
            s.driver_waker = None;
            s.state = if supervised {
                QState::Disconnected {
                    reason: reason.clone(),
                }
            } else {
                QState::Dead {
                    reason: self.transport(reason.clone()),
                }
            };
        }
        let err = self.transport(reason);
        if supervised {
            self.fail_queued_where(&err, |sub| !sub.retry || sub.init);
        } else {
            self.fail_queued(&err);
        }
        self.poke_supervisor();
    }

    /// The queue is done for: queued and future commands fail with `err` (commands on the
    /// wire fail when their driver ends).
    pub fn fail_all(&self, err: HostError) {
        lock(&self.sched).state = QState::Dead {
            reason: err.clone(),
        };
        self.fail_queued(&err);
    }

    /// From now on connection loss fails commands instead of keeping them.
    pub fn set_closing(&self) {
        self.closing.store(true, Ordering::Release);
    }
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    fn fail_queued(&self, err: &HostError) {
        self.fail_queued_where(err, |_| true);
    }

    /// Fails queued commands matching `pred` with `err`; keeps the others in order.
    fn fail_queued_where(&self, err: &HostError, pred: impl Fn(&Submission) -> bool) {
        let tags: Vec<u16> = {
            let mut s = lock(&self.sched);
            let mut all: Vec<u16> = s.init.drain(..).collect();
            all.extend(s.normal.drain(..));
            all
        };
        let mut keep = Vec::new();
        for tag in tags {
            let mut t = lock(&self.tickets[usize::from(tag)]);
            let fail = t.sub.as_ref().is_none_or(&pred) || !t.caller_waiting;
            if !fail {
                keep.push(tag);
                continue;
            }
            t.queued = false;
            let sub = t.sub.take();
            let mut wake = None;
            if t.caller_waiting && t.outcome.is_none() {
                t.outcome = Some(Outcome {
                    result: Err(err.clone()),
                    buf: sub.and_then(|s| s.data.buf),
                    resent: false,
                });
                wake = t.waker.take();
            }
            let idle = t.idle();
            drop(t);
            if idle {
                self.release_tag(tag);
            }
            if let Some(w) = wake {
                w.wake();
            }
        }
        if !keep.is_empty() {
            let mut s = lock(&self.sched);
            for tag in keep.into_iter().rev() {
                s.normal.push_front(tag);
            }
        }
    }
}

/// Waits for a ticket's outcome; dropping it abandons the command (the driver frees the
/// CID when the target answers).
struct Wait<'a> {
    core: &'a Core,
    tag: u16,
    done: bool,
}

impl Future for Wait<'_> {
    type Output = Outcome;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let core = self.core;
        let tag = self.tag;
        let mut t = lock(&core.tickets[usize::from(tag)]);
        if let Some(o) = t.outcome.take() {
            t.caller_waiting = false;
            t.waker = None;
            let idle = t.idle();
            drop(t);
            if idle {
                core.release_tag(tag);
            }
            self.done = true;
            return Poll::Ready(o);
        }
        if !t.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            t.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut t = lock(&self.core.tickets[usize::from(self.tag)]);
        t.caller_waiting = false;
        t.waker = None;
        let outcome = t.outcome.take();
        let idle = t.idle();
        drop(t);
        drop(outcome);
        if idle {
            self.core.release_tag(self.tag);
        }
    }
}
