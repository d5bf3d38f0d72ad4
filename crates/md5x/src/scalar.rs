//! The one-lane compression function, the 64 steps unrolled (generated from the RFC 1321
//! schedule in `consts`, like the AVX2 lanes).

use crate::consts::{BLOCK_BYTES, K};

/// `$a = $b + rotl($a + F($b, $c, $d) + K[$i] + $m, $s)`.
macro_rules! step {
    ($f:ident, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $i:literal, $s:literal) => {
        let f = match stringify!($f).as_bytes()[0] {
            b'f' => ($b & $c) | (!$b & $d),
            // The two terms share no bits: adding them is the same as or-ing (and
            // shortens the dependency chain).
            b'g' => ($b & $d).wrapping_add($c & !$d),
            b'h' => $b ^ $c ^ $d,
            _ => $c ^ ($b | !$d),
        };
        $a = $a
            .wrapping_add(f)
            .wrapping_add(K[$i])
            .wrapping_add($m)
            .rotate_left($s)
            .wrapping_add($b);
    };
}

/// Compresses whole 64-byte blocks of `data` into `state` (`data.len()` a multiple of 64).
pub fn compress(state: &mut [u32; 4], data: &[u8]) {
    debug_assert!(data.len().is_multiple_of(BLOCK_BYTES));
    for block in data.chunks_exact(BLOCK_BYTES) {
        let mut m = [0u32; 16];
        for (w, b) in m.iter_mut().zip(block.chunks_exact(4)) {
            *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        let [mut a, mut b, mut c, mut d] = *state;
        step!(f, a, b, c, d, m[0], 0, 7);
        step!(f, d, a, b, c, m[1], 1, 12);
        step!(f, c, d, a, b, m[2], 2, 17);
        step!(f, b, c, d, a, m[3], 3, 22);
        step!(f, a, b, c, d, m[4], 4, 7);
        step!(f, d, a, b, c, m[5], 5, 12);
        step!(f, c, d, a, b, m[6], 6, 17);
        step!(f, b, c, d, a, m[7], 7, 22);
        step!(f, a, b, c, d, m[8], 8, 7);
        step!(f, d, a, b, c, m[9], 9, 12);
        step!(f, c, d, a, b, m[10], 10, 17);
        step!(f, b, c, d, a, m[11], 11, 22);
        step!(f, a, b, c, d, m[12], 12, 7);
        step!(f, d, a, b, c, m[13], 13, 12);
        step!(f, c, d, a, b, m[14], 14, 17);
        step!(f, b, c, d, a, m[15], 15, 22);
        step!(g, a, b, c, d, m[1], 16, 5);
        step!(g, d, a, b, c, m[6], 17, 9);
        step!(g, c, d, a, b, m[11], 18, 14);
        step!(g, b, c, d, a, m[0], 19, 20);
        step!(g, a, b, c, d, m[5], 20, 5);
        step!(g, d, a, b, c, m[10], 21, 9);
        step!(g, c, d, a, b, m[15], 22, 14);
        step!(g, b, c, d, a, m[4], 23, 20);
        step!(g, a, b, c, d, m[9], 24, 5);
        step!(g, d, a, b, c, m[14], 25, 9);
        step!(g, c, d, a, b, m[3], 26, 14);
        step!(g, b, c, d, a, m[8], 27, 20);
        step!(g, a, b, c, d, m[13], 28, 5);
        step!(g, d, a, b, c, m[2], 29, 9);
        step!(g, c, d, a, b, m[7], 30, 14);
        step!(g, b, c, d, a, m[12], 31, 20);
        step!(h, a, b, c, d, m[5], 32, 4);
        step!(h, d, a, b, c, m[8], 33, 11);
        step!(h, c, d, a, b, m[11], 34, 16);
        step!(h, b, c, d, a, m[14], 35, 23);
        step!(h, a, b, c, d, m[1], 36, 4);
        step!(h, d, a, b, c, m[4], 37, 11);
        step!(h, c, d, a, b, m[7], 38, 16);
        step!(h, b, c, d, a, m[10], 39, 23);
        step!(h, a, b, c, d, m[13], 40, 4);
        step!(h, d, a, b, c, m[0], 41, 11);
        step!(h, c, d, a, b, m[3], 42, 16);
        step!(h, b, c, d, a, m[6], 43, 23);
        step!(h, a, b, c, d, m[9], 44, 4);
        step!(h, d, a, b, c, m[12], 45, 11);
        step!(h, c, d, a, b, m[15], 46, 16);
        step!(h, b, c, d, a, m[2], 47, 23);
        step!(i, a, b, c, d, m[0], 48, 6);
        step!(i, d, a, b, c, m[7], 49, 10);
        step!(i, c, d, a, b, m[14], 50, 15);
        step!(i, b, c, d, a, m[5], 51, 21);
        step!(i, a, b, c, d, m[12], 52, 6);
        step!(i, d, a, b, c, m[3], 53, 10);
        step!(i, c, d, a, b, m[10], 54, 15);
        step!(i, b, c, d, a, m[1], 55, 21);
        step!(i, a, b, c, d, m[8], 56, 6);
        step!(i, d, a, b, c, m[15], 57, 10);
        step!(i, c, d, a, b, m[6], 58, 15);
        step!(i, b, c, d, a, m[13], 59, 21);
        step!(i, a, b, c, d, m[4], 60, 6);
        step!(i, d, a, b, c, m[11], 61, 10);
        step!(i, c, d, a, b, m[2], 62, 15);
        step!(i, b, c, d, a, m[9], 63, 21);
        state[0] = state[0].wrapping_add(a);
        state[1] = state[1].wrapping_add(b);
        state[2] = state[2].wrapping_add(c);
        state[3] = state[3].wrapping_add(d);
    }
}
