//! The shard value format: a 48-byte header, then the payload (one shard of one stripe).
//! Specified in `docs/object.md` ("Shard format"); all integers little-endian.
//!
//! ```text
//! offset size field
//!  0      4   magic "FBSH"
//!  4      2   format version (1)
//!  6      2   header size in bytes (48)
//!  8     16   piece id (the object, or the multipart part, the shard belongs to)
//! 24      4   stripe index
//! 28      1   shard index (0..k data, k..k+m parity)
//! 29      1   k (data shards per stripe)
//! 30      1   m (parity shards per stripe)
//! 31      1   flags (0)
//! 32      4   payload bytes
//! 36      4   stripe data bytes (the stripe's object bytes before padding)
//! 40      4   reserved (0)
//! 44      4   CRC32C of bytes 0..44 followed by the payload
//! 48      -   payload
//! ```
//!
//! The checksum covers the header, so a shard moved under another key or a stale shard
//! of another piece is caught as well as flipped bits: the reader checks the piece id,
//! stripe and shard index against what it asked for.

use sha2::Digest;

use crate::shard::{MAX_VALUE_BYTES, ShardKey};

pub const MAGIC: [u8; 4] = *b"FBSH";
pub const VERSION: u16 = 1;
pub const HEADER_BYTES: usize = 48;
/// The largest payload that fits one store value.
pub const MAX_PAYLOAD_BYTES: usize = MAX_VALUE_BYTES - HEADER_BYTES;

const CRC_OFFSET: usize = 44;
const _: () = assert!(CRC_OFFSET + 4 == HEADER_BYTES);

/// A piece's id: random, 16 bytes. A piece is what one stripe sequence encodes: a whole
/// object from one PUT, or one multipart part.
pub type PieceId = [u8; 16];

/// Where a shard belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardAddress {
    pub piece: PieceId,
    pub stripe: u32,
    pub shard: u8,
}

impl ShardAddress {
    /// The 16-byte store key of this shard: a hash, so keys spread evenly over a KV
    /// engine's index and tell nothing about the object.
    pub fn key(&self) -> ShardKey {
        let mut h = sha2::Sha256::new();
        h.update(b"ferrobay-shard-v1");
        h.update(self.piece);
        h.update(self.stripe.to_le_bytes());
        h.update([self.shard]);
        let digest = h.finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        ShardKey(key)
    }
}

/// The decoded header of a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardHeader {
    pub address: ShardAddress,
    pub data_shards: u8,
    pub parity_shards: u8,
    pub payload_bytes: u32,
    pub stripe_data_bytes: u32,
}

/// Why a stored value is not the shard that was asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardFormatError {
    #[error("value of {0} bytes is shorter than the shard header")]
    Truncated(usize),
    #[error("bad magic")]
    BadMagic,
    #[error("unsupported shard format version {0}")]
    Version(u16),
    #[error("payload length {header} in the header, {actual} in the value")]
    Length { header: u32, actual: usize },
    #[error("checksum mismatch")]
    Checksum,
    #[error("shard belongs to {found:?}, expected {expected:?}")]
    WrongShard {
        expected: ShardAddress,
        found: ShardAddress,
    },
}

/// Builds the store value of one shard: header followed by `payload`.
pub fn encode(header: &ShardHeader, payload: &[u8]) -> Vec<u8> {
    assert!(
        payload.len() <= MAX_PAYLOAD_BYTES,
        "shard payload too large"
    );
    let mut out = vec![0u8; HEADER_BYTES + payload.len()];
    out[HEADER_BYTES..].copy_from_slice(payload);
    encode_in_place(header, &mut out);
    out
}

/// Writes the header of a shard value whose payload is already in place:
/// `value[HEADER_BYTES..]` is the payload, `value[..HEADER_BYTES]` is overwritten.
pub fn encode_in_place(header: &ShardHeader, value: &mut [u8]) {
    assert!(value.len() >= HEADER_BYTES, "no room for the shard header");
    let (head, payload) = value.split_at_mut(HEADER_BYTES);
    assert!(
        payload.len() <= MAX_PAYLOAD_BYTES,
        "shard payload too large"
    );
    assert_eq!(payload.len(), header.payload_bytes as usize);
    head[0..4].copy_from_slice(&MAGIC);
    head[4..6].copy_from_slice(&VERSION.to_le_bytes());
    head[6..8].copy_from_slice(&(HEADER_BYTES as u16).to_le_bytes());
    head[8..24].copy_from_slice(&header.address.piece);
    head[24..28].copy_from_slice(&header.address.stripe.to_le_bytes());
    head[28] = header.address.shard;
    head[29] = header.data_shards;
    head[30] = header.parity_shards;
    head[31] = 0;
    head[32..36].copy_from_slice(&header.payload_bytes.to_le_bytes());
    head[36..40].copy_from_slice(&header.stripe_data_bytes.to_le_bytes());
    head[40..44].copy_from_slice(&[0; 4]);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&head[..CRC_OFFSET]), payload);
    head[CRC_OFFSET..HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Checks a stored value and returns its header and payload. `expected` is the shard the
/// caller asked for; a value of another shard is an error like a flipped bit.
pub fn decode<'a>(
    value: &'a [u8],
    expected: &ShardAddress,
) -> Result<(ShardHeader, &'a [u8]), ShardFormatError> {
    if value.len() < HEADER_BYTES {
        return Err(ShardFormatError::Truncated(value.len()));
    }
    if value[..4] != MAGIC {
        return Err(ShardFormatError::BadMagic);
    }
    let version = u16_at(value, 4);
    if version != VERSION || usize::from(u16_at(value, 6)) != HEADER_BYTES {
        return Err(ShardFormatError::Version(version));
    }
    let payload = &value[HEADER_BYTES..];
    let payload_bytes = u32_at(value, 32);
    if payload_bytes as usize != payload.len() {
        return Err(ShardFormatError::Length {
            header: payload_bytes,
            actual: payload.len(),
        });
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(&value[..CRC_OFFSET]), payload);
    if crc != u32_at(value, CRC_OFFSET) {
        return Err(ShardFormatError::Checksum);
    }
    let mut piece = [0u8; 16];
    piece.copy_from_slice(&value[8..24]);
    let address = ShardAddress {
        piece,
        stripe: u32_at(value, 24),
        shard: value[28],
    };
    if address != *expected {
        return Err(ShardFormatError::WrongShard {
            expected: *expected,
            found: address,
        });
    }
    Ok((
        ShardHeader {
            address,
            data_shards: value[29],
            parity_shards: value[30],
            payload_bytes,
            stripe_data_bytes: u32_at(value, 36),
        },
        payload,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header(payload: usize) -> ShardHeader {
        ShardHeader {
            address: ShardAddress {
                piece: [7; 16],
                stripe: 3,
                shard: 2,
            },
            data_shards: 2,
            parity_shards: 1,
            payload_bytes: payload as u32,
            stripe_data_bytes: 100,
        }
    }

    #[test]
    fn round_trip_and_offsets() {
        let h = header(5);
        let v = encode(&h, b"hello");
        assert_eq!(v.len(), HEADER_BYTES + 5);
        assert_eq!(&v[0..4], b"FBSH");
        assert_eq!(u32_at(&v, 24), 3);
        assert_eq!(v[28], 2);
        assert_eq!(u32_at(&v, 32), 5);
        assert_eq!(u32_at(&v, 36), 100);
        assert_eq!(decode(&v, &h.address), Ok((h, &b"hello"[..])));
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let h = header(8);
        let v = encode(&h, b"payload!");
        for byte in 0..v.len() {
            for bit in 0..8 {
                let mut bad = v.clone();
                bad[byte] ^= 1 << bit;
                assert!(decode(&bad, &h.address).is_err(), "byte {byte} bit {bit}");
            }
        }
    }

    #[test]
    fn another_shard_is_refused() {
        let h = header(1);
        let v = encode(&h, b"x");
        let mut other = h.address;
        other.stripe = 4;
        assert!(matches!(
            decode(&v, &other),
            Err(ShardFormatError::WrongShard { .. })
        ));
    }

    #[test]
    fn keys_differ_per_shard() {
        let a = ShardAddress {
            piece: [1; 16],
            stripe: 0,
            shard: 0,
        };
        let mut b = a;
        b.shard = 1;
        let mut c = a;
        c.stripe = 1;
        assert_ne!(a.key(), b.key());
        assert_ne!(a.key(), c.key());
        assert_eq!(a.key(), a.key());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode(&bytes, &header(0).address);
        }
    }
}
