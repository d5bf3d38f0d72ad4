//! The data a List command returns (KV Command Set 1.0, "List command", "KV key data
//! structure"):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | NRK: number of returned keys |
//! | 4 | … | NRK key entries, back to back |
//!
//! Each key entry: 0..2 key length (1..=16), 2.. the key, then zero padding so that the
//! entry ends on a 4-byte boundary: an entry takes round_up(2 + KL, 4) bytes (4, 8, 12,
//! 16 or 20). A controller returns only whole entries that fit in the host buffer
//! (CDW10); the rest of the buffer is zero.
//!
//! [`KvListWriter`] builds the list in the caller's buffer without allocating;
//! [`KvListData::parse`] checks every entry before any key is handed out.

use crate::bytes::{le16, le32, put16, put32};
use crate::error::DecodeError;

use super::key::KvKey;

/// Bytes of the NRK header.
pub const NRK_BYTES: usize = 4;
/// Bytes of an entry's key length field.
const KL_FIELD_BYTES: usize = 2;

/// Bytes a key entry of `key_len` bytes takes, padding included.
pub const fn entry_bytes(key_len: usize) -> usize {
    (KL_FIELD_BYTES + key_len).div_ceil(4) * 4
}

const _: () = assert!(entry_bytes(1) == 4 && entry_bytes(2) == 4 && entry_bytes(3) == 8);
const _: () = assert!(entry_bytes(KvKey::MAX_BYTES) == 20);

/// Writes a List data buffer into the caller's host buffer.
#[derive(Debug)]
pub struct KvListWriter<'a> {
    buf: &'a mut [u8],
    used: usize,
    count: u32,
}

impl<'a> KvListWriter<'a> {
    /// Zeroes `buf` and writes an empty list (NRK 0). `None` when `buf` cannot hold the
    /// 4-byte NRK (a host buffer below 4 bytes cannot receive a list).
    pub fn new(buf: &'a mut [u8]) -> Option<Self> {
        if buf.len() < NRK_BYTES {
            return None;
        }
        buf.fill(0);
        Some(KvListWriter {
            buf,
            used: NRK_BYTES,
            count: 0,
        })
    }

    /// Appends `key` if its whole entry fits; returns false (writing nothing) if it does
    /// not, after which the caller stops: the list stays valid either way.
    pub fn push(&mut self, key: &KvKey) -> bool {
        let n = entry_bytes(key.len_bytes());
        let Some(entry) = self.buf.get_mut(self.used..self.used + n) else {
            return false;
        };
        put16(entry, 0, key.len_bytes() as u16);
        entry[KL_FIELD_BYTES..KL_FIELD_BYTES + key.len_bytes()].copy_from_slice(key.as_bytes());
        self.used += n;
        self.count += 1;
        put32(self.buf, 0, self.count);
        true
    }

    /// Keys written so far (NRK).
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// Bytes of the buffer the list takes so far (header and entries).
    pub const fn len_bytes(&self) -> usize {
        self.used
    }
}

/// A List data buffer whose header and every entry have been checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvListData<'a> {
    entries: &'a [u8],
    count: u32,
}

impl<'a> KvListData<'a> {
    /// Checks `buf`: it holds the NRK header and NRK entries, each with a key length of
    /// 1..=16 and lying wholly inside `buf`. Padding and bytes after the last entry are
    /// ignored. Walks at most `buf.len() / 4` entries and allocates nothing.
    pub fn parse(buf: &'a [u8]) -> Result<Self, DecodeError> {
        if buf.len() < NRK_BYTES {
            return Err(DecodeError::Short {
                what: "KV list data",
                needed_bytes: NRK_BYTES,
                got_bytes: buf.len(),
            });
        }
        let count = le32(buf, 0);
        let mut off = NRK_BYTES;
        for _ in 0..count {
            if buf.len() < off + KL_FIELD_BYTES {
                return Err(DecodeError::Short {
                    what: "KV list data",
                    needed_bytes: off + KL_FIELD_BYTES,
                    got_bytes: buf.len(),
                });
            }
            let kl = usize::from(le16(buf, off));
            if kl == 0 || kl > KvKey::MAX_BYTES {
                return Err(DecodeError::InvalidField {
                    what: "KV list data",
                    offset: off,
                    reason: "key length outside 1..=16",
                });
            }
            // The last entry's padding may be cut off by the buffer end.
            if buf.len() < off + KL_FIELD_BYTES + kl {
                return Err(DecodeError::Short {
                    what: "KV list data",
                    needed_bytes: off + KL_FIELD_BYTES + kl,
                    got_bytes: buf.len(),
                });
            }
            off += entry_bytes(kl);
        }
        Ok(KvListData {
            entries: &buf[NRK_BYTES.min(buf.len())..],
            count,
        })
    }

    /// Number of returned keys (NRK).
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// The keys in the order the controller returned them.
    pub fn iter(&self) -> KvListIter<'a> {
        KvListIter {
            rest: self.entries,
            left: self.count,
        }
    }

    /// The keys, collected.
    pub fn to_vec(&self) -> Vec<KvKey> {
        self.iter().collect()
    }

    /// The last key returned: where a host continues listing (List starts at its key
    /// inclusively, so the continuation returns this key again first).
    pub fn last(&self) -> Option<KvKey> {
        self.iter().last()
    }
}

impl<'a> IntoIterator for &KvListData<'a> {
    type Item = KvKey;
    type IntoIter = KvListIter<'a>;
    fn into_iter(self) -> KvListIter<'a> {
        self.iter()
    }
}

/// Keys of a checked List data buffer.
#[derive(Debug, Clone)]
pub struct KvListIter<'a> {
    rest: &'a [u8],
    left: u32,
}

impl Iterator for KvListIter<'_> {
    type Item = KvKey;

    fn next(&mut self) -> Option<KvKey> {
        if self.left == 0 {
            return None;
        }
        let kl = usize::from(le16(self.rest, 0));
        let key = KvKey::new(self.rest.get(KL_FIELD_BYTES..KL_FIELD_BYTES + kl)?).ok()?;
        self.rest = self.rest.get(entry_bytes(kl)..).unwrap_or(&[]);
        self.left -= 1;
        Some(key)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}

/// Encodes `keys` as a List data buffer of `host_buffer_bytes` (at least 4), keeping the
/// leading keys whose entries fit. Convenience for tests and tools; a target writes into
/// its transfer buffer with [`KvListWriter`].
pub fn encode_list(keys: &[KvKey], host_buffer_bytes: usize) -> Vec<u8> {
    let mut v = vec![0u8; host_buffer_bytes.max(NRK_BYTES)];
    if let Some(mut w) = KvListWriter::new(&mut v) {
        for k in keys {
            if !w.push(k) {
                break;
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(b: &[u8]) -> KvKey {
        KvKey::new(b).unwrap()
    }

    #[test]
    fn layout() {
        // Keys of 1, 2, 3 and 16 bytes: entries of 4, 4, 8 and 20 bytes after NRK.
        let keys = [key(b"a"), key(b"bc"), key(b"def"), key(&[0x10; 16])];
        let b = encode_list(&keys, 64);
        let mut want = vec![4, 0, 0, 0];
        want.extend_from_slice(&[1, 0, b'a', 0]);
        want.extend_from_slice(&[2, 0, b'b', b'c']);
        want.extend_from_slice(&[3, 0, b'd', b'e', b'f', 0, 0, 0]);
        want.extend_from_slice(&[16, 0]);
        want.extend_from_slice(&[0x10; 16]);
        want.extend_from_slice(&[0, 0]);
        assert_eq!(want.len(), 40);
        assert_eq!(&b[..40], &want[..]);
        assert!(b[40..].iter().all(|&x| x == 0));
        let l = KvListData::parse(&b).unwrap();
        assert_eq!(l.count(), 4);
        assert_eq!(l.to_vec(), keys);
        assert_eq!(l.last(), Some(keys[3]));
        // Exactly the entries, without trailing zeros or the last pad, still parse.
        assert_eq!(KvListData::parse(&b[..38]).unwrap().to_vec(), keys);
    }

    #[test]
    fn writer_keeps_whole_entries_only() {
        let mut buf = [0xFFu8; 15];
        let mut w = KvListWriter::new(&mut buf).unwrap();
        assert!(w.push(&key(b"abcdef"))); // 8 bytes: 4..12
        assert!(!w.push(&key(b"gh"))); // 4 more would end at 16 > 15
        assert_eq!((w.count(), w.len_bytes()), (1, 12));
        assert_eq!(
            &buf[..12],
            &[1, 0, 0, 0, 6, 0, b'a', b'b', b'c', b'd', b'e', b'f']
        );
        assert_eq!(&buf[12..], &[0, 0, 0]);
        assert!(KvListWriter::new(&mut [0u8; 3]).is_none());
        let mut four = [9u8; 4];
        let w = KvListWriter::new(&mut four).unwrap();
        assert_eq!(w.len_bytes(), 4);
        assert_eq!(four, [0; 4]);
    }

    #[test]
    fn parse_rejects() {
        assert!(KvListData::parse(&[1, 0, 0]).is_err());
        // NRK says 2 but only one entry is there.
        let b = [2, 0, 0, 0, 1, 0, b'a', 0];
        assert!(matches!(
            KvListData::parse(&b),
            Err(DecodeError::Short {
                needed_bytes: 10,
                ..
            })
        ));
        // Key length 0 and 17.
        for kl in [0u8, 17] {
            let b = [1, 0, 0, 0, kl, 0, 0, 0];
            assert!(matches!(
                KvListData::parse(&b),
                Err(DecodeError::InvalidField { offset: 4, .. })
            ));
        }
        // A key cut short by the buffer end.
        assert!(KvListData::parse(&[1, 0, 0, 0, 5, 0, b'a', b'b']).is_err());
        // A huge NRK over a small buffer fails without walking 4 billion entries.
        let mut b = vec![0xFF, 0xFF, 0xFF, 0xFF];
        for _ in 0..100 {
            b.extend_from_slice(&[1, 0, b'z', 0]);
        }
        assert!(KvListData::parse(&b).is_err());
        assert_eq!(KvListData::parse(&[0; 4]).unwrap().to_vec(), vec![]);
    }

    fn any_keys() -> impl Strategy<Value = Vec<KvKey>> {
        proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 1..=16).prop_map(|v| KvKey::new(&v).unwrap()),
            0..60,
        )
    }

    proptest! {
        #[test]
        fn roundtrip_keeps_the_prefix_that_fits(keys in any_keys(), hbs in 4usize..1200) {
            let b = encode_list(&keys, hbs);
            prop_assert_eq!(b.len(), hbs);
            let got = KvListData::parse(&b).unwrap().to_vec();
            // A prefix, and the longest one whose entries fit in the buffer.
            let fits: usize = keys.iter().scan(NRK_BYTES, |used, k| {
                *used += entry_bytes(k.len_bytes());
                Some(*used)
            }).take_while(|&used| used <= hbs).count();
            prop_assert_eq!(&got[..], &keys[..fits]);
        }

        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(l) = KvListData::parse(&b) {
                let keys = l.to_vec();
                prop_assert_eq!(keys.len(), l.count() as usize);
                // The last entry's padding may have been cut off: allow for it.
                let again = encode_list(&keys, b.len() + 3);
                prop_assert_eq!(KvListData::parse(&again).unwrap().to_vec(), keys);
            }
        }
    }
}
