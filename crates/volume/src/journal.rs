//! The stripe journal (rotating layouts): closes the write hole of a *degraded* volume.
//!
//! When a row is written while one of its data chunks is unreadable (its member failed,
//! missing, or not yet rebuilt up to the durable checkpoint), a crash could leave data and
//! parity of that row disagreeing, and the unreadable chunk could no longer be derived.
//! So before such a row is written, the content the unreadable chunks have *after* the
//! write (over the written column range) is appended to a ring on every writable member,
//! with FUA. After a crash, assembly recomputes the parity of each journaled range from the
//! readable data and the journaled chunks: the row is consistent again and the unreadable
//! chunks read back as journaled. Format: `docs/volume-format.md`.

use blockdev::IoBuf;
use uuid::Uuid;

use crate::format::codec::*;

pub(crate) const JOURNAL_MAGIC: [u8; 8] = *b"FBVJRNL1";
pub(crate) const JOURNAL_VERSION: u32 = 1;
/// Entries start on 4 KiB boundaries with one 4 KiB header block.
pub(crate) const ENTRY_HEADER_BYTES: usize = 4096;
pub(crate) const MAX_MISSING: usize = erasure::MAX_PARITY_SHARDS;

const OFF_MAGIC: usize = 0;
const OFF_CRC: usize = 8;
const OFF_VERSION: usize = 12;
const OFF_VOLUME: usize = 16;
const OFF_SEQ: usize = 32;
const OFF_FLOOR: usize = 40;
const OFF_ROW: usize = 48;
const OFF_LO: usize = 56;
const OFF_LEN: usize = 60;
const OFF_COUNT: usize = 64;
const OFF_MISSING: usize = 72;
const MISSING_STRIDE: usize = 16;
const _: () = assert!(OFF_MISSING + MAX_MISSING * MISSING_STRIDE <= ENTRY_HEADER_BYTES);

/// One journaled row range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub seq: u64,
    /// Entries with a lower seq were made obsolete by a drain and flush.
    pub floor: u64,
    pub row: u64,
    /// Column range `[lo, lo + len)` inside the row.
    pub lo: u32,
    pub len: u32,
    /// Unreadable data chunks: (data index, `state_generation` of its slot when written).
    pub missing: Vec<(usize, u64)>,
    /// `missing.len() * len` bytes: the chunks' content after the write, in order.
    pub payload: Vec<u8>,
}

impl Entry {
    pub fn encoded_len(&self) -> u64 {
        (ENTRY_HEADER_BYTES + self.payload.len().div_ceil(4096) * 4096) as u64
    }

    pub fn encode(&self, volume: Uuid) -> IoBuf {
        let mut buf = IoBuf::new_zeroed(self.encoded_len() as usize);
        put(&mut buf, OFF_MAGIC, &JOURNAL_MAGIC);
        put_u32(&mut buf, OFF_VERSION, JOURNAL_VERSION);
        put(&mut buf, OFF_VOLUME, volume.as_bytes());
        put_u64(&mut buf, OFF_SEQ, self.seq);
        put_u64(&mut buf, OFF_FLOOR, self.floor);
        put_u64(&mut buf, OFF_ROW, self.row);
        put_u32(&mut buf, OFF_LO, self.lo);
        put_u32(&mut buf, OFF_LEN, self.len);
        put_u8(&mut buf, OFF_COUNT, self.missing.len() as u8);
        for (i, (d, generation)) in self.missing.iter().take(MAX_MISSING).enumerate() {
            let at = OFF_MISSING + i * MISSING_STRIDE;
            put_u8(&mut buf, at, *d as u8);
            put_u64(&mut buf, at + 8, *generation);
        }
        put(&mut buf, ENTRY_HEADER_BYTES, &self.payload);
        let crc = crc32c::crc32c(&buf[..ENTRY_HEADER_BYTES + self.payload.len()]);
        put_u32(&mut buf, OFF_CRC, crc);
        buf
    }

    /// Decodes the entry starting at `at` in a ring image. Never panics.
    pub fn decode(ring: &[u8], at: usize, volume: Uuid) -> Option<Entry> {
        let head = ring.get(at..at + ENTRY_HEADER_BYTES)?;
        if get::<8>(head, OFF_MAGIC) != JOURNAL_MAGIC
            || u32_at(head, OFF_VERSION) != JOURNAL_VERSION
            || get::<16>(head, OFF_VOLUME) != *volume.as_bytes()
        {
            return None;
        }
        let count = usize::from(u8_at(head, OFF_COUNT));
        let len = u32_at(head, OFF_LEN);
        if count == 0 || count > MAX_MISSING || len == 0 {
            return None;
        }
        let payload_len = count.checked_mul(len as usize)?;
        let end = (at + ENTRY_HEADER_BYTES).checked_add(payload_len)?;
        let whole = ring.get(at..end)?;
        let mut check = whole.to_vec();
        put_u32(&mut check, OFF_CRC, 0);
        if crc32c::crc32c(&check) != u32_at(head, OFF_CRC) {
            return None;
        }
        let missing = (0..count)
            .map(|i| {
                let a = OFF_MISSING + i * MISSING_STRIDE;
                (usize::from(u8_at(head, a)), u64_at(head, a + 8))
            })
            .collect();
        Some(Entry {
            seq: u64_at(head, OFF_SEQ),
            floor: u64_at(head, OFF_FLOOR),
            row: u64_at(head, OFF_ROW),
            lo: u32_at(head, OFF_LO),
            len,
            missing,
            payload: whole[ENTRY_HEADER_BYTES..].to_vec(),
        })
    }
}

/// The chain of valid entries from the start of a ring image: each entry follows the
/// previous one with a higher seq. Payload bytes (volume data) are never parsed as headers.
pub(crate) fn scan(ring: &[u8], volume: Uuid) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let mut at = 0;
    while let Some(e) = Entry::decode(ring, at, volume) {
        if out.last().is_some_and(|p| e.seq <= p.seq) {
            break;
        }
        at += e.encoded_len() as usize;
        out.push(e);
    }
    out
}

/// Where the next entry goes.
pub(crate) struct Ring {
    pub pos: u64,
    pub next_seq: u64,
    pub floor: u64,
}

/// The journal of an assembled volume.
pub(crate) struct Journal {
    pub offset_bytes: u64,
    pub bytes: u64,
    pub ring: tokio::sync::Mutex<Ring>,
}

impl Journal {
    pub fn new(offset_bytes: u64, bytes: u64, next_seq: u64) -> Journal {
        Journal {
            offset_bytes,
            bytes,
            ring: tokio::sync::Mutex::new(Ring {
                pos: 0,
                next_seq,
                floor: next_seq,
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(seq: u64, len: u32, count: usize) -> Entry {
        Entry {
            seq,
            floor: 3,
            row: 77,
            lo: 512,
            len,
            missing: (0..count).map(|i| (i * 2, 10 + i as u64)).collect(),
            payload: (0..count * len as usize).map(|i| i as u8).collect(),
        }
    }

    #[test]
    fn round_trip_and_scan() {
        let v = Uuid::from_bytes([3; 16]);
        let a = entry(5, 1024, 2);
        let b = entry(6, 4096, 1);
        let mut ring = vec![0u8; 64 << 10];
        let ea = a.encode(v);
        let eb = b.encode(v);
        ring[..ea.len()].copy_from_slice(&ea);
        ring[ea.len()..ea.len() + eb.len()].copy_from_slice(&eb);
        assert_eq!(scan(&ring, v), vec![a.clone(), b.clone()]);
        // Another volume's entries are not ours.
        assert!(scan(&ring, Uuid::nil()).is_empty());
        // An older entry after the chain ends it.
        let old = entry(2, 512, 1).encode(v);
        let end = ea.len() + eb.len();
        ring[end..end + old.len()].copy_from_slice(&old);
        assert_eq!(scan(&ring, v).len(), 2);
        // A torn entry ends the chain.
        ring[ea.len() + ENTRY_HEADER_BYTES + 5] ^= 1;
        assert_eq!(scan(&ring, v), vec![a.clone()]);
        ring[ENTRY_HEADER_BYTES + 5] ^= 1;
        assert!(scan(&ring, v).is_empty());
        assert_eq!(a.encoded_len(), 8192);
    }

    proptest! {
        #[test]
        fn scan_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..20000)) {
            let _ = scan(&bytes, Uuid::nil());
        }
    }
}
