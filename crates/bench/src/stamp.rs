//! Verification stamps: every 512-byte sector of a written block carries who wrote it,
//! and which sectors that write covered. The layout is specified in docs/bench.md.
//!
//! Version 2 (magic "FBV2"), little-endian:
//! `0..4 magic | 4..8 generation | 8..16 device offset of this sector | 16..20 write id
//!  (same in every sector of one write) | 20..24 CRC-32C of the sector with this field
//!  zeroed | 24..32 device offset of the write's first sector | 32..36 sectors the write
//!  covered | 36..40 zero | 40..512 pseudo-random payload`.
//! Version 1 ("FBV1", the same up to byte 24, payload from 24) is still read; it does
//! not say which sectors its write covered.
//!
//! A read then tells a good sector from a lost write (older generation or write id), a
//! misdirected one (offset of another sector), a torn one (sectors of one write's extent
//! from different writes), and corruption (CRC), whatever block size reads it.

const MAGIC_V1: [u8; 4] = *b"FBV1";
const MAGIC_V2: [u8; 4] = *b"FBV2";
pub const SECTOR_BYTES: usize = 512;
const CRC_AT: usize = 20;
const EXTENT_AT: usize = 24;
const EXTENT_SECTORS_AT: usize = 32;
const PAYLOAD_V2_AT: usize = 40;

// The payload is filled 8 bytes at a time.
const _: () = assert!((SECTOR_BYTES - PAYLOAD_V2_AT).is_multiple_of(8));
const _: () = assert!(EXTENT_SECTORS_AT + 4 <= PAYLOAD_V2_AT);

/// The sectors one write covered: `offset_bytes..offset_bytes + len_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Extent {
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

impl Extent {
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes.saturating_add(self.len_bytes)
    }
    pub fn contains(&self, offset_bytes: u64) -> bool {
        (self.offset_bytes..self.end_bytes()).contains(&offset_bytes)
    }
}

/// What a sector holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampCheck {
    /// A valid stamp; `extent` is None for version 1 stamps.
    Ok {
        generation: u32,
        write_id: u32,
        extent: Option<Extent>,
    },
    /// All zeroes: never written.
    Unwritten,
    /// Valid stamp of another offset: a misdirected write.
    Misdirected { found_offset_bytes: u64 },
    /// Not a stamp, or its checksum does not match.
    Corrupt,
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Fills `block` (a multiple of 512 bytes) as written by one write at `offset_bytes`.
pub fn stamp_block(block: &mut [u8], offset_bytes: u64, generation: u32, write_id: u32) {
    let sectors = (block.len() / SECTOR_BYTES) as u32;
    for (i, sector) in block.chunks_exact_mut(SECTOR_BYTES).enumerate() {
        let off = offset_bytes + (i * SECTOR_BYTES) as u64;
        sector[0..4].copy_from_slice(&MAGIC_V2);
        sector[4..8].copy_from_slice(&generation.to_le_bytes());
        sector[8..16].copy_from_slice(&off.to_le_bytes());
        sector[16..20].copy_from_slice(&write_id.to_le_bytes());
        sector[CRC_AT..CRC_AT + 4].fill(0);
        sector[EXTENT_AT..EXTENT_AT + 8].copy_from_slice(&offset_bytes.to_le_bytes());
        sector[EXTENT_SECTORS_AT..EXTENT_SECTORS_AT + 4].copy_from_slice(&sectors.to_le_bytes());
        sector[EXTENT_SECTORS_AT + 4..PAYLOAD_V2_AT].fill(0);
        let mut x =
            off ^ (u64::from(generation) << 32) ^ u64::from(write_id) ^ 0x9E37_79B9_7F4A_7C15;
        for word in sector[PAYLOAD_V2_AT..].chunks_exact_mut(8) {
            // xorshift64: cheap, deterministic filler so that payload corruption is visible.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.copy_from_slice(&x.to_le_bytes());
        }
        let crc = crc32c::crc32c(sector);
        sector[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Checks one 512-byte sector read from `offset_bytes`.
pub fn check_sector(sector: &[u8], offset_bytes: u64) -> StampCheck {
    if sector.len() != SECTOR_BYTES {
        return StampCheck::Corrupt;
    }
    if sector.iter().all(|&b| b == 0) {
        return StampCheck::Unwritten;
    }
    let v2 = match sector[0..4].try_into() {
        Ok(MAGIC_V2) => true,
        Ok(MAGIC_V1) => false,
        _ => return StampCheck::Corrupt,
    };
    let crc = crc32c::crc32c_append(crc32c::crc32c(&sector[..CRC_AT]), &[0u8; 4]);
    let crc = crc32c::crc32c_append(crc, &sector[CRC_AT + 4..]);
    if crc != le32(sector, CRC_AT) {
        return StampCheck::Corrupt;
    }
    let found = le64(sector, 8);
    if found != offset_bytes {
        return StampCheck::Misdirected {
            found_offset_bytes: found,
        };
    }
    let extent = if v2 {
        let e = Extent {
            offset_bytes: le64(sector, EXTENT_AT),
            len_bytes: u64::from(le32(sector, EXTENT_SECTORS_AT)) * SECTOR_BYTES as u64,
        };
        // A stamp whose write did not cover its own sector was not written by us.
        if !e.contains(offset_bytes) || le32(sector, EXTENT_SECTORS_AT + 4) != 0 {
            return StampCheck::Corrupt;
        }
        Some(e)
    } else {
        None
    };
    StampCheck::Ok {
        generation: le32(sector, 4),
        write_id: le32(sector, 16),
        extent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn detects_each_failure() {
        let mut b = vec![0u8; 4096];
        assert_eq!(check_sector(&b[..512], 0), StampCheck::Unwritten);
        stamp_block(&mut b, 8192, 3, 77);
        let extent = Some(Extent {
            offset_bytes: 8192,
            len_bytes: 4096,
        });
        assert_eq!(
            check_sector(&b[512..1024], 8704),
            StampCheck::Ok {
                generation: 3,
                write_id: 77,
                extent
            }
        );
        assert_eq!(
            check_sector(&b[512..1024], 0),
            StampCheck::Misdirected {
                found_offset_bytes: 8704
            }
        );
        b[700] ^= 1;
        assert_eq!(check_sector(&b[512..1024], 8704), StampCheck::Corrupt);
    }

    /// The bytes of the format as docs/bench.md gives them, for one sector.
    #[test]
    fn layout_is_the_documented_one() {
        let mut b = vec![0u8; 1024];
        stamp_block(&mut b, 0x1_0000, 5, 0x0102_0304);
        let s = &b[512..1024];
        assert_eq!(&s[0..4], b"FBV2");
        assert_eq!(s[4..8], 5u32.to_le_bytes());
        assert_eq!(s[8..16], 0x1_0200u64.to_le_bytes());
        assert_eq!(s[16..20], 0x0102_0304u32.to_le_bytes());
        let mut zeroed = s.to_vec();
        zeroed[20..24].fill(0);
        assert_eq!(s[20..24], crc32c::crc32c(&zeroed).to_le_bytes());
        assert_eq!(s[24..32], 0x1_0000u64.to_le_bytes());
        assert_eq!(s[32..36], 2u32.to_le_bytes());
        assert_eq!(s[36..40], [0u8; 4]);
    }

    /// A version 1 sector (written by earlier builds) still reads as a stamp.
    #[test]
    fn version_1_stamps_are_read() {
        let mut s = vec![0u8; 512];
        s[0..4].copy_from_slice(b"FBV1");
        s[4..8].copy_from_slice(&2u32.to_le_bytes());
        s[8..16].copy_from_slice(&4096u64.to_le_bytes());
        s[16..20].copy_from_slice(&9u32.to_le_bytes());
        s[24..].fill(0xA5);
        let crc = crc32c::crc32c(&s);
        s[20..24].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            check_sector(&s, 4096),
            StampCheck::Ok {
                generation: 2,
                write_id: 9,
                extent: None
            }
        );
    }

    #[test]
    fn an_extent_that_misses_its_sector_is_corrupt() {
        let mut b = vec![0u8; 512];
        stamp_block(&mut b, 4096, 1, 1);
        b[24..32].copy_from_slice(&0u64.to_le_bytes());
        b[20..24].fill(0);
        let crc = crc32c::crc32c(&b);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(check_sector(&b, 4096), StampCheck::Corrupt);
    }

    proptest! {
        #[test]
        fn stamped_blocks_check_ok(sectors in 1usize..16, off in 0u64..1_000_000, g: u32, w: u32) {
            let mut b = vec![0u8; sectors * 512];
            let off = off * 512;
            stamp_block(&mut b, off, g, w);
            let extent = Some(Extent { offset_bytes: off, len_bytes: b.len() as u64 });
            for (i, s) in b.chunks_exact(512).enumerate() {
                prop_assert_eq!(check_sector(s, off + 512 * i as u64), StampCheck::Ok { generation: g, write_id: w, extent });
            }
        }

        #[test]
        fn no_sector_makes_the_check_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600), off: u64) {
            let _ = check_sector(&bytes, off);
        }
    }
}
