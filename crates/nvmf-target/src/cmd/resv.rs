//! Dispatcher of the reservation commands to the namespace's [`crate::Reservations`].
//! The state machine may persist its state synchronously, so it runs on a blocking thread.
//!
//! Preempt and abort fences the preempted hosts before the Acquire completes: their
//! commands on the namespace that have not started are aborted (Command Aborted due to
//! Preempt and Abort), and the ones already on the device are waited for (see
//! [`crate::fence`]), up to `TargetConfig::preempt_abort_timeout_ms`.

use std::sync::Arc;
use std::time::Duration;

use blockdev::IoBuf;
use nvme_proto::opcode::io;
use nvme_proto::status::sct;
use nvme_proto::{Command, Status};

use crate::cmd::context::QueueContext;
use crate::cmd::{Dispatch, Outcome};
use crate::namespace::Namespace;
use crate::resv_api::{HostRef, ResvEffects};
use crate::subsystem::Subsystem;
use crate::sync::lock;
use crate::transport::handle::ConnRequest;

impl QueueContext {
    pub(crate) fn exec_resv(
        &mut self,
        cmd: &Command,
        ns: Arc<Namespace>,
        data: Option<IoBuf>,
        xfer_len: u32,
    ) -> Dispatch {
        let Some(q) = &self.queue else {
            return Status::COMMAND_SEQUENCE_ERROR.into();
        };
        let ctrl = q.ctrl.clone();
        let cmd = *cmd;
        let op = cmd.opcode();
        let needs = match op {
            io::RESERVATION_REGISTER | io::RESERVATION_ACQUIRE => 16,
            io::RESERVATION_RELEASE => 8,
            _ => 0,
        };
        let host_data: Vec<u8> = data.as_deref().map(<[u8]>::to_vec).unwrap_or_default();
        if let Some(b) = data {
            self.pool.put(b);
        }
        if host_data.len() < needs {
            return Status::DATA_SGL_LENGTH_INVALID.dnr().into();
        }
        let max_bytes = xfer_len as usize;
        let fence_timeout =
            Duration::from_millis(u64::from(self.target.config.preempt_abort_timeout_ms));
        Dispatch::Later(Box::pin(async move {
            let ns2 = ns.clone();
            let ctrl2 = ctrl.clone();
            let r = tokio::task::spawn_blocking(move || {
                let host = HostRef {
                    hostid: ctrl2.hostid,
                    hostnqn: &ctrl2.hostnqn,
                    cntlid: ctrl2.cntlid,
                };
                let r = &ns2.reservations;
                match op {
                    io::RESERVATION_REGISTER => {
                        r.register(&host, &cmd, &host_data).map(Res::Effects)
                    }
                    io::RESERVATION_ACQUIRE => r.acquire(&host, &cmd, &host_data).map(Res::Effects),
                    io::RESERVATION_RELEASE => r.release(&host, &cmd, &host_data).map(Res::Effects),
                    _ => r.report(&host, &cmd, max_bytes).map(Res::Report),
                }
            })
            .await;
            match r {
                Ok(Ok(Res::Effects(eff))) => {
                    post_effects(&ctrl.subsys, ns.nsid, &eff);
                    if eff.aborted_hosts.is_empty()
                        || fence_hosts(&ctrl.subsys, &ns, &eff.aborted_hosts, fence_timeout).await
                    {
                        Outcome::ok()
                    } else {
                        Outcome {
                            err_nsid: ns.nsid,
                            ..Outcome::status(COMMAND_INTERRUPTED)
                        }
                    }
                }
                Ok(Ok(Res::Report(bytes))) => Outcome::data(IoBuf::from_slice(&bytes)),
                Ok(Err(st)) => Outcome {
                    err_nsid: ns.nsid,
                    ..Outcome::status(st)
                },
                Err(_) => Outcome::status(Status::INTERNAL_ERROR),
            }
        }))
    }
}

enum Res {
    Effects(ResvEffects),
    Report(Vec<u8>),
}

/// Generic status 0x21 (NVMe 2.0; Linux NVME_SC_CMD_INTERRUPTED): what SPDK answers a
/// preempt-and-abort whose preempted commands did not finish in time.
const COMMAND_INTERRUPTED: Status = Status::new(sct::GENERIC, 0x21);

/// Aborts the not-yet-started commands of `hosts` on `ns` and waits until their
/// commands on the device have finished; false on timeout.
async fn fence_hosts(
    subsys: &Subsystem,
    ns: &Namespace,
    hosts: &[[u8; 16]],
    timeout: Duration,
) -> bool {
    for c in subsys.live_controllers() {
        if !hosts.contains(&c.hostid) {
            continue;
        }
        let queues: Vec<_> = lock(&c.state).io_queues.values().cloned().collect();
        for q in queues {
            // A full queue only changes the status those commands get: once their data
            // arrives their reservation check refuses them.
            q.request(ConnRequest::AbortNs {
                nsid: ns.nsid,
                status: Status::ABORTED_PREEMPT_ABORT,
            });
        }
    }
    let drained = ns.inflight.wait_drained(hosts, timeout).await;
    if !drained {
        tracing::warn!(subsys = %subsys.nqn, nsid = ns.nsid, timeout_ms = timeout.as_millis() as u64,
            "preempt and abort: the preempted hosts' commands did not finish in time");
    }
    drained
}

/// Posts reservation notifications to every controller of the notified hosts.
fn post_effects(subsys: &Subsystem, nsid: u32, eff: &ResvEffects) {
    if eff.notify.is_empty() {
        return;
    }
    for c in subsys.live_controllers() {
        for (hostid, log_type) in &eff.notify {
            if c.hostid == *hostid {
                c.add_resv_notice(*log_type, nsid);
            }
        }
    }
}
