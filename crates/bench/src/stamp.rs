//! Verification stamps: every 512-byte sector of a written block carries who wrote it.
//!
//! Sector layout (little-endian):
//! `0..4 magic "FBV1" | 4..8 generation | 8..16 device offset of this sector |
//!  16..20 write id (same in every sector of one write) | 20..24 CRC-32C of the sector with
//!  this field zeroed | 24..512 pseudo-random payload`.
//! A read then tells a good sector from a lost write (older generation or write id), a
//! misdirected one (offset of another sector), a torn one (sectors of one block from
//! different writes) and corruption (CRC).

const MAGIC: [u8; 4] = *b"FBV1";
const SECTOR: usize = 512;
const CRC_AT: usize = 20;

/// What a sector holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampCheck {
    /// A valid stamp.
    Ok { generation: u32, write_id: u32 },
    /// All zeroes: never written.
    Unwritten,
    /// Valid stamp of another offset: a misdirected write.
    Misdirected { found_offset_bytes: u64 },
    /// Not a stamp, or its checksum does not match.
    Corrupt,
}

/// Fills `block` (a multiple of 512 bytes) as written at `offset_bytes`.
pub fn stamp_block(block: &mut [u8], offset_bytes: u64, generation: u32, write_id: u32) {
    for (i, sector) in block.chunks_exact_mut(SECTOR).enumerate() {
        let off = offset_bytes + (i * SECTOR) as u64;
        sector[0..4].copy_from_slice(&MAGIC);
        sector[4..8].copy_from_slice(&generation.to_le_bytes());
        sector[8..16].copy_from_slice(&off.to_le_bytes());
        sector[16..20].copy_from_slice(&write_id.to_le_bytes());
        sector[CRC_AT..CRC_AT + 4].fill(0);
        let mut x =
            off ^ (u64::from(generation) << 32) ^ u64::from(write_id) ^ 0x9E37_79B9_7F4A_7C15;
        for word in sector[24..].chunks_exact_mut(8) {
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
    if sector.len() != SECTOR {
        return StampCheck::Corrupt;
    }
    if sector.iter().all(|&b| b == 0) {
        return StampCheck::Unwritten;
    }
    if sector[0..4] != MAGIC {
        return StampCheck::Corrupt;
    }
    let mut crc_bytes = [0u8; 4];
    crc_bytes.copy_from_slice(&sector[CRC_AT..CRC_AT + 4]);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&sector[..CRC_AT]), &[0u8; 4]);
    let crc = crc32c::crc32c_append(crc, &sector[CRC_AT + 4..]);
    if crc != u32::from_le_bytes(crc_bytes) {
        return StampCheck::Corrupt;
    }
    let word = |a: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&sector[a..a + 4]);
        u32::from_le_bytes(w)
    };
    let mut o = [0u8; 8];
    o.copy_from_slice(&sector[8..16]);
    let found = u64::from_le_bytes(o);
    if found != offset_bytes {
        return StampCheck::Misdirected {
            found_offset_bytes: found,
        };
    }
    StampCheck::Ok {
        generation: word(4),
        write_id: word(16),
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
        assert_eq!(
            check_sector(&b[512..1024], 8704),
            StampCheck::Ok {
                generation: 3,
                write_id: 77
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

    proptest! {
        #[test]
        fn stamped_blocks_check_ok(sectors in 1usize..16, off in 0u64..1_000_000, g: u32, w: u32) {
            let mut b = vec![0u8; sectors * 512];
            let off = off * 512;
            stamp_block(&mut b, off, g, w);
            for (i, s) in b.chunks_exact(512).enumerate() {
                prop_assert_eq!(check_sector(s, off + 512 * i as u64), StampCheck::Ok { generation: g, write_id: w });
            }
        }
    }
}
