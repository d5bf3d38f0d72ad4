//! The portable kernel: one 256-byte multiplication-table row per coefficient, blocked so
//! that the outputs of a block stay in L1 while every input streams through once.

use super::CoefRow;
use crate::gf::MUL;

const BLOCK_BYTES: usize = 4096;

/// Like [`super::dot`] for the bytes from `start` on (all slices have one length).
pub(super) fn dot_from(
    coefs: &[CoefRow],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    start: usize,
    accumulate: bool,
) {
    let len = outputs.first().map_or(0, |o| o.len());
    let mut lo = start;
    while lo < len {
        let hi = len.min(lo + BLOCK_BYTES);
        for (row, out) in coefs.iter().zip(outputs.iter_mut()) {
            let out = &mut out[lo..hi];
            if !accumulate {
                out.fill(0);
            }
            for (&c, input) in row.iter().zip(inputs) {
                mul_add(c, &input[lo..hi], out);
            }
        }
        lo = hi;
    }
}

/// out ^= c * input.
fn mul_add(c: u8, input: &[u8], out: &mut [u8]) {
    match c {
        0 => {}
        1 => {
            let mut o8 = out.chunks_exact_mut(8);
            let mut i8 = input.chunks_exact(8);
            for (o, i) in (&mut o8).zip(&mut i8) {
                let x = u64::from_ne_bytes(o[..8].try_into().unwrap_or([0; 8]))
                    ^ u64::from_ne_bytes(i[..8].try_into().unwrap_or([0; 8]));
                o.copy_from_slice(&x.to_ne_bytes());
            }
            for (o, &i) in o8.into_remainder().iter_mut().zip(i8.remainder()) {
                *o ^= i;
            }
        }
        _ => {
            let table = &MUL[c as usize];
            for (o, &i) in out.iter_mut().zip(input) {
                *o ^= table[i as usize];
            }
        }
    }
}
