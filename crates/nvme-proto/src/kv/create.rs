//! Namespace Management create of a KV namespace (opcode 0Dh, SEL 0, CDW11 bits 31:24
//! CSI = 01h; [`crate::identify::NsMgmtCommand`] carries the CSI).
//!
//! The data is the 4096-byte block of host-specified fields that hosts send whatever the
//! command set (libnvme `struct nvme_ns_mgmt_host_sw_specified`, used by `nvme create-ns
//! --csi`): NSZE 0..8, NCAP 8..16, FLBAS 26, DPS 29, NMIC 30, ANAGRPID 92..96, NVMSETID
//! 100..102, ENDGID 102..104, decoded by [`crate::identify::NsMgmtCreate`].
//!
//! KV Command Set 1.0 does not tabulate how these map onto a KV namespace; Ferrobay reads
//! them as follows, so that nvme-cli can create KV namespaces:
//! - NSZE and NCAP in bytes (the unit of the KV Identify Namespace NSZE);
//! - FLBAS bits 3:0 select the KV format (0..=NKVF); bits 7:4 must be zero;
//! - DPS must be zero (a KV namespace has no end-to-end protection information);
//! - NMIC, ANAGRPID, NVMSETID and ENDGID as for any namespace.

use crate::identify::NsMgmtCreate;
use crate::status::Status;

/// The host's request for a new KV namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KvNsCreate {
    /// NSZE: size in bytes.
    pub size_bytes: u64,
    /// NCAP as sent, bytes. KV Identify Namespace reports no capacity, so a controller may
    /// require 0 or `size_bytes`.
    pub capacity_bytes: u64,
    /// KV format index, 0..=15 (FLBAS bits 3:0).
    pub format_index: u8,
    /// NMIC bit 0: shared namespace.
    pub nmic: u8,
    pub anagrpid: u32,
    pub nvmsetid: u16,
    pub endgid: u16,
}

impl KvNsCreate {
    /// Reads the KV meaning of decoded create data: Invalid Field in Command (DNR) for
    /// FLBAS bits 7:4 or a non-zero DPS.
    pub fn from_create(c: &NsMgmtCreate) -> Result<Self, Status> {
        if c.flbas & 0xF0 != 0 || c.dps != 0 {
            return Err(Status::INVALID_FIELD.dnr());
        }
        Ok(KvNsCreate {
            size_bytes: c.nsze,
            capacity_bytes: c.ncap,
            format_index: c.flbas & 0x0F,
            nmic: c.nmic,
            anagrpid: c.anagrpid,
            nvmsetid: c.nvmsetid,
            endgid: c.endgid,
        })
    }

    /// The create data a host sends (encode it with [`NsMgmtCreate::to_bytes`]).
    pub fn to_create(&self) -> NsMgmtCreate {
        NsMgmtCreate {
            nsze: self.size_bytes,
            ncap: self.capacity_bytes,
            flbas: self.format_index & 0x0F,
            dps: 0,
            nmic: self.nmic,
            anagrpid: self.anagrpid,
            nvmsetid: self.nvmsetid,
            endgid: self.endgid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identify::{NsMgmtCommand, csi};
    use proptest::prelude::*;

    #[test]
    fn create_bytes() {
        let k = KvNsCreate {
            size_bytes: 1 << 40,
            capacity_bytes: 1 << 40,
            format_index: 2,
            nmic: 1,
            anagrpid: 3,
            nvmsetid: 0,
            endgid: 4,
        };
        let b = k.to_create().to_bytes();
        assert_eq!(&b[0..8], &[0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(&b[8..16], &[0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!((b[26], b[29], b[30]), (2, 0, 1));
        assert_eq!(&b[92..96], &[3, 0, 0, 0]);
        assert_eq!(&b[102..104], &[4, 0]);
        let back = NsMgmtCreate::decode(&b[..]).unwrap();
        assert_eq!(KvNsCreate::from_create(&back), Ok(k));
        // The command: CSI 01h in CDW11 bits 31:24.
        let c = NsMgmtCommand {
            nsid: 0,
            sel: NsMgmtCommand::SEL_CREATE,
            csi: csi::KEY_VALUE,
        }
        .to_command(1);
        assert_eq!(&c.0[44..48], &[0, 0, 0, 0x01]);
    }

    #[test]
    fn rejects_nvm_only_fields() {
        let mut c = KvNsCreate::default().to_create();
        c.dps = 1;
        assert_eq!(
            KvNsCreate::from_create(&c),
            Err(Status::INVALID_FIELD.dnr())
        );
        c.dps = 0;
        c.flbas = 0x10;
        assert_eq!(
            KvNsCreate::from_create(&c),
            Err(Status::INVALID_FIELD.dnr())
        );
    }

    proptest! {
        #[test]
        fn roundtrip(size: u64, cap: u64, fi in 0u8..16, nmic: u8, anagrpid: u32, nvmsetid: u16, endgid: u16) {
            let k = KvNsCreate { size_bytes: size, capacity_bytes: cap, format_index: fi, nmic, anagrpid, nvmsetid, endgid };
            let b = k.to_create().to_bytes();
            prop_assert_eq!(KvNsCreate::from_create(&NsMgmtCreate::decode(&b[..]).unwrap()), Ok(k));
        }
    }
}
