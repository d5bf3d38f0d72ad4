//! Rough throughput check on RAM members (not a benchmark; run with
//! `cargo test -p volume --release --test speed -- --ignored --nocapture`).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Instant;

use blockdev::{BlockDevice, IoBuf, RamDevice, WriteFlags};
use common::*;
use rand::Rng;
use volume::{LevelSpec, Volume, VolumeConfig};

async fn run(level: LevelSpec, n: usize) {
    let members: Vec<Arc<dyn BlockDevice>> = (0..n)
        .map(|i| Arc::new(RamDevice::new(format!("r{i}"), 1 << 30)) as _)
        .collect();
    let mut cfg = VolumeConfig::new(level);
    cfg.assume_clean = true;
    cfg.options = test_options();
    let vol = Arc::new(Volume::create("s", cfg, members, vec![]).await.unwrap());
    let full = vol.info().optimal_io_bytes as usize;
    let io = (1 << 20) / full * full;
    let total = 512usize << 20;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for q in 0..8 {
        let vol = vol.clone();
        tasks.push(tokio::spawn(async move {
            let mut buf = IoBuf::from_slice(&vec![q as u8; io]);
            let mut off = (q * io) as u64;
            while off + io as u64 <= total as u64 {
                buf = vol.write(off, buf, WriteFlags::default()).await.unwrap();
                off += 8 * io as u64;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let w = total as f64 / t.elapsed().as_secs_f64() / 1e6;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for q in 0..8 {
        let vol = vol.clone();
        tasks.push(tokio::spawn(async move {
            let mut buf = IoBuf::new_zeroed(io);
            let mut off = (q * io) as u64;
            while off + io as u64 <= total as u64 {
                buf = vol.read(off, buf).await.unwrap();
                off += 8 * io as u64;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let r = total as f64 / t.elapsed().as_secs_f64() / 1e6;
    let ops = 100_000;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for q in 0..16 {
        let vol = vol.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = rng(q);
            let mut buf = IoBuf::new_zeroed(4096);
            for _ in 0..ops / 16 {
                let off = rng.random_range(0..(total as u64 / 4096)) * 4096;
                buf = vol.write(off, buf, WriteFlags::default()).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let iops = ops as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut tasks = Vec::new();
    for q in 0..16 {
        let vol = vol.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = rng(q);
            let mut buf = IoBuf::new_zeroed(4096);
            for _ in 0..ops / 16 {
                let off = rng.random_range(0..(total as u64 / 4096)) * 4096;
                buf = vol.read(off, buf).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let riops = ops as f64 / t.elapsed().as_secs_f64();
    eprintln!(
        "{level} n={n}: seq write {w:.0} MB/s, seq read {r:.0} MB/s, 4k randwrite {iops:.0} IOPS, 4k randread {riops:.0} IOPS"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn speed() {
    if std::env::var_os("ONLY_RAID0").is_some() {
        run(LevelSpec::Raid0, 4).await;
        return;
    }
    run(LevelSpec::Raid0, 4).await;
    run(LevelSpec::Raid1, 2).await;
    run(LevelSpec::Raid5, 5).await;
    run(LevelSpec::Raid6, 6).await;
    run(LevelSpec::Erasure { k: 8, m: 2 }, 10).await;
}
