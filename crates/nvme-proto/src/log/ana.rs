//! Asymmetric Namespace Access log page (LID 0x0C), NVMe Base 2.0
//! "Asymmetric Namespace Access"; Linux `struct nvme_ana_rsp_hdr`, `struct nvme_ana_group_desc`.
//!
//! Header (16 bytes): 0..8 change count, 8..10 number of ANA group descriptors.
//! Each group descriptor: 0..4 ANAGRPID, 4..8 number of NSIDs, 8..16 change count,
//! 16 ANA state (bits 3:0), 17..32 reserved, 32.. the NSIDs (u32 each). With LSP bit 0
//! (RGO, return groups only) descriptors carry no NSIDs.

use crate::bytes::{le16, le32, le64, put16, put32, put64};
use crate::error::DecodeError;

/// ANA states.
pub mod ana_state {
    pub const OPTIMIZED: u8 = 0x01;
    pub const NON_OPTIMIZED: u8 = 0x02;
    pub const INACCESSIBLE: u8 = 0x03;
    pub const PERSISTENT_LOSS: u8 = 0x04;
    pub const CHANGE: u8 = 0x0F;
}

/// LSP bit 0 of Get Log Page for the ANA log: return groups only (no NSIDs).
pub const LSP_RGO: u8 = 1 << 0;

const HEADER_BYTES: usize = 16;
const GROUP_HEADER_BYTES: usize = 32;

/// One ANA group descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AnaGroupDescriptor {
    pub anagrpid: u32,
    pub chgcnt: u64,
    /// See [`ana_state`].
    pub state: u8,
    pub nsids: Vec<u32>,
}

/// The ANA log page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AnaLog {
    pub chgcnt: u64,
    pub groups: Vec<AnaGroupDescriptor>,
}

impl AnaLog {
    /// Bytes the encoded page takes.
    pub fn encoded_len(&self) -> usize {
        HEADER_BYTES
            + self
                .groups
                .iter()
                .map(|g| GROUP_HEADER_BYTES + 4 * g.nsids.len())
                .sum::<usize>()
    }

    /// Writes the page into `out` (stops at the end of `out`).
    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(self.encoded_len());
        let b = &mut out[..n];
        b.fill(0);
        put64(b, 0, self.chgcnt);
        put16(b, 8, self.groups.len().min(u16::MAX as usize) as u16);
        let mut o = HEADER_BYTES;
        for g in &self.groups {
            put32(b, o, g.anagrpid);
            put32(b, o + 4, g.nsids.len() as u32);
            put64(b, o + 8, g.chgcnt);
            if let Some(s) = b.get_mut(o + 16) {
                *s = g.state & 0xF;
            }
            o += GROUP_HEADER_BYTES;
            for id in &g.nsids {
                put32(b, o, *id);
                o += 4;
            }
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.encoded_len()];
        self.encode(&mut v);
        v
    }

    /// Decodes a whole page; a descriptor or NSID list running past the end of `b` is
    /// an error (nothing is allocated beyond what `b` can hold).
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < HEADER_BYTES {
            return Err(DecodeError::Short {
                what: "ANA log header",
                needed_bytes: HEADER_BYTES,
                got_bytes: b.len(),
            });
        }
        let ngrps = le16(b, 8) as usize;
        let mut groups = Vec::with_capacity(ngrps.min(b.len() / GROUP_HEADER_BYTES));
        let mut o = HEADER_BYTES;
        for _ in 0..ngrps {
            let short = |needed_bytes: usize| DecodeError::Short {
                what: "ANA group descriptor",
                needed_bytes,
                got_bytes: b.len(),
            };
            if b.len() < o + GROUP_HEADER_BYTES {
                return Err(short(o + GROUP_HEADER_BYTES));
            }
            let nnsids = le32(b, o + 4) as usize;
            let end = nnsids
                .checked_mul(4)
                .and_then(|n| n.checked_add(o + GROUP_HEADER_BYTES))
                .ok_or(short(usize::MAX))?;
            if b.len() < end {
                return Err(short(end));
            }
            let first = o + GROUP_HEADER_BYTES;
            groups.push(AnaGroupDescriptor {
                anagrpid: le32(b, o),
                chgcnt: le64(b, o + 8),
                state: b[o + 16] & 0xF,
                nsids: (0..nnsids).map(|i| le32(b, first + 4 * i)).collect(),
            });
            o = end;
        }
        Ok(AnaLog {
            chgcnt: le64(b, 0),
            groups,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        let l = AnaLog {
            chgcnt: 9,
            groups: vec![
                AnaGroupDescriptor {
                    anagrpid: 1,
                    chgcnt: 2,
                    state: ana_state::OPTIMIZED,
                    nsids: vec![1, 2],
                },
                AnaGroupDescriptor {
                    anagrpid: 2,
                    chgcnt: 3,
                    state: ana_state::INACCESSIBLE,
                    nsids: vec![],
                },
            ],
        };
        let b = l.to_bytes();
        assert_eq!(b.len(), 16 + 32 + 8 + 32);
        assert_eq!(&b[..10], &[9, 0, 0, 0, 0, 0, 0, 0, 2, 0]);
        assert_eq!(&b[16..24], &[1, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(b[24], 2);
        assert_eq!(b[32], 1);
        assert_eq!(&b[48..56], &[1, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(&b[56..60], &[2, 0, 0, 0]);
        assert_eq!(b[72], 3);
        assert_eq!(AnaLog::decode(&b).unwrap(), l);
        assert!(AnaLog::decode(&b[..b.len() - 1]).is_err());
    }

    #[test]
    fn huge_counts_are_errors_not_allocations() {
        let mut b = [0u8; 48];
        b[8] = 1;
        b[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(AnaLog::decode(&b).is_err());
        let mut h = [0u8; 16];
        h[8..10].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(AnaLog::decode(&h).is_err());
    }

    fn any_group() -> impl Strategy<Value = AnaGroupDescriptor> {
        (
            any::<u32>(),
            any::<u64>(),
            0u8..16,
            proptest::collection::vec(any::<u32>(), 0..20),
        )
            .prop_map(|(anagrpid, chgcnt, state, nsids)| AnaGroupDescriptor {
                anagrpid,
                chgcnt,
                state,
                nsids,
            })
    }

    proptest! {
        #[test]
        fn roundtrip(chgcnt: u64, groups in proptest::collection::vec(any_group(), 0..10)) {
            let l = AnaLog { chgcnt, groups };
            prop_assert_eq!(AnaLog::decode(&l.to_bytes()).unwrap(), l);
        }
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(l) = AnaLog::decode(&b) {
                prop_assert_eq!(AnaLog::decode(&l.to_bytes()).unwrap(), l);
            }
        }
    }
}
