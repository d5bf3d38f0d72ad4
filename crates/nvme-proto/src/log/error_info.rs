//! Error Information log entry (LID 0x01), 64 bytes each (NVMe Base
//! 2.0 "Error Information"; Linux `struct nvme_error_slot`).
//!
//! 0..8 error count, 8..10 SQID, 10..12 CID, 12..14 status field (bit 0 phase tag,
//! 15:1 status), 14..16 parameter error location (7:0 byte, 10:8 bit; 0xFFFF if n/a),
//! 16..24 LBA, 24..28 NSID, 28 vendor specific info available, 29 transport type,
//! 32..40 command specific information, 40..42 transport type specific information.

use crate::bytes::{le16, le32, le64, put16, put32, put64};
use crate::error::DecodeError;
use crate::status::Status;

/// One error log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorInfoEntry {
    /// Unique, increasing error count; 0 marks an empty entry.
    pub error_count: u64,
    pub sqid: u16,
    pub cid: u16,
    pub status: Status,
    /// Phase tag of the completion that reported the error.
    pub phase: bool,
    /// Byte (bits 7:0) and bit (10:8) in the SQE of the bad parameter; 0xFFFF when none.
    pub param_error_location: u16,
    pub lba: u64,
    pub nsid: u32,
    pub vs_info_available: u8,
    pub trtype: u8,
    pub cs_info: u64,
    pub tt_specific_info: u16,
}

impl ErrorInfoEntry {
    pub const BYTES: usize = 64;
    /// Parameter error location meaning "not applicable".
    pub const NO_LOCATION: u16 = 0xFFFF;

    /// Location of SQE byte `byte`, bit `bit`.
    pub const fn location(byte: u8, bit: u8) -> u16 {
        (byte as u16) | (((bit & 0x7) as u16) << 8)
    }

    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        let b = &mut out[..n];
        b.fill(0);
        put64(b, 0, self.error_count);
        put16(b, 8, self.sqid);
        put16(b, 10, self.cid);
        put16(b, 12, (self.status.to_field() << 1) | self.phase as u16);
        put16(b, 14, self.param_error_location);
        put64(b, 16, self.lba);
        put32(b, 24, self.nsid);
        if let Some(v) = b.get_mut(28..30) {
            v.copy_from_slice(&[self.vs_info_available, self.trtype]);
        }
        put64(b, 32, self.cs_info);
        put16(b, 40, self.tt_specific_info);
    }

    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        self.encode(&mut b);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(DecodeError::Short {
                what: "error information entry",
                needed_bytes: Self::BYTES,
                got_bytes: b.len(),
            });
        }
        let sf = le16(b, 12);
        Ok(ErrorInfoEntry {
            error_count: le64(b, 0),
            sqid: le16(b, 8),
            cid: le16(b, 10),
            status: Status::from_field(sf >> 1),
            phase: sf & 1 == 1,
            param_error_location: le16(b, 14),
            lba: le64(b, 16),
            nsid: le32(b, 24),
            vs_info_available: b[28],
            trtype: b[29],
            cs_info: le64(b, 32),
            tt_specific_info: le16(b, 40),
        })
    }

    /// Encodes a whole log page: `entries` newest first, then empty entries up to
    /// `num_entries` (ELPE + 1).
    pub fn encode_page(entries: &[ErrorInfoEntry], num_entries: usize) -> Vec<u8> {
        let mut v = vec![0u8; num_entries * Self::BYTES];
        for (e, chunk) in entries.iter().zip(v.chunks_exact_mut(Self::BYTES)) {
            e.encode(chunk);
        }
        v
    }

    /// Decodes every whole entry in `b`, including empty ones (error count 0).
    pub fn decode_page(b: &[u8]) -> Vec<ErrorInfoEntry> {
        b.chunks_exact(Self::BYTES)
            .filter_map(|c| Self::decode(c).ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        let e = ErrorInfoEntry {
            error_count: 5,
            sqid: 1,
            cid: 0x22,
            status: Status::LBA_OUT_OF_RANGE.dnr(),
            phase: false,
            param_error_location: ErrorInfoEntry::location(40, 0),
            lba: 0x1_0000,
            nsid: 3,
            vs_info_available: 0,
            trtype: 3,
            cs_info: 0,
            tt_specific_info: 0,
        };
        let b = e.to_bytes();
        assert_eq!(b[0], 5);
        assert_eq!(&b[8..12], &[1, 0, 0x22, 0]);
        // SC 0x80, DNR: field 0x4080, shifted left by one past the phase tag.
        assert_eq!(&b[12..14], &0x8100u16.to_le_bytes());
        assert_eq!(&b[14..16], &[40, 0]);
        assert_eq!(&b[16..24], &[0, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(&b[24..28], &[3, 0, 0, 0]);
        assert_eq!(b[29], 3);
        assert_eq!(ErrorInfoEntry::decode(&b).unwrap(), e);
        let page = ErrorInfoEntry::encode_page(&[e], 4);
        assert_eq!(page.len(), 256);
        assert_eq!(ErrorInfoEntry::decode_page(&page).len(), 4);
        assert_eq!(ErrorInfoEntry::location(44, 9), 44 | (1 << 8));
    }

    proptest! {
        #[test]
        fn stable(b in proptest::collection::vec(any::<u8>(), 64)) {
            let e = ErrorInfoEntry::decode(&b).unwrap();
            prop_assert_eq!(ErrorInfoEntry::decode(&e.to_bytes()).unwrap(), e);
        }
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ErrorInfoEntry::decode(&b);
            let _ = ErrorInfoEntry::decode_page(&b);
        }
    }
}
