//! Get Features / Set Features (NVMe Base 2.0 "Get Features command",
//! "Set Features command") and Asynchronous
//! Event Request completions ("Asynchronous Event Request command").
//!
//! Get Features CDW10: 7:0 FID, 10:8 SEL. Set Features CDW10: 7:0 FID, 31 SV.
//! CDW11.. are feature specific; CDW14 bits 6:0 UUID index. The completion DW0 carries the
//! value for Get Features (and for Set Features of Number of Queues).

use crate::command::Command;
use crate::log::lid;
use crate::opcode::admin;
use crate::status::Status;

/// Feature identifiers (FID).
pub mod fid {
    pub const ARBITRATION: u8 = 0x01;
    pub const POWER_MANAGEMENT: u8 = 0x02;
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    pub const ERROR_RECOVERY: u8 = 0x05;
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    pub const INTERRUPT_VECTOR_CONFIG: u8 = 0x09;
    pub const WRITE_ATOMICITY: u8 = 0x0A;
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    pub const AUTONOMOUS_POWER_STATE: u8 = 0x0C;
    pub const HOST_MEMORY_BUFFER: u8 = 0x0D;
    pub const TIMESTAMP: u8 = 0x0E;
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    pub const HOST_BEHAVIOR: u8 = 0x16;
    /// I/O Command Set Profile: CDW11 bits 8:0 IOCSCI ([`super::IoCommandSetProfile`]).
    pub const IO_COMMAND_SET_PROFILE: u8 = 0x19;
    /// Key Value Configuration: CDW11 bit 0 EDNEK ([`super::KvConfig`]).
    pub const KEY_VALUE_CONFIG: u8 = 0x20;
    pub const HOST_IDENTIFIER: u8 = 0x81;
    pub const RESERVATION_NOTIFICATION_MASK: u8 = 0x82;
    pub const RESERVATION_PERSISTENCE: u8 = 0x83;
    pub const NAMESPACE_WRITE_PROTECT: u8 = 0x84;
}

/// Get Features SEL values (CDW10 bits 10:8).
pub mod sel {
    pub const CURRENT: u8 = 0;
    pub const DEFAULT: u8 = 1;
    pub const SAVED: u8 = 2;
    /// DW0 returns the capabilities bits in [`capabilities`](super::capabilities).
    pub const SUPPORTED_CAPABILITIES: u8 = 3;
}

/// DW0 bits returned for SEL = supported capabilities.
pub mod capabilities {
    pub const SAVEABLE: u32 = 1 << 0;
    pub const NAMESPACE_SPECIFIC: u32 = 1 << 1;
    pub const CHANGEABLE: u32 = 1 << 2;
}

/// A Get Features command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GetFeatures {
    pub nsid: u32,
    pub fid: u8,
    pub sel: u8,
    /// Feature specific (e.g. Host Identifier: bit 0 EXHID).
    pub cdw11: u32,
    pub uuid_index: u8,
}

impl GetFeatures {
    pub fn from_command(c: &Command) -> Self {
        GetFeatures {
            nsid: c.nsid(),
            fid: c.cdw10() as u8,
            sel: ((c.cdw10() >> 8) & 0x7) as u8,
            cdw11: c.cdw11(),
            uuid_index: (c.cdw14() & 0x7F) as u8,
        }
    }
    pub fn to_command(&self, cid: u16) -> Command {
        let mut c = Command::new(admin::GET_FEATURES, cid, self.nsid);
        c.set_cdw10((self.fid as u32) | (((self.sel & 0x7) as u32) << 8));
        c.set_cdw11(self.cdw11);
        c.set_cdw14((self.uuid_index & 0x7F) as u32);
        c
    }
}

/// A Set Features command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetFeatures {
    pub nsid: u32,
    pub fid: u8,
    /// Save: keep the value across power cycles (CDW10 bit 31).
    pub sv: bool,
    pub cdw11: u32,
    pub cdw12: u32,
    pub uuid_index: u8,
}

impl SetFeatures {
    pub fn from_command(c: &Command) -> Self {
        SetFeatures {
            nsid: c.nsid(),
            fid: c.cdw10() as u8,
            sv: c.cdw10() & (1 << 31) != 0,
            cdw11: c.cdw11(),
            cdw12: c.cdw12(),
            uuid_index: (c.cdw14() & 0x7F) as u8,
        }
    }
    pub fn to_command(&self, cid: u16) -> Command {
        let mut c = Command::new(admin::SET_FEATURES, cid, self.nsid);
        c.set_cdw10((self.fid as u32) | ((self.sv as u32) << 31));
        c.set_cdw11(self.cdw11);
        c.set_cdw12(self.cdw12);
        c.set_cdw14((self.uuid_index & 0x7F) as u32);
        c
    }
}

/// Number of Queues (FID 0x07): Set Features CDW11 and the completion DW0 of both Get and
/// Set. Bits 15:0 submission queues, 31:16 completion queues, both 0's based and not
/// counting the admin queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NumberOfQueues {
    /// I/O submission queues, 0's based (NSQR / NSQA).
    pub nsq: u16,
    /// I/O completion queues, 0's based (NCQR / NCQA).
    pub ncq: u16,
}

impl NumberOfQueues {
    /// From queue counts (1-based, clamped to 1..=65535).
    pub fn from_counts(sq: u32, cq: u32) -> Self {
        let z = |n: u32| (n.clamp(1, 0xFFFF) - 1) as u16;
        NumberOfQueues {
            nsq: z(sq),
            ncq: z(cq),
        }
    }
    pub const fn from_dw(v: u32) -> Self {
        NumberOfQueues {
            nsq: v as u16,
            ncq: (v >> 16) as u16,
        }
    }
    pub const fn to_dw(&self) -> u32 {
        (self.nsq as u32) | ((self.ncq as u32) << 16)
    }
    pub const fn sq_count(&self) -> u32 {
        self.nsq as u32 + 1
    }
    pub const fn cq_count(&self) -> u32 {
        self.ncq as u32 + 1
    }
    /// A request of 65536 queues (0xFFFF) gets Invalid Field in Command.
    pub const fn is_valid_request(&self) -> bool {
        self.nsq != 0xFFFF && self.ncq != 0xFFFF
    }
    /// What a controller grants for this request when it has `max` I/O queues.
    pub fn grant(&self, max: u32) -> Self {
        Self::from_counts(self.sq_count().min(max), self.cq_count().min(max))
    }
}

/// I/O Command Set Profile (FID 0x19; NVMe Base 2.0 "I/O Command Set Profile"): Set
/// Features CDW11 and Get Features DW0 bits 8:0 hold IOCSCI, the index of the I/O Command
/// Set Combination (Identify CNS 1Ch) in force while CC.CSS = 110b. Bits 31:9 reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoCommandSetProfile {
    /// IOCSCI, 0..=511.
    pub iocsci: u16,
}

impl IoCommandSetProfile {
    const IOCSCI_MASK: u32 = 0x1FF;

    pub const fn from_dw(v: u32) -> Self {
        IoCommandSetProfile {
            iocsci: (v & Self::IOCSCI_MASK) as u16,
        }
    }
    pub const fn to_dw(&self) -> u32 {
        (self.iocsci as u32) & Self::IOCSCI_MASK
    }
    /// Set Features CDW11 with reserved bits checked: Invalid Field in Command (DNR) if
    /// any of bits 31:9 is set. Whether the index names an offered combination is the
    /// controller's check (I/O Command Set Combination Rejected otherwise).
    pub fn from_cdw11(v: u32) -> Result<Self, Status> {
        if v & !Self::IOCSCI_MASK != 0 {
            return Err(Status::INVALID_FIELD.dnr());
        }
        Ok(Self::from_dw(v))
    }
}

/// Key Value Configuration (FID 0x20; KV Command Set 1.0 "Key Value Configuration"):
/// CDW11 / DW0 bit 0 EDNEK, "error on delete of non-existent key". When set, Delete of an
/// absent key fails with KV Key Does Not Exist; when clear (the default) it succeeds.
/// Namespace specific. Bits 31:1 reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KvConfig {
    pub ednek: bool,
}

impl KvConfig {
    const EDNEK: u32 = 1 << 0;

    pub const fn from_dw(v: u32) -> Self {
        KvConfig {
            ednek: v & Self::EDNEK != 0,
        }
    }
    pub const fn to_dw(&self) -> u32 {
        self.ednek as u32
    }
    /// Set Features CDW11 with reserved bits checked: Invalid Field in Command (DNR) if
    /// any of bits 31:1 is set.
    pub fn from_cdw11(v: u32) -> Result<Self, Status> {
        if v & !Self::EDNEK != 0 {
            return Err(Status::INVALID_FIELD.dnr());
        }
        Ok(Self::from_dw(v))
    }
}

/// Asynchronous Event Configuration (FID 0x0B, CDW11) bits.
pub mod aec {
    /// SMART / health critical warnings that raise events (bits 7:0).
    pub const SMART_MASK: u32 = 0xFF;
    pub const NS_ATTRIBUTE: u32 = 1 << 8;
    pub const FIRMWARE_ACTIVATION: u32 = 1 << 9;
    pub const TELEMETRY_LOG: u32 = 1 << 10;
    pub const ANA_CHANGE: u32 = 1 << 11;
    pub const PREDICTABLE_LATENCY: u32 = 1 << 12;
    pub const LBA_STATUS: u32 = 1 << 13;
    pub const ENDURANCE_GROUP: u32 = 1 << 14;
    pub const NORMAL_NVM_SUBSYSTEM_SHUTDOWN: u32 = 1 << 15;
    pub const DISCOVERY_LOG_CHANGE: u32 = 1 << 31;
}

/// Reservation Notification Mask (FID 0x82, CDW11) bits: a set bit masks the notice.
pub mod resv_mask {
    pub const REGISTRATION_PREEMPTED: u32 = 1 << 1;
    pub const RESERVATION_RELEASED: u32 = 1 << 2;
    pub const RESERVATION_PREEMPTED: u32 = 1 << 3;
}

/// Reservation Persistence (FID 0x83, CDW11) bit 0: persist through power loss (PTPL).
pub const RESV_PERSIST_PTPL: u32 = 1 << 0;
/// Host Identifier (FID 0x81, CDW11) bit 0: extended (128-bit) host identifier.
pub const HOST_ID_EXHID: u32 = 1 << 0;
/// Volatile Write Cache (FID 0x06, CDW11) bit 0: write cache enable.
pub const VWC_WCE: u32 = 1 << 0;
/// Bytes of the Host Identifier feature data: 8, or 16 with EXHID.
pub const fn host_id_bytes(exhid: bool) -> usize {
    if exhid { 16 } else { 8 }
}

/// Asynchronous event types (AER completion DW0 bits 2:0).
pub mod aer_type {
    pub const ERROR: u8 = 0;
    pub const SMART_HEALTH: u8 = 1;
    pub const NOTICE: u8 = 2;
    pub const IMMEDIATE: u8 = 3;
    pub const IO_COMMAND_SPECIFIC: u8 = 6;
    pub const VENDOR_SPECIFIC: u8 = 7;
}

/// Asynchronous event information for [`aer_type::NOTICE`].
pub mod aer_notice {
    pub const NS_ATTRIBUTE_CHANGED: u8 = 0x00;
    pub const FIRMWARE_ACTIVATION_STARTING: u8 = 0x01;
    pub const TELEMETRY_LOG_CHANGED: u8 = 0x02;
    pub const ANA_CHANGE: u8 = 0x03;
    pub const PREDICTABLE_LATENCY_AGGREGATE: u8 = 0x04;
    pub const LBA_STATUS: u8 = 0x05;
    pub const ENDURANCE_GROUP_AGGREGATE: u8 = 0x06;
    pub const NORMAL_NVM_SUBSYSTEM_SHUTDOWN: u8 = 0x07;
    pub const DISCOVERY_LOG_CHANGE: u8 = 0xF0;
}

/// Asynchronous event information for [`aer_type::IO_COMMAND_SPECIFIC`].
pub mod aer_io {
    pub const RESERVATION_LOG_PAGE_AVAILABLE: u8 = 0x00;
    pub const SANITIZE_COMPLETED: u8 = 0x01;
}

/// The DW0 of an Asynchronous Event Request completion: event type (bits 2:0), event
/// information (bits 15:8) and the log page to read to clear it (bits 23:16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AerEvent {
    pub event_type: u8,
    pub info: u8,
    pub log_page: u8,
}

impl AerEvent {
    pub const fn to_dw0(&self) -> u32 {
        ((self.event_type & 0x7) as u32)
            | ((self.info as u32) << 8)
            | ((self.log_page as u32) << 16)
    }
    pub const fn from_dw0(dw0: u32) -> Self {
        AerEvent {
            event_type: (dw0 & 0x7) as u8,
            info: (dw0 >> 8) as u8,
            log_page: (dw0 >> 16) as u8,
        }
    }
    const fn notice(info: u8, log_page: u8) -> Self {
        AerEvent {
            event_type: aer_type::NOTICE,
            info,
            log_page,
        }
    }
    /// Namespace attribute changed: read the Changed Namespace List (0x04).
    pub const fn ns_attribute_changed() -> Self {
        Self::notice(aer_notice::NS_ATTRIBUTE_CHANGED, lid::CHANGED_NS_LIST)
    }
    /// Firmware activation starting: read the Firmware Slot log (0x03).
    pub const fn firmware_activation() -> Self {
        Self::notice(aer_notice::FIRMWARE_ACTIVATION_STARTING, lid::FIRMWARE_SLOT)
    }
    /// ANA change: read the ANA log (0x0C).
    pub const fn ana_change() -> Self {
        Self::notice(aer_notice::ANA_CHANGE, lid::ANA)
    }
    /// Discovery log page change: read the discovery log (0x70).
    pub const fn discovery_log_change() -> Self {
        Self::notice(aer_notice::DISCOVERY_LOG_CHANGE, lid::DISCOVERY)
    }
    /// Reservation log page available: read the Reservation Notification log (0x80).
    pub const fn reservation_log_available() -> Self {
        AerEvent {
            event_type: aer_type::IO_COMMAND_SPECIFIC,
            info: aer_io::RESERVATION_LOG_PAGE_AVAILABLE,
            log_page: lid::RESERVATION_NOTIFICATION,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn aer_dw0_values() {
        // Linux: type NOTICE (2), info in bits 15:8, LID in 23:16.
        assert_eq!(AerEvent::ns_attribute_changed().to_dw0(), 0x0004_0002);
        assert_eq!(AerEvent::ana_change().to_dw0(), 0x000C_0302);
        assert_eq!(AerEvent::discovery_log_change().to_dw0(), 0x0070_F002);
        assert_eq!(AerEvent::firmware_activation().to_dw0(), 0x0003_0102);
        assert_eq!(AerEvent::reservation_log_available().to_dw0(), 0x0080_0006);
        // Linux's NVME_AEN_CFG_* bits.
        assert_eq!(aec::NS_ATTRIBUTE, 0x100);
        assert_eq!(aec::ANA_CHANGE, 0x800);
        assert_eq!(aec::DISCOVERY_LOG_CHANGE, 0x8000_0000);
    }

    #[test]
    fn number_of_queues() {
        // The host asks for 4 I/O queues: NSQR = NCQR = 3.
        let req = NumberOfQueues::from_dw(0x0003_0003);
        assert_eq!((req.sq_count(), req.cq_count()), (4, 4));
        assert_eq!(req.grant(2).to_dw(), 0x0001_0001);
        assert!(!NumberOfQueues::from_dw(0xFFFF).is_valid_request());
        assert_eq!(NumberOfQueues::from_counts(0, 1 << 20).to_dw(), 0xFFFE_0000);
    }

    #[test]
    fn feature_commands() {
        let g = GetFeatures {
            nsid: 0,
            fid: fid::KEEP_ALIVE_TIMER,
            sel: sel::SUPPORTED_CAPABILITIES,
            cdw11: 0,
            uuid_index: 0,
        };
        let c = g.to_command(1);
        assert_eq!((c.opcode(), c.cdw10()), (0x0A, 0x30F));
        let s = SetFeatures {
            nsid: 1,
            fid: fid::RESERVATION_PERSISTENCE,
            sv: true,
            cdw11: RESV_PERSIST_PTPL,
            cdw12: 0,
            uuid_index: 0,
        };
        let c = s.to_command(2);
        assert_eq!((c.opcode(), c.cdw10(), c.cdw11()), (0x09, 0x8000_0083, 1));
        assert_eq!(host_id_bytes(true), 16);
    }

    #[test]
    fn command_set_profile_and_kv_config() {
        // Set Features 19h selecting combination 1: CDW10 = 0x19, CDW11 = 1.
        let s = SetFeatures {
            nsid: 0,
            fid: fid::IO_COMMAND_SET_PROFILE,
            sv: false,
            cdw11: IoCommandSetProfile { iocsci: 1 }.to_dw(),
            cdw12: 0,
            uuid_index: 0,
        };
        let c = s.to_command(3);
        assert_eq!(&c.0[40..48], &[0x19, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(IoCommandSetProfile::from_cdw11(511).unwrap().iocsci, 511);
        assert_eq!(
            IoCommandSetProfile::from_cdw11(512),
            Err(Status::INVALID_FIELD.dnr())
        );
        // Key Value Configuration, EDNEK set on namespace 1.
        let s = SetFeatures {
            nsid: 1,
            fid: fid::KEY_VALUE_CONFIG,
            cdw11: KvConfig { ednek: true }.to_dw(),
            ..s
        };
        assert_eq!(&s.to_command(4).0[40..48], &[0x20, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(KvConfig::from_cdw11(1), Ok(KvConfig { ednek: true }));
        assert_eq!(KvConfig::from_cdw11(2), Err(Status::INVALID_FIELD.dnr()));
        assert_eq!(KvConfig::default().to_dw(), 0);
    }

    proptest! {
        #[test]
        fn kv_features_roundtrip(i in 0u16..512, e: bool, v: u32) {
            let p = IoCommandSetProfile { iocsci: i };
            prop_assert_eq!(IoCommandSetProfile::from_cdw11(p.to_dw()), Ok(p));
            let k = KvConfig { ednek: e };
            prop_assert_eq!(KvConfig::from_cdw11(k.to_dw()), Ok(k));
            // Checked decoding accepts exactly the values without reserved bits.
            prop_assert_eq!(IoCommandSetProfile::from_cdw11(v).is_ok(), v < 512);
            prop_assert_eq!(KvConfig::from_cdw11(v).is_ok(), v < 2);
        }

        #[test]
        fn roundtrips(nsid: u32, fid: u8, s in 0u8..8, sv: bool, cdw11: u32, cdw12: u32, u in 0u8..128, dw: u32, cid: u16) {
            let g = GetFeatures { nsid, fid, sel: s, cdw11, uuid_index: u };
            prop_assert_eq!(GetFeatures::from_command(&g.to_command(cid)), g);
            let st = SetFeatures { nsid, fid, sv, cdw11, cdw12, uuid_index: u };
            prop_assert_eq!(SetFeatures::from_command(&st.to_command(cid)), st);
            prop_assert_eq!(NumberOfQueues::from_dw(dw).to_dw(), dw);
            prop_assert_eq!(AerEvent::from_dw0(dw).to_dw0(), dw & 0x00FF_FF07);
        }
    }
}
