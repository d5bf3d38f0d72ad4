//! Get Log Page with offsets and partial reads.

use std::sync::Arc;

use blockdev::IoBuf;
use nvme_proto::log::effects::{effect, io_effects_kv};
use nvme_proto::log::{
    ChangedNsList, CommandEffectsLog, ErrorInfoEntry, FirmwareSlotLog, GetLogPageCommand,
    ReservationNotificationLog, SmartLog, ana, lid, log_page_range, telemetry,
};
use nvme_proto::opcode::{admin, io};
use nvme_proto::{Command, Status};

use crate::cmd::context::QueueContext;
use crate::cmd::{Dispatch, Outcome};
use crate::controller::{Controller, ERROR_LOG_ENTRIES};
use crate::subsystem::SubsysKind;
use crate::sync::lock;

impl QueueContext {
    pub(crate) fn get_log_page(&mut self, ctrl: &Arc<Controller>, cmd: &Command) -> Dispatch {
        let g = GetLogPageCommand::from_command(cmd);
        let len = g.len_bytes();
        if len > u64::from(self.target.config.mdts_bytes) {
            return Outcome::status(Status::INVALID_FIELD.dnr())
                .with_loc(40)
                .into();
        }
        let discovery = ctrl.subsys.kind == SubsysKind::Discovery;
        let page: Vec<u8> = match (g.lid, discovery) {
            (lid::DISCOVERY, true) => {
                let local = self.local;
                crate::discovery::discovery_log(&self.target, &ctrl.hostnqn, local).to_bytes()
            }
            (lid::ERROR_INFO, _) => {
                let entries: Vec<ErrorInfoEntry> = lock(&ctrl.state)
                    .error_log
                    .iter()
                    .map(|r| ErrorInfoEntry {
                        error_count: r.error_count,
                        sqid: r.sqid,
                        cid: r.cid,
                        status: nvme_proto::Status::from_field(r.status_field),
                        param_error_location: r.param_error_location,
                        lba: r.lba,
                        nsid: r.nsid,
                        trtype: nvme_proto::log::discovery::trtype::TCP,
                        ..ErrorInfoEntry::default()
                    })
                    .collect();
                ErrorInfoEntry::encode_page(&entries, ERROR_LOG_ENTRIES)
            }
            (lid::SMART_HEALTH, false) => {
                if g.nsid != 0 && g.nsid != u32::MAX {
                    // Per-namespace SMART data is not supported (LPA bit 0 clear).
                    return Outcome::status(Status::INVALID_FIELD.dnr())
                        .with_loc(4)
                        .into();
                }
                let h = self.target.health_snapshot();
                let mut log = SmartLog {
                    data_units_read: h.data_units_read.into(),
                    data_units_written: h.data_units_written.into(),
                    host_read_commands: h.host_read_commands.into(),
                    host_write_commands: h.host_write_commands.into(),
                    controller_busy_time_min: h.controller_busy_minutes.into(),
                    power_cycles: h.power_cycles.into(),
                    power_on_hours: h.power_on_hours.into(),
                    unsafe_shutdowns: h.unsafe_shutdowns.into(),
                    media_errors: h.media_errors.into(),
                    num_err_log_entries: h.error_log_entries.into(),
                    ..SmartLog::default()
                };
                // Temperature and spare: the drives' own, or not reported.
                self.target.media_health(&ctrl.subsys.nqn).fill(&mut log);
                log.to_bytes().to_vec()
            }
            (lid::FERROBAY_EXT_SMART, false) => {
                let nsid = match g.nsid {
                    0 | u32::MAX => None,
                    n if ctrl
                        .subsys
                        .namespaces()
                        .iter()
                        .any(|ns| ns.nsid == n && ctrl.is_active(ns)) =>
                    {
                        Some(n)
                    }
                    _ => {
                        return Outcome::status(Status::INVALID_FIELD.dnr())
                            .with_loc(4)
                            .into();
                    }
                };
                self.target.ext_smart(&ctrl.subsys, nsid).to_bytes()
            }
            (lid::TELEMETRY_HOST, false) => {
                let create = g.lsp & telemetry::LSP_CREATE != 0;
                let st = lock(&ctrl.state);
                match (&st.telemetry_capture, create) {
                    (Some((_, page)), false) => page.clone(),
                    (prev, _) => {
                        // A capture: asked for, or the first read of this controller.
                        let generation = prev.as_ref().map_or(0, |(g, _)| g.wrapping_add(1));
                        drop(st);
                        let area1 = self.target.ext_smart(&ctrl.subsys, None).to_bytes();
                        let page = telemetry::host_initiated_page(generation, &area1);
                        lock(&ctrl.state).telemetry_capture = Some((generation, page.clone()));
                        page
                    }
                }
            }
            (lid::FIRMWARE_SLOT, false) => FirmwareSlotLog::single(&self.target.config.firmware)
                .to_bytes()
                .to_vec(),
            (lid::CHANGED_NS_LIST, false) => {
                let mut st = lock(&ctrl.state);
                let list = if st.changed_ns_overflow {
                    ChangedNsList {
                        nsids: vec![ChangedNsList::OVERFLOW],
                    }
                } else {
                    ChangedNsList::from_changed(st.changed_ns.iter().copied())
                };
                // Reading the log clears it.
                st.changed_ns.clear();
                st.changed_ns_overflow = false;
                list.to_bytes().to_vec()
            }
            (lid::COMMANDS_SUPPORTED_EFFECTS, false) => effects_log(g.csi).to_bytes().to_vec(),
            (lid::ANA, false) => {
                // The groups of this host's active namespaces, in this port's states.
                let namespaces: Vec<(u32, u32)> = ctrl
                    .subsys
                    .namespaces()
                    .iter()
                    .filter(|ns| ctrl.is_active(ns))
                    .map(|ns| (ns.ana_group, ns.nsid))
                    .collect();
                ctrl.listener
                    .ana
                    .log(&namespaces, g.lsp & ana::LSP_RGO != 0)
                    .to_bytes()
            }
            (lid::RESERVATION_NOTIFICATION, false) => {
                let mut st = lock(&ctrl.state);
                let entry = st.resv_log.pop_front();
                let available = st.resv_log.len().min(255) as u8;
                match entry {
                    Some(e) => ReservationNotificationLog {
                        log_page_count: e.log_count,
                        log_type: e.log_type,
                        available_log_pages: available,
                        nsid: e.nsid,
                    },
                    None => ReservationNotificationLog::default(),
                }
                .to_bytes()
                .to_vec()
            }
            _ => {
                return Outcome::status(Status::INVALID_LOG_PAGE.dnr())
                    .with_loc(40)
                    .into();
            }
        };
        if !g.rae {
            ctrl.log_read(g.lid);
        }
        match log_page_range(&page, g.lpo, len) {
            Ok(r) => {
                let mut buf = IoBuf::new_zeroed(len as usize);
                buf[..r.data.len()].copy_from_slice(r.data);
                Dispatch::Now(Outcome::data(buf))
            }
            Err(e) => Outcome::status(e.status()).with_loc(48).into(),
        }
    }
}

/// Commands Supported and Effects for command set `csi` (Get Log Page CDW14 bits 31:24):
/// the admin half is the same for every set, the I/O half is the set's own (Linux reads
/// the page per CSI of the namespaces it finds). A CSI not offered gets an empty I/O half.
fn effects_log(csi: u8) -> CommandEffectsLog {
    let mut admin_effects = [0u32; 256];
    for op in [
        admin::GET_LOG_PAGE,
        admin::IDENTIFY,
        admin::ABORT,
        admin::GET_FEATURES,
        admin::ASYNC_EVENT_REQUEST,
        admin::KEEP_ALIVE,
    ] {
        admin_effects[usize::from(op)] = effect::CSUPP;
    }
    admin_effects[usize::from(admin::SET_FEATURES)] = effect::CSUPP | effect::CCC;
    for op in [admin::NAMESPACE_MANAGEMENT, admin::NAMESPACE_ATTACHMENT] {
        admin_effects[usize::from(op)] = effect::CSUPP | effect::NCC | effect::NIC | effect::CCC;
    }
    let mut nvm = [0u32; 256];
    for op in [io::READ, io::COMPARE, io::FLUSH, io::RESERVATION_REPORT] {
        nvm[usize::from(op)] = effect::CSUPP;
    }
    for op in [io::WRITE, io::WRITE_ZEROES, io::DATASET_MANAGEMENT] {
        nvm[usize::from(op)] = effect::CSUPP | effect::LBCC;
    }
    for op in [
        io::RESERVATION_REGISTER,
        io::RESERVATION_ACQUIRE,
        io::RESERVATION_RELEASE,
    ] {
        nvm[usize::from(op)] = effect::CSUPP;
    }
    let kv = io_effects_kv(true);
    CommandEffectsLog::for_csi(&admin_effects, csi, &nvm, &kv)
}
