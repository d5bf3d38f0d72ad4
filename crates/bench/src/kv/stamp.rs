//! Keys and verification stamps of the KV mode. Specified in docs/bench.md ("KV mode").
//!
//! Key of index `i` (16 bytes): `FBKV` | 4 zero bytes | `i` as a big-endian u64, so that
//! keys list in index order.
//!
//! A value written with `--verify` (at least [`HEADER_BYTES`] long), little-endian:
//! `0..4 magic "FBKV" | 4..8 generation | 8..16 key index | 16..20 write id (job << 24 |
//! per-job counter, never 0) | 20..24 CRC-32C of the whole value with this field zeroed |
//! 24..28 value length | 28..32 zero | 32.. xorshift64 payload seeded from key index,
//! generation and write id`.

pub const KEY_BYTES: usize = 16;
/// Bytes of the stamp's header; `--verify` values are at least this long.
pub const HEADER_BYTES: usize = 32;
const MAGIC: [u8; 4] = *b"FBKV";
const CRC_AT: usize = 20;

/// The key of index `index`.
pub fn key_of(index: u64) -> [u8; KEY_BYTES] {
    let mut k = [0u8; KEY_BYTES];
    k[..4].copy_from_slice(b"FBKV");
    k[8..].copy_from_slice(&index.to_be_bytes());
    k
}

/// Fills `value` as write `write_id` of generation `generation` of key `index`.
pub fn stamp_value(value: &mut [u8], index: u64, generation: u32, write_id: u32) {
    if value.len() < HEADER_BYTES {
        return;
    }
    value[0..4].copy_from_slice(&MAGIC);
    value[4..8].copy_from_slice(&generation.to_le_bytes());
    value[8..16].copy_from_slice(&index.to_le_bytes());
    value[16..20].copy_from_slice(&write_id.to_le_bytes());
    value[CRC_AT..CRC_AT + 4].fill(0);
    let len = value.len() as u32;
    value[24..28].copy_from_slice(&len.to_le_bytes());
    value[28..32].fill(0);
    let mut x = index ^ (u64::from(generation) << 32) ^ u64::from(write_id) ^ 0x9E37_79B9_7F4A_7C15;
    let mut words = value[HEADER_BYTES..].chunks_exact_mut(8);
    for w in &mut words {
        // xorshift64: cheap, deterministic filler so that payload corruption is visible.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
    let tail = words.into_remainder();
    let n = tail.len();
    tail.copy_from_slice(&x.rotate_left(7).to_le_bytes()[..n]);
    let crc = crc32c::crc32c(value);
    value[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

/// What a retrieved value holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueCheck {
    /// A valid stamp for this key.
    Ok { generation: u32, write_id: u32 },
    /// A valid stamp of another key's value.
    OtherKey { index: u64 },
    /// Not a stamp, its checksum or its length does not match.
    Corrupt,
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

/// Checks a whole value retrieved for key `index`.
pub fn check_value(value: &[u8], index: u64) -> ValueCheck {
    if value.len() < HEADER_BYTES || value[0..4] != MAGIC {
        return ValueCheck::Corrupt;
    }
    if le32(value, 24) as usize != value.len() {
        return ValueCheck::Corrupt;
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(&value[..CRC_AT]), &[0u8; 4]);
    let crc = crc32c::crc32c_append(crc, &value[CRC_AT + 4..]);
    if crc != le32(value, CRC_AT) {
        return ValueCheck::Corrupt;
    }
    let mut w = [0u8; 8];
    w.copy_from_slice(&value[8..16]);
    let found = u64::from_le_bytes(w);
    if found != index {
        return ValueCheck::OtherKey { index: found };
    }
    ValueCheck::Ok {
        generation: le32(value, 4),
        write_id: le32(value, 16),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_index() {
        assert_eq!(&key_of(0)[..8], b"FBKV\0\0\0\0");
        assert!(key_of(255) < key_of(256));
        assert_eq!(key_of(0x0102)[14..], [1, 2]);
    }

    #[test]
    fn stamps_check_and_every_flip_is_caught() {
        for len in [32usize, 33, 100, 4096, 4099] {
            let mut v = vec![0u8; len];
            stamp_value(&mut v, 7, 3, 0x0100_0005);
            assert_eq!(
                check_value(&v, 7),
                ValueCheck::Ok {
                    generation: 3,
                    write_id: 0x0100_0005
                }
            );
            assert_eq!(check_value(&v, 8), ValueCheck::OtherKey { index: 7 });
            assert_eq!(check_value(&v[..len - 1], 7), ValueCheck::Corrupt);
            for bit in (0..len * 8).step_by(37) {
                let mut bad = v.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                assert_ne!(
                    check_value(&bad, 7),
                    ValueCheck::Ok {
                        generation: 3,
                        write_id: 0x0100_0005
                    },
                    "len {len} bit {bit}"
                );
            }
        }
        assert_eq!(check_value(&[0u8; 64], 1), ValueCheck::Corrupt);
    }
}
