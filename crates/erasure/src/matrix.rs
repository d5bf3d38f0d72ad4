//! The parity (coding) matrix and the small linear algebra that decoding needs.
//!
//! Parity shard j is `P_j = sum_i C[j][i] * D_i` over data shards i. `C` is a Cauchy matrix
//! scaled by nonzero row and column factors, chosen so that
//! - row 0 is all ones: P is plain XOR (RAID-5, and the P of RAID-6);
//! - row 1 is `2^i`: Q is Linux md RAID-6's syndrome (and ISA-L's `gf_gen_rs_matrix`);
//! - column 0 is all ones;
//! - `C[j][i]` depends on neither k nor m, so an (k, m) code is the top-left m x k corner
//!   of one fixed table.
//!
//! Every square submatrix of a scaled Cauchy matrix is invertible, which is exactly the
//! condition for the systematic code `[I; C]` to be MDS: any k of the k + m shards
//! determine the data. `tests/mds.rs` checks this exhaustively for the supported sizes.
//!
//! Construction: `C[j][i] = u_j * y_i / (x_j + y_i)` with `x = (0, 1, y(252), y(253))`,
//! `y_i = y(i) = 2^i / (h + 2^i)`, `h = 2^-1`, `u = (1, h, (x_2 + y_0) / y_0,
//! (x_3 + y_0) / y_0)`. Row 0 is then `y_i / y_i = 1` and row 1 is `h y_i / (1 + y_i) = 2^i`.
//! The map t -> t / (h + t) is injective, so the `y_i` (i < 252) and the four `x_j` are
//! distinct, as a Cauchy matrix needs; the table could thus grow to 252 columns.

use crate::gf;

/// Most data shards per stripe (k).
pub const MAX_DATA_SHARDS: usize = 32;
/// Most parity shards per stripe (m).
pub const MAX_PARITY_SHARDS: usize = 4;
/// Columns for which the construction is proven (see the module comment).
const CONSTRUCTION_COLUMNS: usize = 252;

const _: () = assert!(MAX_DATA_SHARDS <= CONSTRUCTION_COLUMNS);
const _: () = assert!(
    MAX_DATA_SHARDS + MAX_PARITY_SHARDS <= 64,
    "present masks are u64"
);

const H: u8 = gf::exp2(254);

const fn cauchy_y(i: usize) -> u8 {
    let t = gf::exp2(i);
    gf::div(t, H ^ t)
}

/// `PARITY_MATRIX[j][i]`: coefficient of data shard i in parity shard j.
pub const PARITY_MATRIX: [[u8; MAX_DATA_SHARDS]; MAX_PARITY_SHARDS] = {
    let y0 = cauchy_y(0);
    let x = [
        0,
        1,
        cauchy_y(CONSTRUCTION_COLUMNS),
        cauchy_y(CONSTRUCTION_COLUMNS + 1),
    ];
    let u = [1, H, gf::div(x[2] ^ y0, y0), gf::div(x[3] ^ y0, y0)];
    let mut c = [[0u8; MAX_DATA_SHARDS]; MAX_PARITY_SHARDS];
    let mut j = 0;
    while j < MAX_PARITY_SHARDS {
        let mut i = 0;
        while i < MAX_DATA_SHARDS {
            let y = cauchy_y(i);
            c[j][i] = gf::div(gf::mul(u[j], y), x[j] ^ y);
            i += 1;
        }
        j += 1;
    }
    c
};

// The properties promised above, checked by the compiler.
const _: () = {
    let mut i = 0;
    while i < MAX_DATA_SHARDS {
        assert!(PARITY_MATRIX[0][i] == 1, "P must be XOR");
        assert!(PARITY_MATRIX[1][i] == gf::exp2(i), "Q must be md RAID-6's");
        i += 1;
    }
    let mut j = 0;
    while j < MAX_PARITY_SHARDS {
        assert!(PARITY_MATRIX[j][0] == 1);
        j += 1;
    }
};

/// Inverts the top-left n x n block of `a` in place by Gauss-Jordan elimination; returns
/// false (leaving `a` unspecified) if it is singular.
pub(crate) fn invert_small(a: &mut [[u8; MAX_PARITY_SHARDS]; MAX_PARITY_SHARDS], n: usize) -> bool {
    let n = n.min(MAX_PARITY_SHARDS);
    let mut inv = [[0u8; MAX_PARITY_SHARDS]; MAX_PARITY_SHARDS];
    for (r, row) in inv.iter_mut().enumerate().take(n) {
        row[r] = 1;
    }
    for col in 0..n {
        let Some(pivot) = (col..n).find(|&r| a[r][col] != 0) else {
            return false;
        };
        a.swap(col, pivot);
        inv.swap(col, pivot);
        let scale = gf::inv(a[col][col]);
        for c in 0..n {
            a[col][c] = gf::mul(a[col][c], scale);
            inv[col][c] = gf::mul(inv[col][c], scale);
        }
        for r in 0..n {
            let f = a[r][col];
            if r != col && f != 0 {
                for c in 0..n {
                    a[r][c] ^= gf::mul(f, a[col][c]);
                    inv[r][c] ^= gf::mul(f, inv[col][c]);
                }
            }
        }
    }
    *a = inv;
    true
}
