//! The Identify I/O Command Set data structure (CNS 1Ch; NVMe Base 2.0 "I/O Command Set
//! data structure"; libnvme `struct nvme_id_iocs`), 4096 bytes: 512 I/O Command Set
//! Combinations of 8 bytes each. A combination is a vector with bit n set when CSI n is
//! part of it ([`super::csi::vector_bit`]); zero entries are unused. The I/O Command Set
//! Profile feature (FID 19h) selects a combination by its index (IOCSCI).

use crate::bytes::{le64, put64};
use crate::error::DecodeError;

use super::IDENTIFY_DATA_BYTES;
use super::csi;

/// The I/O command set combinations a controller offers, by index.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IoCommandSetCombinations {
    /// Combination vectors by index (IOCSCI). Trailing zero entries are not kept.
    pub vectors: Vec<u64>,
}

impl IoCommandSetCombinations {
    pub const BYTES: usize = IDENTIFY_DATA_BYTES;
    pub const MAX_ENTRIES: usize = 512;

    /// A controller with one combination, index 0, of the command sets `csis`
    /// (e.g. `[csi::NVM, csi::KEY_VALUE]` → vector 0b11).
    pub fn single(csis: &[u8]) -> Self {
        let v = csis.iter().fold(0u64, |v, &c| v | csi::vector_bit(c));
        let mut c = IoCommandSetCombinations { vectors: vec![v] };
        c.trim();
        c
    }

    /// The vector of combination `index`, 0 if there is none.
    pub fn get(&self, index: usize) -> u64 {
        self.vectors.get(index).copied().unwrap_or(0)
    }

    /// Whether combination `index` exists (is non-zero), as Set Features 19h requires.
    pub fn is_offered(&self, index: usize) -> bool {
        self.get(index) != 0
    }

    fn trim(&mut self) {
        while self.vectors.last() == Some(&0) {
            self.vectors.pop();
        }
    }

    /// Writes up to 512 entries into `out`, zero-filled after them.
    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        out[..n].fill(0);
        for (i, v) in self.vectors.iter().take(Self::MAX_ENTRIES).enumerate() {
            put64(out, 8 * i, *v);
        }
    }

    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_DATA_BYTES]> {
        let mut b = Box::new([0u8; IDENTIFY_DATA_BYTES]);
        self.encode(&mut b[..]);
        b
    }

    /// Reads the 512 entries; a shorter `b` is an error.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(DecodeError::Short {
                what: "I/O command set data structure",
                needed_bytes: Self::BYTES,
                got_bytes: b.len(),
            });
        }
        let mut c = IoCommandSetCombinations {
            vectors: (0..Self::MAX_ENTRIES).map(|i| le64(b, 8 * i)).collect(),
        };
        c.trim();
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nvm_and_kv_in_combination_zero() {
        let c = IoCommandSetCombinations::single(&[csi::NVM, csi::KEY_VALUE]);
        assert_eq!(c.vectors, vec![0b11]);
        let b = c.to_bytes();
        assert_eq!(&b[..8], &[0x03, 0, 0, 0, 0, 0, 0, 0]);
        assert!(b[8..].iter().all(|&x| x == 0));
        assert_eq!(IoCommandSetCombinations::decode(&b[..]).unwrap(), c);
        assert!(c.is_offered(0) && !c.is_offered(1) && !c.is_offered(600));
        // QEMU's NVM + ZNS controller: bits 0 and 2.
        assert_eq!(
            IoCommandSetCombinations::single(&[csi::NVM, csi::ZONED]).get(0),
            0b101
        );
        assert!(IoCommandSetCombinations::decode(&b[..4095]).is_err());
    }

    proptest! {
        #[test]
        fn roundtrip(mut vectors in proptest::collection::vec(any::<u64>(), 0..512)) {
            while vectors.last() == Some(&0) { vectors.pop(); }
            let c = IoCommandSetCombinations { vectors };
            prop_assert_eq!(IoCommandSetCombinations::decode(&c.to_bytes()[..]).unwrap(), c);
        }

        #[test]
        fn stable(b in proptest::collection::vec(any::<u8>(), 4096)) {
            let c = IoCommandSetCombinations::decode(&b).unwrap();
            prop_assert_eq!(&c.to_bytes()[..c.vectors.len() * 8], &b[..c.vectors.len() * 8]);
        }
    }
}
