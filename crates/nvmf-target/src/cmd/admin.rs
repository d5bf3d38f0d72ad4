//! Admin command set dispatch, Keep Alive, Asynchronous Event Request, Abort and the
//! Namespace Management / Attachment commands (handed to the [`crate::NamespaceManager`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use blockdev::IoBuf;
use nvme_proto::fabrics::{Cc, Csts};
use nvme_proto::identify::{CtrlList, NsAttachCommand, NsMgmtCommand, NsMgmtCreate, csi};
use nvme_proto::kv::KvNsCreate;
use nvme_proto::opcode::admin;
use nvme_proto::{Command, Status};

use crate::Target;
use crate::cmd::context::QueueContext;
use crate::cmd::{Dispatch, Outcome};
use crate::controller::Controller;
use crate::ns_manager::{CreateKvNamespace, CreateNamespace};
use crate::subsystem::SubsysKind;
use crate::sync::{lock, read};
use crate::transport::handle::ConnRequest;
use tokio::sync::oneshot;

/// Asynchronous Event Request Limit, 0's based (4 outstanding).
pub(crate) const AERL: u8 = 3;
/// Abort Command Limit, 0's based.
pub(crate) const ACL: u8 = 3;
/// SQE byte of Namespace Management's CSI (CDW11 bits 31:24), for the error log.
const NS_MGMT_CSI_SQE_BYTE: u16 = 47;

impl QueueContext {
    pub(crate) fn exec_admin(
        &mut self,
        cmd: &Command,
        data: Option<IoBuf>,
        xfer_len: u32,
    ) -> Dispatch {
        let Some(ctrl) = self.ctrl().cloned() else {
            return Status::COMMAND_SEQUENCE_ERROR.into();
        };
        let op = cmd.opcode();
        let discovery = ctrl.subsys.kind == SubsysKind::Discovery;
        let enabled = {
            let st = lock(&ctrl.state);
            Cc::from_u32(st.cc).en && Csts::from_u32(st.csts).rdy
        };
        if !enabled {
            if let Some(b) = data {
                self.pool.put(b);
            }
            return Status::COMMAND_SEQUENCE_ERROR.into();
        }
        if xfer_len > self.target.config.mdts_bytes {
            if let Some(b) = data {
                self.pool.put(b);
            }
            return Dispatch::Now(Outcome::status(Status::INVALID_FIELD.dnr()).with_loc(24));
        }
        let allowed_on_discovery = matches!(
            op,
            admin::IDENTIFY
                | admin::GET_LOG_PAGE
                | admin::KEEP_ALIVE
                | admin::ASYNC_EVENT_REQUEST
                | admin::GET_FEATURES
                | admin::SET_FEATURES
        );
        if discovery && !allowed_on_discovery {
            if let Some(b) = data {
                self.pool.put(b);
            }
            return Status::INVALID_OPCODE.dnr().into();
        }
        let d = match op {
            admin::IDENTIFY => self.identify(&ctrl, cmd),
            admin::GET_LOG_PAGE => self.get_log_page(&ctrl, cmd),
            admin::GET_FEATURES => self.get_features(&ctrl, cmd),
            admin::SET_FEATURES => self.set_features(&ctrl, cmd, data.as_deref()),
            admin::KEEP_ALIVE => {
                ctrl.touch_keepalive();
                Outcome::ok().into()
            }
            admin::ASYNC_EVENT_REQUEST => aer(ctrl),
            admin::ABORT => self.abort(&ctrl, cmd),
            admin::NAMESPACE_MANAGEMENT => self.ns_management(&ctrl, cmd, data.as_deref()),
            admin::NAMESPACE_ATTACHMENT => self.ns_attachment(&ctrl, cmd, data.as_deref()),
            _ => Outcome::status(Status::INVALID_OPCODE.dnr())
                .with_loc(0)
                .into(),
        };
        if let Some(b) = data {
            self.pool.put(b);
        }
        d
    }

    fn ns_management(
        &mut self,
        ctrl: &Arc<Controller>,
        cmd: &Command,
        data: Option<&[u8]>,
    ) -> Dispatch {
        let Some(mgr) = read(&self.target.ns_manager).clone() else {
            return Status::INVALID_OPCODE.dnr().into();
        };
        let m = NsMgmtCommand::from_command(cmd);
        let target = Target {
            inner: self.target.clone(),
        };
        let subnqn = ctrl.subsys.nqn.clone();
        match m.sel {
            NsMgmtCommand::SEL_CREATE => {
                let Ok(c) = NsMgmtCreate::decode(data.unwrap_or(&[])) else {
                    return Status::DATA_SGL_LENGTH_INVALID.dnr().into();
                };
                let create: Box<dyn FnOnce() -> Result<u32, Status> + Send> = match m.csi {
                    csi::NVM => {
                        let idx = c.flbas & 0xF;
                        let block_size_bytes = match idx {
                            0 => 512,
                            1 => 4096,
                            _ => return Status::INVALID_FORMAT.dnr().into(),
                        };
                        if c.nsze == 0 || c.ncap == 0 || c.ncap > c.nsze {
                            return Outcome::status(Status::INVALID_FIELD.dnr()).into();
                        }
                        let req = CreateNamespace {
                            size_blocks: c.nsze,
                            capacity_blocks: c.ncap,
                            lba_format: idx,
                            block_size_bytes,
                            nmic: c.nmic,
                            anagrpid: c.anagrpid,
                            csi: m.csi,
                        };
                        Box::new(move || mgr.create(&target, &subnqn, &req))
                    }
                    csi::KEY_VALUE => {
                        if !ctrl.runs_command_set(csi::KEY_VALUE) {
                            return Outcome::status(Status::IO_COMMAND_SET_NOT_ENABLED.dnr())
                                .with_loc(NS_MGMT_CSI_SQE_BYTE)
                                .into();
                        }
                        let k = match KvNsCreate::from_create(&c) {
                            Ok(k) => k,
                            Err(st) => return Outcome::status(st).into(),
                        };
                        // One KV format (index 0); no thin provisioning: NCAP is 0 or NSZE.
                        if k.format_index != 0 {
                            return Status::INVALID_FORMAT.dnr().into();
                        }
                        if k.size_bytes == 0
                            || (k.capacity_bytes != 0 && k.capacity_bytes != k.size_bytes)
                        {
                            return Outcome::status(Status::INVALID_FIELD.dnr()).into();
                        }
                        let req = CreateKvNamespace {
                            size_bytes: k.size_bytes,
                            format_index: k.format_index,
                            nmic: k.nmic,
                            anagrpid: k.anagrpid,
                        };
                        Box::new(move || mgr.create_kv(&target, &subnqn, &req))
                    }
                    _ => {
                        return Outcome::status(Status::IO_COMMAND_SET_NOT_SUPPORTED.dnr())
                            .with_loc(NS_MGMT_CSI_SQE_BYTE)
                            .into();
                    }
                };
                Dispatch::Later(Box::pin(async move {
                    match tokio::task::spawn_blocking(create).await {
                        Ok(Ok(nsid)) => Outcome::dw0(nsid),
                        Ok(Err(st)) => Outcome::status(st),
                        Err(_) => Outcome::status(Status::INTERNAL_ERROR),
                    }
                }))
            }
            NsMgmtCommand::SEL_DELETE => {
                let nsid = m.nsid;
                if nsid == 0 {
                    return Outcome::status(Status::INVALID_NAMESPACE.dnr())
                        .with_loc(4)
                        .into();
                }
                Dispatch::Later(Box::pin(async move {
                    let r = tokio::task::spawn_blocking(move || mgr.delete(&target, &subnqn, nsid))
                        .await;
                    match r {
                        Ok(Ok(())) => Outcome::ok(),
                        Ok(Err(st)) => Outcome::status(st),
                        Err(_) => Outcome::status(Status::INTERNAL_ERROR),
                    }
                }))
            }
            _ => Outcome::status(Status::INVALID_FIELD.dnr())
                .with_loc(40)
                .into(),
        }
    }

    fn ns_attachment(
        &mut self,
        ctrl: &Arc<Controller>,
        cmd: &Command,
        data: Option<&[u8]>,
    ) -> Dispatch {
        let Some(mgr) = read(&self.target.ns_manager).clone() else {
            return Status::INVALID_OPCODE.dnr().into();
        };
        let a = NsAttachCommand::from_command(cmd);
        let Ok(list) = CtrlList::decode(data.unwrap_or(&[])) else {
            return Status::CONTROLLER_LIST_INVALID.dnr().into();
        };
        if a.nsid == 0 || a.nsid == u32::MAX {
            return Outcome::status(Status::INVALID_NAMESPACE.dnr())
                .with_loc(4)
                .into();
        }
        let target = Target {
            inner: self.target.clone(),
        };
        let subnqn = ctrl.subsys.nqn.clone();
        let nsid = a.nsid;
        let attach = match a.sel {
            NsAttachCommand::SEL_ATTACH => true,
            NsAttachCommand::SEL_DETACH => false,
            _ => {
                return Outcome::status(Status::INVALID_FIELD.dnr())
                    .with_loc(40)
                    .into();
            }
        };
        let ids = list.ids;
        Dispatch::Later(Box::pin(async move {
            let r = tokio::task::spawn_blocking(move || {
                if attach {
                    mgr.attach(&target, &subnqn, nsid, &ids)
                } else {
                    mgr.detach(&target, &subnqn, nsid, &ids)
                }
            })
            .await;
            match r {
                Ok(Ok(())) => Outcome::ok(),
                Ok(Err(st)) => Outcome::status(st),
                Err(_) => Outcome::status(Status::INTERNAL_ERROR),
            }
        }))
    }
}

impl QueueContext {
    /// Abort (CDW10: SQID 15:0, CID 31:16): a command that has not started executing
    /// (waiting for its data or for an R2T) is aborted with Command Abort Requested and
    /// DW0 bit 0 is 0; commands already executing run to completion (DW0 bit 0 = 1, as
    /// the spec allows).
    fn abort(&mut self, ctrl: &Arc<Controller>, cmd: &Command) -> Dispatch {
        let sqid = (cmd.cdw10() & 0xFFFF) as u16;
        let cid = (cmd.cdw10() >> 16) as u16;
        if sqid == 0 {
            return Dispatch::AbortOnThisQueue { cid };
        }
        let Some(queue) = lock(&ctrl.state).io_queues.get(&sqid).cloned() else {
            return Outcome::dw0(NOT_ABORTED).into();
        };
        if ctrl.aborts_outstanding.fetch_add(1, Ordering::AcqRel) > u32::from(ACL) {
            ctrl.aborts_outstanding.fetch_sub(1, Ordering::AcqRel);
            return Status::ABORT_LIMIT_EXCEEDED.dnr().into();
        }
        let guard = AbortGuard(ctrl.clone());
        let (tx, rx) = oneshot::channel();
        if !queue.request(ConnRequest::AbortCid { cid, reply: tx }) {
            return Outcome::dw0(NOT_ABORTED).into();
        }
        Dispatch::Later(Box::pin(async move {
            let _guard = guard;
            let aborted = matches!(
                tokio::time::timeout(ABORT_REPLY_TIMEOUT, rx).await,
                Ok(Ok(true))
            );
            Outcome::dw0(u32::from(!aborted))
        }))
    }
}

/// Abort's DW0 when the command was not aborted.
const NOT_ABORTED: u32 = 1;
/// How long Abort waits for the other queue's task to answer.
const ABORT_REPLY_TIMEOUT: Duration = Duration::from_secs(1);

/// Decrements the controller's count of waiting Abort commands when one ends.
struct AbortGuard(Arc<Controller>);

impl Drop for AbortGuard {
    fn drop(&mut self) {
        self.0.aborts_outstanding.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Decrements the controller's AER count when the command ends (also when dropped).
struct AerGuard(Arc<Controller>);

impl Drop for AerGuard {
    fn drop(&mut self) {
        self.0.aer_outstanding.fetch_sub(1, Ordering::AcqRel);
    }
}

fn aer(ctrl: Arc<Controller>) -> Dispatch {
    if ctrl.aer_outstanding.fetch_add(1, Ordering::AcqRel) > u32::from(AERL) {
        ctrl.aer_outstanding.fetch_sub(1, Ordering::AcqRel);
        return Status::ASYNC_EVENT_LIMIT_EXCEEDED.dnr().into();
    }
    let guard = AerGuard(ctrl);
    Dispatch::Later(Box::pin(async move {
        let ctrl = &guard.0;
        loop {
            let notified = ctrl.events.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(ev) = ctrl.take_event() {
                return Outcome::dw0(ev.to_dw0());
            }
            if ctrl.is_dead() {
                return Outcome::status(Status::ABORTED_SQ_DELETION);
            }
            notified.await;
        }
    }))
}
