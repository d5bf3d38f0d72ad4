//! Dataset Management (0x09), Write Zeroes (0x08) and Compare (0x05) of the NVM command
//! set (NVM Command Set 1.0 "Dataset Management
//! command", "Write Zeroes command", "Compare command").
//!
//! DSM: CDW10 bits 7:0 NR (number of ranges, 0's based), CDW11 bit 0 IDR, 1 IDW, 2 AD
//! (deallocate); data is NR+1 ranges of 16 bytes: 0..4 context attributes, 4..8 length in
//! LBAs, 8..16 starting LBA.
//! Write Zeroes / Compare: CDW10..11 SLBA, CDW12 bits 15:0 NLB (0's based), 24 STC,
//! 25 DEAC (Write Zeroes only), 29:26 PRINFO, 30 FUA, 31 LR.

use crate::bytes::{le32, le64, put32, put64};
use crate::command::Command;
use crate::error::DecodeError;
use crate::opcode::io;

/// Whether `nlb` blocks at `slba` lie inside a namespace of `nsze` blocks (no overflow).
pub const fn lba_range_in_bounds(slba: u64, nlb: u64, nsze: u64) -> bool {
    match slba.checked_add(nlb) {
        Some(end) => end <= nsze,
        None => false,
    }
}

/// DSM attribute bits (CDW11).
pub mod dsm_attr {
    /// Integral dataset for read.
    pub const IDR: u32 = 1 << 0;
    /// Integral dataset for write.
    pub const IDW: u32 = 1 << 1;
    /// Deallocate the ranges.
    pub const AD: u32 = 1 << 2;
}

/// A Dataset Management command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DsmCommand {
    /// Number of ranges, 1..=256 (NR + 1).
    pub ranges: u16,
    /// CDW11 attributes, see [`dsm_attr`].
    pub attributes: u32,
}

impl DsmCommand {
    pub const MAX_RANGES: usize = 256;

    pub fn from_command(c: &Command) -> Self {
        DsmCommand {
            ranges: (c.cdw10() & 0xFF) as u16 + 1,
            attributes: c.cdw11(),
        }
    }
    pub fn to_command(&self, cid: u16, nsid: u32) -> Command {
        let mut c = Command::new(io::DATASET_MANAGEMENT, cid, nsid);
        c.set_cdw10((self.ranges.clamp(1, 256) - 1) as u32);
        c.set_cdw11(self.attributes);
        c
    }
    pub const fn deallocate(&self) -> bool {
        self.attributes & dsm_attr::AD != 0
    }
    /// Bytes of range data the command carries.
    pub const fn data_bytes(&self) -> usize {
        self.ranges as usize * DsmRange::BYTES
    }
}

/// One DSM range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DsmRange {
    pub context_attributes: u32,
    /// Length in logical blocks (not 0's based).
    pub nlb: u32,
    pub slba: u64,
}

impl DsmRange {
    pub const BYTES: usize = 16;

    pub fn encode(&self, out: &mut [u8]) {
        put32(out, 0, self.context_attributes);
        put32(out, 4, self.nlb);
        put64(out, 8, self.slba);
    }

    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        self.encode(&mut b);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(DecodeError::Short {
                what: "DSM range",
                needed_bytes: Self::BYTES,
                got_bytes: b.len(),
            });
        }
        Ok(DsmRange {
            context_attributes: le32(b, 0),
            nlb: le32(b, 4),
            slba: le64(b, 8),
        })
    }

    /// Decodes `count` ranges (1..=256) from `b`, which must hold them all.
    pub fn decode_list(b: &[u8], count: usize) -> Result<Vec<DsmRange>, DecodeError> {
        if count == 0 || count > DsmCommand::MAX_RANGES {
            return Err(DecodeError::InvalidField {
                what: "DSM range list",
                offset: 0,
                reason: "range count outside 1..=256",
            });
        }
        let need = count * Self::BYTES;
        let data = b.get(..need).ok_or(DecodeError::Short {
            what: "DSM range list",
            needed_bytes: need,
            got_bytes: b.len(),
        })?;
        data.chunks_exact(Self::BYTES).map(Self::decode).collect()
    }

    /// Encodes ranges back to back.
    pub fn encode_list(ranges: &[DsmRange]) -> Vec<u8> {
        let mut v = vec![0u8; ranges.len() * Self::BYTES];
        for (r, chunk) in ranges.iter().zip(v.chunks_exact_mut(Self::BYTES)) {
            r.encode(chunk);
        }
        v
    }
}

/// CDW12 bits shared by Write Zeroes and Compare.
pub mod cdw12 {
    pub const STC: u32 = 1 << 24;
    pub const DEAC: u32 = 1 << 25;
    pub const PRINFO_SHIFT: u32 = 26;
    pub const FUA: u32 = 1 << 30;
    pub const LR: u32 = 1 << 31;
}

/// A Write Zeroes command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteZeroes {
    pub slba: u64,
    /// Number of logical blocks, 1..=65536 (NLB + 1).
    pub nlb: u32,
    /// Deallocate: the blocks may be deallocated rather than written.
    pub deac: bool,
    pub fua: bool,
}

impl WriteZeroes {
    pub fn from_command(c: &Command) -> Self {
        let v = c.cdw12();
        WriteZeroes {
            slba: c.slba(),
            nlb: (v & 0xFFFF) + 1,
            deac: v & cdw12::DEAC != 0,
            fua: v & cdw12::FUA != 0,
        }
    }
    pub fn to_command(&self, cid: u16, nsid: u32) -> Command {
        let mut c = Command::new(io::WRITE_ZEROES, cid, nsid);
        c.set_slba(self.slba);
        c.set_cdw12(
            (self.nlb.clamp(1, 0x1_0000) - 1)
                | if self.deac { cdw12::DEAC } else { 0 }
                | if self.fua { cdw12::FUA } else { 0 },
        );
        c
    }
}

/// A Compare command: the data sent is compared with the blocks; a mismatch completes
/// with Compare Failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Compare {
    pub slba: u64,
    /// Number of logical blocks, 1..=65536 (NLB + 1).
    pub nlb: u32,
    pub fua: bool,
    pub lr: bool,
}

impl Compare {
    pub fn from_command(c: &Command) -> Self {
        let v = c.cdw12();
        Compare {
            slba: c.slba(),
            nlb: (v & 0xFFFF) + 1,
            fua: v & cdw12::FUA != 0,
            lr: v & cdw12::LR != 0,
        }
    }
    pub fn to_command(&self, cid: u16, nsid: u32) -> Command {
        let mut c = Command::new(io::COMPARE, cid, nsid);
        c.set_slba(self.slba);
        c.set_cdw12(
            (self.nlb.clamp(1, 0x1_0000) - 1)
                | if self.fua { cdw12::FUA } else { 0 }
                | if self.lr { cdw12::LR } else { 0 },
        );
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn range_layout() {
        let r = DsmRange {
            context_attributes: 0x0102_0304,
            nlb: 8,
            slba: 0x10_0000_0000,
        };
        assert_eq!(
            r.to_bytes(),
            [4, 3, 2, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0]
        );
        assert_eq!(DsmRange::decode(&r.to_bytes()).unwrap(), r);
        let list = DsmRange::encode_list(&[r, r]);
        assert_eq!(DsmRange::decode_list(&list, 2).unwrap(), vec![r, r]);
        assert!(DsmRange::decode_list(&list, 3).is_err());
        assert!(DsmRange::decode_list(&list, 0).is_err());
        assert!(DsmRange::decode_list(&[0; 4112], 257).is_err());
    }

    #[test]
    fn command_dwords() {
        let d = DsmCommand {
            ranges: 3,
            attributes: dsm_attr::AD,
        };
        let c = d.to_command(1, 1);
        assert_eq!((c.opcode(), c.cdw10(), c.cdw11()), (0x09, 2, 4));
        assert!(DsmCommand::from_command(&c).deallocate());
        assert_eq!(d.data_bytes(), 48);
        let w = WriteZeroes {
            slba: 5,
            nlb: 16,
            deac: true,
            fua: false,
        };
        let c = w.to_command(2, 1);
        assert_eq!((c.opcode(), c.slba(), c.cdw12()), (0x08, 5, 0x0200_000F));
        assert_eq!(WriteZeroes::from_command(&c), w);
        let cmp = Compare {
            slba: 1,
            nlb: 1,
            fua: true,
            lr: false,
        };
        let c = cmp.to_command(3, 1);
        assert_eq!((c.opcode(), c.cdw12()), (0x05, 0x4000_0000));
        assert_eq!(Compare::from_command(&c), cmp);
    }

    #[test]
    fn bounds() {
        assert!(lba_range_in_bounds(0, 8, 8));
        assert!(!lba_range_in_bounds(1, 8, 8));
        assert!(!lba_range_in_bounds(u64::MAX, 2, u64::MAX));
    }

    proptest! {
        #[test]
        fn roundtrips(ranges in proptest::collection::vec(any::<(u32, u32, u64)>(), 1..256), slba: u64,
                      nlb in 1u32..=65536, deac: bool, fua: bool, lr: bool, attributes: u32, cid: u16) {
            let rs: Vec<DsmRange> = ranges.iter().map(|&(c, n, s)| DsmRange { context_attributes: c, nlb: n, slba: s }).collect();
            prop_assert_eq!(DsmRange::decode_list(&DsmRange::encode_list(&rs), rs.len()).unwrap(), rs.clone());
            let d = DsmCommand { ranges: rs.len() as u16, attributes };
            prop_assert_eq!(DsmCommand::from_command(&d.to_command(cid, 1)), d);
            let w = WriteZeroes { slba, nlb, deac, fua };
            prop_assert_eq!(WriteZeroes::from_command(&w.to_command(cid, 1)), w);
            let c = Compare { slba, nlb, fua, lr };
            prop_assert_eq!(Compare::from_command(&c.to_command(cid, 1)), c);
        }
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..300), n in 0usize..300) {
            let _ = DsmRange::decode_list(&b, n);
        }
    }
}
