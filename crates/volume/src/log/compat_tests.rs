//! A whole log volume whose roots are in format 1 (what binaries before incremental
//! checkpoints wrote) opens with the current code and reads back every block, and its
//! next checkpoint writes a version 2 root. The old format's writer is here, test-only:
//! a base checkpoint in slot `n mod 2`, no deltas, and a version 1 root (bytes 52.. zero,
//! per "Log root" in docs/volume-format.md) in copy `n mod 2`; the other copy invalid.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use blockdev::{BlockDevice, IoBuf, RamDevice, WriteFlags};
use rand::{Rng, SeedableRng};

use super::Compression;
use super::format::{ROOT_BYTES, ROOT_MAGIC, Root};
use super::test_support::{BS, MIB, config};
use crate::Volume;

/// Half text (compresses), half noise (stored raw).
fn block(seed: u64) -> Vec<u8> {
    let mut r = rand::rngs::StdRng::seed_from_u64(seed);
    let mut b = vec![0u8; BS];
    r.fill(&mut b[BS / 2..]);
    for (i, x) in b[..BS / 2].iter_mut().enumerate() {
        *x = b"format one root "[(i + seed as usize) % 16];
    }
    b
}

/// A version 1 root, byte by byte from the documented offsets (not `Root::encode`).
fn root_v1(r: &Root) -> Vec<u8> {
    let mut b = vec![0u8; ROOT_BYTES];
    b[0..8].copy_from_slice(&ROOT_MAGIC);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[16..32].copy_from_slice(r.volume_uuid.as_bytes());
    b[32..40].copy_from_slice(&r.checkpoint.to_le_bytes());
    b[40..48].copy_from_slice(&r.checkpoint_bytes.to_le_bytes());
    b[48..52].copy_from_slice(&r.checkpoint_crc.to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

async fn roots(vol: &Volume) -> Vec<Option<Root>> {
    let b = vol
        .inner
        .read_volume(0, IoBuf::new_zeroed(2 * ROOT_BYTES))
        .await
        .unwrap();
    (0..2)
        .map(|c| Root::decode(&b[c * ROOT_BYTES..(c + 1) * ROOT_BYTES], vol.uuid()))
        .collect()
}

/// Writes block `lba` with content `seed + i` for the `i`-th of `lbas` (distinct), all
/// at once (group commit: a few segments, not one each).
async fn write_blocks(vol: &Volume, model: &mut [Option<u64>], lbas: &[u64], seed: u64) {
    let writes = lbas.iter().enumerate().map(|(i, &lba)| {
        let buf = IoBuf::from_slice(&block(seed + i as u64));
        vol.write(lba * BS as u64, buf, WriteFlags::default())
    });
    for r in futures::future::join_all(writes).await {
        r.unwrap();
    }
    for (i, &lba) in lbas.iter().enumerate() {
        model[lba as usize] = Some(seed + i as u64);
    }
}

/// `n` distinct random blocks below `below`.
fn distinct(r: &mut rand::rngs::StdRng, n: usize, below: u64) -> Vec<u64> {
    let mut set = std::collections::BTreeSet::new();
    while set.len() < n {
        set.insert(r.random_range(0..below));
    }
    set.into_iter().collect()
}

async fn check(vol: &Volume, model: &[Option<u64>]) {
    for (lba, want) in model.iter().enumerate() {
        let got = vol
            .read(lba as u64 * BS as u64, IoBuf::new_zeroed(BS))
            .await
            .unwrap();
        match want {
            Some(s) => assert!(got[..] == block(*s)[..], "block {lba}"),
            None => assert!(got.iter().all(|&x| x == 0), "block {lba} should be zero"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_with_format_1_roots_opens_and_reads_back() {
    let devs: Vec<Arc<dyn BlockDevice>> = (0..4)
        .map(|i| Arc::new(RamDevice::new(format!("m{i}"), 16 * MIB)) as _)
        .collect();
    let vol = Volume::create("old", config(Compression::Lz4), devs.clone(), vec![])
        .await
        .unwrap();
    // No checkpoint but the ones this test writes.
    vol.abort_keeper();
    let blocks = vol.size_bytes() / BS as u64;
    let mut model: Vec<Option<u64>> = vec![None; blocks as usize];
    let mut r = rand::rngs::StdRng::seed_from_u64(1);
    // Checkpointed: a run, random overwrites and a deallocated range.
    let run: Vec<u64> = (0..blocks / 8).collect();
    for part in run.chunks(64) {
        write_blocks(&vol, &mut model, part, 1000 + part[0]).await;
    }
    let hot = distinct(&mut r, 200, blocks / 8);
    write_blocks(&vol, &mut model, &hot, 5000).await;
    vol.write_zeroes(10 * BS as u64, 20 * BS as u64)
        .await
        .unwrap();
    model[10..30].fill(None);
    let log = vol.log.clone().unwrap();
    // What an old binary wrote: a base checkpoint in slot n mod 2 (forced: no delta).
    loop {
        log.st().chain.tail = None;
        log.checkpoint().await.unwrap();
        let (in_its_slot, no_deltas) = {
            let st = log.st();
            (
                u64::from(st.chain.slot) == st.checkpoint_no % 2,
                st.chain.deltas.is_empty(),
            )
        };
        if in_its_slot {
            assert!(no_deltas);
            break;
        }
        // A delta keeps the slot and moves the number on by one: the next base lands
        // in slot n mod 2.
        log.checkpoint().await.unwrap();
    }
    // Not checkpointed: segments the next assembly replays from the old root's free
    // list (a format 1 root has no head: ascending from the first free segment).
    let tail = distinct(&mut r, 300, blocks);
    assert!(
        log.status().segments_free > log.gc_low_water() as u64,
        "{:?}",
        log.status()
    );
    write_blocks(&vol, &mut model, &tail, 9000).await;
    vol.flush().await.unwrap();
    let current = roots(&vol)
        .await
        .into_iter()
        .flatten()
        .max_by_key(|r| r.checkpoint)
        .unwrap();
    assert!(
        current.deltas.is_empty() && current.head.is_empty(),
        "{current:?}"
    );
    assert_eq!(u64::from(current.slot), current.checkpoint % 2);
    let copy = (current.checkpoint % 2) as usize;
    let v1 = root_v1(&current);
    assert_eq!(Root::decode(&v1, vol.uuid()), Some(current.clone()));
    vol.inner
        .write_volume((copy * ROOT_BYTES) as u64, IoBuf::from_slice(&v1), true)
        .await
        .unwrap();
    vol.inner
        .write_volume(
            ((1 - copy) * ROOT_BYTES) as u64,
            IoBuf::new_zeroed(ROOT_BYTES),
            true,
        )
        .await
        .unwrap();
    // A crash: nothing more is written.
    drop(log);
    drop(vol);

    let vol = Volume::assemble(devs.clone()).await.unwrap();
    check(&vol, &model).await;
    let st = vol.status().log.unwrap();
    // The replay's checkpoint (or the next one) is version 2.
    write_blocks(&vol, &mut model, &[1, 2, 3], 20_000).await;
    vol.stop().await.unwrap();
    drop(vol);
    let vol = Volume::assemble(devs).await.unwrap();
    let b = vol
        .inner
        .read_volume(0, IoBuf::new_zeroed(2 * ROOT_BYTES))
        .await
        .unwrap();
    let newest = roots(&vol)
        .await
        .into_iter()
        .enumerate()
        .filter_map(|(c, r)| r.map(|r| (c, r)))
        .max_by_key(|(_, r)| r.checkpoint)
        .unwrap();
    let version = u32::from_le_bytes(
        b[newest.0 * ROOT_BYTES + 8..newest.0 * ROOT_BYTES + 12]
            .try_into()
            .unwrap(),
    );
    assert_eq!(version, 2, "{st:?}");
    assert!(newest.1.checkpoint > current.checkpoint);
    check(&vol, &model).await;
}
