//! Eight lanes of MD5 in AVX2: one stream per 32-bit lane of a 256-bit vector, the 64
//! steps unrolled (generated from the RFC 1321 schedule in `consts`). The message words of
//! the eight lanes' blocks are transposed into vectors, eight rows of eight words at a time.
//! The helpers are macros so that everything expands inside the one `target_feature`
//! function.

#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m256i, _mm256_add_epi32, _mm256_and_si256, _mm256_andnot_si256, _mm256_loadu_si256,
    _mm256_or_si256, _mm256_permute2x128_si256, _mm256_set_epi32, _mm256_set1_epi32,
    _mm256_slli_epi32, _mm256_srli_epi32, _mm256_storeu_si256, _mm256_unpackhi_epi32,
    _mm256_unpackhi_epi64, _mm256_unpacklo_epi32, _mm256_unpacklo_epi64, _mm256_xor_si256,
};

use crate::consts::{BLOCK_BYTES, K};

/// Lanes per vector.
pub const LANES: usize = 8;

/// The round function of step `$f` on b, c, d.
macro_rules! round_fn {
    (f, $b:expr, $c:expr, $d:expr) => {
        _mm256_or_si256(_mm256_and_si256($b, $c), _mm256_andnot_si256($b, $d))
    };
    (g, $b:expr, $c:expr, $d:expr) => {
        _mm256_or_si256(_mm256_and_si256($b, $d), _mm256_andnot_si256($d, $c))
    };
    (h, $b:expr, $c:expr, $d:expr) => {
        _mm256_xor_si256(_mm256_xor_si256($b, $c), $d)
    };
    (i, $b:expr, $c:expr, $d:expr) => {
        _mm256_xor_si256(
            $c,
            _mm256_or_si256($b, _mm256_xor_si256($d, _mm256_set1_epi32(-1))),
        )
    };
}

/// `$a = $b + rotl($a + F($b, $c, $d) + K[$i] + $m, $s)` ($r = 32 - $s).
macro_rules! step {
    ($f:ident, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $i:literal, $s:literal, $r:literal) => {
        // K[i] as a lane value: only the bits matter.
        let k = _mm256_set1_epi32(K[$i] as i32);
        let t = _mm256_add_epi32(
            _mm256_add_epi32($a, round_fn!($f, $b, $c, $d)),
            _mm256_add_epi32(k, $m),
        );
        let rot = _mm256_or_si256(_mm256_slli_epi32::<$s>(t), _mm256_srli_epi32::<$r>(t));
        $a = _mm256_add_epi32(rot, $b);
    };
}

/// Rows `r[l]` = eight consecutive words of lane l; gives `c[w]` = word w of every lane.
macro_rules! transpose {
    ($r:expr) => {{
        let r = $r;
        let t0 = _mm256_unpacklo_epi32(r[0], r[1]);
        let t1 = _mm256_unpackhi_epi32(r[0], r[1]);
        let t2 = _mm256_unpacklo_epi32(r[2], r[3]);
        let t3 = _mm256_unpackhi_epi32(r[2], r[3]);
        let t4 = _mm256_unpacklo_epi32(r[4], r[5]);
        let t5 = _mm256_unpackhi_epi32(r[4], r[5]);
        let t6 = _mm256_unpacklo_epi32(r[6], r[7]);
        let t7 = _mm256_unpackhi_epi32(r[6], r[7]);
        let u0 = _mm256_unpacklo_epi64(t0, t2);
        let u1 = _mm256_unpackhi_epi64(t0, t2);
        let u2 = _mm256_unpacklo_epi64(t1, t3);
        let u3 = _mm256_unpackhi_epi64(t1, t3);
        let u4 = _mm256_unpacklo_epi64(t4, t6);
        let u5 = _mm256_unpackhi_epi64(t4, t6);
        let u6 = _mm256_unpacklo_epi64(t5, t7);
        let u7 = _mm256_unpackhi_epi64(t5, t7);
        [
            _mm256_permute2x128_si256::<0x20>(u0, u4),
            _mm256_permute2x128_si256::<0x20>(u1, u5),
            _mm256_permute2x128_si256::<0x20>(u2, u6),
            _mm256_permute2x128_si256::<0x20>(u3, u7),
            _mm256_permute2x128_si256::<0x31>(u0, u4),
            _mm256_permute2x128_si256::<0x31>(u1, u5),
            _mm256_permute2x128_si256::<0x31>(u2, u6),
            _mm256_permute2x128_si256::<0x31>(u3, u7),
        ]
    }};
}

/// Compresses `blocks` 64-byte blocks of every lane: `state[l]` with the bytes at
/// `lanes[l]`.
///
/// # Safety
/// The CPU supports AVX2; every `lanes[l]` is valid for reads of `blocks * 64` bytes.
#[target_feature(enable = "avx2")]
pub unsafe fn compress(state: &mut [[u32; 4]; LANES], lanes: &[*const u8; LANES], blocks: usize) {
    let word = |w: usize| {
        _mm256_set_epi32(
            state[7][w] as i32,
            state[6][w] as i32,
            state[5][w] as i32,
            state[4][w] as i32,
            state[3][w] as i32,
            state[2][w] as i32,
            state[1][w] as i32,
            state[0][w] as i32,
        )
    };
    let (mut sa, mut sb, mut sc, mut sd) = (word(0), word(1), word(2), word(3));
    for n in 0..blocks {
        let at = n * BLOCK_BYTES;
        // SAFETY: bytes at..at + 64 lie within the `blocks * 64` readable bytes of every
        // lane (the caller's guarantee); unaligned loads accept any address.
        let (lo, hi): ([__m256i; 8], [__m256i; 8]) = unsafe {
            (
                std::array::from_fn(|l| _mm256_loadu_si256(lanes[l].add(at).cast())),
                std::array::from_fn(|l| _mm256_loadu_si256(lanes[l].add(at + 32).cast())),
            )
        };
        let (lo, hi) = (transpose!(lo), transpose!(hi));
        let m: [__m256i; 16] = std::array::from_fn(|w| if w < 8 { lo[w] } else { hi[w - 8] });
        let (mut a, mut b, mut c, mut d) = (sa, sb, sc, sd);
        step!(f, a, b, c, d, m[0], 0, 7, 25);
        step!(f, d, a, b, c, m[1], 1, 12, 20);
        step!(f, c, d, a, b, m[2], 2, 17, 15);
        step!(f, b, c, d, a, m[3], 3, 22, 10);
        step!(f, a, b, c, d, m[4], 4, 7, 25);
        step!(f, d, a, b, c, m[5], 5, 12, 20);
        step!(f, c, d, a, b, m[6], 6, 17, 15);
        step!(f, b, c, d, a, m[7], 7, 22, 10);
        step!(f, a, b, c, d, m[8], 8, 7, 25);
        step!(f, d, a, b, c, m[9], 9, 12, 20);
        step!(f, c, d, a, b, m[10], 10, 17, 15);
        step!(f, b, c, d, a, m[11], 11, 22, 10);
        step!(f, a, b, c, d, m[12], 12, 7, 25);
        step!(f, d, a, b, c, m[13], 13, 12, 20);
        step!(f, c, d, a, b, m[14], 14, 17, 15);
        step!(f, b, c, d, a, m[15], 15, 22, 10);
        step!(g, a, b, c, d, m[1], 16, 5, 27);
        step!(g, d, a, b, c, m[6], 17, 9, 23);
        step!(g, c, d, a, b, m[11], 18, 14, 18);
        step!(g, b, c, d, a, m[0], 19, 20, 12);
        step!(g, a, b, c, d, m[5], 20, 5, 27);
        step!(g, d, a, b, c, m[10], 21, 9, 23);
        step!(g, c, d, a, b, m[15], 22, 14, 18);
        step!(g, b, c, d, a, m[4], 23, 20, 12);
        step!(g, a, b, c, d, m[9], 24, 5, 27);
        step!(g, d, a, b, c, m[14], 25, 9, 23);
        step!(g, c, d, a, b, m[3], 26, 14, 18);
        step!(g, b, c, d, a, m[8], 27, 20, 12);
        step!(g, a, b, c, d, m[13], 28, 5, 27);
        step!(g, d, a, b, c, m[2], 29, 9, 23);
        step!(g, c, d, a, b, m[7], 30, 14, 18);
        step!(g, b, c, d, a, m[12], 31, 20, 12);
        step!(h, a, b, c, d, m[5], 32, 4, 28);
        step!(h, d, a, b, c, m[8], 33, 11, 21);
        step!(h, c, d, a, b, m[11], 34, 16, 16);
        step!(h, b, c, d, a, m[14], 35, 23, 9);
        step!(h, a, b, c, d, m[1], 36, 4, 28);
        step!(h, d, a, b, c, m[4], 37, 11, 21);
        step!(h, c, d, a, b, m[7], 38, 16, 16);
        step!(h, b, c, d, a, m[10], 39, 23, 9);
        step!(h, a, b, c, d, m[13], 40, 4, 28);
        step!(h, d, a, b, c, m[0], 41, 11, 21);
        step!(h, c, d, a, b, m[3], 42, 16, 16);
        step!(h, b, c, d, a, m[6], 43, 23, 9);
        step!(h, a, b, c, d, m[9], 44, 4, 28);
        step!(h, d, a, b, c, m[12], 45, 11, 21);
        step!(h, c, d, a, b, m[15], 46, 16, 16);
        step!(h, b, c, d, a, m[2], 47, 23, 9);
        step!(i, a, b, c, d, m[0], 48, 6, 26);
        step!(i, d, a, b, c, m[7], 49, 10, 22);
        step!(i, c, d, a, b, m[14], 50, 15, 17);
        step!(i, b, c, d, a, m[5], 51, 21, 11);
        step!(i, a, b, c, d, m[12], 52, 6, 26);
        step!(i, d, a, b, c, m[3], 53, 10, 22);
        step!(i, c, d, a, b, m[10], 54, 15, 17);
        step!(i, b, c, d, a, m[1], 55, 21, 11);
        step!(i, a, b, c, d, m[8], 56, 6, 26);
        step!(i, d, a, b, c, m[15], 57, 10, 22);
        step!(i, c, d, a, b, m[6], 58, 15, 17);
        step!(i, b, c, d, a, m[13], 59, 21, 11);
        step!(i, a, b, c, d, m[4], 60, 6, 26);
        step!(i, d, a, b, c, m[11], 61, 10, 22);
        step!(i, c, d, a, b, m[2], 62, 15, 17);
        step!(i, b, c, d, a, m[9], 63, 21, 11);
        sa = _mm256_add_epi32(sa, a);
        sb = _mm256_add_epi32(sb, b);
        sc = _mm256_add_epi32(sc, c);
        sd = _mm256_add_epi32(sd, d);
    }
    let mut out = [[0u32; LANES]; 4];
    for (o, v) in out.iter_mut().zip([sa, sb, sc, sd]) {
        // SAFETY: `o` is 32 writable bytes; unaligned stores accept any address.
        unsafe { _mm256_storeu_si256(o.as_mut_ptr().cast(), v) };
    }
    for (l, s) in state.iter_mut().enumerate() {
        *s = [out[0][l], out[1][l], out[2][l], out[3][l]];
    }
}
