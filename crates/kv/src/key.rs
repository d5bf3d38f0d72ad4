//! Keys: 1 to 16 bytes (the NVMe KV key), stored inline in a fixed 17-byte value.

use std::cmp::Ordering;
use std::fmt;

use crate::KvError;

/// Longest key (NVMe KV: the key travels in CDW2-3 and CDW14-15).
pub const MAX_KEY_BYTES: usize = 16;

/// A key of 1 to [`MAX_KEY_BYTES`] bytes. Ordered bytewise (a prefix sorts first), which is
/// the order of `list`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    /// Bytes past `len` are always zero, so derived equality and hashing are exact.
    bytes: [u8; MAX_KEY_BYTES],
    len: u8,
}

const _: () = assert!(std::mem::size_of::<Key>() == MAX_KEY_BYTES + 1);
const _: () = assert!(MAX_KEY_BYTES <= u8::MAX as usize);

impl Key {
    /// Checks the size (1..=16 bytes).
    pub fn new(key: &[u8]) -> Result<Key, KvError> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(KvError::InvalidKeySize { len: key.len() });
        }
        let mut bytes = [0u8; MAX_KEY_BYTES];
        bytes[..key.len()].copy_from_slice(key);
        Ok(Key {
            bytes,
            len: key.len() as u8,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Always false (keys are at least one byte); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The zero-padded 16 bytes as stored on disk.
    pub(crate) fn padded(&self) -> &[u8; MAX_KEY_BYTES] {
        &self.bytes
    }
}

impl Ord for Key {
    /// Bytewise, as one 128-bit comparison: the zero padding makes the padded bytes,
    /// read big-endian, order as the keys do except that a key and itself followed by
    /// zero bytes tie, which the length decides (the shorter, a prefix, first).
    fn cmp(&self, other: &Key) -> Ordering {
        u128::from_be_bytes(self.bytes)
            .cmp(&u128::from_be_bytes(other.bytes))
            .then(self.len.cmp(&other.len))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

impl TryFrom<&[u8]> for Key {
    type Error = KvError;
    fn try_from(key: &[u8]) -> Result<Key, KvError> {
        Key::new(key)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked() {
        assert!(matches!(
            Key::new(b""),
            Err(KvError::InvalidKeySize { len: 0 })
        ));
        assert!(matches!(
            Key::new(&[0u8; 17]),
            Err(KvError::InvalidKeySize { len: 17 })
        ));
        assert_eq!(Key::new(&[7u8; 16]).unwrap().as_bytes(), &[7u8; 16]);
        assert_eq!(Key::new(b"a").unwrap().len(), 1);
    }

    #[test]
    fn order_is_bytewise_with_prefixes_first() {
        let mut keys: Vec<Key> = [&b"b"[..], b"ab", b"a", b"a\0", b"\xff"]
            .iter()
            .map(|k| Key::new(k).unwrap())
            .collect();
        keys.sort();
        let got: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        assert_eq!(got, vec![&b"a"[..], b"a\0", b"ab", b"b", b"\xff"]);
        // Trailing zero bytes are part of the key.
        assert_ne!(Key::new(b"a").unwrap(), Key::new(b"a\0").unwrap());
    }

    #[test]
    fn order_matches_byte_slices() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let k = |r: u64| {
                let len = 1 + (r % 16) as usize;
                // Few distinct byte values, so prefixes and trailing zeros are common.
                let bytes: Vec<u8> = (0..len)
                    .map(|i| [0u8, 1, 0xff][(r >> (4 + 2 * i)) as usize % 3])
                    .collect();
                bytes
            };
            let (a, b) = (k(next()), k(next()));
            let (ka, kb) = (Key::new(&a).unwrap(), Key::new(&b).unwrap());
            assert_eq!(ka.cmp(&kb), a.cmp(&b), "{a:?} vs {b:?}");
            assert_eq!(ka == kb, a == b);
        }
    }
}
