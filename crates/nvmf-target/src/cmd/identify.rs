//! Identify: controller, namespace (NVM, KV, command set independent), namespace lists
//! (all and per command set), descriptors, I/O command set combinations, controller lists.

use std::sync::Arc;

use blockdev::IoBuf;
use nvme_proto::fabrics::Vs;
use nvme_proto::identify::controller::bits as cbits;
use nvme_proto::identify::independent::bits as ibits;
use nvme_proto::identify::namespace::bits as nbits;
use nvme_proto::identify::{
    CtrlList, IDENTIFY_DATA_BYTES, IdentifyCommand, IdentifyController, IdentifyNamespace,
    IdentifyNsIndependent, IoCommandSetCombinations, LbaFormat, NsIdDescriptor, NsIdDescriptorList,
    NsList, PowerStateDescriptor, cns, csi,
};
use nvme_proto::kv::identify::KV_FORMAT_COUNT;
use nvme_proto::kv::{KvFormat, KvIdentifyController, KvIdentifyNamespace};
use nvme_proto::{Command, Status};

use crate::ana::{ANA_MAX_GROUPS, ANA_TRANSITION_TIME_S, ana_limits};
use crate::cmd::admin::{ACL, AERL};
use crate::cmd::context::QueueContext;
use crate::cmd::{Dispatch, Outcome};
use crate::controller::{Controller, ERROR_LOG_ENTRIES};
use crate::namespace::{BlockMedia, KvMedia, Namespace};
use crate::subsystem::SubsysKind;
use crate::sync::read;

/// Highest NSID a subsystem may use (NN) and the namespace limit (MNAN).
pub(crate) const MAX_NAMESPACES: u32 = 1024;
/// Keep Alive Support granularity, in 100 ms units.
const KAS_100MS: u16 = 1;

fn data_out(bytes: &[u8]) -> Dispatch {
    Dispatch::Now(Outcome::data(IoBuf::from_slice(bytes)))
}

/// A stable 128-bit identifier derived from a name (FGUID).
fn guid_of(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, chunk) in out.chunks_mut(4).enumerate() {
        let mut s = name.as_bytes().to_vec();
        s.push(i as u8);
        chunk.copy_from_slice(&crc32c::crc32c(&s).to_le_bytes());
    }
    out
}

/// The I/O command sets this target offers, as one combination (Identify CNS 1Ch entry
/// 0, the only I/O Command Set Profile).
pub(crate) const IO_COMMAND_SETS: [u8; 2] = [csi::NVM, csi::KEY_VALUE];

/// The vector of the one combination: bit n for CSI n.
pub(crate) fn io_command_set_combination() -> u64 {
    IoCommandSetCombinations::single(&IO_COMMAND_SETS).get(0)
}

/// SQE byte of the Identify CSI (CDW11 bits 31:24), for the error log.
const CSI_SQE_BYTE: u16 = 47;

fn invalid_namespace() -> Dispatch {
    Outcome::status(Status::INVALID_NAMESPACE.dnr())
        .with_loc(4)
        .into()
}

/// The structure asked for does not exist for the namespace's command set.
fn invalid_command_set() -> Dispatch {
    Outcome::status(Status::INVALID_IO_COMMAND_SET.dnr())
        .with_loc(CSI_SQE_BYTE)
        .into()
}

impl QueueContext {
    pub(crate) fn identify(&mut self, ctrl: &Arc<Controller>, cmd: &Command) -> Dispatch {
        let id = IdentifyCommand::from_command(cmd);
        let discovery = ctrl.subsys.kind == SubsysKind::Discovery;
        if discovery && id.cns != cns::CONTROLLER {
            return Outcome::status(Status::INVALID_FIELD.dnr())
                .with_loc(40)
                .into();
        }
        let subsys = &ctrl.subsys;
        let mdts_bytes = self.target.config.mdts_bytes;
        match id.cns {
            cns::CONTROLLER => data_out(&self.identify_controller(ctrl)[..]),
            cns::NAMESPACE | cns::ALLOCATED_NAMESPACE => {
                let allocated = id.cns == cns::ALLOCATED_NAMESPACE;
                if id.nsid == u32::MAX {
                    return data_out(&common_namespace(mdts_bytes).to_bytes()[..]);
                }
                if id.nsid == 0 || id.nsid > MAX_NAMESPACES {
                    return invalid_namespace();
                }
                let ns = if allocated {
                    subsys.namespace(id.nsid)
                } else {
                    self.active_ns(id.nsid)
                };
                match ns {
                    Some(ns) => match ns.block() {
                        Some(blk) => {
                            data_out(&identify_namespace(&ns, blk, mdts_bytes).to_bytes()[..])
                        }
                        // The NVM Identify Namespace does not describe a KV namespace.
                        None => invalid_command_set(),
                    },
                    // Inactive NSID: zero-filled data.
                    None => data_out(&[0u8; IDENTIFY_DATA_BYTES]),
                }
            }
            cns::ACTIVE_NS_LIST
            | cns::ALLOCATED_NS_LIST
            | cns::CS_ACTIVE_NS_LIST
            | cns::CS_ALLOCATED_NS_LIST => {
                if id.nsid >= 0xFFFF_FFFE {
                    return invalid_namespace();
                }
                let allocated =
                    matches!(id.cns, cns::ALLOCATED_NS_LIST | cns::CS_ALLOCATED_NS_LIST);
                let of_csi = matches!(id.cns, cns::CS_ACTIVE_NS_LIST | cns::CS_ALLOCATED_NS_LIST);
                if of_csi && !IO_COMMAND_SETS.contains(&id.csi) {
                    return invalid_command_set();
                }
                let all = subsys.namespaces();
                let nsids = all
                    .iter()
                    .filter(|ns| allocated || ctrl.is_active(ns))
                    .filter(|ns| !of_csi || ns.csi() == id.csi)
                    .map(|ns| ns.nsid);
                data_out(&NsList::above(nsids, id.nsid).to_bytes()[..])
            }
            cns::NS_ID_DESCRIPTORS => {
                let Some(ns) = self.active_ns(id.nsid) else {
                    return invalid_namespace();
                };
                let mut d = Vec::new();
                if ns.eui64 != [0; 8] {
                    d.push(NsIdDescriptor::Eui64(ns.eui64));
                }
                if ns.nguid != [0; 16] {
                    d.push(NsIdDescriptor::Nguid(ns.nguid));
                }
                if ns.uuid != [0; 16] {
                    d.push(NsIdDescriptor::Uuid(ns.uuid));
                }
                d.push(NsIdDescriptor::Csi(ns.csi()));
                data_out(&NsIdDescriptorList { descriptors: d }.to_bytes()[..])
            }
            // NVM command set specific controller data: no limits beyond MDTS → all
            // zero. KV 1.0 defines no KV controller fields (a later revision's version
            // field stays 0).
            cns::CS_CONTROLLER => match id.csi {
                csi::NVM => data_out(&[0u8; IDENTIFY_DATA_BYTES]),
                csi::KEY_VALUE => data_out(&KvIdentifyController::default().to_bytes()[..]),
                _ => invalid_command_set(),
            },
            cns::CS_NAMESPACE | cns::CS_ALLOCATED_NAMESPACE => {
                if !IO_COMMAND_SETS.contains(&id.csi) {
                    return invalid_command_set();
                }
                let ns = if id.cns == cns::CS_ALLOCATED_NAMESPACE {
                    subsys.namespace(id.nsid)
                } else {
                    self.active_ns(id.nsid)
                };
                let Some(ns) = ns else {
                    return invalid_namespace();
                };
                if ns.csi() != id.csi {
                    return invalid_command_set();
                }
                match ns.kv() {
                    Some(kv) => data_out(&kv_identify_namespace(&ns, kv).to_bytes()[..]),
                    // NVM command set specific namespace data: no fields in use.
                    None => data_out(&[0u8; IDENTIFY_DATA_BYTES]),
                }
            }
            cns::CS_INDEPENDENT_NAMESPACE => {
                if id.nsid == 0 || id.nsid > MAX_NAMESPACES {
                    return invalid_namespace();
                }
                match self.active_ns(id.nsid) {
                    Some(ns) => data_out(&independent_namespace(&ns).to_bytes()[..]),
                    None => data_out(&[0u8; IDENTIFY_DATA_BYTES]),
                }
            }
            cns::IO_COMMAND_SET => {
                data_out(&IoCommandSetCombinations::single(&IO_COMMAND_SETS).to_bytes()[..])
            }
            cns::NS_ATTACHED_CTRL_LIST => {
                let Some(ns) = subsys.namespace(id.nsid) else {
                    return invalid_namespace();
                };
                let ids = subsys
                    .live_controllers()
                    .iter()
                    .filter(|c| ns.is_attached_to(&c.hostnqn))
                    .map(|c| c.cntlid)
                    .collect::<Vec<_>>();
                data_out(&CtrlList::from_at_least(ids, id.cntid).to_bytes()[..])
            }
            cns::CTRL_LIST => {
                let ids = subsys
                    .live_controllers()
                    .iter()
                    .map(|c| c.cntlid)
                    .collect::<Vec<_>>();
                data_out(&CtrlList::from_at_least(ids, id.cntid).to_bytes()[..])
            }
            _ => Outcome::status(Status::INVALID_FIELD.dnr())
                .with_loc(40)
                .into(),
        }
    }

    fn identify_controller(&self, ctrl: &Controller) -> Box<[u8; IDENTIFY_DATA_BYTES]> {
        let cfg = &self.target.config;
        let subsys = &ctrl.subsys;
        let discovery = subsys.kind == SubsysKind::Discovery;
        let namespaces = subsys.namespaces();
        let vwc = namespaces
            .iter()
            .any(|ns| ns.volatile_write_cache() && ns.is_attached_to(&ctrl.hostnqn));
        let total_bytes: u128 = namespaces
            .iter()
            .map(|ns| u128::from(ns.size_bytes()))
            .sum();
        let ns_mgmt = read(&self.target.ns_manager).is_some();
        let mut psd = [PowerStateDescriptor::default(); 32];
        psd[0].mp = 2500; // 25 W in centiwatts: an informational maximum.
        let mut id = IdentifyController {
            sn: subsys.serial.clone(),
            mn: subsys.model.clone(),
            fr: cfg.firmware.clone(),
            rab: 6,
            ieee: cfg.ieee_oui,
            cmic: cbits::CMIC_MULTI_CTRL | cbits::CMIC_MULTI_PORT,
            mdts: cfg.mdts_field(),
            cntlid: ctrl.cntlid,
            ver: Vs::V2_0.to_u32(),
            ctratt: cbits::CTRATT_HOSTID_128,
            fguid: guid_of(&subsys.nqn),
            acl: ACL,
            aerl: AERL,
            frmw: 0x03,
            lpa: cbits::LPA_CMD_EFFECTS | cbits::LPA_EXTENDED_DATA | cbits::LPA_TELEMETRY,
            elpe: (ERROR_LOG_ENTRIES - 1) as u8,
            npss: 0,
            wctemp: 0x0157,
            cctemp: 0x0175,
            kas: KAS_100MS,
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: cfg.mqes.saturating_add(1),
            sgls: cbits::SGLS_SUPPORTED | cbits::SGLS_OFFSET | cbits::SGLS_TRANSPORT,
            subnqn: subsys.nqn.clone(),
            ioccsz: (64 + cfg.in_capsule_bytes) / 16,
            iorcsz: 1,
            icdoff: 0,
            msdbd: 1,
            ofcs: cbits::OFCS_DISCONNECT,
            psd,
            ..IdentifyController::default()
        };
        if discovery {
            id.cntrltype = cbits::CNTRLTYPE_DISCOVERY;
            id.dctype = cfg.discovery_controller_type.dctype();
            id.cmic = 0;
            id.oaes = cbits::OAES_DISCOVERY_CHANGE;
            id.maxcmd = cfg.mqes.saturating_add(1);
        } else {
            id.cntrltype = cbits::CNTRLTYPE_IO;
            id.oaes = cbits::OAES_NS_ATTR | cbits::OAES_ANA_CHANGE;
            id.cmic |= cbits::CMIC_ANA;
            let (groups, mnan) = ana_limits(cfg.mdts_bytes, MAX_NAMESPACES);
            id.anatt = ANA_TRANSITION_TIME_S;
            id.anacap = cbits::ANACAP_OPTIMIZED
                | cbits::ANACAP_NON_OPTIMIZED
                | cbits::ANACAP_INACCESSIBLE
                | cbits::ANACAP_PERSISTENT_LOSS
                | cbits::ANACAP_CHANGE
                | cbits::ANACAP_GRPID_STATIC;
            id.anagrpmax = ANA_MAX_GROUPS;
            id.nanagrpid = groups;
            id.oacs = if ns_mgmt { cbits::OACS_NS_MGMT } else { 0 };
            id.oncs = cbits::ONCS_COMPARE
                | cbits::ONCS_DSM
                | cbits::ONCS_WRITE_ZEROES
                | cbits::ONCS_RESERVATIONS;
            // Bits 2:1 = 10b: flush of all namespaces (NSID FFFFFFFFh) is not supported.
            id.vwc = if vwc {
                cbits::VWC_PRESENT | 0b100
            } else {
                0b100
            };
            id.nn = MAX_NAMESPACES;
            // In 1..=NN, and small enough that the largest ANA log fits in MDTS.
            id.mnan = mnan;
            id.tnvmcap = total_bytes;
        }
        id.to_bytes()
    }
}

fn lba_formats() -> (u8, [LbaFormat; nvme_proto::identify::namespace::LBAF_COUNT]) {
    let mut lbaf = [LbaFormat::default(); nvme_proto::identify::namespace::LBAF_COUNT];
    lbaf[0] = LbaFormat::new(9);
    lbaf[1] = LbaFormat::new(12);
    (1, lbaf)
}

/// Capabilities common to all namespaces (NSID FFFFFFFFh).
fn common_namespace(_mdts_bytes: u32) -> IdentifyNamespace {
    let (nlbaf, lbaf) = lba_formats();
    IdentifyNamespace {
        nlbaf,
        lbaf,
        nmic: nbits::NMIC_SHARED,
        ..IdentifyNamespace::default()
    }
}

pub(crate) fn identify_namespace(
    ns: &Namespace,
    blk: &BlockMedia,
    mdts_bytes: u32,
) -> IdentifyNamespace {
    let (nlbaf, lbaf) = lba_formats();
    let mut dlfeat = nbits::DLFEAT_WRITE_ZEROES_DEALLOCATES;
    if blk.discard_reads_zeroes() {
        dlfeat |= nbits::DLFEAT_READ_ZEROES;
    }
    let noiob = (u64::from(mdts_bytes) >> blk.lba_shift).min(u64::from(u16::MAX)) as u16;
    IdentifyNamespace {
        nsze: blk.blocks,
        ncap: blk.blocks,
        nuse: blk.blocks,
        nlbaf,
        flbas: IdentifyNamespace::flbas_for(if blk.block_size_bytes == 4096 { 1 } else { 0 }),
        nmic: nbits::NMIC_SHARED,
        rescap: ns.reservations.capabilities(),
        dlfeat,
        noiob,
        nvmcap: u128::from(blk.size_bytes),
        anagrpid: ns.ana_group,
        nguid: ns.nguid,
        eui64: ns.eui64,
        lbaf,
        ..IdentifyNamespace::default()
    }
}

/// The KV Identify Namespace (CNS 05h, CSI 01h): sizes in bytes from the store's usage,
/// the one KV format.
pub(crate) fn kv_identify_namespace(ns: &Namespace, kv: &KvMedia) -> KvIdentifyNamespace {
    let u = kv.backend.usage();
    let mut kvf = [KvFormat::default(); KV_FORMAT_COUNT];
    kvf[0] = kv.format;
    KvIdentifyNamespace {
        nsze_bytes: u.capacity_bytes,
        nuse_bytes: u.used_bytes,
        nmic: nbits::NMIC_SHARED,
        rescap: ns.reservations.capabilities(),
        anagrpid: ns.ana_group,
        nguid: ns.nguid,
        eui64: ns.eui64,
        kvf,
        ..KvIdentifyNamespace::default()
    }
}

/// The command set independent Identify Namespace (CNS 08h), which Linux reads for
/// namespaces of command sets other than NVM: ready unless the store could not be opened.
pub(crate) fn independent_namespace(ns: &Namespace) -> IdentifyNsIndependent {
    let ready = ns.kv().is_none_or(|k| k.backend.is_ready());
    IdentifyNsIndependent {
        nsfeat: if ns.volatile_write_cache() {
            0
        } else {
            ibits::NSFEAT_VWC_NOT_PRESENT
        },
        nmic: ibits::NMIC_SHARED,
        rescap: ns.reservations.capabilities(),
        anagrpid: ns.ana_group,
        nstat: if ready { ibits::NSTAT_READY } else { 0 },
        ..IdentifyNsIndependent::default()
    }
}
