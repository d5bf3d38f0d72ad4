//! RamDevice and FileDevice (both engines, O_DIRECT) against a plain Vec<u8> model.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::sync::Arc;

use blockdev::{BlockDevice, FileDevice, IoBuf, IoEngine, OpenOptions, RamDevice, WriteFlags};
use proptest::prelude::*;

const BLOCK: u64 = 512;
/// Just over two 1 MiB RAM chunks so I/O crosses chunk boundaries.
const SIZE_BYTES: u64 = (2 << 20) + 64 * 1024;
const BLOCKS: u64 = SIZE_BYTES / BLOCK;

#[derive(Clone, Debug)]
enum Op {
    Write {
        block: u64,
        blocks: u64,
        seed: u8,
        fua: bool,
    },
    Read {
        block: u64,
        blocks: u64,
    },
    WriteZeroes {
        block: u64,
        blocks: u64,
    },
    Discard {
        block: u64,
        blocks: u64,
    },
    Flush,
}

fn range() -> impl Strategy<Value = (u64, u64)> {
    // Mostly small I/Os, some large ones; sometimes right around the chunk boundary.
    let start = prop_oneof![0..BLOCKS, (2040u64..2056)];
    (start, prop_oneof![4 => 1..17u64, 1 => 1..1024u64]).prop_map(|(b, n)| (b, n.min(BLOCKS - b)))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (range(), any::<u8>(), prop::bool::weighted(0.1))
            .prop_map(|((block, blocks), seed, fua)| Op::Write { block, blocks, seed, fua }),
        3 => range().prop_map(|(block, blocks)| Op::Read { block, blocks }),
        1 => range().prop_map(|(block, blocks)| Op::WriteZeroes { block, blocks }),
        1 => range().prop_map(|(block, blocks)| Op::Discard { block, blocks }),
        1 => Just(Op::Flush),
    ]
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

async fn check(dev: &dyn BlockDevice, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut model = vec![0u8; SIZE_BYTES as usize];
    for op in ops {
        match *op {
            Op::Write {
                block,
                blocks,
                seed,
                fua,
            } => {
                let (off, len) = ((block * BLOCK) as usize, (blocks * BLOCK) as usize);
                let data = pattern(seed, len);
                let back = dev
                    .write(off as u64, IoBuf::from_slice(&data), WriteFlags { fua })
                    .await;
                prop_assert_eq!(
                    &back.unwrap()[..],
                    &data[..],
                    "write must hand the buffer back"
                );
                model[off..off + len].copy_from_slice(&data);
            }
            Op::Read { block, blocks } => {
                let (off, len) = ((block * BLOCK) as usize, (blocks * BLOCK) as usize);
                let got = dev
                    .read(off as u64, IoBuf::from_slice(&vec![0xEE; len]))
                    .await
                    .unwrap();
                prop_assert!(
                    got[..] == model[off..off + len],
                    "{}: read {:?} differs",
                    dev.info().name,
                    op
                );
            }
            Op::WriteZeroes { block, blocks } | Op::Discard { block, blocks } => {
                let (off, len) = (block * BLOCK, blocks * BLOCK);
                if matches!(op, Op::Discard { .. }) {
                    dev.discard(off, len).await.unwrap();
                } else {
                    dev.write_zeroes(off, len).await.unwrap();
                }
                model[off as usize..(off + len) as usize].fill(0);
            }
            Op::Flush => dev.flush().await.unwrap(),
        }
    }
    let all = dev
        .read(0, IoBuf::new_zeroed(SIZE_BYTES as usize))
        .await
        .unwrap();
    prop_assert!(
        all[..] == model[..],
        "{}: final contents differ",
        dev.info().name
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn backends_match_vec_model(ops in prop::collection::vec(op(), 1..60)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let dir = tempfile::Builder::new().prefix("blockdev-model-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let mut devs: Vec<Arc<dyn BlockDevice>> = vec![Arc::new(RamDevice::new("ram", SIZE_BYTES))];
        for engine in [IoEngine::Uring, IoEngine::ThreadPool] {
            let opts = OpenOptions { create_size_bytes: Some(SIZE_BYTES), engine, queue_depth: 8, ..Default::default() };
            let dev = FileDevice::open(dir.path().join(format!("{engine:?}.img")), opts).unwrap();
            prop_assert!(dev.is_direct());
            if u64::from(dev.info().logical_block_bytes) != BLOCK {
                eprintln!("filesystem wants {}-byte direct I/O; file backends not checked", dev.info().logical_block_bytes);
                continue;
            }
            prop_assert_eq!(dev.engine(), engine);
            devs.push(Arc::new(dev));
        }
        for dev in devs {
            rt.block_on(check(&*dev, &ops))?;
        }
    }
}
