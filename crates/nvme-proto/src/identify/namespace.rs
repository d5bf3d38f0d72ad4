//! The Identify Namespace data structure for the NVM command set (CNS 0x00 and 0x11),
//! 4096 bytes (NVM Command Set 1.0 "Identify Namespace Data Structure,
//! NVM Command Set"; Linux `struct nvme_id_ns`).
//!
//! Namespace Management's create data uses the same layout, see [`super::NsMgmtCreate`].

use crate::bytes::{get_array, le16, le32, le64, le128, put_bytes, put16, put32, put64, put128};
use crate::error::DecodeError;

use super::IDENTIFY_DATA_BYTES;

/// Number of LBA format entries (NVMe 2.0 allows 64; before 2.0 only 16 were defined and
/// the rest of the range was reserved, so encoding all 64 is compatible).
pub const LBAF_COUNT: usize = 64;

/// Byte offsets of Identify Namespace fields.
pub mod off {
    pub const NSZE: usize = 0;
    pub const NCAP: usize = 8;
    pub const NUSE: usize = 16;
    pub const NSFEAT: usize = 24;
    pub const NLBAF: usize = 25;
    pub const FLBAS: usize = 26;
    pub const MC: usize = 27;
    pub const DPC: usize = 28;
    pub const DPS: usize = 29;
    pub const NMIC: usize = 30;
    pub const RESCAP: usize = 31;
    pub const FPI: usize = 32;
    pub const DLFEAT: usize = 33;
    pub const NAWUN: usize = 34;
    pub const NAWUPF: usize = 36;
    pub const NACWU: usize = 38;
    pub const NABSN: usize = 40;
    pub const NABO: usize = 42;
    pub const NABSPF: usize = 44;
    pub const NOIOB: usize = 46;
    pub const NVMCAP: usize = 48;
    pub const NPWG: usize = 64;
    pub const NPWA: usize = 66;
    pub const NPDG: usize = 68;
    pub const NPDA: usize = 70;
    pub const NOWS: usize = 72;
    pub const ANAGRPID: usize = 92;
    pub const NSATTR: usize = 99;
    pub const NVMSETID: usize = 100;
    pub const ENDGID: usize = 102;
    pub const NGUID: usize = 104;
    pub const EUI64: usize = 120;
    pub const LBAF0: usize = 128;
    pub const VS: usize = 384;
}

/// Bit values of Identify Namespace fields.
pub mod bits {
    /// NSFEAT: thin provisioning (NCAP may be less than NSZE, NUSE is meaningful).
    pub const NSFEAT_THIN: u8 = 1 << 0;
    /// NSFEAT: NAWUN, NAWUPF and NACWU are valid.
    pub const NSFEAT_ATOMICS: u8 = 1 << 1;
    /// NSFEAT: deallocated or unwritten logical block error support.
    pub const NSFEAT_DAE: u8 = 1 << 2;
    /// NSFEAT: NPWG, NPWA, NPDG, NPDA and NOWS are valid.
    pub const NSFEAT_OPTPERF: u8 = 1 << 4;
    /// NMIC: the namespace may be attached to two or more controllers.
    pub const NMIC_SHARED: u8 = 1 << 0;
    /// RESCAP bits.
    pub const RESCAP_PTPL: u8 = 1 << 0;
    pub const RESCAP_WRITE_EXCLUSIVE: u8 = 1 << 1;
    pub const RESCAP_EXCLUSIVE_ACCESS: u8 = 1 << 2;
    pub const RESCAP_WE_REGISTRANTS_ONLY: u8 = 1 << 3;
    pub const RESCAP_EA_REGISTRANTS_ONLY: u8 = 1 << 4;
    pub const RESCAP_WE_ALL_REGISTRANTS: u8 = 1 << 5;
    pub const RESCAP_EA_ALL_REGISTRANTS: u8 = 1 << 6;
    /// RESCAP: Ignore Existing Key behaves as NVMe 1.3 and later define it.
    pub const RESCAP_IEKEY_1_3: u8 = 1 << 7;
    /// All reservation types, PTPL and the 1.3 IEKEY behaviour.
    pub const RESCAP_ALL: u8 = 0xFF;
    /// DLFEAT bits 2:0 = 001b: deallocated blocks read as zeroes.
    pub const DLFEAT_READ_ZEROES: u8 = 0b001;
    /// DLFEAT: Write Zeroes with DEAC deallocates.
    pub const DLFEAT_WRITE_ZEROES_DEALLOCATES: u8 = 1 << 3;
    /// DLFEAT: the guard field of deallocated blocks is the CRC of their data.
    pub const DLFEAT_GUARD_CRC: u8 = 1 << 4;
    /// FLBAS: metadata travels at the end of each LBA (extended LBA).
    pub const FLBAS_EXTENDED_METADATA: u8 = 1 << 4;
    /// NSATTR: the namespace is write protected.
    pub const NSATTR_WRITE_PROTECTED: u8 = 1 << 0;
}

/// One LBA format (4 bytes at 128 + 4 * n).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LbaFormat {
    /// Metadata bytes per LBA.
    pub ms: u16,
    /// LBA data size as log2 bytes (9 = 512, 12 = 4096); 0 = format not supported.
    pub lbads: u8,
    /// Relative performance (bits 1:0): 0 best .. 3 degraded.
    pub rp: u8,
}

impl LbaFormat {
    /// A format of `lbads` (log2 bytes) without metadata, best performance.
    pub const fn new(lbads: u8) -> Self {
        LbaFormat {
            ms: 0,
            lbads,
            rp: 0,
        }
    }
    /// Bytes per logical block (0 if LBADS is out of range).
    pub const fn lba_bytes(&self) -> u64 {
        if self.lbads < 64 {
            1u64 << self.lbads
        } else {
            0
        }
    }
    fn encode(&self, out: &mut [u8], o: usize) {
        put16(out, o, self.ms);
        put_bytes(out, o + 2, &[self.lbads, self.rp & 0x3]);
    }
    fn decode(b: &[u8], o: usize) -> Self {
        LbaFormat {
            ms: le16(b, o),
            lbads: b.get(o + 2).copied().unwrap_or(0),
            rp: b.get(o + 3).copied().unwrap_or(0) & 0x3,
        }
    }
}

/// Identify Namespace (NVM command set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyNamespace {
    /// Namespace size in logical blocks.
    pub nsze: u64,
    /// Namespace capacity in logical blocks.
    pub ncap: u64,
    /// Namespace utilization in logical blocks.
    pub nuse: u64,
    pub nsfeat: u8,
    /// Number of LBA formats, 0's based.
    pub nlbaf: u8,
    /// Formatted LBA size: bits 3:0 and 6:5 index into `lbaf`, bit 4 extended metadata.
    pub flbas: u8,
    pub mc: u8,
    pub dpc: u8,
    pub dps: u8,
    pub nmic: u8,
    pub rescap: u8,
    pub fpi: u8,
    pub dlfeat: u8,
    pub nawun: u16,
    pub nawupf: u16,
    pub nacwu: u16,
    pub nabsn: u16,
    pub nabo: u16,
    pub nabspf: u16,
    /// Namespace optimal I/O boundary in logical blocks (keep ≤ MDTS).
    pub noiob: u16,
    /// NVM capacity in bytes.
    pub nvmcap: u128,
    /// Preferred write granularity, 0's based logical blocks.
    pub npwg: u16,
    pub npwa: u16,
    pub npdg: u16,
    pub npda: u16,
    pub nows: u16,
    pub anagrpid: u32,
    pub nsattr: u8,
    pub nvmsetid: u16,
    pub endgid: u16,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    pub lbaf: [LbaFormat; LBAF_COUNT],
}

impl Default for IdentifyNamespace {
    fn default() -> Self {
        IdentifyNamespace {
            nsze: 0,
            ncap: 0,
            nuse: 0,
            nsfeat: 0,
            nlbaf: 0,
            flbas: 0,
            mc: 0,
            dpc: 0,
            dps: 0,
            nmic: 0,
            rescap: 0,
            fpi: 0,
            dlfeat: 0,
            nawun: 0,
            nawupf: 0,
            nacwu: 0,
            nabsn: 0,
            nabo: 0,
            nabspf: 0,
            noiob: 0,
            nvmcap: 0,
            npwg: 0,
            npwa: 0,
            npdg: 0,
            npda: 0,
            nows: 0,
            anagrpid: 0,
            nsattr: 0,
            nvmsetid: 0,
            endgid: 0,
            nguid: [0; 16],
            eui64: [0; 8],
            lbaf: [LbaFormat::default(); LBAF_COUNT],
        }
    }
}

impl IdentifyNamespace {
    pub const BYTES: usize = IDENTIFY_DATA_BYTES;

    /// The index into `lbaf` that FLBAS selects (bits 3:0 low, bits 6:5 high).
    pub const fn lba_format_index(&self) -> usize {
        ((self.flbas & 0xF) | ((self.flbas >> 1) & 0x30)) as usize
    }

    /// FLBAS for format `index` (0..64) without extended metadata.
    pub const fn flbas_for(index: u8) -> u8 {
        (index & 0xF) | ((index & 0x30) << 1)
    }

    /// The LBA format in use.
    pub fn lba_format(&self) -> LbaFormat {
        self.lbaf
            .get(self.lba_format_index())
            .copied()
            .unwrap_or_default()
    }

    /// Writes the structure into `out[..4096]`, zeroing the bytes it does not set.
    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        let b = &mut out[..n];
        b.fill(0);
        use off::*;
        put64(b, NSZE, self.nsze);
        put64(b, NCAP, self.ncap);
        put64(b, NUSE, self.nuse);
        put_bytes(
            b,
            NSFEAT,
            &[
                self.nsfeat,
                self.nlbaf,
                self.flbas,
                self.mc,
                self.dpc,
                self.dps,
                self.nmic,
                self.rescap,
                self.fpi,
                self.dlfeat,
            ],
        );
        put16(b, NAWUN, self.nawun);
        put16(b, NAWUPF, self.nawupf);
        put16(b, NACWU, self.nacwu);
        put16(b, NABSN, self.nabsn);
        put16(b, NABO, self.nabo);
        put16(b, NABSPF, self.nabspf);
        put16(b, NOIOB, self.noiob);
        put128(b, NVMCAP, self.nvmcap);
        put16(b, NPWG, self.npwg);
        put16(b, NPWA, self.npwa);
        put16(b, NPDG, self.npdg);
        put16(b, NPDA, self.npda);
        put16(b, NOWS, self.nows);
        put32(b, ANAGRPID, self.anagrpid);
        put_bytes(b, NSATTR, &[self.nsattr]);
        put16(b, NVMSETID, self.nvmsetid);
        put16(b, ENDGID, self.endgid);
        put_bytes(b, NGUID, &self.nguid);
        put_bytes(b, EUI64, &self.eui64);
        for (i, f) in self.lbaf.iter().enumerate() {
            f.encode(b, LBAF0 + 4 * i);
        }
    }

    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_DATA_BYTES]> {
        let mut b = Box::new([0u8; IDENTIFY_DATA_BYTES]);
        self.encode(&mut b[..]);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(DecodeError::Short {
                what: "identify namespace",
                needed_bytes: Self::BYTES,
                got_bytes: b.len(),
            });
        }
        Ok(Self::decode_prefix(b))
    }

    /// Decodes whatever of the layout `b` holds, reading missing bytes as 0.
    pub(crate) fn decode_prefix(b: &[u8]) -> Self {
        use off::*;
        let u8at = |i: usize| b.get(i).copied().unwrap_or(0);
        let mut lbaf = [LbaFormat::default(); LBAF_COUNT];
        for (i, f) in lbaf.iter_mut().enumerate() {
            *f = LbaFormat::decode(b, LBAF0 + 4 * i);
        }
        IdentifyNamespace {
            nsze: le64(b, NSZE),
            ncap: le64(b, NCAP),
            nuse: le64(b, NUSE),
            nsfeat: u8at(NSFEAT),
            nlbaf: u8at(NLBAF),
            flbas: u8at(FLBAS),
            mc: u8at(MC),
            dpc: u8at(DPC),
            dps: u8at(DPS),
            nmic: u8at(NMIC),
            rescap: u8at(RESCAP),
            fpi: u8at(FPI),
            dlfeat: u8at(DLFEAT),
            nawun: le16(b, NAWUN),
            nawupf: le16(b, NAWUPF),
            nacwu: le16(b, NACWU),
            nabsn: le16(b, NABSN),
            nabo: le16(b, NABO),
            nabspf: le16(b, NABSPF),
            noiob: le16(b, NOIOB),
            nvmcap: le128(b, NVMCAP),
            npwg: le16(b, NPWG),
            npwa: le16(b, NPWA),
            npdg: le16(b, NPDG),
            npda: le16(b, NPDA),
            nows: le16(b, NOWS),
            anagrpid: le32(b, ANAGRPID),
            nsattr: u8at(NSATTR),
            nvmsetid: le16(b, NVMSETID),
            endgid: le16(b, ENDGID),
            nguid: get_array(b, NGUID),
            eui64: get_array(b, EUI64),
            lbaf,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> IdentifyNamespace {
        let mut lbaf = [LbaFormat::default(); LBAF_COUNT];
        lbaf[0] = LbaFormat::new(9);
        lbaf[1] = LbaFormat {
            ms: 8,
            lbads: 12,
            rp: 1,
        };
        lbaf[63] = LbaFormat {
            ms: 0x3F3F,
            lbads: 13,
            rp: 3,
        };
        IdentifyNamespace {
            nsze: 0x0000_0001_0000_0000,
            ncap: 0x0808_0808_0808_0808,
            nuse: 0x1010_1010_1010_1010,
            nsfeat: bits::NSFEAT_THIN | bits::NSFEAT_OPTPERF,
            nlbaf: 1,
            flbas: 1,
            mc: 0x1B,
            dpc: 0x1C,
            dps: 0x1D,
            nmic: bits::NMIC_SHARED,
            rescap: bits::RESCAP_ALL,
            fpi: 0x20,
            dlfeat: bits::DLFEAT_READ_ZEROES | bits::DLFEAT_WRITE_ZEROES_DEALLOCATES,
            nawun: 0x2222,
            nawupf: 0x2424,
            nacwu: 0x2626,
            nabsn: 0x2828,
            nabo: 0x2A2A,
            nabspf: 0x2C2C,
            noiob: 0x2E2E,
            nvmcap: 0x3030,
            npwg: 0x4040,
            npwa: 0x4242,
            npdg: 0x4444,
            npda: 0x4646,
            nows: 0x4848,
            anagrpid: 0x5C5C_5C5C,
            nsattr: 1,
            nvmsetid: 0x6464,
            endgid: 0x6666,
            nguid: [0x68; 16],
            eui64: [0x78; 8],
            lbaf,
        }
    }

    #[test]
    fn field_offsets() {
        let ns = sample();
        let b = ns.to_bytes();
        let u16at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        assert_eq!(&b[0..8], &[0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(b[8], 0x08);
        assert_eq!(b[16], 0x10);
        assert_eq!(
            &b[24..34],
            &[0x11, 1, 1, 0x1B, 0x1C, 0x1D, 1, 0xFF, 0x20, 0x09]
        );
        assert_eq!(u16at(34), 0x2222);
        assert_eq!(u16at(46), 0x2E2E);
        assert_eq!(u16at(48), 0x3030);
        assert_eq!(u16at(64), 0x4040);
        assert_eq!(u16at(72), 0x4848);
        assert_eq!(&b[92..96], &[0x5C; 4]);
        assert_eq!(b[99], 1);
        assert_eq!(u16at(100), 0x6464);
        assert_eq!(u16at(102), 0x6666);
        assert_eq!(&b[104..120], &[0x68; 16]);
        assert_eq!(&b[120..128], &[0x78; 8]);
        assert_eq!(&b[128..132], &[0, 0, 9, 0]);
        assert_eq!(&b[132..136], &[8, 0, 12, 1]);
        assert_eq!(&b[128 + 63 * 4..128 + 64 * 4], &[0x3F, 0x3F, 13, 3]);
        assert!(b[74..92].iter().all(|&x| x == 0));
        assert!(b[384..].iter().all(|&x| x == 0));
        assert_eq!(IdentifyNamespace::decode(&b[..]).unwrap(), ns);
        assert_eq!(ns.lba_format().lba_bytes(), 4096);
    }

    #[test]
    fn flbas_index_uses_high_bits() {
        let f = IdentifyNamespace::flbas_for(17);
        assert_eq!(f, 0x21);
        let ns = IdentifyNamespace {
            flbas: f | bits::FLBAS_EXTENDED_METADATA,
            ..Default::default()
        };
        assert_eq!(ns.lba_format_index(), 17);
    }

    #[test]
    fn short_input() {
        assert!(IdentifyNamespace::decode(&[0u8; 100]).is_err());
    }

    proptest! {
        #[test]
        fn decode_encode_is_stable(seed in proptest::collection::vec(any::<u8>(), 4096)) {
            let ns = IdentifyNamespace::decode(&seed).unwrap();
            prop_assert_eq!(IdentifyNamespace::decode(&ns.to_bytes()[..]).unwrap(), ns);
        }

        #[test]
        fn roundtrip(nsze: u64, ncap: u64, flbas in 0u8..0x80, anagrpid: u32, nguid: [u8; 16],
                     eui64: [u8; 8], ms: u16, lbads: u8, rp in 0u8..4, i in 0usize..64) {
            let mut ns = sample();
            ns.nsze = nsze; ns.ncap = ncap; ns.flbas = flbas; ns.anagrpid = anagrpid;
            ns.nguid = nguid; ns.eui64 = eui64;
            ns.lbaf[i] = LbaFormat { ms, lbads, rp };
            prop_assert_eq!(IdentifyNamespace::decode(&ns.to_bytes()[..]).unwrap(), ns);
        }
    }
}
