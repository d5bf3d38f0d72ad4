//! Shared helpers for the volume integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

pub mod power;

use blockdev::{BlockDevice, FaultHandle, FaultyDevice, IoBuf, RamDevice, WriteFlags};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use volume::{EngineOptions, LevelSpec, ManualClock, Throttle, Volume, VolumeConfig};

pub const MIB: u64 = 1 << 20;

/// Options for tests: no throttling sleeps, no auto rebuild, small batches.
pub fn test_options() -> EngineOptions {
    EngineOptions {
        throttle: Throttle::Unlimited,
        auto_rebuild: false,
        batch_bytes: 256 << 10,
        clock: Arc::new(ManualClock::new()),
        ..EngineOptions::default()
    }
}

pub fn config(level: LevelSpec, su: u64, region: u64) -> VolumeConfig {
    VolumeConfig {
        stripe_unit_bytes: su,
        region_bytes: region,
        journal_bytes: 256 << 10,
        options: test_options(),
        ..VolumeConfig::new(level)
    }
}

/// RAM members behind fault injectors.
pub struct Members {
    pub ram: Vec<Arc<RamDevice>>,
    pub faults: Vec<FaultHandle>,
    pub devs: Vec<Arc<dyn BlockDevice>>,
}

pub fn ram_members(count: usize, size: u64) -> Members {
    let mut ram = Vec::new();
    let mut faults = Vec::new();
    let mut devs: Vec<Arc<dyn BlockDevice>> = Vec::new();
    for i in 0..count {
        let r = Arc::new(RamDevice::new(format!("m{i}"), size));
        let f = FaultyDevice::new(r.clone());
        faults.push(f.handle());
        ram.push(r);
        devs.push(Arc::new(f));
    }
    Members { ram, faults, devs }
}

/// A volume named "t" over `m` with stripe unit `su` and 1 MiB bitmap regions.
pub async fn create_on(m: &Members, level: LevelSpec, su: u64) -> Volume {
    Volume::create("t", config(level, su, MIB), m.devs.clone(), vec![])
        .await
        .unwrap()
}

pub fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

pub async fn write(vol: &Volume, off: u64, data: &[u8]) {
    vol.write(off, IoBuf::from_slice(data), WriteFlags::default())
        .await
        .unwrap_or_else(|e| panic!("write {off}+{}: {e}", data.len()));
}

pub async fn read(vol: &Volume, off: u64, len: usize) -> Vec<u8> {
    vol.read(off, IoBuf::new_zeroed(len))
        .await
        .unwrap_or_else(|e| panic!("read {off}+{len}: {e}"))
        .to_vec()
}

/// Compares the whole volume with the model, in 1 MiB reads.
pub async fn check_all(vol: &Volume, model: &[u8]) {
    let mut off = 0usize;
    while off < model.len() {
        let n = (model.len() - off).min(MIB as usize);
        let got = read(vol, off as u64, n).await;
        if got != model[off..off + n] {
            let first = got
                .iter()
                .zip(&model[off..off + n])
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            panic!("volume differs from model at byte {}", off + first);
        }
        off += n;
    }
}

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}
