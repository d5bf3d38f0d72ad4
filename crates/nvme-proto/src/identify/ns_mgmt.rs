//! Namespace Management (opcode 0x0D) and Namespace Attachment (opcode 0x15), NVMe Base
//! 2.0 "Namespace Management command" and "Namespace Attachment command".
//!
//! Namespace Management: CDW10 bits 3:0 SEL (0 create, 1 delete), CDW11 bits 31:24 CSI;
//! create carries a 4096-byte Identify Namespace layout of which the host sets only
//! NSZE, NCAP, FLBAS, DPS, NMIC, ANAGRPID, NVMSETID and ENDGID; the completion's DW0 is
//! the new NSID. Namespace Attachment: CDW10 bits 3:0 SEL (0 attach, 1 detach), NSID in
//! the SQE, and a controller list as data.

use crate::command::Command;
use crate::error::DecodeError;
use crate::opcode::admin;

use super::IDENTIFY_DATA_BYTES;
use super::namespace::{IdentifyNamespace, off};

/// The fields of a Namespace Management command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NsMgmtCommand {
    /// The namespace to delete (0xFFFFFFFF = all); 0 for create.
    pub nsid: u32,
    /// Select: [`Self::SEL_CREATE`] or [`Self::SEL_DELETE`].
    pub sel: u8,
    /// Command set of the new namespace.
    pub csi: u8,
}

impl NsMgmtCommand {
    pub const SEL_CREATE: u8 = 0;
    pub const SEL_DELETE: u8 = 1;

    pub fn from_command(c: &Command) -> Self {
        NsMgmtCommand {
            nsid: c.nsid(),
            sel: (c.cdw10() & 0xF) as u8,
            csi: (c.cdw11() >> 24) as u8,
        }
    }
    pub fn to_command(&self, cid: u16) -> Command {
        let mut c = Command::new(admin::NAMESPACE_MANAGEMENT, cid, self.nsid);
        c.set_cdw10((self.sel & 0xF) as u32);
        c.set_cdw11((self.csi as u32) << 24);
        c
    }
}

/// The fields of a Namespace Attachment command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NsAttachCommand {
    pub nsid: u32,
    /// Select: [`Self::SEL_ATTACH`] or [`Self::SEL_DETACH`].
    pub sel: u8,
}

impl NsAttachCommand {
    pub const SEL_ATTACH: u8 = 0;
    pub const SEL_DETACH: u8 = 1;

    pub fn from_command(c: &Command) -> Self {
        NsAttachCommand {
            nsid: c.nsid(),
            sel: (c.cdw10() & 0xF) as u8,
        }
    }
    pub fn to_command(&self, cid: u16) -> Command {
        let mut c = Command::new(admin::NAMESPACE_ATTACHMENT, cid, self.nsid);
        c.set_cdw10((self.sel & 0xF) as u32);
        c
    }
}

/// The host-specified fields of Namespace Management create.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NsMgmtCreate {
    /// Size in logical blocks of the format FLBAS selects.
    pub nsze: u64,
    /// Capacity in logical blocks.
    pub ncap: u64,
    pub flbas: u8,
    pub dps: u8,
    /// Bit 0: shared namespace (may be attached to several controllers).
    pub nmic: u8,
    pub anagrpid: u32,
    pub nvmsetid: u16,
    pub endgid: u16,
}

impl NsMgmtCreate {
    /// The bytes the decoder needs: up to the last host-specified field (ENDGID).
    pub const MIN_BYTES: usize = off::ENDGID + 2;

    /// Reads the host fields; `b` is normally 4096 bytes but only the first
    /// [`Self::MIN_BYTES`] are needed.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::MIN_BYTES {
            return Err(DecodeError::Short {
                what: "namespace management data",
                needed_bytes: Self::MIN_BYTES,
                got_bytes: b.len(),
            });
        }
        let ns = IdentifyNamespace::decode_prefix(b);
        Ok(NsMgmtCreate {
            nsze: ns.nsze,
            ncap: ns.ncap,
            flbas: ns.flbas,
            dps: ns.dps,
            nmic: ns.nmic,
            anagrpid: ns.anagrpid,
            nvmsetid: ns.nvmsetid,
            endgid: ns.endgid,
        })
    }

    /// Writes the 4096-byte data with only the host fields set.
    pub fn encode(&self, out: &mut [u8]) {
        IdentifyNamespace {
            nsze: self.nsze,
            ncap: self.ncap,
            flbas: self.flbas,
            dps: self.dps,
            nmic: self.nmic,
            anagrpid: self.anagrpid,
            nvmsetid: self.nvmsetid,
            endgid: self.endgid,
            ..IdentifyNamespace::default()
        }
        .encode(out);
    }

    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_DATA_BYTES]> {
        let mut b = Box::new([0u8; IDENTIFY_DATA_BYTES]);
        self.encode(&mut b[..]);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn create_layout() {
        let c = NsMgmtCreate {
            nsze: 0x100,
            ncap: 0x80,
            flbas: 1,
            dps: 0,
            nmic: 1,
            anagrpid: 2,
            nvmsetid: 0,
            endgid: 3,
        };
        let b = c.to_bytes();
        assert_eq!(&b[0..2], &[0, 1]);
        assert_eq!(b[8], 0x80);
        assert_eq!((b[26], b[30]), (1, 1));
        assert_eq!(&b[92..96], &[2, 0, 0, 0]);
        assert_eq!(&b[102..104], &[3, 0]);
        assert_eq!(NsMgmtCreate::decode(&b[..]).unwrap(), c);
        assert_eq!(NsMgmtCreate::decode(&b[..104]).unwrap(), c);
        assert!(NsMgmtCreate::decode(&b[..103]).is_err());
    }

    #[test]
    fn commands() {
        let m = NsMgmtCommand {
            nsid: 0,
            sel: NsMgmtCommand::SEL_CREATE,
            csi: 0,
        };
        let c = m.to_command(1);
        assert_eq!(c.opcode(), 0x0D);
        assert_eq!(NsMgmtCommand::from_command(&c), m);
        let a = NsAttachCommand {
            nsid: 7,
            sel: NsAttachCommand::SEL_DETACH,
        };
        let c = a.to_command(2);
        assert_eq!((c.opcode(), c.nsid(), c.cdw10()), (0x15, 7, 1));
        assert_eq!(NsAttachCommand::from_command(&c), a);
    }

    proptest! {
        #[test]
        fn roundtrip(nsze: u64, ncap: u64, flbas: u8, dps: u8, nmic: u8, anagrpid: u32, nvmsetid: u16, endgid: u16) {
            let c = NsMgmtCreate { nsze, ncap, flbas, dps, nmic, anagrpid, nvmsetid, endgid };
            prop_assert_eq!(NsMgmtCreate::decode(&c.to_bytes()[..]).unwrap(), c);
        }
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = NsMgmtCreate::decode(&b);
        }
    }
}
