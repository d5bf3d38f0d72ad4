//! The 16-byte completion queue entry (CQE).
//!
//! Layout: 0..4 DW0 (command specific), 4..8 DW1, 8..10 SQHD, 10..12 SQID, 12..14 CID,
//! 14..16 status: bit 0 phase tag, bits 15:1 the status field (see [`Status`]).

use crate::CQE_BYTES;
use crate::bytes::{le16, le32, put16, put32};
use crate::status::Status;

/// A completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub dw0: u32,
    pub dw1: u32,
    pub sqhd: u16,
    pub sqid: u16,
    pub cid: u16,
    pub status: Status,
}

impl Completion {
    pub const fn new(cid: u16, status: Status) -> Self {
        Completion {
            dw0: 0,
            dw1: 0,
            sqhd: 0,
            sqid: 0,
            cid,
            status,
        }
    }

    pub const fn success(cid: u16) -> Self {
        Completion::new(cid, Status::SUCCESS)
    }

    /// 64-bit command-specific result (DW0 low, DW1 high), e.g. Property Get of an 8-byte register.
    pub const fn result64(&self) -> u64 {
        (self.dw0 as u64) | ((self.dw1 as u64) << 32)
    }

    pub fn encode(&self) -> [u8; CQE_BYTES] {
        let mut b = [0u8; CQE_BYTES];
        put32(&mut b, 0, self.dw0);
        put32(&mut b, 4, self.dw1);
        put16(&mut b, 8, self.sqhd);
        put16(&mut b, 10, self.sqid);
        put16(&mut b, 12, self.cid);
        put16(&mut b, 14, self.status.to_field() << 1);
        b
    }

    pub fn decode(b: &[u8; CQE_BYTES]) -> Self {
        Completion {
            dw0: le32(b, 0),
            dw1: le32(b, 4),
            sqhd: le16(b, 8),
            sqid: le16(b, 10),
            cid: le16(b, 12),
            status: Status::from_field(le16(b, 14) >> 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn status_bits() {
        let c = Completion::new(7, Status::INVALID_NAMESPACE.dnr());
        let b = c.encode();
        // SC 0x0B at bits 8:1, DNR at bit 15.
        assert_eq!(u16::from_le_bytes([b[14], b[15]]), (0x0B << 1) | 0x8000);
        assert_eq!(&b[12..14], &[7, 0]);
    }

    proptest! {
        #[test]
        fn roundtrip(dw0: u32, dw1: u32, sqhd: u16, sqid: u16, cid: u16, sc: u8, sct in 0u8..8, dnr: bool, more: bool) {
            let c = Completion { dw0, dw1, sqhd, sqid, cid, status: Status { sc, sct, dnr, more } };
            prop_assert_eq!(Completion::decode(&c.encode()), c);
        }
    }
}
