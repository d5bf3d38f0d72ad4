//! Fabrics commands: Connect, Property Get/Set, Disconnect.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use blockdev::IoBuf;
use nvme_proto::auth::{AuthReceive, AuthSend, FailureReason};
use nvme_proto::fabrics::{
    CNTLID_DYNAMIC, Cap, Cc, ConnectCommand, ConnectData, ConnectResponse, Csts, InvalidParameter,
    PropertyGet, PropertySet, PropertySize, Vs, connect_data_off, connect_sqe_off, reg,
    validate_nqn,
};
use nvme_proto::opcode::fctype;
use nvme_proto::{Command, Status};

use crate::auth::{AuthExchange, OsAuthRandom, SendResult};
use crate::cmd::context::{QueueBinding, QueueContext};
use crate::cmd::identify::io_command_set_combination;
use crate::cmd::{Dispatch, Outcome};
use crate::controller::{AdminQueue, Controller};
use crate::subsystem::{SubsysKind, Subsystem};
use crate::sync::lock;

/// CAP.TO: worst-case time to ready, in 500 ms units.
const CAP_TIMEOUT_500MS: u8 = 30;

impl QueueContext {
    pub(crate) fn exec_fabrics(&mut self, cmd: &Command, data: Option<IoBuf>) -> Dispatch {
        let pre_auth = self.auth.as_ref().is_some_and(|a| !a.authenticated());
        let out = match cmd.fctype() {
            fctype::CONNECT => self.connect(cmd, data.as_deref().unwrap_or(&[])),
            fctype::AUTH_SEND => self.auth_send(cmd, data.as_deref()),
            fctype::AUTH_RECEIVE => self.auth_receive(cmd),
            fctype::PROPERTY_GET | fctype::PROPERTY_SET if pre_auth => {
                Outcome::status(Status::AUTH_REQUIRED.dnr())
            }
            fctype::PROPERTY_GET => self.property_get(cmd),
            fctype::PROPERTY_SET => self.property_set(cmd),
            fctype::DISCONNECT => {
                if self.queue.is_none() {
                    Outcome::status(Status::COMMAND_SEQUENCE_ERROR)
                } else {
                    Outcome {
                        close_after: true,
                        ..Outcome::ok()
                    }
                }
            }
            _ => Outcome::status(Status::INVALID_OPCODE.dnr()),
        };
        if let Some(b) = data {
            self.pool.put(b);
        }
        Dispatch::Now(out)
    }

    fn connect(&mut self, cmd: &Command, data: &[u8]) -> Outcome {
        if self.queue.is_some() {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.dnr());
        }
        let cc = ConnectCommand::from_command(cmd);
        if cc.recfmt != 0 {
            return Outcome::status(Status::CONNECT_INCOMPATIBLE_FORMAT.dnr());
        }
        let cd = match ConnectData::decode(data) {
            Ok(cd) => cd,
            Err(nvme_proto::DecodeError::Short { .. }) => {
                return Outcome::status(Status::DATA_SGL_LENGTH_INVALID.dnr());
            }
            Err(nvme_proto::DecodeError::InvalidField { offset, .. }) => {
                return invalid_param(InvalidParameter::data(offset as u16));
            }
            Err(_) => return invalid_param(InvalidParameter::data(connect_data_off::SUBNQN)),
        };
        let target = self.target.clone();
        let Some(subsys) = target
            .subsystem(&cd.subnqn)
            .filter(|s| !s.removed.load(std::sync::atomic::Ordering::Acquire))
        else {
            return invalid_param(InvalidParameter::data(connect_data_off::SUBNQN));
        };
        if self.listener.opts.discovery_only && subsys.kind != SubsysKind::Discovery {
            return invalid_param(InvalidParameter::data(connect_data_off::SUBNQN));
        }
        // An empty HOSTNQN is let through like the Linux and SPDK targets do (SPDK's perf
        // sends one unless told a host NQN); only subsystems open to any host admit it.
        if !cd.hostnqn.is_empty() && validate_nqn(&cd.hostnqn).is_err() {
            return invalid_param(InvalidParameter::data(connect_data_off::HOSTNQN));
        }
        if !subsys.host_allowed(&cd.hostnqn) {
            return Outcome::status(Status::CONNECT_INVALID_HOST.dnr());
        }
        // TLS (NVMe/TCP 3.6.1.2): the PSK identity names the host and the subsystem; a host
        // with a TLS PSK must come over TLS.
        match self.handle.tls_identity.get() {
            Some(id) if id.hostnqn != cd.hostnqn || id.subnqn != cd.subnqn => {
                tracing::warn!(
                    peer = %self.handle.peer,
                    identity_host = %id.hostnqn,
                    identity_subsystem = %id.subnqn,
                    hostnqn = %cd.hostnqn,
                    subnqn = %cd.subnqn,
                    "Connect refused: host or subsystem NQN differs from the TLS PSK identity"
                );
                return Outcome::status(Status::CONNECT_INVALID_HOST.dnr());
            }
            None if subsys.tls_psk_for(&cd.hostnqn).is_some() => {
                tracing::warn!(
                    peer = %self.handle.peer,
                    hostnqn = %cd.hostnqn,
                    subnqn = %cd.subnqn,
                    "Connect refused: this host has a TLS PSK and must connect through a TLS listener"
                );
                return Outcome::status(Status::CONNECT_INVALID_HOST.dnr());
            }
            // Secure channel concatenation: only the admin queue authenticates over plain
            // TCP; I/O queues come over TLS with the PSK that exchange generated.
            None if cc.qid != 0 && subsys.concat_required(&cd.hostnqn) => {
                tracing::warn!(
                    peer = %self.handle.peer,
                    hostnqn = %cd.hostnqn,
                    subnqn = %cd.subnqn,
                    qid = cc.qid,
                    "Connect refused: this host uses secure channel concatenation, its I/O queues must connect through a TLS listener with the generated PSK"
                );
                return Outcome::status(Status::CONNECT_INVALID_HOST.dnr());
            }
            _ => {}
        }
        let mqes = target.config.mqes;
        if cc.sqsize == 0 || cc.sqsize > mqes {
            return invalid_param(InvalidParameter::sqe(connect_sqe_off::SQSIZE));
        }
        let sqflow_disabled = cc.cattr & ConnectCommand::CATTR_DISABLE_SQFLOW != 0;
        if cc.qid == 0 {
            if cd.cntlid != CNTLID_DYNAMIC {
                return invalid_param(InvalidParameter::data(connect_data_off::CNTLID));
            }
            let Some(cntlid) = target.alloc_cntlid(&subsys) else {
                return Outcome::status(Status::CONNECT_CONTROLLER_BUSY);
            };
            let kato_ms = if cc.kato_ms == 0 && subsys.kind == SubsysKind::Nvm {
                target.config.default_kato_ms
            } else {
                cc.kato_ms
            };
            let ctrl = Arc::new(Controller::new(
                cntlid,
                subsys.clone(),
                cd.hostnqn.clone(),
                cd.hostid,
                AdminQueue {
                    conn: self.handle.clone(),
                    listener: self.listener.clone(),
                },
                kato_ms,
                target.config.max_io_queues,
            ));
            lock(&subsys.controllers).insert(cntlid, Arc::downgrade(&ctrl));
            ctrl.spawn_watchdog();
            self.bind(ctrl, 0, cc.sqsize, sqflow_disabled);
            tracing::debug!(cntlid, subsys = %subsys.nqn, host = %cd.hostnqn, "admin queue connected");
            let authreq = self.require_auth(&subsys, &cd.hostnqn, 0);
            return ConnectResponse { cntlid, authreq }
                .completion(0)
                .into_outcome();
        }
        if subsys.kind == SubsysKind::Discovery {
            return invalid_param(InvalidParameter::sqe(connect_sqe_off::QID));
        }
        let Some(ctrl) = subsys.controller(cd.cntlid).filter(|c| !c.is_dead()) else {
            return invalid_param(InvalidParameter::data(connect_data_off::CNTLID));
        };
        if ctrl.hostnqn != cd.hostnqn {
            return invalid_param(InvalidParameter::data(connect_data_off::HOSTNQN));
        }
        if ctrl.hostid != cd.hostid {
            return invalid_param(InvalidParameter::data(connect_data_off::HOSTID));
        }
        {
            let mut st = lock(&ctrl.state);
            if !Cc::from_u32(st.cc).en || !Csts::from_u32(st.csts).rdy {
                return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
            }
            if cc.qid > st.io_queues_granted || st.io_queues.contains_key(&cc.qid) {
                return invalid_param(InvalidParameter::sqe(connect_sqe_off::QID));
            }
            st.io_queues.insert(cc.qid, self.handle.clone());
        }
        let cntlid = ctrl.cntlid;
        self.max_icd_bytes = target.config.in_capsule_bytes as usize;
        self.bind(ctrl, cc.qid, cc.sqsize, sqflow_disabled);
        let authreq = self.require_auth(&subsys, &cd.hostnqn, cc.qid);
        ConnectResponse { cntlid, authreq }
            .completion(0)
            .into_outcome()
    }

    /// Sets up DH-HMAC-CHAP for this queue when the host must authenticate; the AUTHREQ
    /// bits of the Connect response. A queue over TLS with the PSK this host's secure
    /// channel concatenation generated needs none: that PSK is the authentication's result.
    fn require_auth(&mut self, subsys: &Subsystem, hostnqn: &str, qid: u16) -> u16 {
        let identity = self.handle.tls_identity.get();
        match subsys.dhchap_for(hostnqn) {
            Some(cfg) if cfg.concat && identity.is_some_and(|id| id.generated) => 0,
            Some(cfg) => {
                // ASCR tells a host on a plain admin queue that it must concatenate (a Linux
                // host without `concat` then stops with "secure concatenation is not
                // supported" instead of failing the exchange).
                let ascr = if cfg.concat && qid == 0 && identity.is_none() {
                    ConnectResponse::AUTHREQ_ASCR
                } else {
                    0
                };
                self.auth = Some(Box::new(
                    AuthExchange::new(cfg, hostnqn, &subsys.nqn).on_queue(qid, identity.is_some()),
                ));
                ConnectResponse::AUTHREQ_ATR | ascr
            }
            None => 0,
        }
    }

    /// Retains the PSK a concatenating exchange on this queue just generated.
    fn retain_generated(&mut self) {
        let (Some(auth), Some(q)) = (self.auth.as_mut(), self.queue.as_ref()) else {
            return;
        };
        if let Some(g) = auth.take_generated() {
            q.ctrl.subsys.retain_generated(&q.ctrl.hostnqn, &g);
            tracing::info!(
                host = %q.ctrl.hostnqn,
                subsys = %q.ctrl.subsys.nqn,
                cntlid = q.ctrl.cntlid,
                "secure channel concatenation: host {} authenticated, generated TLS PSK retained for its TLS connections",
                q.ctrl.hostnqn
            );
        }
    }

    fn auth_log_ids(&self) -> (String, String, u16, u16) {
        match &self.queue {
            Some(q) => (
                q.ctrl.hostnqn.clone(),
                q.ctrl.subsys.nqn.clone(),
                q.ctrl.cntlid,
                q.qid,
            ),
            None => (String::new(), String::new(), 0, 0),
        }
    }

    fn auth_failed(&self, reason: FailureReason) {
        let (host, subsys, cntlid, qid) = self.auth_log_ids();
        tracing::warn!(
            host = %host,
            subsys = %subsys,
            cntlid,
            qid,
            peer = %self.handle.peer,
            "DH-HMAC-CHAP authentication of host {host} failed: {reason}; closing the connection"
        );
    }

    fn auth_send(&mut self, cmd: &Command, data: Option<&[u8]>) -> Outcome {
        if self.queue.is_none() {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
        }
        let f = AuthSend::from_command(cmd);
        if let Err(e) = f.check() {
            return invalid_field(&e);
        }
        // An exchange in progress is traffic: it keeps the controller alive (the host
        // cannot send Keep Alive before it authenticated).
        if let Some(q) = &self.queue {
            q.ctrl.touch_keepalive();
        }
        let data = data.unwrap_or(&[]);
        if data.len() != f.tl as usize {
            return Outcome::status(Status::INVALID_FIELD.dnr()).with_loc(44);
        }
        let Some(auth) = self.auth.as_mut() else {
            // This host was not asked to authenticate.
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.dnr());
        };
        match auth.on_send(data, &OsAuthRandom) {
            SendResult::Accepted => {
                if auth.authenticated() {
                    let (h, g) = auth.negotiated();
                    let (host, subsys, cntlid, qid) = self.auth_log_ids();
                    tracing::debug!(host = %host, subsys = %subsys, cntlid, qid, hash = %h, dhgroup = %g, "host authenticated");
                }
                self.retain_generated();
                Outcome::ok()
            }
            // The Failure1 goes out with the next Authentication Receive.
            SendResult::Failed(_) => Outcome::ok(),
            SendResult::HostAborted(exp) => {
                let (host, subsys, cntlid, qid) = self.auth_log_ids();
                let why = FailureReason::from_u8(exp)
                    .map_or_else(|| format!("reason {exp:#04x}"), |r| r.to_string());
                tracing::warn!(
                    host = %host,
                    subsys = %subsys,
                    cntlid,
                    qid,
                    peer = %self.handle.peer,
                    "host {host} refused the controller in DH-HMAC-CHAP (Failure2: {why}); closing the connection"
                );
                self.kill_if_admin();
                Outcome {
                    close_after: true,
                    ..Outcome::ok()
                }
            }
        }
    }

    fn auth_receive(&mut self, cmd: &Command) -> Outcome {
        if self.queue.is_none() {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
        }
        let f = AuthReceive::from_command(cmd);
        if let Err(e) = f.check() {
            return invalid_field(&e);
        }
        // Messages are at most 4 KiB; a host asking for far more gets no buffer that big.
        if f.al as usize > 16 * nvme_proto::auth::MAX_MESSAGE_BYTES {
            return Outcome::status(Status::INVALID_FIELD.dnr()).with_loc(44);
        }
        if let Some(q) = &self.queue {
            q.ctrl.touch_keepalive();
        }
        let Some(auth) = self.auth.as_mut() else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR.dnr());
        };
        let r = auth.on_receive(f.al);
        self.retain_generated();
        let close_after = r.failure.is_some();
        if let Some(reason) = r.failure {
            self.auth_failed(reason);
            self.kill_if_admin();
        }
        let mut buf = self.pool.get(r.message.len());
        buf.copy_from_slice(&r.message);
        Outcome {
            close_after,
            ..Outcome::data(buf)
        }
    }

    /// A failed admin queue takes its controller down (Linux nvmet_ctrl_fatal_error).
    fn kill_if_admin(&self) {
        if let Some(q) = &self.queue
            && q.qid == 0
        {
            q.ctrl.kill();
        }
    }

    fn bind(&mut self, ctrl: Arc<Controller>, qid: u16, sqsize: u16, sqflow_disabled: bool) {
        {
            let mut id = lock(&self.handle.ident);
            id.subsystem = ctrl.subsys.nqn.clone();
            id.hostnqn = ctrl.hostnqn.clone();
            id.cntlid = ctrl.cntlid;
            id.qid = qid;
        }
        self.queue = Some(QueueBinding {
            ctrl,
            qid,
            sqsize,
            sqflow_disabled,
        });
    }

    fn property_get(&mut self, cmd: &Command) -> Outcome {
        let Some(q) = &self.queue else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
        };
        if q.qid != 0 {
            return Outcome::status(Status::INVALID_FIELD.dnr());
        }
        let Ok(pg) = PropertyGet::from_command(cmd) else {
            return Outcome::status(Status::INVALID_FIELD.dnr()).with_loc(40);
        };
        let discovery = q.ctrl.subsys.kind == SubsysKind::Discovery;
        let (value, size) = match pg.ofst {
            reg::CAP => (
                Cap {
                    mqes: self.target.config.mqes,
                    cqr: true,
                    to_500ms: CAP_TIMEOUT_500MS,
                    // I/O controllers offer the I/O command sets (NVM and Key Value):
                    // hosts enable them with CC.CSS = 110b. Like Linux nvmet, discovery
                    // controllers report NVM only: hosts enable them with CC.CSS = NVM.
                    css: if discovery {
                        Cap::CSS_NVM
                    } else {
                        Cap::CSS_NVM | Cap::CSS_IO_COMMAND_SETS
                    },
                    mpsmin: 0,
                    mpsmax: 0,
                    ..Cap::default()
                }
                .to_u64(),
                PropertySize::Eight,
            ),
            reg::VS => (u64::from(Vs::V2_0.to_u32()), PropertySize::Four),
            reg::CC => (u64::from(lock(&q.ctrl.state).cc), PropertySize::Four),
            reg::CSTS => (u64::from(lock(&q.ctrl.state).csts), PropertySize::Four),
            _ => return Outcome::status(Status::INVALID_FIELD.dnr()).with_loc(44),
        };
        if pg.size != size {
            return Outcome::status(Status::INVALID_FIELD.dnr()).with_loc(40);
        }
        let c = pg.completion(0, value);
        Outcome {
            dw0: c.dw0,
            dw1: c.dw1,
            ..Outcome::ok()
        }
    }

    fn property_set(&mut self, cmd: &Command) -> Outcome {
        let Some(q) = &self.queue else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
        };
        if q.qid != 0 {
            return Outcome::status(Status::INVALID_FIELD.dnr());
        }
        let Ok(ps) = PropertySet::from_command(cmd) else {
            return Outcome::status(Status::INVALID_FIELD.dnr()).with_loc(40);
        };
        if ps.ofst != reg::CC || ps.size != PropertySize::Four {
            return Outcome::status(Status::INVALID_FIELD.dnr()).with_loc(44);
        }
        let discovery = q.ctrl.subsys.kind == SubsysKind::Discovery;
        let ctrl = q.ctrl.clone();
        let mut st = lock(&ctrl.state);
        let old = Cc::from_u32(st.cc);
        let new = Cc::from_u32(ps.value as u32);
        let mut csts = Csts::from_u32(st.csts);
        if new.en && !old.en {
            let css_ok = if discovery {
                matches!(new.css, Cc::CSS_NVM | Cc::CSS_ADMIN_ONLY)
            } else {
                matches!(new.css, Cc::CSS_NVM | Cc::CSS_ALL_IO)
            };
            let entry_sizes_ok = (new.iosqes == 6 && new.iocqes == 4)
                || (discovery && new.iosqes == 0 && new.iocqes == 0);
            if new.mps != 0 || !css_ok || !entry_sizes_ok {
                csts.cfs = true;
                csts.rdy = false;
            } else {
                csts.rdy = true;
                csts.cfs = false;
                let sets = new.enabled_io_command_sets(io_command_set_combination());
                ctrl.io_command_sets.store(sets, Ordering::Release);
                // Namespaces of the sets now running become active: cached lookups go.
                ctrl.subsys.bump_ns_generation();
            }
        } else if !new.en && old.en {
            // Controller reset: not ready, shutdown state cleared.
            csts.rdy = false;
            csts.shst = Csts::SHST_NORMAL;
        }
        let mut flush_for_shutdown = false;
        if new.shn != Cc::SHN_NONE && old.shn == Cc::SHN_NONE {
            // The target holds no data itself; devices with a volatile cache are flushed
            // before the shutdown is reported complete.
            csts.shst = Csts::SHST_OCCURRING;
            flush_for_shutdown = true;
        } else if new.shn == Cc::SHN_NONE && new.en {
            csts.shst = Csts::SHST_NORMAL;
        }
        st.cc = new.to_u32();
        st.csts = csts.to_u32();
        drop(st);
        if flush_for_shutdown {
            let c = ctrl.clone();
            tokio::spawn(async move {
                for ns in c.subsys.namespaces() {
                    if !ns.is_attached_to(&c.hostnqn) {
                        continue;
                    }
                    let flushed = match (ns.block(), ns.kv()) {
                        (Some(b), _) if b.device.info().volatile_write_cache => {
                            b.device.flush().await.map_err(|e| e.to_string())
                        }
                        (_, Some(k)) => k.backend.flush().await.map_err(|e| e.to_string()),
                        _ => Ok(()),
                    };
                    if let Err(e) = flushed {
                        tracing::warn!(nsid = ns.nsid, error = %e, "flush at shutdown failed");
                    }
                }
                let mut st = lock(&c.state);
                let mut csts = Csts::from_u32(st.csts);
                if Cc::from_u32(st.cc).shn != Cc::SHN_NONE {
                    csts.shst = Csts::SHST_COMPLETE;
                    st.csts = csts.to_u32();
                }
            });
        }
        Outcome::ok()
    }
}

/// Invalid Field in Command (DNR) at the SQE byte the decoder names.
fn invalid_field(e: &nvme_proto::DecodeError) -> Outcome {
    let loc = match e {
        nvme_proto::DecodeError::InvalidField { offset, .. } => *offset as u16,
        _ => 0xFFFF,
    };
    Outcome::status(Status::INVALID_FIELD.dnr()).with_loc(loc)
}

fn invalid_param(p: InvalidParameter) -> Outcome {
    let c = p.completion(0);
    Outcome {
        dw0: c.dw0,
        ..Outcome::status(c.status)
    }
}

trait IntoOutcome {
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for nvme_proto::Completion {
    fn into_outcome(self) -> Outcome {
        Outcome {
            dw0: self.dw0,
            dw1: self.dw1,
            ..Outcome::status(self.status)
        }
    }
}
