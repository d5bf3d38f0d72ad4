//! Get Log Page (NVMe Base 2.0 "Get Log Page command"): the command's fields, log identifiers, the
//! log page structures a fabrics target serves, and partial reads with offsets.

pub mod ana;
pub mod changed_ns;
pub mod discovery;
pub mod effects;
pub mod error_info;
pub mod ext_smart;
pub mod firmware;
pub mod read;
pub mod reservation;
pub mod smart;
pub mod telemetry;

pub use ana::{AnaGroupDescriptor, AnaLog, ana_state};
pub use changed_ns::ChangedNsList;
pub use discovery::{DiscoveryLog, DiscoveryLogEntry, DiscoveryLogHeader};
pub use effects::{CommandEffectsLog, io_effects_kv, io_effects_nvm};
pub use error_info::ErrorInfoEntry;
pub use ext_smart::{ExtSmartLog, ExtSmartRecord, LatencySummary};
pub use firmware::FirmwareSlotLog;
pub use read::{LogPageRead, LogReadError, log_page_range, read_log_page};
pub use reservation::ReservationNotificationLog;
pub use smart::SmartLog;
pub use telemetry::TelemetryHeader;

use crate::command::Command;
use crate::opcode::admin;

/// Log page identifiers (LID).
pub mod lid {
    pub const SUPPORTED_LOG_PAGES: u8 = 0x00;
    pub const ERROR_INFO: u8 = 0x01;
    pub const SMART_HEALTH: u8 = 0x02;
    pub const FIRMWARE_SLOT: u8 = 0x03;
    pub const CHANGED_NS_LIST: u8 = 0x04;
    pub const COMMANDS_SUPPORTED_EFFECTS: u8 = 0x05;
    pub const DEVICE_SELF_TEST: u8 = 0x06;
    pub const TELEMETRY_HOST: u8 = 0x07;
    pub const TELEMETRY_CONTROLLER: u8 = 0x08;
    pub const ENDURANCE_GROUP: u8 = 0x09;
    pub const PREDICTABLE_LATENCY: u8 = 0x0A;
    pub const ANA: u8 = 0x0C;
    pub const PERSISTENT_EVENT: u8 = 0x0D;
    pub const FEATURE_IDS_EFFECTS: u8 = 0x12;
    pub const DISCOVERY: u8 = 0x70;
    /// Ferrobay's extended SMART page (vendor specific, `ext_smart`).
    pub const FERROBAY_EXT_SMART: u8 = 0xC0;
    pub const RESERVATION_NOTIFICATION: u8 = 0x80;
    pub const SANITIZE_STATUS: u8 = 0x81;
}

/// The fields of a Get Log Page command.
///
/// CDW10: 7:0 LID, 14:8 LSP, 15 RAE, 31:16 NUMDL. CDW11: 15:0 NUMDU, 31:16 LSI.
/// CDW12/13: LPOL/LPOU (byte offset, or entry index when OT is set). CDW14: 6:0 UUID
/// index, 23 OT, 31:24 CSI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GetLogPageCommand {
    pub nsid: u32,
    pub lid: u8,
    /// Log specific parameter (7 bits), e.g. ANA bit 0 RGO "return groups only".
    pub lsp: u8,
    /// Retain Asynchronous Event: reading the page does not clear the pending event.
    pub rae: bool,
    /// Number of dwords to return, 0's based (NUMDU:NUMDL).
    pub numd: u32,
    /// Log specific identifier (e.g. the endurance group).
    pub lsi: u16,
    /// Log page offset (LPOU:LPOL): bytes, dword aligned, unless `ot`.
    pub lpo: u64,
    pub uuid_index: u8,
    /// Offset type: `lpo` is an entry index rather than a byte offset.
    pub ot: bool,
    pub csi: u8,
}

impl GetLogPageCommand {
    /// A request for `len_bytes` (rounded up to dwords, at least 4) of page `lid` at byte
    /// `offset`.
    pub fn new(lid: u8, nsid: u32, offset: u64, len_bytes: u64) -> Self {
        let dwords = len_bytes.div_ceil(4).clamp(1, 1 << 32);
        GetLogPageCommand {
            nsid,
            lid,
            numd: (dwords - 1) as u32,
            lpo: offset,
            ..Default::default()
        }
    }

    /// The number of bytes the host asked for: (NUMD + 1) * 4.
    pub const fn len_bytes(&self) -> u64 {
        (self.numd as u64 + 1) * 4
    }

    pub fn from_command(c: &Command) -> Self {
        let (cdw10, cdw11, cdw14) = (c.cdw10(), c.cdw11(), c.cdw14());
        GetLogPageCommand {
            nsid: c.nsid(),
            lid: cdw10 as u8,
            lsp: ((cdw10 >> 8) & 0x7F) as u8,
            rae: cdw10 & (1 << 15) != 0,
            numd: (cdw10 >> 16) | ((cdw11 & 0xFFFF) << 16),
            lsi: (cdw11 >> 16) as u16,
            lpo: (c.cdw12() as u64) | ((c.cdw13() as u64) << 32),
            uuid_index: (cdw14 & 0x7F) as u8,
            ot: cdw14 & (1 << 23) != 0,
            csi: (cdw14 >> 24) as u8,
        }
    }

    /// A Get Log Page SQE for `cid` (the caller sets SGL1 for the transfer).
    pub fn to_command(&self, cid: u16) -> Command {
        let mut c = Command::new(admin::GET_LOG_PAGE, cid, self.nsid);
        c.set_cdw10(
            (self.lid as u32)
                | (((self.lsp & 0x7F) as u32) << 8)
                | ((self.rae as u32) << 15)
                | ((self.numd & 0xFFFF) << 16),
        );
        c.set_cdw11((self.numd >> 16) | ((self.lsi as u32) << 16));
        c.set_cdw12(self.lpo as u32);
        c.set_cdw13((self.lpo >> 32) as u32);
        c.set_cdw14(
            ((self.uuid_index & 0x7F) as u32)
                | ((self.ot as u32) << 23)
                | ((self.csi as u32) << 24),
        );
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sqe_layout() {
        // Discovery log, entries from offset 1024, 4 KiB, RAE: as libnvme reads it.
        let mut g = GetLogPageCommand::new(lid::DISCOVERY, 0, 1024, 4096);
        g.rae = true;
        let c = g.to_command(3);
        assert_eq!(c.opcode(), 0x02);
        assert_eq!(&c.0[40..44], &[0x70, 0x80, 0xFF, 0x03]);
        assert_eq!(&c.0[44..48], &[0, 0, 0, 0]);
        assert_eq!(&c.0[48..56], &[0, 4, 0, 0, 0, 0, 0, 0]);
        assert_eq!(g.len_bytes(), 4096);
        // NUMDU carries the high bits: 1 MiB = 0x40000 dwords -> NUMD 0x3FFFF.
        let big = GetLogPageCommand::new(lid::ERROR_INFO, 0, 0, 1 << 20).to_command(1);
        assert_eq!(big.cdw10() >> 16, 0xFFFF);
        assert_eq!(big.cdw11() & 0xFFFF, 0x3);
        let g2 = GetLogPageCommand {
            lsp: 1,
            lsi: 0x1234,
            ot: true,
            csi: 2,
            uuid_index: 5,
            ..g
        };
        let c2 = g2.to_command(1);
        assert_eq!(c2.0[41], 0x81);
        assert_eq!(&c2.0[46..48], &[0x34, 0x12]);
        assert_eq!(&c2.0[56..60], &[5, 0, 0x80, 2]);
    }

    #[test]
    fn new_clamps_length() {
        assert_eq!(GetLogPageCommand::new(1, 0, 0, 0).len_bytes(), 4);
        assert_eq!(GetLogPageCommand::new(1, 0, 0, 5).len_bytes(), 8);
        assert_eq!(GetLogPageCommand::new(1, 0, 0, u64::MAX).numd, u32::MAX);
    }

    proptest! {
        #[test]
        fn roundtrip(nsid: u32, lid: u8, lsp in 0u8..0x80, rae: bool, numd: u32, lsi: u16, lpo: u64,
                     uuid_index in 0u8..0x80, ot: bool, csi: u8, cid: u16) {
            let g = GetLogPageCommand { nsid, lid, lsp, rae, numd, lsi, lpo, uuid_index, ot, csi };
            prop_assert_eq!(GetLogPageCommand::from_command(&g.to_command(cid)), g);
        }
    }
}
