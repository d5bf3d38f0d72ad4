//! Identify (NVMe Base 2.0 "Identify command"): the command's fields, CNS values, and the data
//! structures a fabrics target returns or a host reads.
//!
//! Identify SQE: 4..8 NSID, CDW10 bits 7:0 CNS and 31:16 CNTID, CDW11 bits 15:0 CNSSID and
//! 31:24 CSI, CDW14 bits 6:0 UUID index. Every data structure is 4096 bytes.

pub mod controller;
pub mod descriptors;
pub mod independent;
pub mod io_command_set;
pub mod lists;
pub mod namespace;
pub mod ns_mgmt;

pub use controller::{IdentifyController, PowerStateDescriptor};
pub use descriptors::{NsIdDescriptor, NsIdDescriptorList};
pub use independent::IdentifyNsIndependent;
pub use io_command_set::IoCommandSetCombinations;
pub use lists::{CtrlList, NsList};
pub use namespace::{IdentifyNamespace, LbaFormat};
pub use ns_mgmt::{NsAttachCommand, NsMgmtCommand, NsMgmtCreate};

use crate::command::Command;
use crate::opcode::admin;

/// Size of every Identify data structure.
pub const IDENTIFY_DATA_BYTES: usize = 4096;

/// Controller or Namespace Structure (CNS) values.
pub mod cns {
    /// Identify Namespace for an active NSID (NVM command set).
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u8 = 0x01;
    /// Active namespace ID list: up to 1024 active NSIDs greater than NSID.
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace Identification Descriptor list for NSID.
    pub const NS_ID_DESCRIPTORS: u8 = 0x03;
    /// NVM Set list.
    pub const NVM_SET_LIST: u8 = 0x04;
    /// I/O command set specific Identify Namespace.
    pub const CS_NAMESPACE: u8 = 0x05;
    /// I/O command set specific Identify Controller.
    pub const CS_CONTROLLER: u8 = 0x06;
    /// Active namespace ID list for an I/O command set.
    pub const CS_ACTIVE_NS_LIST: u8 = 0x07;
    /// I/O command set independent Identify Namespace.
    pub const CS_INDEPENDENT_NAMESPACE: u8 = 0x08;
    /// Allocated namespace ID list: up to 1024 allocated NSIDs greater than NSID.
    pub const ALLOCATED_NS_LIST: u8 = 0x10;
    /// Identify Namespace for an allocated NSID.
    pub const ALLOCATED_NAMESPACE: u8 = 0x11;
    /// Controllers attached to namespace NSID, with CNTID ≥ CDW10.CNTID.
    pub const NS_ATTACHED_CTRL_LIST: u8 = 0x12;
    /// Controllers in the NVM subsystem, with CNTID ≥ CDW10.CNTID.
    pub const CTRL_LIST: u8 = 0x13;
    /// Primary controller capabilities.
    pub const PRIMARY_CTRL_CAPS: u8 = 0x14;
    /// Secondary controller list.
    pub const SECONDARY_CTRL_LIST: u8 = 0x15;
    /// Namespace granularity list.
    pub const NS_GRANULARITY: u8 = 0x16;
    /// UUID list.
    pub const UUID_LIST: u8 = 0x17;
    /// Allocated namespace ID list for an I/O command set.
    pub const CS_ALLOCATED_NS_LIST: u8 = 0x1A;
    /// I/O command set specific Identify Namespace for an allocated NSID.
    pub const CS_ALLOCATED_NAMESPACE: u8 = 0x1B;
    /// Identify I/O Command Set data structure: the command set combinations.
    pub const IO_COMMAND_SET: u8 = 0x1C;
}

/// Command Set Identifiers (CSI).
pub mod csi {
    pub const NVM: u8 = 0x00;
    pub const KEY_VALUE: u8 = 0x01;
    pub const ZONED: u8 = 0x02;

    /// The bit of `csi` in an I/O command set vector (CNS 1Ch entries, CC.CSS = 110b):
    /// bit n stands for CSI n. 0 for a CSI above 63, which no vector can name.
    pub const fn vector_bit(csi: u8) -> u64 {
        if csi < 64 { 1 << csi } else { 0 }
    }
}

/// The fields of an Identify command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdentifyCommand {
    pub nsid: u32,
    pub cns: u8,
    /// Controller identifier (CNS 0x12, 0x13: the lowest CNTID to list).
    pub cntid: u16,
    /// CNS specific identifier.
    pub cnssid: u16,
    /// Command set identifier.
    pub csi: u8,
    /// UUID index (bits 6:0 of CDW14).
    pub uuid_index: u8,
}

impl IdentifyCommand {
    pub fn from_command(c: &Command) -> Self {
        let cdw10 = c.cdw10();
        let cdw11 = c.cdw11();
        IdentifyCommand {
            nsid: c.nsid(),
            cns: cdw10 as u8,
            cntid: (cdw10 >> 16) as u16,
            cnssid: cdw11 as u16,
            csi: (cdw11 >> 24) as u8,
            uuid_index: (c.cdw14() & 0x7F) as u8,
        }
    }

    /// An Identify SQE for `cid` (the caller sets SGL1 for the 4096-byte transfer).
    pub fn to_command(&self, cid: u16) -> Command {
        let mut c = Command::new(admin::IDENTIFY, cid, self.nsid);
        c.set_cdw10((self.cns as u32) | ((self.cntid as u32) << 16));
        c.set_cdw11((self.cnssid as u32) | ((self.csi as u32) << 24));
        c.set_cdw14((self.uuid_index & 0x7F) as u32);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn identify_sqe_layout() {
        let i = IdentifyCommand {
            nsid: 1,
            cns: cns::NS_ID_DESCRIPTORS,
            cntid: 0x0102,
            cnssid: 0,
            csi: csi::ZONED,
            uuid_index: 0,
        };
        let c = i.to_command(5);
        assert_eq!(c.opcode(), 0x06);
        assert_eq!(&c.0[40..44], &[0x03, 0x00, 0x02, 0x01]);
        assert_eq!(c.0[47], 0x02);
    }

    proptest! {
        #[test]
        fn roundtrip(nsid: u32, cns: u8, cntid: u16, cnssid: u16, csi: u8, uuid_index in 0u8..128, cid: u16) {
            let i = IdentifyCommand { nsid, cns, cntid, cnssid, csi, uuid_index };
            prop_assert_eq!(IdentifyCommand::from_command(&i.to_command(cid)), i);
        }
    }
}
