//! Every kernel against the plain reference: encode, reconstruct (all and some), update.

use erasure::{ErasureError, Kernel, MAX_DATA_SHARDS, MAX_PARITY_SHARDS, ReedSolomon, reference};
use proptest::prelude::*;

fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(Vec::as_slice).collect()
}

fn muts(v: &mut [Vec<u8>]) -> Vec<&mut [u8]> {
    v.iter_mut().map(Vec::as_mut_slice).collect()
}

fn encode(rs: &ReedSolomon, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let mut parity = vec![vec![0xA5; len]; rs.parity_shards()];
    rs.encode(&refs(data), &mut muts(&mut parity))
        .expect("encode");
    parity
}

/// Encodes and checks against `expected_parity`, erases `lost`, rebuilds, checks all shards.
fn roundtrip(kernel: Kernel, data: &[Vec<u8>], expected_parity: &[Vec<u8>], lost: &[usize]) {
    let (k, m) = (data.len(), expected_parity.len());
    let rs = ReedSolomon::with_kernel(k, m, kernel).expect("geometry");
    let parity = encode(&rs, data);
    assert_eq!(parity, expected_parity, "{kernel} encode {k}+{m}");

    let original: Vec<Vec<u8>> = data.iter().chain(&parity).cloned().collect();
    let mut shards = original.clone();
    let mut present = vec![true; k + m];
    for &i in lost {
        present[i] = false;
        shards[i].iter_mut().for_each(|b| *b = !*b);
    }
    rs.reconstruct(&mut muts(&mut shards), &present)
        .expect("reconstruct");
    assert_eq!(
        shards, original,
        "{kernel} reconstruct {k}+{m} lost {lost:?}"
    );
}

/// The reference rebuilds the original shards from the survivors of `lost`.
fn reference_roundtrip(data: &[Vec<u8>], parity: &[Vec<u8>], lost: &[usize]) {
    let original: Vec<Vec<u8>> = data.iter().chain(parity).cloned().collect();
    let opt: Vec<Option<Vec<u8>>> = original
        .iter()
        .enumerate()
        .map(|(i, s)| (!lost.contains(&i)).then(|| s.clone()))
        .collect();
    let rebuilt = reference::reconstruct(data.len(), parity.len(), &opt);
    assert_eq!(rebuilt.as_ref(), Some(&original), "reference lost {lost:?}");
}

fn kernels() -> impl Iterator<Item = Kernel> {
    Kernel::available()
}

fn shard_data(k: usize, len: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut x = seed | 1;
    (0..k)
        .map(|_| {
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        })
        .collect()
}

/// k, m, shard length (odd, short, and past the unrolled SIMD blocks), a seed, a loss set.
fn case() -> impl Strategy<Value = (usize, usize, usize, u64, Vec<usize>)> {
    (1..=MAX_DATA_SHARDS, 1..=MAX_PARITY_SHARDS).prop_flat_map(|(k, m)| {
        (
            Just(k),
            Just(m),
            prop_oneof![0usize..200, 200usize..700, Just(4096), Just(4096 + 63)],
            any::<u64>(),
            proptest::sample::subsequence((0..k + m).collect::<Vec<_>>(), 1..=m),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn every_kernel_matches_reference((k, m, len, seed, lost) in case()) {
        let data = shard_data(k, len, seed);
        let parity = reference::encode(m, &data);
        reference_roundtrip(&data, &parity, &lost);
        for kernel in kernels() {
            roundtrip(kernel, &data, &parity, &lost);
        }
    }

    #[test]
    fn reconstruct_some_touches_only_wanted(
        (k, m, len, seed, lost) in case(),
        pick in any::<u64>(),
    ) {
        let data = shard_data(k, len.max(1), seed);
        for kernel in kernels() {
            let rs = ReedSolomon::with_kernel(k, m, kernel).expect("geometry");
            let parity = encode(&rs, &data);
            let original: Vec<Vec<u8>> = data.iter().chain(&parity).cloned().collect();
            let wanted: Vec<usize> =
                lost.iter().copied().filter(|&i| pick & (1 << i) != 0).collect();
            let mut shards = original.clone();
            let mut present = vec![true; k + m];
            for &i in &lost {
                present[i] = false;
                // Unwanted missing buffers may be empty.
                shards[i] = if wanted.contains(&i) { vec![0x5A; original[i].len()] } else { Vec::new() };
            }
            // A present index in `wanted` is ignored.
            let mut asked = wanted.clone();
            if let Some(p) = present.iter().position(|&p| p) {
                asked.push(p);
            }
            rs.reconstruct_some(&mut muts(&mut shards), &present, &asked).expect("reconstruct_some");
            for i in 0..k + m {
                if present[i] || wanted.contains(&i) {
                    prop_assert_eq!(&shards[i], &original[i], "{} shard {}", kernel, i);
                } else {
                    prop_assert!(shards[i].is_empty());
                }
            }
        }
    }

    #[test]
    fn update_parity_equals_full_encode(
        (k, m, len, seed, _lost) in case(),
        index in any::<prop::sample::Index>(),
        seed2 in any::<u64>(),
    ) {
        let mut data = shard_data(k, len, seed);
        let d = index.index(k);
        for kernel in kernels() {
            let rs = ReedSolomon::with_kernel(k, m, kernel).expect("geometry");
            let mut parity = encode(&rs, &data);
            let new = shard_data(1, len, seed2).remove(0);
            rs.update_parity(d, &data[d], &new, &mut muts(&mut parity)).expect("update");
            let old = std::mem::replace(&mut data[d], new);
            prop_assert_eq!(&parity, &reference::encode(m, &data), "{} update {}", kernel, d);
            data[d] = old;
        }
    }
}

/// Runs one kernel through a deterministic sweep: every (k, m) up to 12+4 at lengths that
/// hit each loop of the SIMD code (empty, tail only, one vector, unrolled blocks, tails).
fn sweep(kernel: Kernel) {
    if !kernel.is_available() {
        testkit::prereq::missing_cpu_feature(format!("what the {kernel} kernel needs"));
        return;
    }
    for k in 1..=12 {
        for m in 1..=MAX_PARITY_SHARDS {
            for &len in &[0, 1, 31, 32, 63, 64, 65, 127, 128, 129, 255, 256, 300] {
                let data = shard_data(k, len, (k * 131 + m * 7 + len) as u64);
                // Lose the last m data shards (or all data and some parity if k < m).
                let lost: Vec<usize> = (0..k + m).rev().skip(m).take(m).collect();
                roundtrip(kernel, &data, &reference::encode(m, &data), &lost);
            }
        }
    }
    let k = MAX_DATA_SHARDS;
    let data = shard_data(k, 1000, 99);
    let parity = reference::encode(MAX_PARITY_SHARDS, &data);
    roundtrip(kernel, &data, &parity, &[0, 7, 31, 33]);
}

#[test]
fn kernel_scalar() {
    sweep(Kernel::Scalar);
}

#[test]
fn kernel_avx2() {
    sweep(Kernel::Avx2);
}

#[test]
fn kernel_avx512() {
    sweep(Kernel::Avx512);
}

#[test]
fn kernel_gfni_avx2() {
    sweep(Kernel::GfniAvx2);
}

#[test]
fn kernel_gfni_avx512() {
    sweep(Kernel::GfniAvx512);
}

/// The CI machine has AVX-512 and GFNI: fail loudly if detection ever regresses there.
/// AVX2 and scalar stay available (and their sweeps run) wherever wider kernels exist:
/// an AVX2-only CPU (AMD EPYC before Zen 4) runs nothing else.
#[test]
fn best_kernel_uses_the_cpu() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("gfni")
        && std::arch::is_x86_feature_detected!("avx512bw")
    {
        assert_eq!(Kernel::best(), Kernel::GfniAvx512);
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        assert!(Kernel::available().any(|k| k == Kernel::Avx2));
    }
    assert_eq!(Kernel::available().next(), Some(Kernel::Scalar));
    assert_eq!(
        ReedSolomon::new(4, 2).map(|r| r.kernel()),
        Ok(Kernel::best())
    );
    for kernel in Kernel::ALL {
        assert_eq!(Kernel::from_name(kernel.name()), Some(kernel));
    }
}

/// Every erasure pattern of the volume's geometries, on every kernel.
#[test]
fn all_patterns_of_volume_geometries() {
    for (k, m) in [(4, 1), (4, 2), (8, 2), (10, 4), (6, 3)] {
        let data = shard_data(k, 200, 7);
        let parity = reference::encode(m, &data);
        let n = k + m;
        for mask in 1u32..(1 << n) {
            if mask.count_ones() as usize > m {
                continue;
            }
            let lost: Vec<usize> = (0..n).filter(|&i| mask & (1 << i) != 0).collect();
            for kernel in kernels() {
                roundtrip(kernel, &data, &parity, &lost);
            }
        }
    }
}

#[test]
fn errors_leave_buffers_alone() {
    let rs = ReedSolomon::new(4, 2).expect("4+2");
    let data = shard_data(4, 64, 1);
    let mut parity = vec![vec![7u8; 64]; 2];
    // Wrong counts and lengths.
    assert!(matches!(
        rs.encode(&refs(&data[..3]), &mut muts(&mut parity)),
        Err(ErasureError::ShardCount {
            expected: 4,
            actual: 3,
            ..
        })
    ));
    let mut short = data.clone();
    short[2].pop();
    assert_eq!(
        rs.encode(&refs(&short), &mut muts(&mut parity)),
        Err(ErasureError::ShardLength {
            index: 2,
            expected_bytes: 64,
            actual_bytes: 63
        })
    );
    let mut bad_parity = vec![vec![7u8; 64], vec![7u8; 65]];
    assert_eq!(
        rs.encode(&refs(&data), &mut muts(&mut bad_parity)),
        Err(ErasureError::ShardLength {
            index: 5,
            expected_bytes: 64,
            actual_bytes: 65
        })
    );
    assert!(bad_parity.iter().all(|p| p.iter().all(|&b| b == 7)));
    // Too many missing.
    let mut shards: Vec<Vec<u8>> = data.iter().chain(&parity).cloned().collect();
    let before = shards.clone();
    let present = [false, true, false, true, false, true];
    assert_eq!(
        rs.reconstruct(&mut muts(&mut shards), &present),
        Err(ErasureError::TooManyMissing { missing: 3, max: 2 })
    );
    assert_eq!(
        rs.reconstruct_some(&mut muts(&mut shards), &[true; 6], &[6]),
        Err(ErasureError::IndexOutOfRange {
            index: 6,
            shards: 6
        })
    );
    assert_eq!(
        rs.update_parity(4, &data[0], &data[1], &mut muts(&mut parity)),
        Err(ErasureError::IndexOutOfRange {
            index: 4,
            shards: 4
        })
    );
    assert_eq!(shards, before);
    assert!(matches!(
        ReedSolomon::new(0, 2),
        Err(ErasureError::UnsupportedGeometry { .. })
    ));
    assert!(matches!(
        ReedSolomon::new(4, 5),
        Err(ErasureError::UnsupportedGeometry { .. })
    ));
    assert!(matches!(
        ReedSolomon::new(33, 1),
        Err(ErasureError::UnsupportedGeometry { .. })
    ));
}

#[test]
fn verify_detects_corruption() {
    let rs = ReedSolomon::new(8, 2).expect("8+2");
    let data = shard_data(8, 4096, 3);
    let parity = encode(&rs, &data);
    let mut shards: Vec<Vec<u8>> = data.iter().chain(&parity).cloned().collect();
    let mut scratch = vec![vec![0u8; 4096]; 2];
    assert_eq!(rs.verify(&refs(&shards), &mut muts(&mut scratch)), Ok(true));
    shards[3][1000] ^= 0x10;
    assert_eq!(
        rs.verify(&refs(&shards), &mut muts(&mut scratch)),
        Ok(false)
    );
}

#[test]
fn encode_in_place_matches_encode() {
    let rs = ReedSolomon::new(10, 4).expect("10+4");
    let data = shard_data(10, 777, 5);
    let parity = encode(&rs, &data);
    let mut shards: Vec<Vec<u8>> = data.clone();
    shards.extend(vec![vec![0u8; 777]; 4]);
    rs.encode_in_place(&mut muts(&mut shards))
        .expect("encode_in_place");
    assert_eq!(&shards[10..], &parity[..]);
}
