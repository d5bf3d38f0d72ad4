//! Ferrobay extended SMART log page (vendor specific, LID C0h), version 1.
//!
//! `docs/wire/ext-smart.md` has the layout with offsets. A 64-byte header, then
//! `record_count` records of `record_bytes` (256 in version 1), one per drive or
//! namespace: operations and bytes, errors by kind, queue depth, the drive's own
//! temperature / wear / spare when it reports them, and a latency summary per operation
//! class. The page is checksummed (CRC-32C over the whole page with the CRC field zero)
//! and versioned: a reader takes `record_bytes` from the header, so later versions may
//! append fields to a record without breaking version-1 readers.

use crate::bytes::{get_str_nul, le16, le32, le64, put_bytes, put_str_nul, put16, put32, put64};
use crate::error::DecodeError;

/// The log identifier (first of the vendor-specific range C0h..FFh).
pub const LID: u8 = 0xC0;
pub const SIGNATURE: [u8; 4] = *b"FBXS";
pub const VERSION: u16 = 1;
pub const HEADER_BYTES: usize = 64;
pub const RECORD_BYTES: usize = 256;
/// Records in one page (the count is a u16; this keeps a page under 64 KiB).
pub const MAX_RECORDS: usize = 255;
pub const NAME_BYTES: usize = 32;

/// Header offsets.
pub mod hdr {
    pub const SIGNATURE: usize = 0;
    pub const VERSION: usize = 4;
    pub const HEADER_BYTES: usize = 6;
    pub const RECORD_BYTES: usize = 8;
    pub const RECORD_COUNT: usize = 10;
    pub const TOTAL_BYTES: usize = 12;
    pub const TIMESTAMP_MS: usize = 16;
    pub const CRC32C: usize = 24;
}

/// Record offsets.
pub mod rec {
    pub const KIND: usize = 0;
    pub const FLAGS: usize = 1;
    pub const TEMPERATURE_K: usize = 2;
    pub const NSID: usize = 4;
    pub const NAME: usize = 8;
    pub const PERCENTAGE_USED: usize = 40;
    pub const AVAILABLE_SPARE: usize = 41;
    pub const SPARE_THRESHOLD: usize = 42;
    pub const GRADE: usize = 43;
    pub const QUEUE_DEPTH: usize = 44;
    pub const QUEUE_DEPTH_AVG_MILLI: usize = 48;
    pub const READ_BYTES: usize = 56;
    pub const WRITE_BYTES: usize = 64;
    /// Four u64: read, write, flush, other.
    pub const OPS: usize = 72;
    /// Three u64: media, transport, other.
    pub const ERRORS: usize = 104;
    pub const SMART_MEDIA_ERRORS: usize = 128;
    /// Four [`super::LatencySummary`] of 28 bytes: read, write, flush, other.
    pub const LATENCY: usize = 136;
    pub const LATENCY_BYTES: usize = 28;
}

/// Record flags: which optional fields hold a reading.
pub mod flag {
    pub const TEMPERATURE: u8 = 1 << 0;
    pub const PERCENTAGE_USED: u8 = 1 << 1;
    pub const SPARE: u8 = 1 << 2;
    pub const SMART_MEDIA_ERRORS: u8 = 1 << 3;
    pub const LATENCY: u8 = 1 << 4;
    pub const GRADE: u8 = 1 << 5;
}

/// What a record describes.
pub mod kind {
    pub const DRIVE: u8 = 1;
    pub const NAMESPACE: u8 = 2;
}

/// Latency of one operation class, microseconds (lifetime of the counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: u32,
    pub p50_us: u32,
    pub p99_us: u32,
    pub p999_us: u32,
    pub max_us: u32,
}

/// One drive or namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtSmartRecord {
    pub kind: u8,
    /// 0 for a drive.
    pub nsid: u32,
    /// Drive name (or the namespace's drive), at most 31 bytes of UTF-8 kept.
    pub name: String,
    pub temperature_k: Option<u16>,
    pub percentage_used: Option<u8>,
    /// (available spare %, threshold %).
    pub spare: Option<(u8, u8)>,
    /// The prediction grade (0 ok, 1 suspect, 2 failing), when one was made.
    pub grade: Option<u8>,
    pub queue_depth: u32,
    /// Average queue depth seen by arriving I/Os, x1000.
    pub queue_depth_avg_milli: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Successful operations: read, write, flush, other.
    pub ops: [u64; 4],
    /// Failed operations: media, transport, other.
    pub errors: [u64; 3],
    pub smart_media_errors: Option<u64>,
    /// Per class (read, write, flush, other), when latency is kept.
    pub latency: Option<[LatencySummary; 4]>,
}

/// The whole page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtSmartLog {
    /// When the counters were read, ms on the node's monotonic clock.
    pub timestamp_ms: u64,
    pub records: Vec<ExtSmartRecord>,
}

const WHAT: &str = "extended SMART log";

impl ExtSmartLog {
    /// Encodes the page (records past [`MAX_RECORDS`] are left out).
    pub fn to_bytes(&self) -> Vec<u8> {
        let n = self.records.len().min(MAX_RECORDS);
        let total = HEADER_BYTES + n * RECORD_BYTES;
        let mut b = vec![0u8; total];
        put_bytes(&mut b, hdr::SIGNATURE, &SIGNATURE);
        put16(&mut b, hdr::VERSION, VERSION);
        put16(&mut b, hdr::HEADER_BYTES, HEADER_BYTES as u16);
        put16(&mut b, hdr::RECORD_BYTES, RECORD_BYTES as u16);
        put16(&mut b, hdr::RECORD_COUNT, n as u16);
        put32(&mut b, hdr::TOTAL_BYTES, total as u32);
        put64(&mut b, hdr::TIMESTAMP_MS, self.timestamp_ms);
        for (i, r) in self.records.iter().take(n).enumerate() {
            let at = HEADER_BYTES + i * RECORD_BYTES;
            r.encode(&mut b[at..at + RECORD_BYTES]);
        }
        let crc = crc32c::crc32c(&b);
        put32(&mut b, hdr::CRC32C, crc);
        b
    }

    /// Decodes a page; checks signature, sizes and CRC. Never panics.
    pub fn decode(b: &[u8]) -> Result<ExtSmartLog, DecodeError> {
        if b.len() < HEADER_BYTES {
            return Err(DecodeError::Short {
                what: WHAT,
                needed_bytes: HEADER_BYTES,
                got_bytes: b.len(),
            });
        }
        let bad = |offset, reason| DecodeError::InvalidField {
            what: WHAT,
            offset,
            reason,
        };
        if b[..4] != SIGNATURE {
            return Err(bad(hdr::SIGNATURE, "not FBXS"));
        }
        if le16(b, hdr::VERSION) == 0 {
            return Err(bad(hdr::VERSION, "version 0"));
        }
        let header_bytes = usize::from(le16(b, hdr::HEADER_BYTES));
        let record_bytes = usize::from(le16(b, hdr::RECORD_BYTES));
        let count = usize::from(le16(b, hdr::RECORD_COUNT));
        let total = le32(b, hdr::TOTAL_BYTES) as usize;
        if header_bytes < HEADER_BYTES {
            return Err(bad(hdr::HEADER_BYTES, "header shorter than version 1's"));
        }
        if record_bytes < RECORD_BYTES {
            return Err(bad(hdr::RECORD_BYTES, "record shorter than version 1's"));
        }
        if total != header_bytes + count * record_bytes {
            return Err(bad(hdr::TOTAL_BYTES, "total is not header + records"));
        }
        if b.len() < total {
            return Err(DecodeError::Short {
                what: WHAT,
                needed_bytes: total,
                got_bytes: b.len(),
            });
        }
        let mut copy = b[..total].to_vec();
        put32(&mut copy, hdr::CRC32C, 0);
        if crc32c::crc32c(&copy) != le32(b, hdr::CRC32C) {
            return Err(bad(hdr::CRC32C, "checksum mismatch"));
        }
        let records = (0..count)
            .map(|i| {
                let at = header_bytes + i * record_bytes;
                ExtSmartRecord::decode(&b[at..at + record_bytes])
            })
            .collect();
        Ok(ExtSmartLog {
            timestamp_ms: le64(b, hdr::TIMESTAMP_MS),
            records,
        })
    }
}

impl ExtSmartRecord {
    fn encode(&self, b: &mut [u8]) {
        let mut flags = 0u8;
        put_bytes(b, rec::KIND, &[self.kind]);
        if let Some(t) = self.temperature_k {
            flags |= flag::TEMPERATURE;
            put16(b, rec::TEMPERATURE_K, t);
        }
        put32(b, rec::NSID, self.nsid);
        put_str_nul(b, rec::NAME, NAME_BYTES, &self.name);
        if let Some(p) = self.percentage_used {
            flags |= flag::PERCENTAGE_USED;
            put_bytes(b, rec::PERCENTAGE_USED, &[p]);
        }
        if let Some((s, t)) = self.spare {
            flags |= flag::SPARE;
            put_bytes(b, rec::AVAILABLE_SPARE, &[s, t]);
        }
        if let Some(g) = self.grade {
            flags |= flag::GRADE;
            put_bytes(b, rec::GRADE, &[g]);
        }
        put32(b, rec::QUEUE_DEPTH, self.queue_depth);
        put64(b, rec::QUEUE_DEPTH_AVG_MILLI, self.queue_depth_avg_milli);
        put64(b, rec::READ_BYTES, self.read_bytes);
        put64(b, rec::WRITE_BYTES, self.write_bytes);
        for (i, v) in self.ops.iter().enumerate() {
            put64(b, rec::OPS + 8 * i, *v);
        }
        for (i, v) in self.errors.iter().enumerate() {
            put64(b, rec::ERRORS + 8 * i, *v);
        }
        if let Some(m) = self.smart_media_errors {
            flags |= flag::SMART_MEDIA_ERRORS;
            put64(b, rec::SMART_MEDIA_ERRORS, m);
        }
        if let Some(lat) = &self.latency {
            flags |= flag::LATENCY;
            for (i, l) in lat.iter().enumerate() {
                let at = rec::LATENCY + rec::LATENCY_BYTES * i;
                put64(b, at, l.count);
                put32(b, at + 8, l.mean_us);
                put32(b, at + 12, l.p50_us);
                put32(b, at + 16, l.p99_us);
                put32(b, at + 20, l.p999_us);
                put32(b, at + 24, l.max_us);
            }
        }
        put_bytes(b, rec::FLAGS, &[flags]);
    }

    fn decode(b: &[u8]) -> ExtSmartRecord {
        let byte = |off: usize| b.get(off).copied().unwrap_or(0);
        let flags = byte(rec::FLAGS);
        let has = |f: u8| flags & f != 0;
        ExtSmartRecord {
            kind: byte(rec::KIND),
            nsid: le32(b, rec::NSID),
            name: get_str_nul(b, rec::NAME, NAME_BYTES),
            temperature_k: has(flag::TEMPERATURE).then(|| le16(b, rec::TEMPERATURE_K)),
            percentage_used: has(flag::PERCENTAGE_USED).then(|| byte(rec::PERCENTAGE_USED)),
            spare: has(flag::SPARE)
                .then(|| (byte(rec::AVAILABLE_SPARE), byte(rec::SPARE_THRESHOLD))),
            grade: has(flag::GRADE).then(|| byte(rec::GRADE)),
            queue_depth: le32(b, rec::QUEUE_DEPTH),
            queue_depth_avg_milli: le64(b, rec::QUEUE_DEPTH_AVG_MILLI),
            read_bytes: le64(b, rec::READ_BYTES),
            write_bytes: le64(b, rec::WRITE_BYTES),
            ops: std::array::from_fn(|i| le64(b, rec::OPS + 8 * i)),
            errors: std::array::from_fn(|i| le64(b, rec::ERRORS + 8 * i)),
            smart_media_errors: has(flag::SMART_MEDIA_ERRORS)
                .then(|| le64(b, rec::SMART_MEDIA_ERRORS)),
            latency: has(flag::LATENCY).then(|| {
                std::array::from_fn(|i| {
                    let at = rec::LATENCY + rec::LATENCY_BYTES * i;
                    LatencySummary {
                        count: le64(b, at),
                        mean_us: le32(b, at + 8),
                        p50_us: le32(b, at + 12),
                        p99_us: le32(b, at + 16),
                        p999_us: le32(b, at + 20),
                        max_us: le32(b, at + 24),
                    }
                })
            }),
        }
    }
}

const _: () = assert!(rec::LATENCY + 4 * rec::LATENCY_BYTES <= RECORD_BYTES);
const _: () = assert!(rec::NAME + NAME_BYTES <= rec::PERCENTAGE_USED);
const _: () = assert!(hdr::CRC32C + 4 <= HEADER_BYTES);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn sample() -> ExtSmartLog {
        ExtSmartLog {
            timestamp_ms: 123_456,
            records: vec![
                ExtSmartRecord {
                    kind: kind::DRIVE,
                    name: "d0".into(),
                    temperature_k: Some(310),
                    percentage_used: Some(3),
                    spare: Some((100, 10)),
                    grade: Some(0),
                    queue_depth: 4,
                    queue_depth_avg_milli: 3_500,
                    read_bytes: 1 << 30,
                    write_bytes: 1 << 29,
                    ops: [10, 20, 30, 40],
                    errors: [1, 2, 3],
                    smart_media_errors: Some(7),
                    latency: Some(
                        [LatencySummary {
                            count: 10,
                            mean_us: 100,
                            p50_us: 90,
                            p99_us: 400,
                            p999_us: 900,
                            max_us: 1000,
                        }; 4],
                    ),
                    nsid: 0,
                },
                ExtSmartRecord {
                    kind: kind::NAMESPACE,
                    nsid: 3,
                    name: "a-very-long-drive-name-longer-than-thirty-one-bytes".into(),
                    ..ExtSmartRecord::default()
                },
            ],
        }
    }

    #[test]
    fn round_trip_and_fixed_vector() {
        let log = sample();
        let b = log.to_bytes();
        assert_eq!(b.len(), 64 + 2 * 256);
        assert_eq!(&b[0..4], b"FBXS");
        assert_eq!(b[rec::NAME + 64..rec::NAME + 64 + 2], *b"d0");
        assert_eq!(le64(&b, 64 + rec::OPS + 8), 20);
        let back = ExtSmartLog::decode(&b).unwrap();
        assert_eq!(back.records[0], log.records[0]);
        assert_eq!(back.records[1].name, "a-very-long-drive-name-longer-t");
        assert_eq!(back.records[1].latency, None);
        // A version-1 reader of a page whose records grew keeps working.
        let mut grown = ExtSmartLog::default().to_bytes();
        put16(&mut grown, hdr::RECORD_BYTES, 300);
        put32(&mut grown, hdr::CRC32C, 0);
        let c = crc32c::crc32c(&grown);
        put32(&mut grown, hdr::CRC32C, c);
        assert!(ExtSmartLog::decode(&grown).unwrap().records.is_empty());
    }

    #[test]
    fn damage_is_detected() {
        let mut b = sample().to_bytes();
        b[200] ^= 1;
        assert!(matches!(
            ExtSmartLog::decode(&b),
            Err(DecodeError::InvalidField {
                reason: "checksum mismatch",
                ..
            })
        ));
        assert!(ExtSmartLog::decode(&b[..100]).is_err());
        assert!(ExtSmartLog::decode(&[0u8; 64]).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..1200)) {
            let _ = ExtSmartLog::decode(&b);
        }

        #[test]
        fn decode_of_a_valid_header_with_any_body_never_panics(
            body in proptest::collection::vec(any::<u8>(), 0..600),
            count in 0u16..4,
        ) {
            let mut b = ExtSmartLog::default().to_bytes();
            put16(&mut b, hdr::RECORD_COUNT, count);
            put32(&mut b, hdr::TOTAL_BYTES, 64 + u32::from(count) * 256);
            b.extend_from_slice(&body);
            put32(&mut b, hdr::CRC32C, 0);
            let total = (64 + usize::from(count) * 256).min(b.len());
            let c = crc32c::crc32c(&b[..total]);
            put32(&mut b, hdr::CRC32C, c);
            let _ = ExtSmartLog::decode(&b);
        }
    }
}
