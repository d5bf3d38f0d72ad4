//! Get Features / Set Features.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use blockdev::IoBuf;
use nvme_proto::features::{
    GetFeatures, HOST_ID_EXHID, IoCommandSetProfile, KvConfig, NumberOfQueues, RESV_PERSIST_PTPL,
    SetFeatures, VWC_WCE, aec, capabilities, fid, resv_mask, sel,
};
use nvme_proto::{Command, Status};

use crate::cmd::context::QueueContext;
use crate::cmd::{Dispatch, Outcome};
use crate::controller::Controller;
use crate::namespace::KvMedia;
use crate::subsystem::SubsysKind;
use crate::sync::lock;

/// Async event configuration bits this target can raise.
fn supported_aec(discovery: bool) -> u32 {
    if discovery {
        aec::DISCOVERY_LOG_CHANGE
    } else {
        aec::NS_ATTRIBUTE | aec::ANA_CHANGE
    }
}

const RESV_MASK_BITS: u32 = resv_mask::REGISTRATION_PREEMPTED
    | resv_mask::RESERVATION_RELEASED
    | resv_mask::RESERVATION_PREEMPTED;

impl QueueContext {
    /// The KV namespace a Key Value Configuration feature names: Invalid Namespace for
    /// an inactive NSID, Invalid Field for a namespace of another command set (the
    /// feature is KV specific).
    fn kv_feature_ns(&mut self, nsid: u32) -> Result<Arc<KvMedia>, Dispatch> {
        let Some(ns) = self.active_ns(nsid) else {
            return Err(Outcome::status(Status::INVALID_NAMESPACE.dnr())
                .with_loc(4)
                .into());
        };
        ns.kv().cloned().ok_or_else(|| {
            Outcome::status(Status::INVALID_FIELD.dnr())
                .with_loc(40)
                .into()
        })
    }

    pub(crate) fn get_features(&mut self, ctrl: &Arc<Controller>, cmd: &Command) -> Dispatch {
        let g = GetFeatures::from_command(cmd);
        let discovery = ctrl.subsys.kind == SubsysKind::Discovery;
        if discovery && !matches!(g.fid, fid::ASYNC_EVENT_CONFIG | fid::KEEP_ALIVE_TIMER) {
            return Outcome::status(Status::INVALID_FIELD.dnr())
                .with_loc(40)
                .into();
        }
        if g.sel == sel::SUPPORTED_CAPABILITIES {
            let caps = match g.fid {
                fid::RESERVATION_NOTIFICATION_MASK
                | fid::RESERVATION_PERSISTENCE
                | fid::KEY_VALUE_CONFIG => {
                    capabilities::CHANGEABLE | capabilities::NAMESPACE_SPECIFIC
                }
                fid::NUMBER_OF_QUEUES | fid::POWER_MANAGEMENT | fid::HOST_IDENTIFIER => 0,
                _ => capabilities::CHANGEABLE,
            };
            return Outcome::dw0(caps).into();
        }
        let default = g.sel == sel::DEFAULT;
        let st = lock(&ctrl.state);
        let dw0 = match g.fid {
            fid::ARBITRATION
            | fid::POWER_MANAGEMENT
            | fid::ERROR_RECOVERY
            | fid::INTERRUPT_COALESCING
            | fid::WRITE_ATOMICITY => 0,
            fid::INTERRUPT_VECTOR_CONFIG => g.cdw11 & 0xFFFF,
            // Over temperature threshold of the composite sensor: 0x157 K = 70 °C.
            fid::TEMPERATURE_THRESHOLD => 0x0157,
            fid::VOLATILE_WRITE_CACHE => {
                if default || st.vwc_enabled {
                    VWC_WCE
                } else {
                    0
                }
            }
            fid::NUMBER_OF_QUEUES => {
                let n = if default {
                    self.target.config.max_io_queues
                } else {
                    st.io_queues_granted
                };
                NumberOfQueues::from_counts(u32::from(n), u32::from(n)).to_dw()
            }
            fid::ASYNC_EVENT_CONFIG => {
                if default {
                    0
                } else {
                    st.aec
                }
            }
            fid::KEEP_ALIVE_TIMER => st.kato_ms,
            // One combination (NVM + KV), index 0, whatever CC.CSS says.
            fid::IO_COMMAND_SET_PROFILE => IoCommandSetProfile { iocsci: 0 }.to_dw(),
            fid::KEY_VALUE_CONFIG => {
                drop(st);
                let kv = match self.kv_feature_ns(g.nsid) {
                    Ok(kv) => kv,
                    Err(d) => return d,
                };
                let ednek = !default && kv.ednek.load(Ordering::Relaxed);
                return Outcome::dw0(KvConfig { ednek }.to_dw()).into();
            }
            fid::HOST_IDENTIFIER => {
                if g.cdw11 & HOST_ID_EXHID == 0 {
                    return Outcome::status(Status::INVALID_FIELD.dnr())
                        .with_loc(44)
                        .into();
                }
                return Dispatch::Now(Outcome::data(IoBuf::from_slice(&ctrl.hostid)));
            }
            fid::RESERVATION_NOTIFICATION_MASK => {
                drop(st);
                if self.active_ns(g.nsid).is_none() && g.nsid != u32::MAX {
                    return Outcome::status(Status::INVALID_NAMESPACE.dnr())
                        .with_loc(4)
                        .into();
                }
                return Outcome::dw0(lock(&ctrl.state).resv_mask & RESV_MASK_BITS).into();
            }
            fid::RESERVATION_PERSISTENCE => {
                drop(st);
                let Some(ns) = self.active_ns(g.nsid) else {
                    return Outcome::status(Status::INVALID_NAMESPACE.dnr())
                        .with_loc(4)
                        .into();
                };
                let ptpl = ns.reservations.persist_through_power_loss();
                return Outcome::dw0(if ptpl { RESV_PERSIST_PTPL } else { 0 }).into();
            }
            _ => {
                return Outcome::status(Status::INVALID_FIELD.dnr())
                    .with_loc(40)
                    .into();
            }
        };
        Outcome::dw0(dw0).into()
    }

    pub(crate) fn set_features(
        &mut self,
        ctrl: &Arc<Controller>,
        cmd: &Command,
        _data: Option<&[u8]>,
    ) -> Dispatch {
        let s = SetFeatures::from_command(cmd);
        let discovery = ctrl.subsys.kind == SubsysKind::Discovery;
        if s.sv {
            return Outcome::status(Status::FEATURE_NOT_SAVEABLE.dnr())
                .with_loc(43)
                .into();
        }
        if discovery && !matches!(s.fid, fid::ASYNC_EVENT_CONFIG | fid::KEEP_ALIVE_TIMER) {
            return Outcome::status(Status::INVALID_FIELD.dnr())
                .with_loc(40)
                .into();
        }
        match s.fid {
            fid::ARBITRATION
            | fid::ERROR_RECOVERY
            | fid::INTERRUPT_COALESCING
            | fid::WRITE_ATOMICITY => Outcome::ok().into(),
            fid::POWER_MANAGEMENT => {
                if s.cdw11 & 0x1F != 0 {
                    Outcome::status(Status::INVALID_FIELD.dnr())
                        .with_loc(44)
                        .into()
                } else {
                    Outcome::ok().into()
                }
            }
            fid::TEMPERATURE_THRESHOLD => Outcome::ok().into(),
            fid::VOLATILE_WRITE_CACHE => {
                lock(&ctrl.state).vwc_enabled = s.cdw11 & VWC_WCE != 0;
                Outcome::ok().into()
            }
            fid::NUMBER_OF_QUEUES => {
                let req = NumberOfQueues::from_dw(s.cdw11);
                if !req.is_valid_request() {
                    return Outcome::status(Status::INVALID_FIELD.dnr())
                        .with_loc(44)
                        .into();
                }
                let max = u32::from(self.target.config.max_io_queues);
                let granted = req.grant(max);
                lock(&ctrl.state).io_queues_granted =
                    granted.sq_count().min(granted.cq_count()) as u16;
                Outcome::dw0(granted.to_dw()).into()
            }
            fid::ASYNC_EVENT_CONFIG => {
                lock(&ctrl.state).aec = s.cdw11 & supported_aec(discovery);
                Outcome::ok().into()
            }
            fid::KEEP_ALIVE_TIMER => {
                lock(&ctrl.state).kato_ms = s.cdw11;
                ctrl.touch_keepalive();
                Outcome::ok().into()
            }
            // On fabrics the host identifier comes with Connect.
            fid::HOST_IDENTIFIER => Outcome::status(Status::COMMAND_SEQUENCE_ERROR.dnr()).into(),
            fid::IO_COMMAND_SET_PROFILE => match IoCommandSetProfile::from_cdw11(s.cdw11) {
                Err(st) => Outcome::status(st).with_loc(44).into(),
                // Index 0 (NVM + KV) is the only combination offered (Identify CNS 1Ch).
                Ok(p) if p.iocsci == 0 => Outcome::ok().into(),
                Ok(_) => Outcome::status(Status::IO_COMMAND_SET_COMBINATION_REJECTED.dnr())
                    .with_loc(44)
                    .into(),
            },
            fid::KEY_VALUE_CONFIG => {
                let cfg = match KvConfig::from_cdw11(s.cdw11) {
                    Ok(c) => c,
                    Err(st) => return Outcome::status(st).with_loc(44).into(),
                };
                match self.kv_feature_ns(s.nsid) {
                    Ok(kv) => {
                        kv.ednek.store(cfg.ednek, Ordering::Relaxed);
                        Outcome::ok().into()
                    }
                    Err(d) => d,
                }
            }
            fid::RESERVATION_NOTIFICATION_MASK => {
                if self.active_ns(s.nsid).is_none() && s.nsid != u32::MAX {
                    return Outcome::status(Status::INVALID_NAMESPACE.dnr())
                        .with_loc(4)
                        .into();
                }
                lock(&ctrl.state).resv_mask = s.cdw11 & RESV_MASK_BITS;
                Outcome::ok().into()
            }
            fid::RESERVATION_PERSISTENCE => {
                let Some(ns) = self.active_ns(s.nsid) else {
                    return Outcome::status(Status::INVALID_NAMESPACE.dnr())
                        .with_loc(4)
                        .into();
                };
                match ns
                    .reservations
                    .set_persist_through_power_loss(s.cdw11 & RESV_PERSIST_PTPL != 0)
                {
                    Ok(()) => Outcome::ok().into(),
                    Err(st) => Outcome::status(st).into(),
                }
            }
            _ => Outcome::status(Status::INVALID_FIELD.dnr())
                .with_loc(40)
                .into(),
        }
    }
}
