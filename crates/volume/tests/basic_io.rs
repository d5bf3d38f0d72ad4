//! Create, write, read back, across layouts; degraded reads and writes.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use rand::Rng;
use volume::{LevelSpec, MemberState, Volume, VolumeState};

use blockdev::BlockDevice;

const SU: u64 = 16 << 10;

fn layouts() -> Vec<(LevelSpec, usize)> {
    vec![
        (LevelSpec::Raid0, 3),
        (LevelSpec::Raid1, 2),
        (LevelSpec::Raid1, 3),
        (LevelSpec::Raid10 { copies: 2 }, 4),
        (LevelSpec::Raid10 { copies: 2 }, 3),
        (LevelSpec::Raid5, 3),
        (LevelSpec::Raid5, 5),
        (LevelSpec::Raid6, 4),
        (LevelSpec::Raid6, 6),
        (LevelSpec::Erasure { k: 4, m: 2 }, 6),
        (LevelSpec::Erasure { k: 3, m: 3 }, 6),
        (LevelSpec::Erasure { k: 2, m: 4 }, 6),
    ]
}

async fn random_io(vol: &Volume, model: &mut [u8], seed: u64, ops: usize) {
    let mut r = rng(seed);
    let size = model.len() as u64;
    for _ in 0..ops {
        let sectors = if r.random_bool(0.3) {
            r.random_range(1..=2 * SU / 512 * 4)
        } else {
            r.random_range(1..=16)
        };
        let len = (sectors * 512).min(size);
        let off = r.random_range(0..=(size - len) / 512) * 512;
        if r.random_bool(0.6) {
            let data = random_bytes(&mut r, len as usize);
            write(vol, off, &data).await;
            model[off as usize..(off + len) as usize].copy_from_slice(&data);
        } else {
            let got = read(vol, off, len as usize).await;
            assert!(
                got == model[off as usize..(off + len) as usize],
                "read {off}+{len}"
            );
        }
    }
}

#[tokio::test]
async fn every_layout_reads_back_random_io() {
    for (i, (level, n)) in layouts().into_iter().enumerate() {
        let m = ram_members(n, 4 * MIB);
        let vol = Volume::create("t", config(level, SU, MIB), m.devs.clone(), vec![])
            .await
            .unwrap();
        let size = vol.size_bytes() as usize;
        let mut model = vec![0u8; size];
        random_io(&vol, &mut model, i as u64, 300).await;
        check_all(&vol, &model).await;
        assert_eq!(vol.status().state, VolumeState::Healthy, "{level}");
    }
}

#[tokio::test]
async fn full_stripe_write_reads_nothing() {
    let m = ram_members(6, 4 * MIB);
    let vol = create_on(&m, LevelSpec::Raid6, SU).await;
    let before: Vec<u64> = m.ram.iter().map(|r| r.stats().read_ops).collect();
    let mut r = rng(1);
    let data = random_bytes(&mut r, (4 * SU * 8) as usize);
    write(&vol, 4 * SU * 2, &data).await;
    let after: Vec<u64> = m.ram.iter().map(|r| r.stats().read_ops).collect();
    assert_eq!(before, after, "full-stripe writes must not read");
    assert_eq!(read(&vol, 4 * SU * 2, data.len()).await, data);
}

#[tokio::test]
async fn small_write_uses_cheaper_strategy() {
    // 8+1: a 4 KiB write must read 2 shards (old data + parity), not 7.
    let m = ram_members(9, 4 * MIB);
    let vol = create_on(&m, LevelSpec::Raid5, SU).await;
    let before: u64 = m.ram.iter().map(|r| r.stats().read_ops).sum();
    write(&vol, 8192, &[7u8; 4096]).await;
    let after: u64 = m.ram.iter().map(|r| r.stats().read_ops).sum();
    assert_eq!(
        after - before,
        2,
        "read-modify-write reads old data and parity"
    );
    // 3+1 with a write covering 2 of 3 chunks fully: reconstruct-write reads 1.
    let m = ram_members(4, 4 * MIB);
    let vol = create_on(&m, LevelSpec::Raid5, SU).await;
    let before: u64 = m.ram.iter().map(|r| r.stats().read_ops).sum();
    write(&vol, 0, &vec![9u8; 2 * SU as usize]).await;
    let after: u64 = m.ram.iter().map(|r| r.stats().read_ops).sum();
    assert_eq!(
        after - before,
        1,
        "reconstruct-write reads the one untouched chunk"
    );
}

#[tokio::test]
async fn degraded_reads_and_writes_within_tolerance() {
    for (level, n) in layouts() {
        let tolerance = level.params(n, SU).unwrap().m;
        if tolerance == 0 {
            continue;
        }
        let m = ram_members(n, 4 * MIB);
        let vol = Volume::create("t", config(level, SU, MIB), m.devs.clone(), vec![])
            .await
            .unwrap();
        let mut model = vec![0u8; vol.size_bytes() as usize];
        random_io(&vol, &mut model, 7, 100).await;
        // Fail `tolerance` members (for raid10, members whose loss is survivable).
        let victims: Vec<usize> = match level {
            LevelSpec::Raid10 { .. } => vec![0],
            _ => (0..tolerance).map(|i| (i * 2 + 1) % n).collect(),
        };
        for &v in &victims {
            vol.fail_member(v).await.unwrap();
        }
        assert_eq!(vol.status().state, VolumeState::Degraded, "{level}");
        check_all(&vol, &model).await;
        random_io(&vol, &mut model, 8, 200).await;
        check_all(&vol, &model).await;
        for &v in &victims {
            assert_eq!(vol.status().members[v].state, MemberState::Failed);
        }
    }
}
