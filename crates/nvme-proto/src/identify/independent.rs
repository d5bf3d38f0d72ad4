//! The I/O Command Set Independent Identify Namespace data structure (CNS 08h; NVMe Base
//! 2.0; Linux `struct nvme_id_ns_cs_indep`), 4096 bytes. Linux reads it, rather than the
//! NVM Identify Namespace, for namespaces of any other command set (a KV namespace
//! appears as `/dev/ngXnY` only if this answers with NSTAT.NRDY set).
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | NSFEAT: bit 4 rotational media, bit 5 no volatile write cache |
//! | 1 | 1 | NMIC: bit 0 shared |
//! | 2 | 1 | RESCAP |
//! | 3 | 1 | FPI |
//! | 4 | 4 | ANAGRPID |
//! | 8 | 1 | NSATTR: bit 0 write protected |
//! | 9 | 1 | reserved |
//! | 10 | 2 | NVMSETID |
//! | 12 | 2 | ENDGID |
//! | 14 | 1 | NSTAT: bit 0 namespace ready |
//! | 15 | 4081 | reserved |

use crate::bytes::{le16, le32, put_bytes, put16, put32};
use crate::error::DecodeError;

use super::IDENTIFY_DATA_BYTES;

/// Bit values of the command set independent namespace fields.
pub mod bits {
    /// NSFEAT: the namespace is on rotational media (Linux `NVME_NS_ROTATIONAL`).
    pub const NSFEAT_ROTATIONAL: u8 = 1 << 4;
    /// NSFEAT: no volatile write cache (Linux `NVME_NS_VWC_NOT_PRESENT`).
    pub const NSFEAT_VWC_NOT_PRESENT: u8 = 1 << 5;
    /// NMIC: may be attached to several controllers.
    pub const NMIC_SHARED: u8 = 1 << 0;
    /// NSATTR: write protected.
    pub const NSATTR_WRITE_PROTECTED: u8 = 1 << 0;
    /// NSTAT: namespace ready (Linux `NVME_NSTAT_NRDY`); Linux skips a namespace without it.
    pub const NSTAT_READY: u8 = 1 << 0;
}

/// The I/O command set independent Identify Namespace data structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdentifyNsIndependent {
    pub nsfeat: u8,
    pub nmic: u8,
    pub rescap: u8,
    pub fpi: u8,
    pub anagrpid: u32,
    pub nsattr: u8,
    pub nvmsetid: u16,
    pub endgid: u16,
    pub nstat: u8,
}

impl IdentifyNsIndependent {
    pub const BYTES: usize = IDENTIFY_DATA_BYTES;
    /// Bytes the decoder needs (through NSTAT).
    pub const MIN_BYTES: usize = 15;

    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        out[..n].fill(0);
        put_bytes(out, 0, &[self.nsfeat, self.nmic, self.rescap, self.fpi]);
        put32(out, 4, self.anagrpid);
        put_bytes(out, 8, &[self.nsattr]);
        put16(out, 10, self.nvmsetid);
        put16(out, 12, self.endgid);
        put_bytes(out, 14, &[self.nstat]);
    }

    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_DATA_BYTES]> {
        let mut b = Box::new([0u8; IDENTIFY_DATA_BYTES]);
        self.encode(&mut b[..]);
        b
    }

    /// Decodes the fields; only the first [`Self::MIN_BYTES`] bytes are needed.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::MIN_BYTES {
            return Err(DecodeError::Short {
                what: "I/O command set independent identify namespace",
                needed_bytes: Self::MIN_BYTES,
                got_bytes: b.len(),
            });
        }
        Ok(IdentifyNsIndependent {
            nsfeat: b[0],
            nmic: b[1],
            rescap: b[2],
            fpi: b[3],
            anagrpid: le32(b, 4),
            nsattr: b[8],
            nvmsetid: le16(b, 10),
            endgid: le16(b, 12),
            nstat: b[14],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        // What Linux nvmet returns for a shared, ready namespace in ANA group 2.
        let i = IdentifyNsIndependent {
            nsfeat: bits::NSFEAT_VWC_NOT_PRESENT,
            nmic: bits::NMIC_SHARED,
            rescap: 0xFF,
            fpi: 0,
            anagrpid: 2,
            nsattr: bits::NSATTR_WRITE_PROTECTED,
            nvmsetid: 0x0102,
            endgid: 0x0304,
            nstat: bits::NSTAT_READY,
        };
        let b = i.to_bytes();
        assert_eq!(
            &b[..16],
            &[0x20, 1, 0xFF, 0, 2, 0, 0, 0, 1, 0, 2, 1, 4, 3, 1, 0]
        );
        assert!(b[15..].iter().all(|&x| x == 0));
        assert_eq!(IdentifyNsIndependent::decode(&b[..]).unwrap(), i);
        assert_eq!(IdentifyNsIndependent::decode(&b[..15]).unwrap(), i);
        assert!(IdentifyNsIndependent::decode(&b[..14]).is_err());
    }

    proptest! {
        #[test]
        fn roundtrip(nsfeat: u8, nmic: u8, rescap: u8, fpi: u8, anagrpid: u32, nsattr: u8,
                     nvmsetid: u16, endgid: u16, nstat: u8) {
            let i = IdentifyNsIndependent { nsfeat, nmic, rescap, fpi, anagrpid, nsattr, nvmsetid, endgid, nstat };
            prop_assert_eq!(IdentifyNsIndependent::decode(&i.to_bytes()[..]).unwrap(), i);
        }

        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = IdentifyNsIndependent::decode(&b);
        }
    }
}
