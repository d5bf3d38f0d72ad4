//! A plain, slow reference implementation that shares no code with the fast path: bitwise
//! field multiplication (no tables), the parity matrix rebuilt from its defining formula,
//! byte-at-a-time encoding, and decoding by Gauss-Jordan inversion of the k x k matrix of
//! the first k surviving rows of the generator `[I; C]`. Tests compare everything against it.

/// The field polynomial (x^8 + x^4 + x^3 + x^2 + 1).
const POLY: u16 = 0x11D;

/// a * b by shift-and-add with reduction.
pub fn mul(a: u8, b: u8) -> u8 {
    let (mut a, mut b, mut p) = (a as u16, b, 0u16);
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        a <<= 1;
        if a & 0x100 != 0 {
            a ^= POLY;
        }
        b >>= 1;
    }
    p as u8
}

/// a^e by square-and-multiply.
pub fn pow(a: u8, e: u32) -> u8 {
    let (mut base, mut e, mut acc) = (a, e, 1u8);
    while e != 0 {
        if e & 1 != 0 {
            acc = mul(acc, base);
        }
        base = mul(base, base);
        e >>= 1;
    }
    acc
}

/// 1 / a (a^254); 0 for 0.
pub fn inv(a: u8) -> u8 {
    pow(a, 254)
}

/// The m x k parity matrix from its definition (see `matrix.rs`): a Cauchy matrix scaled
/// so that row 0 is all ones and row 1 is 2^i.
pub fn parity_matrix(k: usize, m: usize) -> Vec<Vec<u8>> {
    let h = inv(2);
    let y = |i: usize| {
        let t = pow(2, i as u32);
        mul(t, inv(h ^ t))
    };
    let x = [0, 1, y(252), y(253)];
    let y0 = y(0);
    let u = [1, h, mul(x[2] ^ y0, inv(y0)), mul(x[3] ^ y0, inv(y0))];
    (0..m)
        .map(|j| {
            (0..k)
                .map(|i| mul(mul(u[j], y(i)), inv(x[j] ^ y(i))))
                .collect()
        })
        .collect()
}

/// The (k + m) x k generator matrix `[I; C]`.
pub fn generator(k: usize, m: usize) -> Vec<Vec<u8>> {
    let mut g: Vec<Vec<u8>> = (0..k)
        .map(|r| (0..k).map(|c| u8::from(r == c)).collect())
        .collect();
    g.extend(parity_matrix(k, m));
    g
}

/// Inverse of a square matrix by Gauss-Jordan elimination, None if singular.
pub fn invert(matrix: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
    let n = matrix.len();
    let mut a: Vec<Vec<u8>> = matrix.to_vec();
    let mut b: Vec<Vec<u8>> = (0..n)
        .map(|r| (0..n).map(|c| u8::from(r == c)).collect())
        .collect();
    for col in 0..n {
        let pivot = (col..n).find(|&r| a[r][col] != 0)?;
        a.swap(col, pivot);
        b.swap(col, pivot);
        let s = inv(a[col][col]);
        for c in 0..n {
            a[col][c] = mul(a[col][c], s);
            b[col][c] = mul(b[col][c], s);
        }
        for r in 0..n {
            let f = a[r][col];
            if r != col && f != 0 {
                for c in 0..n {
                    let (ac, bc) = (a[col][c], b[col][c]);
                    a[r][c] ^= mul(f, ac);
                    b[r][c] ^= mul(f, bc);
                }
            }
        }
    }
    Some(b)
}

/// Parity shards of `data` (k shards of one length), byte by byte.
pub fn encode(m: usize, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let k = data.len();
    let len = data.first().map_or(0, Vec::len);
    let c = parity_matrix(k, m);
    c.iter()
        .map(|row| {
            (0..len)
                .map(|b| {
                    row.iter()
                        .zip(data)
                        .fold(0, |acc, (&f, d)| acc ^ mul(f, d[b]))
                })
                .collect()
        })
        .collect()
}

/// All k + m shards rebuilt from the present ones (`None` = missing), or None if fewer
/// than k are present.
pub fn reconstruct(k: usize, m: usize, shards: &[Option<Vec<u8>>]) -> Option<Vec<Vec<u8>>> {
    let g = generator(k, m);
    let survivors: Vec<usize> = (0..k + m)
        .filter(|&i| shards[i].is_some())
        .take(k)
        .collect();
    if survivors.len() < k {
        return None;
    }
    let sub: Vec<Vec<u8>> = survivors.iter().map(|&i| g[i].clone()).collect();
    let decode = invert(&sub)?;
    let len = shards.iter().flatten().next().map_or(0, Vec::len);
    let data: Vec<Vec<u8>> = decode
        .iter()
        .map(|row| {
            (0..len)
                .map(|b| {
                    row.iter().zip(&survivors).fold(0, |acc, (&f, &s)| {
                        acc ^ mul(f, shards[s].as_ref().map_or(0, |v| v[b]))
                    })
                })
                .collect()
        })
        .collect();
    let mut all = data.clone();
    all.extend(encode(m, &data));
    Some(all)
}
