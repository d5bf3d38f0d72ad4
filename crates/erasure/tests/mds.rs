//! The parity matrix: its definition, md RAID-6 compatibility and the MDS property.

use erasure::{MAX_DATA_SHARDS, MAX_PARITY_SHARDS, PARITY_MATRIX, ReedSolomon, reference};

#[test]
fn matrix_matches_its_definition() {
    let r = reference::parity_matrix(MAX_DATA_SHARDS, MAX_PARITY_SHARDS);
    for (j, row) in r.iter().enumerate() {
        assert_eq!(&PARITY_MATRIX[j][..], &row[..], "row {j}");
    }
}

/// P is XOR; Q is Linux md's syndrome, which md computes by Horner's rule from the last
/// data disk down: Q = ((D_{k-1} * 2 + D_{k-2}) * 2 + ...) + D_0.
#[test]
fn p_is_xor_and_q_is_md_raid6() {
    let k = 10;
    let data: Vec<Vec<u8>> = (0..k)
        .map(|i| (0..256).map(|b| (b * 7 + i * 31) as u8).collect())
        .collect();
    let rs = ReedSolomon::new(k, 2).expect("10+2");
    let mut parity = vec![vec![0u8; 256]; 2];
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    rs.encode(&refs, &mut outs).expect("encode");
    for b in 0..256 {
        let p = data.iter().fold(0, |acc, d| acc ^ d[b]);
        let q = data
            .iter()
            .rev()
            .fold(0, |acc, d| reference::mul(acc, 2) ^ d[b]);
        assert_eq!((parity[0][b], parity[1][b]), (p, q), "byte {b}");
    }
}

/// MDS <=> every square submatrix of the parity matrix is invertible. Checked for every
/// row set and every column set of the whole supported table (k <= 32, m <= 4).
#[test]
fn every_square_submatrix_is_invertible() {
    let rows: Vec<usize> = (0..MAX_PARITY_SHARDS).collect();
    let mut checked = 0u64;
    for size in 1..=MAX_PARITY_SHARDS {
        for row_set in subsets(&rows, size) {
            for col_set in subsets(&(0..MAX_DATA_SHARDS).collect::<Vec<_>>(), size) {
                let sub: Vec<Vec<u8>> = row_set
                    .iter()
                    .map(|&r| col_set.iter().map(|&c| PARITY_MATRIX[r][c]).collect())
                    .collect();
                assert!(
                    reference::invert(&sub).is_some(),
                    "rows {row_set:?} cols {col_set:?}"
                );
                checked += 1;
            }
        }
    }
    // 4*32 + 6*496 + 4*4960 + 35960
    assert_eq!(checked, 128 + 2976 + 19840 + 35960);
}

/// The direct statement, for every geometry up to 16 shards and the volume's (10, 4):
/// for every set of m lost shards, the k x k generator rows of the survivors invert.
#[test]
fn every_erasure_pattern_decodes() {
    let mut geometries: Vec<(usize, usize)> = Vec::new();
    for m in 1..=MAX_PARITY_SHARDS {
        for k in 1..=16 - m {
            geometries.push((k, m));
        }
    }
    geometries.push((MAX_DATA_SHARDS, 1));
    geometries.push((MAX_DATA_SHARDS, 2));
    for (k, m) in geometries {
        let g = reference::generator(k, m);
        let n = k + m;
        let all: Vec<usize> = (0..n).collect();
        for lost in subsets(&all, m.min(n)) {
            let sub: Vec<Vec<u8>> = (0..n)
                .filter(|i| !lost.contains(i))
                .map(|i| g[i].clone())
                .collect();
            assert!(reference::invert(&sub).is_some(), "{k}+{m} lost {lost:?}");
        }
    }
}

fn subsets(items: &[usize], size: usize) -> Vec<Vec<usize>> {
    if size == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for (i, &first) in items.iter().enumerate() {
        for mut rest in subsets(&items[i + 1..], size - 1) {
            rest.insert(0, first);
            out.push(rest);
        }
    }
    out
}
