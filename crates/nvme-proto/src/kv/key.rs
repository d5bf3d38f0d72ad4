//! The KV key: 1 to 16 bytes, carried in the command itself (KV Command Set 1.0, "Key").
//!
//! In the SQE the key occupies CDW2..CDW3 (bytes 8..16, key bytes 0..8) and CDW14..CDW15
//! (bytes 56..64, key bytes 8..16), key byte `i` at the lowest address first; CDW11 bits
//! 7:0 hold the key length (KL). Bytes past KL are written as zero and ignored on input.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

use crate::command::Command;

/// SQE bytes holding key bytes 0..8 (CDW2, CDW3).
pub const KEY_LO_SQE_BYTES: std::ops::Range<usize> = 8..16;
/// SQE bytes holding key bytes 8..16 (CDW14, CDW15).
pub const KEY_HI_SQE_BYTES: std::ops::Range<usize> = 56..64;
/// SQE byte of the key length, KL (CDW11 bits 7:0).
pub const KL_SQE_BYTE: usize = 44;

/// A key of 1 to [`KvKey::MAX_BYTES`] bytes, held inline so that building and parsing
/// commands never allocates. Keys compare bytewise like `[u8]` (a prefix sorts first),
/// which is the order of a `BTreeMap<Vec<u8>, _>`.
#[derive(Clone, Copy)]
pub struct KvKey {
    // Invariant: 1 <= len <= MAX_BYTES and bytes[len..] are zero.
    bytes: [u8; KvKey::MAX_BYTES],
    len: u8,
}

const _: () = assert!(KEY_LO_SQE_BYTES.end - KEY_LO_SQE_BYTES.start == 8);
const _: () = assert!(KEY_HI_SQE_BYTES.end - KEY_HI_SQE_BYTES.start == 8);
const _: () = assert!(KEY_HI_SQE_BYTES.end == crate::SQE_BYTES);

/// A byte string that cannot be a KV key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a KV key is 1 to 16 bytes, got {len_bytes}")]
pub struct KvKeyLengthError {
    pub len_bytes: usize,
}

impl KvKey {
    /// The longest key the KV command set can carry (16 bytes: CDW2-3 and CDW14-15).
    pub const MAX_BYTES: usize = 16;

    /// A key of `key.len()` bytes, 1..=16.
    pub fn new(key: &[u8]) -> Result<Self, KvKeyLengthError> {
        if key.is_empty() || key.len() > Self::MAX_BYTES {
            return Err(KvKeyLengthError {
                len_bytes: key.len(),
            });
        }
        let mut bytes = [0u8; Self::MAX_BYTES];
        bytes[..key.len()].copy_from_slice(key);
        Ok(KvKey {
            bytes,
            len: key.len() as u8,
        })
    }

    /// The key bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The key length (KL), 1..=16.
    pub const fn len_bytes(&self) -> usize {
        self.len as usize
    }

    /// The smallest key that sorts after this one, or `None` for the largest key (16
    /// bytes of FFh). A host continues a List from it: List starts at its key inclusively,
    /// so starting at the successor of the last key returned skips exactly that key.
    /// A key shorter than 16 bytes is followed by itself plus a 00h byte; a 16-byte key by
    /// the key cut after its last byte below FFh, that byte incremented.
    pub fn successor(&self) -> Option<KvKey> {
        let n = self.len as usize;
        if n < Self::MAX_BYTES {
            // bytes[n] is zero by the invariant: one more byte of 00h.
            return Some(KvKey {
                bytes: self.bytes,
                len: self.len + 1,
            });
        }
        let i = self.bytes.iter().rposition(|&b| b != 0xFF)?;
        let mut bytes = [0u8; Self::MAX_BYTES];
        bytes[..=i].copy_from_slice(&self.bytes[..=i]);
        bytes[i] += 1;
        Some(KvKey {
            bytes,
            len: (i + 1) as u8,
        })
    }

    /// The 16 key bytes as they travel (zero past the length) and the length.
    pub const fn to_wire(&self) -> ([u8; Self::MAX_BYTES], u8) {
        (self.bytes, self.len)
    }

    /// Writes the key bytes into CDW2-3 / CDW14-15 and KL into CDW11 bits 7:0, leaving
    /// the other bits of CDW11 as they are.
    pub(crate) fn write_to(&self, c: &mut Command) {
        c.0[KEY_LO_SQE_BYTES].copy_from_slice(&self.bytes[..8]);
        c.0[KEY_HI_SQE_BYTES].copy_from_slice(&self.bytes[8..]);
        c.0[KL_SQE_BYTE] = self.len;
    }

    /// The key of `len` (1..=16, checked by the caller) bytes in `c`.
    pub(crate) fn read_from(c: &Command, len: usize) -> Option<Self> {
        let mut raw = [0u8; Self::MAX_BYTES];
        raw[..8].copy_from_slice(&c.0[KEY_LO_SQE_BYTES]);
        raw[8..].copy_from_slice(&c.0[KEY_HI_SQE_BYTES]);
        Self::new(raw.get(..len)?).ok()
    }
}

impl PartialEq for KvKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for KvKey {}

impl Hash for KvKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialOrd for KvKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KvKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl AsRef<[u8]> for KvKey {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl TryFrom<&[u8]> for KvKey {
    type Error = KvKeyLengthError;
    fn try_from(key: &[u8]) -> Result<Self, Self::Error> {
        KvKey::new(key)
    }
}

impl std::fmt::Debug for KvKey {
    /// Printable ASCII keys show as text, others as hex.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.as_bytes();
        if b.iter().all(|c| (0x20..0x7F).contains(c)) {
            write!(f, "KvKey({:?})", String::from_utf8_lossy(b))
        } else {
            write!(f, "KvKey(0x")?;
            for c in b {
                write!(f, "{c:02x}")?;
            }
            write!(f, ")")
        }
    }
}

impl std::fmt::Display for KvKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lengths() {
        assert_eq!(KvKey::new(b"").unwrap_err().len_bytes, 0);
        assert_eq!(KvKey::new(&[7; 17]).unwrap_err().len_bytes, 17);
        assert_eq!(KvKey::new(&[7; 16]).unwrap().len_bytes(), 16);
        assert_eq!(KvKey::new(b"a").unwrap().as_bytes(), b"a");
        assert_eq!(
            KvKey::new(&[0; 17]).unwrap_err().to_string(),
            "a KV key is 1 to 16 bytes, got 17"
        );
    }

    #[test]
    fn order_is_bytewise_prefix_first() {
        let k = |b: &[u8]| KvKey::new(b).unwrap();
        assert!(k(b"a") < k(b"a\0"));
        assert!(k(b"a\xff") < k(b"b"));
        assert!(k(b"ab") > k(b"a"));
        assert_eq!(k(b"x"), k(b"x"));
        assert_eq!(format!("{:?}", k(b"obj/1")), "KvKey(\"obj/1\")");
        assert_eq!(format!("{}", k(&[0, 0xAB])), "KvKey(0x00ab)");
    }

    #[test]
    fn sqe_placement() {
        let mut c = Command::default();
        let key = KvKey::new(b"0123456789ABCDEF").unwrap();
        key.write_to(&mut c);
        assert_eq!(&c.0[8..16], b"01234567");
        assert_eq!(&c.0[56..64], b"89ABCDEF");
        assert_eq!(c.0[44], 16);
        assert_eq!(KvKey::read_from(&c, 16), Some(key));
        // A short key leaves its unused bytes zero.
        let mut c = Command::default();
        c.0[8..16].fill(0xEE);
        c.0[56..64].fill(0xEE);
        KvKey::new(b"abc").unwrap().write_to(&mut c);
        assert_eq!(&c.0[8..16], b"abc\0\0\0\0\0");
        assert_eq!(&c.0[56..64], &[0; 8]);
    }

    #[test]
    fn successors() {
        let k = |b: &[u8]| KvKey::new(b).unwrap();
        assert_eq!(k(b"a").successor(), Some(k(b"a\0")));
        let mut full = [0x41u8; 16];
        assert_eq!(
            k(&full).successor(),
            Some(k(&[[0x41u8; 15].as_slice(), &[0x42]].concat()))
        );
        full[13..].fill(0xFF);
        assert_eq!(
            k(&full).successor(),
            Some(k(&[[0x41u8; 12].as_slice(), &[0x42]].concat()))
        );
        assert_eq!(k(&[0xFF; 16]).successor(), None);
        assert_eq!(
            k(&[0xFF; 15]).successor(),
            Some(k(&[[0xFFu8; 15].as_slice(), &[0]].concat()))
        );
    }

    proptest! {
        /// The successor is greater, and no key lies strictly between the two.
        #[test]
        fn successor_is_the_next_key(a in proptest::collection::vec(any::<u8>(), 1..=16),
                                     b in proptest::collection::vec(any::<u8>(), 1..=16)) {
            let (ka, kb) = (KvKey::new(&a).unwrap(), KvKey::new(&b).unwrap());
            match ka.successor() {
                Some(s) => {
                    prop_assert!(s > ka);
                    prop_assert!(!(kb > ka && kb < s), "{:?} between {:?} and {:?}", kb, ka, s);
                }
                None => prop_assert_eq!(a, vec![0xFF; 16]),
            }
        }

        #[test]
        fn model_order_matches_slices(a in proptest::collection::vec(any::<u8>(), 1..=16),
                                      b in proptest::collection::vec(any::<u8>(), 1..=16)) {
            let (ka, kb) = (KvKey::new(&a).unwrap(), KvKey::new(&b).unwrap());
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(ka == kb, a == b);
            prop_assert_eq!(ka.as_bytes(), &a[..]);
        }
    }
}
