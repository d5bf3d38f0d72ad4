//! Crash consistency: a scripted workload on crash-recording members is cut at every
//! member I/O; for several outcomes of the unflushed writes the volume must assemble,
//! resync only dirty regions, and every sector must read back as its durable content or
//! the content of a write issued after it, never anything else. The same must hold after
//! losing `m` members (parity consistent: no write hole).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use blockdev::{BlockDevice, CrashRecorder, IoBuf, RamDevice, WriteFlags};
use common::power::Power;
use common::*;
use rand::Rng;
use volume::{EngineOptions, LevelSpec, Volume};

const SECTOR: usize = 512;
const SU: u64 = 4096;
const REGION: u64 = 64 << 10;
const MEMBER_BYTES: u64 = (1 << 20) + (256 << 10);

#[derive(Clone, Debug)]
enum Op {
    Write { off: u64, sectors: u64, fua: bool },
    Flush,
    Sweep,
}

/// Deterministic content of sector `s` as written by write `w` (w = 0: never written).
fn pattern(w: u32, s: u64) -> [u8; SECTOR] {
    let mut out = [0u8; SECTOR];
    if w == 0 {
        return out;
    }
    let mut x = (u64::from(w) << 32) ^ s ^ 0x9E37_79B9_7F4A_7C15;
    for chunk in out.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    out
}

fn script(seed: u64, vol_bytes: u64, ops: usize) -> Vec<Op> {
    let mut r = rng(seed);
    let sectors_total = vol_bytes / SECTOR as u64;
    // Writes cluster in a few hot spots so regions stay mostly clean.
    let hot: Vec<u64> = (0..3).map(|_| r.random_range(0..sectors_total)).collect();
    (0..ops)
        .map(|_| match r.random_range(0..10) {
            0 => Op::Flush,
            1 => Op::Sweep,
            _ => {
                let sectors = if r.random_bool(0.25) {
                    r.random_range(8..=64)
                } else {
                    r.random_range(1..=8)
                };
                let base = hot[r.random_range(0..hot.len())];
                let jitter = r.random_range(0..256);
                let off = (base + jitter).min(sectors_total - sectors);
                Op::Write {
                    off: off * SECTOR as u64,
                    sectors,
                    fua: r.random_bool(0.15),
                }
            }
        })
        .collect()
}

/// Per sector: its durable write id and the ids issued since.
#[derive(Clone)]
struct Model {
    durable: Vec<u32>,
    pending: Vec<Vec<u32>>,
}

impl Model {
    fn new(sectors: usize) -> Model {
        Model {
            durable: vec![0; sectors],
            pending: vec![Vec::new(); sectors],
        }
    }
    fn issue(&mut self, w: u32, first: usize, count: usize) {
        for s in first..first + count {
            self.pending[s].push(w);
        }
    }
    fn complete_fua(&mut self, w: u32, first: usize, count: usize) {
        for s in first..first + count {
            self.durable[s] = w;
            self.pending[s].clear();
        }
    }
    fn flushed(&mut self) {
        for (d, p) in self.durable.iter_mut().zip(self.pending.iter_mut()) {
            if let Some(&last) = p.last() {
                *d = last;
            }
            p.clear();
        }
    }
    fn allows(&self, s: usize, content: &[u8]) -> bool {
        if s >= self.durable.len() {
            return content.iter().all(|&b| b == 0);
        }
        std::iter::once(self.durable[s])
            .chain(self.pending[s].iter().copied())
            .any(|w| pattern(w, s as u64)[..] == *content)
    }
}

fn options() -> EngineOptions {
    EngineOptions {
        bitmap_quiet: Duration::from_secs(3600),
        ..test_options()
    }
}

struct Run {
    images: Option<Vec<RamDevice>>,
    model: Model,
    member_ops: u64,
}

/// Runs the script with the power cut at member op `cut_at` (u64::MAX: never).
async fn run(
    level: LevelSpec,
    n: usize,
    degrade: &[usize],
    ops: &[Op],
    cut_at: u64,
    seed: u64,
) -> Run {
    let recorders: Vec<Arc<CrashRecorder>> = (0..n)
        .map(|i| Arc::new(CrashRecorder::new(format!("c{i}"), MEMBER_BYTES)))
        .collect();
    // Create on the recorders directly, then flush so creation is all durable.
    let plain: Vec<Arc<dyn BlockDevice>> = recorders.iter().map(|r| r.clone() as _).collect();
    let mut cfg = config(level, SU, REGION);
    cfg.options = options();
    // Small: the workload wraps it several times.
    cfg.journal_bytes = 64 << 10;
    let vol = Volume::create("crash", cfg, plain, vec![]).await.unwrap();
    for &d in degrade {
        vol.fail_member(d).await.unwrap();
    }
    vol.stop().await.unwrap();
    drop(vol);
    for r in &recorders {
        r.flush().await.unwrap();
    }
    let power = Power::new(cut_at, seed, recorders.clone());
    let devs = power.members(degrade);
    let vol = match Volume::assemble_with(devs, options()).await {
        Ok(vol) => vol,
        Err(e) => {
            // Cut during assembly's own superblock write: nothing written yet.
            assert!(power.cut.load(Ordering::Acquire), "assembly failed: {e}");
            let images = power.images.lock().unwrap().take();
            return Run {
                images,
                model: Model::new(0),
                member_ops: power.ops.load(Ordering::Acquire),
            };
        }
    };
    let sectors = (vol.size_bytes() / SECTOR as u64) as usize;
    let mut model = Model::new(sectors);
    for (i, op) in ops.iter().enumerate() {
        let w = i as u32 + 1;
        let ok = match op {
            Op::Write { off, sectors, fua } => {
                let first = (*off / SECTOR as u64) as usize;
                let mut data = Vec::with_capacity(*sectors as usize * SECTOR);
                for s in first..first + *sectors as usize {
                    data.extend_from_slice(&pattern(w, s as u64));
                }
                model.issue(w, first, *sectors as usize);
                let r = vol
                    .write(*off, IoBuf::from_slice(&data), WriteFlags { fua: *fua })
                    .await;
                if r.is_ok() && *fua {
                    model.complete_fua(w, first, *sectors as usize);
                }
                r.is_ok()
            }
            Op::Flush => {
                let r = vol.flush().await;
                if r.is_ok() {
                    model.flushed();
                }
                r.is_ok()
            }
            Op::Sweep => vol.sweep_bitmap(true).await.is_ok(),
        };
        if !ok {
            assert!(
                power.cut.load(Ordering::Acquire),
                "op {i} failed without a power cut"
            );
            break;
        }
    }
    let member_ops = power.ops.load(Ordering::Acquire);
    drop(vol);
    let images = power.images.lock().unwrap().take();
    Run {
        images,
        model,
        member_ops,
    }
}

/// Assembles the crash images (without the members failed before the workload) and
/// checks every sector, then again with the rest of the tolerance lost.
async fn verify(
    level: LevelSpec,
    images: Vec<RamDevice>,
    degrade: &[usize],
    model: &Model,
    what: &str,
) {
    let n = images.len();
    let rams: Vec<Arc<RamDevice>> = images
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !degrade.contains(i))
        .map(|(_, r)| Arc::new(r))
        .collect();
    let devs: Vec<Arc<dyn BlockDevice>> = rams.iter().map(|r| r.clone() as _).collect();
    let vol = Volume::assemble_with(devs, options())
        .await
        .unwrap_or_else(|e| panic!("{what}: assembly failed: {e}"));
    let st = vol.status();
    // Resync read only metadata, the journal (and, replaying it, at most as much row
    // data as it holds) and the dirty regions.
    let bitmap_area = 4096u64;
    let journal = st_journal_bytes(level);
    let bound = 8192 + bitmap_area + 2 * journal + st.dirty_regions * (REGION + SU);
    for r in &rams {
        let read = r.stats().read_bytes;
        assert!(
            read <= bound,
            "{what}: assembly read {read} bytes from a member, bound {bound} ({} dirty)",
            st.dirty_regions
        );
    }
    check_model(&vol, model, &format!("{what} healthy")).await;
    let after_resync: Vec<Arc<dyn BlockDevice>> = rams
        .iter()
        .map(|r| Arc::new(r.snapshot(r.info().name.clone())) as _)
        .collect();
    // Lose members: reconstructed data must be consistent too (no write hole).
    let params = level.params(n, SU).unwrap();
    let victims: Vec<usize> = match level {
        LevelSpec::Raid10 { .. } | LevelSpec::Raid1 if degrade.is_empty() => vec![0],
        LevelSpec::Raid10 { .. } | LevelSpec::Raid1 => vec![],
        _ => (0..n)
            .filter(|i| !degrade.contains(i))
            .take(params.m - degrade.len())
            .collect(),
    };
    for v in victims {
        vol.fail_member(v).await.unwrap();
    }
    check_model(&vol, model, &format!("{what} degraded")).await;
    drop(vol);
    // And a scrub finds nothing to repair.
    let vol = Volume::assemble_with(after_resync, options())
        .await
        .unwrap();
    let report = vol.scrub().await.unwrap();
    assert_eq!(
        report.mismatches, 0,
        "{what}: parity inconsistent after resync: {report:?}"
    );
}

async fn check_model(vol: &Volume, model: &Model, what: &str) {
    let size = vol.size_bytes() as usize;
    let got = vol.read(0, IoBuf::new_zeroed(size)).await.unwrap();
    for (s, content) in got.chunks_exact(SECTOR).enumerate() {
        assert!(
            model.allows(s, content),
            "{what}: sector {s} holds neither its durable content (write {:?}) nor a later one ({:?})",
            model.durable.get(s),
            model.pending.get(s)
        );
    }
}

fn st_journal_bytes(level: LevelSpec) -> u64 {
    match level {
        LevelSpec::Raid1 | LevelSpec::Raid10 { .. } | LevelSpec::Raid0 => 0,
        _ => 64 << 10,
    }
}

async fn crash_points(
    level: LevelSpec,
    n: usize,
    degrade: &[usize],
    script_seed: u64,
    ops: usize,
    stride: u64,
) {
    let size = {
        let p = level.params(n, SU).unwrap();
        let usable = MEMBER_BYTES - (1 << 20);
        match p.family() {
            volume::layout::Family::Rotating { k, .. } => usable * k as u64,
            volume::layout::Family::Near { copies } => usable * n as u64 / copies as u64,
        }
    };
    let ops = script(script_seed, size, ops);
    let full = run(level, n, degrade, &ops, u64::MAX, 0).await;
    assert!(full.images.is_none());
    let total = full.member_ops;
    let mut cut = 0;
    let mut checked = 0;
    while cut < total {
        for seed in 0..3 {
            let r = run(level, n, degrade, &ops, cut, seed).await;
            let images = r.images.expect("the cut happened");
            let what =
                format!("{level} (failed {degrade:?}) cut at member op {cut}/{total} seed {seed}");
            verify(level, images, degrade, &r.model, &what).await;
            checked += 1;
        }
        cut += stride;
    }
    eprintln!("{level} failed {degrade:?}: {total} member ops, {checked} crash images verified");
    assert!(checked > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raid5_every_member_io() {
    crash_points(LevelSpec::Raid5, 3, &[], 11, 40, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raid6_every_member_io() {
    crash_points(LevelSpec::Raid6, 4, &[], 12, 30, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasure_4_2_crash_points() {
    crash_points(LevelSpec::Erasure { k: 4, m: 2 }, 6, &[], 13, 30, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raid1_every_member_io() {
    crash_points(LevelSpec::Raid1, 2, &[], 14, 40, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raid10_crash_points() {
    crash_points(LevelSpec::Raid10 { copies: 2 }, 3, &[], 15, 30, 1).await;
}

/// Degraded: the journal must keep the missing members' data derivable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raid5_degraded_every_member_io() {
    crash_points(LevelSpec::Raid5, 4, &[1], 16, 40, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raid6_degraded_crash_points() {
    crash_points(LevelSpec::Raid6, 5, &[3], 17, 30, 1).await;
    crash_points(LevelSpec::Raid6, 5, &[0, 2], 18, 30, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_degraded_crash_points() {
    crash_points(LevelSpec::Raid1, 3, &[0], 19, 30, 1).await;
    crash_points(LevelSpec::Raid10 { copies: 2 }, 4, &[2], 20, 30, 1).await;
}
