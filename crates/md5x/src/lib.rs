//! MD5, as S3 needs it for ETags and Content-MD5, at the speed of many uploads at once.
//!
//! MD5 is one serial chain per message, so a single stream cannot use SIMD; a gateway
//! hashing many uploads at once can: [`Md5Lanes`] is a process-wide worker that hashes
//! up to eight streams together, one per 32-bit lane of an AVX2 vector (the technique of
//! MinIO's md5-simd). [`StreamMd5`] is what an upload holds: small updates are hashed in
//! place, whole blocks of large ones go to the lanes. Without AVX2 (or with one stream
//! active) the same scalar code hashes them.
//!
//! [`Md5`] is the plain scalar streaming hasher (RFC 1321), the reference the lanes are
//! tested against (and both against the `md-5` crate).

#[cfg(target_arch = "x86_64")]
mod avx2;
mod consts;
mod scalar;
mod service;

pub use service::{Md5Lanes, StreamMd5, lanes_supported};

use consts::{BLOCK_BYTES, INIT};

/// Streaming MD5, one block at a time.
#[derive(Clone, Debug)]
pub struct Md5 {
    state: [u32; 4],
    /// Bytes hashed so far (blocks compressed plus the tail).
    len_bytes: u64,
    tail: [u8; BLOCK_BYTES],
    tail_len: usize,
}

impl Default for Md5 {
    fn default() -> Md5 {
        Md5::new()
    }
}

impl Md5 {
    pub fn new() -> Md5 {
        Md5 {
            state: INIT,
            len_bytes: 0,
            tail: [0; BLOCK_BYTES],
            tail_len: 0,
        }
    }

    /// The digest of `data`.
    pub fn digest(data: &[u8]) -> [u8; 16] {
        let mut h = Md5::new();
        h.update(data);
        h.finalize()
    }

    pub fn update(&mut self, mut data: &[u8]) {
        self.len_bytes += data.len() as u64;
        if self.tail_len > 0 {
            let take = (BLOCK_BYTES - self.tail_len).min(data.len());
            self.tail[self.tail_len..self.tail_len + take].copy_from_slice(&data[..take]);
            self.tail_len += take;
            data = &data[take..];
            if self.tail_len < BLOCK_BYTES {
                return;
            }
            scalar::compress(&mut self.state, &self.tail);
            self.tail_len = 0;
        }
        let whole = data.len() - data.len() % BLOCK_BYTES;
        scalar::compress(&mut self.state, &data[..whole]);
        let rest = &data[whole..];
        self.tail[..rest.len()].copy_from_slice(rest);
        self.tail_len = rest.len();
    }

    /// Bytes to feed before the hasher is on a block boundary (0 when it is).
    fn to_boundary(&self) -> usize {
        (BLOCK_BYTES - self.tail_len) % BLOCK_BYTES
    }

    /// Takes over the state after `blocks_len` bytes of whole blocks were compressed
    /// elsewhere, from a block boundary.
    fn advance_blocks(&mut self, state: [u32; 4], blocks_len: usize) {
        debug_assert_eq!(self.tail_len, 0);
        debug_assert!(blocks_len.is_multiple_of(BLOCK_BYTES));
        self.state = state;
        self.len_bytes += blocks_len as u64;
    }

    pub fn finalize(mut self) -> [u8; 16] {
        let bits = self.len_bytes.wrapping_mul(8);
        let mut pad = [0u8; 2 * BLOCK_BYTES];
        pad[0] = 0x80;
        // The padding ends 8 bytes before a block boundary, then the length in bits.
        let pad_len = if self.tail_len < 56 {
            56 - self.tail_len
        } else {
            120 - self.tail_len
        };
        pad[pad_len..pad_len + 8].copy_from_slice(&bits.to_le_bytes());
        self.update(&pad[..pad_len + 8]);
        debug_assert_eq!(self.tail_len, 0);
        let mut out = [0u8; 16];
        for (o, w) in out.chunks_exact_mut(4).zip(self.state) {
            o.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// The digests of eight messages at once: their common whole blocks in the eight lanes
/// (AVX2; one after the other without it), the rest of each in place.
pub fn digest8(inputs: [&[u8]; 8]) -> [[u8; 16]; 8] {
    let common = inputs.iter().map(|d| d.len()).min().unwrap_or(0);
    let whole = common - common % BLOCK_BYTES;
    let mut states = [INIT; 8];
    service::compress8(&mut states, &inputs, whole / BLOCK_BYTES);
    std::array::from_fn(|l| {
        let mut h = Md5::new();
        h.advance_blocks(states[l], whole);
        h.update(&inputs[l][whole..]);
        h.finalize()
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use md5::Digest;
    use proptest::prelude::*;

    #[test]
    fn eight_messages_at_once() {
        let msgs: Vec<Vec<u8>> = (0..8u8)
            .map(|i| {
                (0..(1000 + 4099 * usize::from(i)))
                    .map(|j| (j as u8) ^ i)
                    .collect()
            })
            .collect();
        let got = digest8(std::array::from_fn(|i| msgs[i].as_slice()));
        for (g, m) in got.iter().zip(&msgs) {
            assert_eq!(*g, reference(m));
        }
    }

    fn reference(data: &[u8]) -> [u8; 16] {
        md5::Md5::digest(data).into()
    }

    #[test]
    fn rfc_1321_test_suite() {
        let cases: [(&str, &str); 7] = [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "d174ab98d277d9f5a5611c2c9f419d9f",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ];
        for (input, want) in cases {
            let got = Md5::digest(input.as_bytes());
            let hex: String = got.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex, want, "MD5({input:?})");
        }
    }

    proptest! {
        #[test]
        fn matches_md5_crate_in_any_pieces(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            cuts in proptest::collection::vec(0usize..3000, 0..6),
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut h = Md5::new();
            let mut at = 0;
            for c in cuts {
                h.update(&data[at..c]);
                at = c;
            }
            h.update(&data[at..]);
            prop_assert_eq!(h.finalize(), reference(&data));
        }
    }
}
