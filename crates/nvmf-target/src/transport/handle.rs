//! A handle on a live connection: identity, counters, a kill switch that other tasks
//! (keep-alive watchdog, controller teardown, shutdown) pull, and a small request queue
//! through which other tasks ask the connection to abort commands it holds.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use futures::task::AtomicWaker;
use nvme_proto::Status;
use tokio::sync::{Notify, oneshot};

use crate::stats::{ConnCounters, ConnStatsSnapshot};
use crate::sync::lock;

#[derive(Clone, Debug, Default)]
pub(crate) struct ConnIdent {
    pub subsystem: String,
    pub hostnqn: String,
    pub cntlid: u16,
    pub qid: u16,
}

/// Requests queued per connection before further ones are refused.
const MAX_REQUESTS: usize = 64;

/// Work another task hands to a connection's task.
#[derive(Debug)]
pub(crate) enum ConnRequest {
    /// Abort every command on namespace `nsid` that has not started executing (waiting
    /// for its data or for an R2T) with `status`.
    AbortNs { nsid: u32, status: Status },
    /// Abort command `cid` if it has not started executing; the reply tells whether it
    /// was aborted (Abort command).
    AbortCid {
        cid: u16,
        reply: oneshot::Sender<bool>,
    },
}

pub(crate) struct ConnHandle {
    pub id: u64,
    pub peer: String,
    pub local: String,
    pub counters: ConnCounters,
    pub ident: Mutex<ConnIdent>,
    killed: AtomicBool,
    kill: Notify,
    requests: Mutex<VecDeque<ConnRequest>>,
    /// Set when a request is queued: the connection's loop checks it without locking.
    has_requests: AtomicBool,
    /// Wakes the connection's task when a request is queued.
    pub waker: AtomicWaker,
    /// The PSK identity the host authenticated with, on a TLS connection.
    pub tls_identity: std::sync::OnceLock<nvme_proto::tls_key::PskIdentity>,
}

impl ConnHandle {
    pub fn new(id: u64, peer: String, local: String) -> Self {
        ConnHandle {
            id,
            peer,
            local,
            counters: ConnCounters::default(),
            ident: Mutex::new(ConnIdent::default()),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
            requests: Mutex::new(VecDeque::new()),
            has_requests: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            tls_identity: std::sync::OnceLock::new(),
        }
    }

    /// Queues a request for the connection's task; false (request dropped) when the
    /// connection is gone or its queue is full.
    pub fn request(&self, r: ConnRequest) -> bool {
        if self.is_killed() {
            return false;
        }
        {
            let mut q = lock(&self.requests);
            if q.len() >= MAX_REQUESTS {
                return false;
            }
            q.push_back(r);
        }
        self.has_requests.store(true, Release);
        self.waker.wake();
        true
    }

    /// Takes the queued requests (connection task only).
    pub fn take_requests(&self) -> Option<VecDeque<ConnRequest>> {
        if !self.has_requests.swap(false, Acquire) {
            return None;
        }
        let mut q = lock(&self.requests);
        if q.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut *q))
        }
    }

    /// Asks the connection to close (idempotent).
    pub fn kill(&self) {
        self.killed.store(true, Relaxed);
        // notify_one keeps a permit, so a connection that is not waiting yet still sees it.
        self.kill.notify_one();
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Relaxed)
    }

    /// Resolves once [`ConnHandle::kill`] was called.
    pub async fn killed(&self) {
        while !self.is_killed() {
            self.kill.notified().await;
        }
    }

    pub fn snapshot(&self) -> ConnStatsSnapshot {
        let c = &self.counters;
        let id = lock(&self.ident).clone();
        ConnStatsSnapshot {
            id: self.id,
            peer: self.peer.clone(),
            local: self.local.clone(),
            subsystem: id.subsystem,
            host_nqn: id.hostnqn,
            cntlid: id.cntlid,
            qid: id.qid,
            commands: c.commands.load(Relaxed),
            read_ops: c.read_ops.load(Relaxed),
            write_ops: c.write_ops.load(Relaxed),
            read_bytes: c.read_bytes.load(Relaxed),
            write_bytes: c.write_bytes.load(Relaxed),
            errors: c.errors.load(Relaxed),
            in_flight: c.in_flight.load(Relaxed),
        }
    }
}
