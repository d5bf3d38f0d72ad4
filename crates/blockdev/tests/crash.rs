//! CrashRecorder: flushed data always survives; unflushed blocks are old or new.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::{BTreeMap, BTreeSet};

use blockdev::{BlockDevice, BlockError, CrashRecorder, IoBuf, RamDevice, WriteChoice, WriteFlags};
use proptest::prelude::*;

const BLOCK: usize = 512;

async fn write(dev: &CrashRecorder, block: u64, data: &[u8], fua: bool) {
    dev.write(
        block * BLOCK as u64,
        IoBuf::from_slice(data),
        WriteFlags { fua },
    )
    .await
    .unwrap();
}

fn block_of(img: &RamDevice, block: u64) -> Vec<u8> {
    let mut out = vec![0u8; BLOCK];
    img.read_at(block * BLOCK as u64, &mut out).unwrap();
    out
}

#[tokio::test]
async fn flushed_data_survives_unflushed_is_old_or_new() {
    let dev = CrashRecorder::new("c", 64 * BLOCK as u64);
    assert!(dev.info().volatile_write_cache);
    write(&dev, 0, &[1; 4 * BLOCK], false).await;
    dev.flush().await.unwrap();
    write(&dev, 2, &[2; 4 * BLOCK], false).await; // blocks 2..6, unflushed
    assert_eq!(dev.pending_writes().len(), 1);
    // Reads see the newest data.
    let live = dev.read(0, IoBuf::new_zeroed(6 * BLOCK)).await.unwrap();
    assert_eq!(&live[..2 * BLOCK], &[1; 2 * BLOCK][..]);
    assert_eq!(&live[2 * BLOCK..], &[2; 4 * BLOCK][..]);

    let mut seen_torn = false;
    let mut seen_none = false;
    let mut seen_all = false;
    for seed in 0..64 {
        let img = dev.crash_image(seed);
        assert_eq!(block_of(&img, 0), vec![1; BLOCK]);
        assert_eq!(block_of(&img, 1), vec![1; BLOCK]);
        let landed: Vec<bool> = (2..6)
            .map(|b| {
                let got = block_of(&img, b);
                let old = if b < 4 {
                    vec![1; BLOCK]
                } else {
                    vec![0; BLOCK]
                };
                assert!(
                    got == old || got == vec![2; BLOCK],
                    "block {b} is neither old nor new"
                );
                got == vec![2; BLOCK]
            })
            .collect();
        seen_all |= landed.iter().all(|&l| l);
        seen_none |= landed.iter().all(|&l| !l);
        seen_torn |= landed.iter().any(|&l| l) && !landed.iter().all(|&l| l);
        // Same seed, same image.
        assert_eq!(block_of(&dev.crash_image(seed), 3), block_of(&img, 3));
    }
    assert!(
        seen_all && seen_none && seen_torn,
        "all/none/torn outcomes expected over 64 seeds"
    );

    dev.flush().await.unwrap();
    assert!(dev.pending_writes().is_empty());
    for seed in 0..8 {
        let img = dev.crash_image(seed);
        for b in 2..6 {
            assert_eq!(block_of(&img, b), vec![2; BLOCK]);
        }
    }
}

#[tokio::test]
async fn fua_is_durable_and_supersedes_older_pending_data() {
    let dev = CrashRecorder::new("c", 16 * BLOCK as u64);
    write(&dev, 0, &[1; 2 * BLOCK], false).await;
    write(&dev, 1, &[9; BLOCK], true).await;
    write(&dev, 4, &[4; BLOCK], true).await;
    for seed in 0..32 {
        let img = dev.crash_image(seed);
        assert!(matches!(block_of(&img, 0)[0], 0 | 1));
        assert_eq!(
            block_of(&img, 1),
            vec![9; BLOCK],
            "older pending data must not reappear"
        );
        assert_eq!(block_of(&img, 4), vec![4; BLOCK]);
    }
    assert_eq!(
        dev.block_candidates(BLOCK as u64).unwrap(),
        vec![vec![9; BLOCK]]
    );
    assert_eq!(
        dev.block_candidates(0).unwrap(),
        vec![vec![0; BLOCK], vec![1; BLOCK]]
    );
}

#[tokio::test]
async fn explicit_choices_order_and_zeroes() {
    let dev = CrashRecorder::new("c", 16 * BLOCK as u64);
    write(&dev, 0, &[1; 2 * BLOCK], false).await; // #0
    write(&dev, 0, &[2; 2 * BLOCK], false).await; // #1
    dev.write_zeroes(BLOCK as u64, BLOCK as u64).await.unwrap(); // #2
    dev.discard(8 * BLOCK as u64, BLOCK as u64).await.unwrap(); // #3
    let pending = dev.pending_writes();
    assert_eq!(pending.len(), 4);
    assert!(pending[2].zeroes && pending[3].zeroes && !pending[0].zeroes);
    // Reordered: the older write lands last.
    let img = dev.crash_image_with(&[
        WriteChoice {
            index: 1,
            blocks: None,
        },
        WriteChoice {
            index: 0,
            blocks: Some(vec![true, false]),
        },
    ]);
    assert_eq!(block_of(&img, 0), vec![1; BLOCK]);
    assert_eq!(block_of(&img, 1), vec![2; BLOCK]);
    let img = dev.crash_image_with(&[
        WriteChoice {
            index: 0,
            blocks: None,
        },
        WriteChoice {
            index: 2,
            blocks: None,
        },
        WriteChoice {
            index: 99,
            blocks: None,
        },
    ]);
    assert_eq!(block_of(&img, 0), vec![1; BLOCK]);
    assert_eq!(block_of(&img, 1), vec![0; BLOCK]);
    assert_eq!(block_of(&dev.durable_image(), 0), vec![0; BLOCK]);
    assert_eq!(block_of(&dev.current_image(), 0), vec![2; BLOCK]);
    assert_eq!(block_of(&dev.current_image(), 1), vec![0; BLOCK]);
}

#[tokio::test]
async fn crash_freezes_and_images_restart() {
    let dev = CrashRecorder::new("c", 16 * BLOCK as u64);
    write(&dev, 3, &[3; BLOCK], false).await;
    dev.flush().await.unwrap();
    write(&dev, 5, &[5; BLOCK], false).await;
    let img = dev.crash(7);
    assert!(matches!(
        dev.read(0, IoBuf::new_zeroed(BLOCK)).await,
        Err(BlockError::Closed)
    ));
    assert!(matches!(dev.flush().await, Err(BlockError::Closed)));
    assert!(matches!(
        dev.write(0, IoBuf::new_zeroed(BLOCK), WriteFlags::default())
            .await,
        Err(BlockError::Closed)
    ));
    // Recovery runs on a new recorder whose starting content is all durable.
    let again = CrashRecorder::from_image("c2", &img);
    assert!(again.pending_writes().is_empty());
    let back = again
        .read(3 * BLOCK as u64, IoBuf::new_zeroed(BLOCK))
        .await
        .unwrap();
    assert_eq!(&back[..], &[3; BLOCK][..]);
    assert_eq!(block_of(&again.crash_image(1), 3), vec![3; BLOCK]);
    assert!(matches!(
        again.read(1, IoBuf::new_zeroed(BLOCK)).await,
        Err(BlockError::Misaligned { .. })
    ));
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        block: u64,
        blocks: u64,
        byte: u8,
        fua: bool,
    },
    Zero {
        block: u64,
        blocks: u64,
    },
    Flush,
}

const BLOCKS: u64 = 32;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..BLOCKS, 1..5u64, any::<u8>(), prop::bool::weighted(0.2)).prop_map(|(block, blocks, byte, fua)| {
            Op::Write { block, blocks: blocks.min(BLOCKS - block), byte, fua }
        }),
        1 => (0..BLOCKS, 1..5u64).prop_map(|(block, blocks)| Op::Zero { block, blocks: blocks.min(BLOCKS - block) }),
        1 => Just(Op::Flush),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// An independent model: per block, the durable byte and the set of bytes written since
    /// the last flush (cleared by FUA). Every crash image must pick from those sets.
    #[test]
    fn crash_images_match_the_model(ops in prop::collection::vec(op(), 1..40), seeds in prop::collection::vec(any::<u64>(), 4)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let dev = CrashRecorder::new("c", BLOCKS * BLOCK as u64);
            let mut durable: BTreeMap<u64, u8> = BTreeMap::new();
            let mut pending: BTreeMap<u64, BTreeSet<u8>> = BTreeMap::new();
            let mut live: BTreeMap<u64, u8> = BTreeMap::new();
            for op in &ops {
                match *op {
                    Op::Write { block, blocks, byte, fua } => {
                        write(&dev, block, &vec![byte; (blocks as usize) * BLOCK], fua).await;
                        for b in block..block + blocks {
                            live.insert(b, byte);
                            if fua {
                                durable.insert(b, byte);
                                pending.remove(&b);
                            } else {
                                pending.entry(b).or_default().insert(byte);
                            }
                        }
                    }
                    Op::Zero { block, blocks } => {
                        dev.write_zeroes(block * BLOCK as u64, blocks * BLOCK as u64).await.unwrap();
                        for b in block..block + blocks {
                            live.insert(b, 0);
                            pending.entry(b).or_default().insert(0);
                        }
                    }
                    Op::Flush => {
                        dev.flush().await.unwrap();
                        durable = live.clone();
                        pending.clear();
                    }
                }
            }
            let current = dev.current_image();
            for b in 0..BLOCKS {
                prop_assert_eq!(block_of(&current, b)[0], live.get(&b).copied().unwrap_or(0));
            }
            for &seed in &seeds {
                let img = dev.crash_image(seed);
                for b in 0..BLOCKS {
                    let got = block_of(&img, b);
                    prop_assert!(got.iter().all(|&x| x == got[0]), "block {} torn inside", b);
                    let old = durable.get(&b).copied().unwrap_or(0);
                    let ok = got[0] == old || pending.get(&b).is_some_and(|s| s.contains(&got[0]));
                    prop_assert!(ok, "block {} = {} not in durable {} / pending {:?}", b, got[0], old, pending.get(&b));
                    let candidates = dev.block_candidates(b * BLOCK as u64).unwrap();
                    prop_assert!(candidates.contains(&got));
                }
            }
            Ok(())
        })?;
    }
}
