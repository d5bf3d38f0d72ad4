//! Changed Namespace List log page (LID 0x04), 4096 bytes (NVMe Base
//! 2.0 "Changed Namespace List").
//!
//! Up to 1024 NSIDs (u32) in increasing order, zero-filled; if more than 1024 namespaces
//! changed, entry 0 is 0xFFFFFFFF and the rest are zero.

use crate::bytes::{le32, put32};
use crate::error::DecodeError;

/// The changed namespace list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChangedNsList {
    pub nsids: Vec<u32>,
}

impl ChangedNsList {
    pub const BYTES: usize = 4096;
    pub const MAX_ENTRIES: usize = 1024;
    /// Entry 0 value meaning "more than 1024 namespaces changed".
    pub const OVERFLOW: u32 = 0xFFFF_FFFF;

    /// The list for the namespaces in `changed`: sorted and deduplicated, or the overflow
    /// marker if there are more than 1024.
    pub fn from_changed(changed: impl IntoIterator<Item = u32>) -> Self {
        let mut nsids: Vec<u32> = changed.into_iter().filter(|&n| n != 0).collect();
        nsids.sort_unstable();
        nsids.dedup();
        if nsids.len() > Self::MAX_ENTRIES {
            nsids = vec![Self::OVERFLOW];
        }
        ChangedNsList { nsids }
    }

    /// Whether more namespaces changed than the list can hold.
    pub fn is_overflow(&self) -> bool {
        self.nsids.first() == Some(&Self::OVERFLOW)
    }

    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        out[..n].fill(0);
        for (i, &id) in self.nsids.iter().take(Self::MAX_ENTRIES).enumerate() {
            put32(out, 4 * i, id);
        }
    }

    pub fn to_bytes(&self) -> Box<[u8; Self::BYTES]> {
        let mut b = Box::new([0u8; Self::BYTES]);
        self.encode(&mut b[..]);
        b
    }

    /// Reads entries up to the first zero, at most 1024 (a partial read decodes the
    /// entries it holds).
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let n = (b.len() / 4).min(Self::MAX_ENTRIES);
        Ok(ChangedNsList {
            nsids: (0..n)
                .map(|i| le32(b, 4 * i))
                .take_while(|&id| id != 0)
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_and_overflow() {
        let l = ChangedNsList::from_changed([4, 2, 4]);
        let b = l.to_bytes();
        assert_eq!(&b[..12], &[2, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(ChangedNsList::decode(&b[..]).unwrap(), l);
        let o = ChangedNsList::from_changed(1..=1025);
        assert!(o.is_overflow());
        let b = o.to_bytes();
        assert_eq!(&b[..8], &[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]);
        assert_eq!(ChangedNsList::from_changed(1..=1024).nsids.len(), 1024);
    }

    proptest! {
        #[test]
        fn roundtrip(ids in proptest::collection::vec(any::<u32>(), 0..1100)) {
            let l = ChangedNsList::from_changed(ids);
            prop_assert_eq!(ChangedNsList::decode(&l.to_bytes()[..]).unwrap(), l);
        }
    }
}
