//! Dispatcher of the reservation commands to the namespace's [`crate::Reservations`].
//! The state machine may persist its state synchronously, so it runs on a blocking thread.

use std::sync::Arc;

use blockdev::IoBuf;
use nvme_proto::opcode::io;
use nvme_proto::{Command, Status};

use crate::cmd::{Dispatch, Outcome};
use crate::namespace::Namespace;
use crate::resv_api::{HostRef, ResvEffects};
use crate::transport::conn::Core;

impl Core {
    pub(crate) fn exec_resv(
        &mut self,
        cmd: &Command,
        ns: Arc<Namespace>,
        data: Option<IoBuf>,
        xfer_len: u32,
    ) -> Dispatch {
        let Some(q) = &self.q else {
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
            self.tx.pool.put(b);
        }
        if host_data.len() < needs {
            return Status::DATA_SGL_LENGTH_INVALID.dnr().into();
        }
        let max_bytes = xfer_len as usize;
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
                    Outcome::ok()
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

/// Posts reservation notifications to every controller of the notified hosts.
fn post_effects(subsys: &crate::subsystem::Subsystem, nsid: u32, eff: &ResvEffects) {
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
