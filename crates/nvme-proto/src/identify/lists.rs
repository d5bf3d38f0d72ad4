//! Namespace ID lists (CNS 0x02 active, 0x10 allocated) and controller lists (CNS 0x12,
//! 0x13, and the data of Namespace Attachment).
//!
//! NS list: up to 1024 u32 NSIDs in increasing order, the rest zero (4096 bytes).
//! Controller list: u16 count at 0, then up to 2047 u16 controller IDs (4096 bytes).

use crate::bytes::{le16, le32, put16, put32};
use crate::error::DecodeError;

use super::IDENTIFY_DATA_BYTES;

/// A namespace ID list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NsList {
    pub nsids: Vec<u32>,
}

impl NsList {
    pub const BYTES: usize = IDENTIFY_DATA_BYTES;
    pub const MAX_ENTRIES: usize = 1024;

    /// The list a controller returns for Identify with NSID `after`: the NSIDs in `all`
    /// greater than `after`, sorted, without duplicates, at most 1024.
    /// (`after` of 0xFFFFFFFE or 0xFFFFFFFF gives an empty list.)
    pub fn above(all: impl IntoIterator<Item = u32>, after: u32) -> Self {
        let mut nsids: Vec<u32> = all.into_iter().filter(|&n| n > after && n != 0).collect();
        nsids.sort_unstable();
        nsids.dedup();
        nsids.truncate(Self::MAX_ENTRIES);
        NsList { nsids }
    }

    /// Writes up to 1024 entries into `out`, zero-filled after them.
    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        out[..n].fill(0);
        for (i, &id) in self.nsids.iter().take(Self::MAX_ENTRIES).enumerate() {
            put32(out, 4 * i, id);
        }
    }

    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_DATA_BYTES]> {
        let mut b = Box::new([0u8; IDENTIFY_DATA_BYTES]);
        self.encode(&mut b[..]);
        b
    }

    /// Reads entries up to the first zero (or the end of `b`, at most 1024 entries).
    /// The Changed Namespace List log page uses the same format.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let n = (b.len() / 4).min(Self::MAX_ENTRIES);
        let nsids = (0..n)
            .map(|i| le32(b, 4 * i))
            .take_while(|&id| id != 0)
            .collect();
        Ok(NsList { nsids })
    }
}

/// A controller list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CtrlList {
    pub ids: Vec<u16>,
}

impl CtrlList {
    pub const BYTES: usize = IDENTIFY_DATA_BYTES;
    pub const MAX_ENTRIES: usize = 2047;

    /// The list for CNS 0x12/0x13: the IDs in `all` greater than or equal to `from`,
    /// sorted, without duplicates, at most 2047.
    pub fn from_at_least(all: impl IntoIterator<Item = u16>, from: u16) -> Self {
        let mut ids: Vec<u16> = all.into_iter().filter(|&c| c >= from).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.truncate(Self::MAX_ENTRIES);
        CtrlList { ids }
    }

    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        out[..n].fill(0);
        let ids = &self.ids[..self.ids.len().min(Self::MAX_ENTRIES)];
        put16(out, 0, ids.len() as u16);
        for (i, &id) in ids.iter().enumerate() {
            put16(out, 2 + 2 * i, id);
        }
    }

    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_DATA_BYTES]> {
        let mut b = Box::new([0u8; IDENTIFY_DATA_BYTES]);
        self.encode(&mut b[..]);
        b
    }

    /// Reads the count and that many IDs. A count above 2047 or past the end of `b` is
    /// an error (Namespace Attachment answers it with Controller List Invalid).
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < 2 {
            return Err(DecodeError::Short {
                what: "controller list",
                needed_bytes: 2,
                got_bytes: b.len(),
            });
        }
        let count = le16(b, 0) as usize;
        if count > Self::MAX_ENTRIES {
            return Err(DecodeError::InvalidField {
                what: "controller list",
                offset: 0,
                reason: "more than 2047 identifiers",
            });
        }
        if b.len() < 2 + 2 * count {
            return Err(DecodeError::Short {
                what: "controller list",
                needed_bytes: 2 + 2 * count,
                got_bytes: b.len(),
            });
        }
        Ok(CtrlList {
            ids: (0..count).map(|i| le16(b, 2 + 2 * i)).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ns_list_layout() {
        let l = NsList::above([5, 1, 3, 3, 7], 1);
        assert_eq!(l.nsids, vec![3, 5, 7]);
        let b = l.to_bytes();
        assert_eq!(&b[..16], &[3, 0, 0, 0, 5, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(NsList::decode(&b[..]).unwrap(), l);
        assert!(NsList::above([1, 2], 0xFFFF_FFFE).nsids.is_empty());
        assert_eq!(NsList::above(1..3000, 0).nsids.len(), 1024);
    }

    #[test]
    fn ctrl_list_layout() {
        let l = CtrlList::from_at_least([9, 2, 0x1234], 2);
        let b = l.to_bytes();
        assert_eq!(&b[..10], &[3, 0, 2, 0, 9, 0, 0x34, 0x12, 0, 0]);
        assert_eq!(CtrlList::decode(&b[..]).unwrap(), l);
        assert_eq!(CtrlList::from_at_least([1, 2, 3], 3).ids, vec![3]);
        assert!(CtrlList::decode(&[0xFF, 0x07]).is_err());
        assert!(CtrlList::decode(&[0x00, 0x08]).is_err());
        assert!(CtrlList::decode(&[1]).is_err());
        assert_eq!(CtrlList::decode(&[0, 0]).unwrap().ids, Vec::<u16>::new());
    }

    proptest! {
        #[test]
        fn ns_roundtrip(mut nsids in proptest::collection::vec(1u32.., 0..1024)) {
            nsids.sort_unstable();
            let l = NsList { nsids };
            prop_assert_eq!(NsList::decode(&l.to_bytes()[..]).unwrap(), l);
        }
        #[test]
        fn ctrl_roundtrip(ids in proptest::collection::vec(any::<u16>(), 0..2047)) {
            let l = CtrlList { ids };
            prop_assert_eq!(CtrlList::decode(&l.to_bytes()[..]).unwrap(), l);
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let _ = NsList::decode(&b);
            let _ = CtrlList::decode(&b);
        }
    }
}
