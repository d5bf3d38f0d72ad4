//! What a command sees of the queue it arrived on: the target, the controller and queue
//! this connection became with Connect, the connection's identity, its buffer pool and
//! its namespace cache. The command sets are methods on [`QueueContext`]
//! (`cmd::fabrics`, `cmd::admin`, `cmd::io`); [`QueueContext::execute`] picks the set.

use std::net::SocketAddr;
use std::sync::Arc;

use blockdev::IoBuf;
use nvme_proto::opcode::admin;
use nvme_proto::{Command, Status};

use crate::cmd::io::NsCache;
use crate::cmd::{Dispatch, Outcome};
use crate::config::ADMIN_IN_CAPSULE_BYTES;
use crate::controller::Controller;
use crate::pool::BufPool;
use crate::target::{ListenerInfo, TargetInner};
use crate::transport::handle::ConnHandle;

/// The queue this connection became with Connect.
pub(crate) struct QueueBinding {
    pub ctrl: Arc<Controller>,
    pub qid: u16,
    /// 0's based queue size.
    pub sqsize: u16,
    pub sqflow_disabled: bool,
}

pub(crate) struct QueueContext {
    pub target: Arc<TargetInner>,
    pub handle: Arc<ConnHandle>,
    /// The listener the connection came through (its ANA states, discovery-only).
    pub listener: Arc<ListenerInfo>,
    /// The address the host reached us on.
    pub local: SocketAddr,
    /// Set by a successful Connect.
    pub queue: Option<QueueBinding>,
    /// Largest in-capsule data accepted now (8 KiB until an I/O queue Connect).
    pub max_icd_bytes: usize,
    /// Data buffers of this connection's commands.
    pub pool: BufPool,
    pub ns_cache: NsCache,
    /// Counter shard of this connection (see [`crate::stats`]).
    pub shard: usize,
    /// DH-HMAC-CHAP state when the host must authenticate (set by Connect).
    pub auth: Option<Box<crate::auth::AuthExchange>>,
}

impl QueueContext {
    pub fn new(
        target: Arc<TargetInner>,
        handle: Arc<ConnHandle>,
        listener: Arc<ListenerInfo>,
        local: SocketAddr,
    ) -> QueueContext {
        QueueContext {
            shard: handle.id as usize,
            target,
            handle,
            listener,
            local,
            queue: None,
            max_icd_bytes: ADMIN_IN_CAPSULE_BYTES as usize,
            pool: BufPool::new(),
            ns_cache: NsCache::default(),
            auth: None,
        }
    }

    pub(crate) fn ctrl(&self) -> Option<&Arc<Controller>> {
        self.queue.as_ref().map(|q| &q.ctrl)
    }

    /// Runs a command: Fabrics commands on any queue, admin commands on queue 0, I/O
    /// commands on the others; nothing but Fabrics before Connect. `qos_released`: an I/O
    /// command that waited in the throttle queue and is not charged again.
    pub(crate) fn execute(
        &mut self,
        cmd: &Command,
        data: Option<IoBuf>,
        xfer_len: u32,
        qos_released: bool,
    ) -> Dispatch {
        if cmd.opcode() == admin::FABRICS {
            return self.exec_fabrics(cmd, data);
        }
        // Until the queue authenticated, only Authentication Send/Receive and Disconnect
        // (fabrics, above) run: everything else is Authentication Required.
        if self.auth.as_ref().is_some_and(|a| !a.authenticated()) {
            if let Some(b) = data {
                self.pool.put(b);
            }
            return Dispatch::Now(Outcome::status(Status::AUTH_REQUIRED.dnr()));
        }
        match &self.queue {
            None => Dispatch::Now(Outcome::status(Status::COMMAND_SEQUENCE_ERROR)),
            Some(q) if q.qid == 0 => self.exec_admin(cmd, data, xfer_len),
            Some(_) => self.exec_io(cmd, data, xfer_len, qos_released),
        }
    }
}
