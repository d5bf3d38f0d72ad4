//! Identify data of the Key Value command set: the I/O command set specific Identify
//! Namespace (CNS 05h, CSI 01h) with its KV formats, and the I/O command set specific
//! Identify Controller (CNS 06h, CSI 01h). 4096 bytes each.
//!
//! Namespace layout (KV Command Set 1.0, "I/O Command Set Specific Identify Namespace
//! Data Structure" and "KV Format Data Structure"; the same offsets in xNVMe's
//! `xnvme_spec_kvs_idfy_ns`, which cites KV 1.0c Figures 39/40, and SPDK's
//! `spdk_nvme_kv_ns_data`):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | NSZE: namespace size, bytes |
//! | 8 | 8 | reserved (KV has no NCAP) |
//! | 16 | 8 | NUSE: bytes in use |
//! | 24 | 1 | NSFEAT (bit 0 thin provisioning) |
//! | 25 | 1 | NKVF: number of KV formats, 0's based |
//! | 26 | 1 | NMIC (bit 0 shared) |
//! | 27 | 1 | RESCAP |
//! | 28 | 1 | FPI |
//! | 29 | 3 | reserved |
//! | 32 | 4 | NOVG: optimal value granularity, bytes |
//! | 36 | 4 | ANAGRPID |
//! | 40 | 3 | reserved |
//! | 43 | 1 | NSATTR (bit 0 write protected) |
//! | 44 | 2 | NVMSETID |
//! | 46 | 2 | ENDGID |
//! | 48 | 16 | NGUID |
//! | 64 | 8 | EUI64 |
//! | 72 | 16 × 16 | KV format 0..15 |
//! | 328 | 3512 | reserved |
//! | 3840 | 256 | vendor specific |
//!
//! KV format (16 bytes): 0..2 KVKML maximum key length (bytes), 2 reserved, 3 additional
//! format options (bits 1:0 relative performance), 4..8 KVVML maximum value length
//! (bytes), 8..12 MNKS maximum number of keys, 12..16 reserved.

use crate::bytes::{get_array, le16, le32, le64, put_bytes, put16, put32, put64};
use crate::error::DecodeError;
use crate::identify::IDENTIFY_DATA_BYTES;
use crate::status::Status;

use super::command::KvCommand;
use super::key::KvKey;

/// Byte offsets of the KV Identify Namespace fields.
pub mod off {
    pub const NSZE: usize = 0;
    pub const NUSE: usize = 16;
    pub const NSFEAT: usize = 24;
    pub const NKVF: usize = 25;
    pub const NMIC: usize = 26;
    pub const RESCAP: usize = 27;
    pub const FPI: usize = 28;
    pub const NOVG: usize = 32;
    pub const ANAGRPID: usize = 36;
    pub const NSATTR: usize = 43;
    pub const NVMSETID: usize = 44;
    pub const ENDGID: usize = 46;
    pub const NGUID: usize = 48;
    pub const EUI64: usize = 64;
    pub const KVF0: usize = 72;
    pub const VENDOR_SPECIFIC: usize = 3840;
}

/// Number of KV format descriptors in the structure.
pub const KV_FORMAT_COUNT: usize = 16;

const _: () = assert!(off::KVF0 + KV_FORMAT_COUNT * KvFormat::BYTES == 328);
const _: () = assert!(off::VENDOR_SPECIFIC + 256 == IDENTIFY_DATA_BYTES);
const _: () = assert!(off::EUI64 + 8 == off::KVF0);

/// One KV format: the limits of a namespace formatted with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KvFormat {
    /// KVKML: the longest key, bytes (at most 16).
    pub max_key_bytes: u16,
    /// Additional format options; bits 1:0 relative performance (0 best .. 3 degraded).
    pub afo: u8,
    /// KVVML: the largest value, bytes.
    pub max_value_bytes: u32,
    /// MNKS: the most keys the namespace holds (0: not reported).
    pub max_keys: u32,
}

impl KvFormat {
    pub const BYTES: usize = 16;

    pub fn encode(&self, out: &mut [u8], at: usize) {
        put16(out, at, self.max_key_bytes);
        put_bytes(out, at + 3, &[self.afo]);
        put32(out, at + 4, self.max_value_bytes);
        put32(out, at + 8, self.max_keys);
    }

    pub fn decode(b: &[u8], at: usize) -> Self {
        KvFormat {
            max_key_bytes: le16(b, at),
            afo: b.get(at + 3).copied().unwrap_or(0),
            max_value_bytes: le32(b, at + 4),
            max_keys: le32(b, at + 8),
        }
    }

    /// Invalid Key Size (DNR) if `key` is longer than this format's KVKML.
    pub fn check_key(&self, key: &KvKey) -> Result<(), Status> {
        if key.len_bytes() > usize::from(self.max_key_bytes) {
            return Err(Status::KV_INVALID_KEY_SIZE.dnr());
        }
        Ok(())
    }

    /// Invalid Value Size (DNR) if a value of `value_size_bytes` exceeds KVVML.
    pub fn check_value_size(&self, value_size_bytes: u32) -> Result<(), Status> {
        if value_size_bytes > self.max_value_bytes {
            return Err(Status::KV_INVALID_VALUE_SIZE.dnr());
        }
        Ok(())
    }

    /// The namespace-dependent checks of a decoded command: its key against KVKML and,
    /// for Store, its value size against KVVML.
    pub fn check(&self, cmd: &KvCommand) -> Result<(), Status> {
        if let Some(k) = cmd.key() {
            self.check_key(k)?;
        }
        if let KvCommand::Store {
            value_size_bytes, ..
        } = cmd
        {
            self.check_value_size(*value_size_bytes)?;
        }
        Ok(())
    }
}

/// The KV I/O command set specific Identify Namespace data structure (CNS 05h, CSI 01h).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KvIdentifyNamespace {
    /// NSZE: namespace size in bytes.
    pub nsze_bytes: u64,
    /// NUSE: bytes in use (keys and values).
    pub nuse_bytes: u64,
    pub nsfeat: u8,
    /// NKVF: number of KV formats, 0's based (0 = one format).
    pub nkvf: u8,
    /// NMIC: bit 0 shared namespace.
    pub nmic: u8,
    pub rescap: u8,
    pub fpi: u8,
    /// NOVG: value size the namespace handles best, bytes (0: not reported).
    pub novg_bytes: u32,
    pub anagrpid: u32,
    /// NSATTR: bit 0 write protected.
    pub nsattr: u8,
    pub nvmsetid: u16,
    pub endgid: u16,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    pub kvf: [KvFormat; KV_FORMAT_COUNT],
}

impl KvIdentifyNamespace {
    pub const BYTES: usize = IDENTIFY_DATA_BYTES;

    /// The formats the namespace reports (NKVF + 1 of them).
    pub fn formats(&self) -> &[KvFormat] {
        &self.kvf[..(usize::from(self.nkvf) + 1).min(KV_FORMAT_COUNT)]
    }

    /// Writes the structure into `out[..4096]`, zeroing the bytes it does not set.
    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        let b = &mut out[..n];
        b.fill(0);
        put64(b, off::NSZE, self.nsze_bytes);
        put64(b, off::NUSE, self.nuse_bytes);
        put_bytes(
            b,
            off::NSFEAT,
            &[self.nsfeat, self.nkvf, self.nmic, self.rescap, self.fpi],
        );
        put32(b, off::NOVG, self.novg_bytes);
        put32(b, off::ANAGRPID, self.anagrpid);
        put_bytes(b, off::NSATTR, &[self.nsattr]);
        put16(b, off::NVMSETID, self.nvmsetid);
        put16(b, off::ENDGID, self.endgid);
        put_bytes(b, off::NGUID, &self.nguid);
        put_bytes(b, off::EUI64, &self.eui64);
        for (i, f) in self.kvf.iter().enumerate() {
            f.encode(b, off::KVF0 + KvFormat::BYTES * i);
        }
    }

    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_DATA_BYTES]> {
        let mut b = Box::new([0u8; IDENTIFY_DATA_BYTES]);
        self.encode(&mut b[..]);
        b
    }

    /// Decodes the 4096-byte structure; reserved and vendor specific bytes are ignored.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(DecodeError::Short {
                what: "KV identify namespace",
                needed_bytes: Self::BYTES,
                got_bytes: b.len(),
            });
        }
        let at = |i: usize| b.get(i).copied().unwrap_or(0);
        Ok(KvIdentifyNamespace {
            nsze_bytes: le64(b, off::NSZE),
            nuse_bytes: le64(b, off::NUSE),
            nsfeat: at(off::NSFEAT),
            nkvf: at(off::NKVF),
            nmic: at(off::NMIC),
            rescap: at(off::RESCAP),
            fpi: at(off::FPI),
            novg_bytes: le32(b, off::NOVG),
            anagrpid: le32(b, off::ANAGRPID),
            nsattr: at(off::NSATTR),
            nvmsetid: le16(b, off::NVMSETID),
            endgid: le16(b, off::ENDGID),
            nguid: get_array(b, off::NGUID),
            eui64: get_array(b, off::EUI64),
            kvf: std::array::from_fn(|i| KvFormat::decode(b, off::KVF0 + KvFormat::BYTES * i)),
        })
    }
}

/// The KV I/O command set specific Identify Controller data structure (CNS 06h, CSI 01h).
///
/// KV Command Set 1.0 defines no fields in it, so a 1.0 controller returns 4096 zero
/// bytes. Later revisions report the KV specification version at bytes 0..4, encoded like
/// the VS register (bits 31:16 major, 15:8 minor, 7:0 tertiary); FEMU's KV-SSD model
/// (which follows KV 1.3) does. Ferrobay reports 0 (no version claimed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KvIdentifyController {
    /// VER: KV specification version, 0 when not reported.
    pub ver: u32,
}

impl KvIdentifyController {
    pub const BYTES: usize = IDENTIFY_DATA_BYTES;

    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        out[..n].fill(0);
        put32(out, 0, self.ver);
    }

    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_DATA_BYTES]> {
        let mut b = Box::new([0u8; IDENTIFY_DATA_BYTES]);
        self.encode(&mut b[..]);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(DecodeError::Short {
                what: "KV identify controller",
                needed_bytes: Self::BYTES,
                got_bytes: b.len(),
            });
        }
        Ok(KvIdentifyController { ver: le32(b, 0) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> KvIdentifyNamespace {
        let mut kvf = [KvFormat::default(); KV_FORMAT_COUNT];
        kvf[0] = KvFormat {
            max_key_bytes: 16,
            afo: 0,
            max_value_bytes: 2 << 20,
            max_keys: 0x0102_0304,
        };
        kvf[15] = KvFormat {
            max_key_bytes: 8,
            afo: 3,
            max_value_bytes: 0xA1A2_A3A4,
            max_keys: 0xB1B2_B3B4,
        };
        KvIdentifyNamespace {
            nsze_bytes: 0x0000_0010_0000_0000,
            nuse_bytes: 0x1111_2222_3333_4444,
            nsfeat: 1,
            nkvf: 0,
            nmic: 1,
            rescap: 0xFF,
            fpi: 0x80,
            novg_bytes: 4096,
            anagrpid: 0x0506_0708,
            nsattr: 1,
            nvmsetid: 0x0A0B,
            endgid: 0x0C0D,
            nguid: [0x42; 16],
            eui64: [0x24; 8],
            kvf,
        }
    }

    #[test]
    fn field_offsets() {
        let ns = sample();
        let b = ns.to_bytes();
        assert_eq!(&b[0..8], &[0, 0, 0, 0, 0x10, 0, 0, 0]);
        assert!(b[8..16].iter().all(|&x| x == 0));
        assert_eq!(
            &b[16..24],
            &[0x44, 0x44, 0x33, 0x33, 0x22, 0x22, 0x11, 0x11]
        );
        assert_eq!(&b[24..32], &[1, 0, 1, 0xFF, 0x80, 0, 0, 0]);
        assert_eq!(&b[32..36], &[0, 0x10, 0, 0]);
        assert_eq!(&b[36..40], &[8, 7, 6, 5]);
        assert_eq!(&b[40..48], &[0, 0, 0, 1, 0x0B, 0x0A, 0x0D, 0x0C]);
        assert_eq!(&b[48..64], &[0x42; 16]);
        assert_eq!(&b[64..72], &[0x24; 8]);
        // KV format 0: KVKML 16, AFO 0, KVVML 2 MiB, MNKS.
        assert_eq!(
            &b[72..88],
            &[16, 0, 0, 0, 0, 0, 0x20, 0, 4, 3, 2, 1, 0, 0, 0, 0]
        );
        // KV format 15 at 72 + 15 * 16 = 312.
        assert_eq!(
            &b[312..328],
            &[
                8, 0, 0, 3, 0xA4, 0xA3, 0xA2, 0xA1, 0xB4, 0xB3, 0xB2, 0xB1, 0, 0, 0, 0
            ]
        );
        assert!(b[328..].iter().all(|&x| x == 0));
        assert_eq!(KvIdentifyNamespace::decode(&b[..]).unwrap(), ns);
        assert_eq!(ns.formats(), &ns.kvf[..1]);
        assert!(KvIdentifyNamespace::decode(&b[..4095]).is_err());
    }

    #[test]
    fn format_checks() {
        let f = KvFormat {
            max_key_bytes: 8,
            afo: 0,
            max_value_bytes: 1024,
            max_keys: 0,
        };
        let long = KvKey::new(b"123456789").unwrap();
        let short = KvKey::new(b"12345678").unwrap();
        assert_eq!(f.check_key(&long), Err(Status::KV_INVALID_KEY_SIZE.dnr()));
        assert_eq!(f.check_key(&short), Ok(()));
        assert_eq!(
            f.check_value_size(1025),
            Err(Status::KV_INVALID_VALUE_SIZE.dnr())
        );
        let store = |v| KvCommand::Store {
            key: short,
            value_size_bytes: v,
            mode: Default::default(),
            no_compression: false,
        };
        assert_eq!(f.check(&store(1024)), Ok(()));
        assert_eq!(
            f.check(&store(1025)),
            Err(Status::KV_INVALID_VALUE_SIZE.dnr())
        );
        // Retrieve's host buffer may be any size; only the key is checked.
        let r = KvCommand::Retrieve {
            key: long,
            host_buffer_bytes: u32::MAX,
            raw: false,
        };
        assert_eq!(f.check(&r), Err(Status::KV_INVALID_KEY_SIZE.dnr()));
        let l = KvCommand::List {
            start: None,
            host_buffer_bytes: u32::MAX,
        };
        assert_eq!(f.check(&l), Ok(()));
    }

    #[test]
    fn controller_version() {
        let c = KvIdentifyController { ver: 0x0001_0300 };
        let b = c.to_bytes();
        assert_eq!(&b[..4], &[0, 3, 1, 0]);
        assert!(b[4..].iter().all(|&x| x == 0));
        assert_eq!(KvIdentifyController::decode(&b[..]).unwrap(), c);
        assert_eq!(
            KvIdentifyController::default().to_bytes()[..],
            [0u8; 4096][..]
        );
    }

    proptest! {
        #[test]
        fn decode_encode_is_stable(seed in proptest::collection::vec(any::<u8>(), 4096)) {
            let ns = KvIdentifyNamespace::decode(&seed).unwrap();
            prop_assert_eq!(KvIdentifyNamespace::decode(&ns.to_bytes()[..]).unwrap(), ns);
            let c = KvIdentifyController::decode(&seed).unwrap();
            prop_assert_eq!(KvIdentifyController::decode(&c.to_bytes()[..]).unwrap(), c);
        }

        #[test]
        fn roundtrip(nsze: u64, nuse: u64, nkvf in 0u8..16, novg: u32, anagrpid: u32,
                     kml: u16, afo: u8, kvvml: u32, mnks: u32, i in 0usize..16) {
            let mut ns = sample();
            ns.nsze_bytes = nsze; ns.nuse_bytes = nuse; ns.nkvf = nkvf;
            ns.novg_bytes = novg; ns.anagrpid = anagrpid;
            ns.kvf[i] = KvFormat { max_key_bytes: kml, afo, max_value_bytes: kvvml, max_keys: mnks };
            prop_assert_eq!(KvIdentifyNamespace::decode(&ns.to_bytes()[..]).unwrap(), ns);
        }

        #[test]
        fn short_input_never_panics(b in proptest::collection::vec(any::<u8>(), 0..4096)) {
            prop_assert!(KvIdentifyNamespace::decode(&b).is_err());
            prop_assert!(KvIdentifyController::decode(&b).is_err());
        }
    }
}
