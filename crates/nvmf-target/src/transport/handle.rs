//! A handle on a live connection: identity, counters and a kill switch that other tasks
//! (keep-alive watchdog, controller teardown, shutdown) pull.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use tokio::sync::Notify;

use crate::stats::{ConnCounters, ConnStatsSnapshot};
use crate::sync::lock;

#[derive(Clone, Debug, Default)]
pub(crate) struct ConnIdent {
    pub subsystem: String,
    pub hostnqn: String,
    pub cntlid: u16,
    pub qid: u16,
}

pub(crate) struct ConnHandle {
    pub id: u64,
    pub peer: String,
    pub local: String,
    pub counters: ConnCounters,
    pub ident: Mutex<ConnIdent>,
    killed: AtomicBool,
    kill: Notify,
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
