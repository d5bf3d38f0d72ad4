//! GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D), generator 2: the field
//! of ISA-L, Linux md RAID-6 and most Reed-Solomon libraries.
//!
//! All tables are computed at compile time. The SIMD kernels use two derived forms of
//! "multiply by a constant c": a pair of 16-entry nibble tables (PSHUFB) and an 8x8 bit
//! matrix (GF2P8AFFINEQB). Both are exact for this polynomial; the reference
//! implementation checks them against bitwise multiplication.

/// The field polynomial, including the x^8 term.
pub const POLYNOMIAL: u16 = 0x11D;

/// `EXP[i] = 2^i`, doubled in length so that `EXP[log a + log b]` needs no reduction.
const EXP: [u8; 510] = {
    let mut t = [0u8; 510];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        t[i] = x as u8;
        t[i + 255] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLYNOMIAL;
        }
        i += 1;
    }
    t
};

/// `LOG[a]` for a != 0 (`LOG[0]` is unused).
const LOG: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[EXP[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// Full multiplication table: `MUL[a][b] = a * b` (64 KiB, used by the scalar kernel).
pub(crate) static MUL: [[u8; 256]; 256] = {
    let mut t = [[0u8; 256]; 256];
    let mut a = 1;
    while a < 256 {
        let mut b = 1;
        while b < 256 {
            t[a][b] = mul(a as u8, b as u8);
            b += 1;
        }
        a += 1;
    }
    t
};

/// PSHUFB tables: `NIBBLE[c][x] = c * x` and `NIBBLE[c][16 + x] = c * (x << 4)`, x < 16.
pub(crate) static NIBBLE: [[u8; 32]; 256] = {
    let mut t = [[0u8; 32]; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 16 {
            t[c][x] = mul(c as u8, x as u8);
            t[c][16 + x] = mul(c as u8, (x << 4) as u8);
            x += 1;
        }
        c += 1;
    }
    t
};

/// GF2P8AFFINEQB matrices: byte `7 - i` of `AFFINE[c]` selects the input bits whose XOR is
/// output bit i of `c * x`, i.e. bit j of that byte is bit i of `c * 2^j`.
pub(crate) static AFFINE: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut c = 0;
    while c < 256 {
        let mut m = 0u64;
        let mut i = 0;
        while i < 8 {
            let mut row = 0u64;
            let mut j = 0;
            while j < 8 {
                let prod = mul(c as u8, 1 << j);
                row |= (((prod >> i) & 1) as u64) << j;
                j += 1;
            }
            m |= row << (8 * (7 - i));
            i += 1;
        }
        t[c] = m;
        c += 1;
    }
    t
};

/// a * b.
#[inline]
pub const fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// The multiplicative inverse of a != 0 (`inv(0)` returns 0).
#[inline]
pub const fn inv(a: u8) -> u8 {
    if a == 0 {
        0
    } else {
        EXP[255 - LOG[a as usize] as usize]
    }
}

/// a / b for b != 0 (returns 0 for b == 0).
#[inline]
pub const fn div(a: u8, b: u8) -> u8 {
    mul(a, inv(b))
}

/// 2^e (the generator to the power e, e taken mod 255).
#[inline]
pub const fn exp2(e: usize) -> u8 {
    EXP[e % 255]
}

const _: () = assert!(EXP[0] == 1 && EXP[1] == 2 && EXP[8] == 0x1D);
const _: () = assert!(EXP[254] == 0x8E, "2^-1 = 0x8E for 0x11D");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference;

    #[test]
    fn tables_match_bitwise_multiplication() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), reference::mul(a, b));
                assert_eq!(MUL[a as usize][b as usize], reference::mul(a, b));
                let n = &NIBBLE[a as usize];
                assert_eq!(
                    n[(b & 15) as usize] ^ n[16 + (b >> 4) as usize],
                    reference::mul(a, b)
                );
                assert_eq!(
                    affine(AFFINE[a as usize], b),
                    reference::mul(a, b),
                    "{a} * {b}"
                );
            }
            if a != 0 {
                assert_eq!(mul(a, inv(a)), 1);
            }
        }
    }

    /// GF2P8AFFINEQB's definition for one byte (Intel SDM): bit i of the result is the
    /// parity of `x & matrix.byte[7 - i]`.
    fn affine(matrix: u64, x: u8) -> u8 {
        (0..8).fold(0, |r, i| {
            let row = (matrix >> (8 * (7 - i))) as u8;
            r | (((row & x).count_ones() & 1) as u8) << i
        })
    }
}
