//! Crash consistency of the log layout: a scripted workload of writes, overwrites,
//! deallocates, flushes, garbage collection and checkpoints on crash-recording members is
//! cut at member operations spread over the whole run; for each cut, the crash images
//! (random subsets of the unflushed writes kept) must assemble, replay the log, and
//! every logical block must read back whole as its durable version or a version issued
//! after it: no acknowledged write lost, no torn block. Then the same with one member
//! gone (the parity of every segment agrees with its data).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use blockdev::{BlockDevice, CrashRecorder, IoBuf, RamDevice, WriteFlags};
use common::power::Power;
use common::*;
use rand::Rng;
use volume::{Compression, EngineOptions, LevelSpec, LogConfig, Volume};

const BLOCK: u64 = 4096;
const SU: u64 = 16 << 10;
const MEMBER_BYTES: u64 = 3 << 20;
const HOT_BLOCKS: u64 = 96;

#[derive(Clone, Debug)]
enum Op {
    Write {
        block: u64,
        count: u64,
        fua: bool,
    },
    Trim {
        block: u64,
        count: u64,
    },
    Flush,
    Gc,
    Checkpoint,
    /// A checkpoint while three writes of `count` blocks at `block`, `block + 32` and
    /// `block + 64` (mod the hot range) go on: segments written while it is.
    CheckpointUnderWrites {
        block: u64,
        count: u64,
    },
}

fn script(seed: u64, ops: usize) -> Vec<Op> {
    let mut r = rng(seed);
    (0..ops)
        .map(|_| match r.random_range(0..22) {
            0 | 1 => Op::Flush,
            2 => Op::Gc,
            3 => Op::Checkpoint,
            20 | 21 => Op::CheckpointUnderWrites {
                block: r.random_range(0..HOT_BLOCKS),
                count: r.random_range(1..=4),
            },
            4 | 5 => Op::Trim {
                block: r.random_range(0..HOT_BLOCKS),
                count: r.random_range(1..=8),
            },
            _ => Op::Write {
                block: r.random_range(0..HOT_BLOCKS),
                count: r.random_range(1..=4),
                fua: r.random_bool(0.2),
            },
        })
        .collect()
}

/// Version `w` of block `b`: its identity, then compressible text (w = 0: zeroes).
fn block_content(w: u32, b: u64) -> Vec<u8> {
    let mut v = vec![0u8; BLOCK as usize];
    if w == 0 {
        return v;
    }
    v[..4].copy_from_slice(&w.to_le_bytes());
    v[4..12].copy_from_slice(&b.to_le_bytes());
    let mut r = rng(u64::from(w) << 32 ^ b);
    let words: [&[u8]; 4] = [b"segment ", b"summary ", b"replay ", b"crash "];
    let mut at = 12;
    while at < v.len() {
        let word = words[r.random_range(0..4)];
        let n = word.len().min(v.len() - at);
        v[at..at + n].copy_from_slice(&word[..n]);
        at += n;
    }
    v
}

/// Per block: the durable version and versions issued since (trims are versions whose
/// content is zeroes).
#[derive(Clone)]
struct Model {
    durable: Vec<u32>,
    pending: Vec<Vec<u32>>,
    trims: HashSet<u32>,
}

impl Model {
    fn new(blocks: usize) -> Model {
        Model {
            durable: vec![0; blocks],
            pending: vec![Vec::new(); blocks],
            trims: HashSet::new(),
        }
    }
    fn content(&self, w: u32, b: u64) -> Vec<u8> {
        if self.trims.contains(&w) {
            vec![0u8; BLOCK as usize]
        } else {
            block_content(w, b)
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
    fn allows(&self, b: u64, got: &[u8]) -> bool {
        let i = b as usize;
        std::iter::once(self.durable[i])
            .chain(self.pending[i].iter().copied())
            .any(|w| self.content(w, b) == got)
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
    /// Segments sealed while a checkpoint was written (its root's head).
    head_segments: u64,
    /// Checkpoints written as deltas.
    deltas: u64,
}

async fn run(ops: &[Op], cut_at: u64, seed: u64) -> Run {
    let recorders: Vec<Arc<CrashRecorder>> = (0..4)
        .map(|i| Arc::new(CrashRecorder::new(format!("c{i}"), MEMBER_BYTES)))
        .collect();
    let plain: Vec<Arc<dyn BlockDevice>> = recorders.iter().map(|r| r.clone() as _).collect();
    let mut cfg = config(LevelSpec::Raid5, SU, 256 << 10);
    cfg.options = options();
    cfg.journal_bytes = 64 << 10;
    cfg.log = Some(LogConfig::new(Compression::Lz4));
    let vol = Volume::create("crash", cfg, plain, vec![]).await.unwrap();
    vol.stop().await.unwrap();
    drop(vol);
    for r in &recorders {
        r.flush().await.unwrap();
    }
    let power = Power::new(cut_at, seed, recorders.clone());
    power.yield_writes.store(true, Ordering::Relaxed);
    let devs = power.members(&[]);
    let vol = match Volume::assemble_with(devs, options()).await {
        Ok(v) => v,
        Err(e) => {
            assert!(power.cut.load(Ordering::Acquire), "assembly failed: {e}");
            return Run {
                images: power.images.lock().unwrap().take(),
                model: Model::new(0),
                member_ops: power.ops.load(Ordering::Acquire),
                head_segments: 0,
                deltas: 0,
            };
        }
    };
    let blocks = (vol.size_bytes() / BLOCK) as usize;
    let mut model = Model::new(blocks);
    for (i, op) in ops.iter().enumerate() {
        let w = i as u32 + 1;
        let ok = match op {
            Op::Write { block, count, fua } => {
                let mut data = Vec::new();
                for b in *block..*block + *count {
                    data.extend_from_slice(&block_content(w, b));
                    model.pending[b as usize].push(w);
                }
                let r = vol
                    .write(
                        block * BLOCK,
                        IoBuf::from_slice(&data),
                        WriteFlags { fua: *fua },
                    )
                    .await;
                if r.is_ok() && *fua {
                    for b in *block..*block + *count {
                        model.durable[b as usize] = w;
                        model.pending[b as usize].clear();
                    }
                }
                r.is_ok()
            }
            Op::Trim { block, count } => {
                model.trims.insert(w);
                for b in *block..*block + *count {
                    model.pending[b as usize].push(w);
                }
                vol.discard(block * BLOCK, count * BLOCK).await.is_ok()
            }
            Op::Flush => {
                let r = vol.flush().await;
                if r.is_ok() {
                    model.flushed();
                }
                r.is_ok()
            }
            Op::Gc => vol.log().unwrap().collect_garbage().await.is_ok(),
            Op::Checkpoint => vol.log().unwrap().checkpoint().await.is_ok(),
            Op::CheckpointUnderWrites { block, count } => {
                let starts: Vec<u64> = (0..3)
                    .map(|i| (block + 32 * i) % (HOT_BLOCKS - count + 1))
                    .collect();
                let mut bufs = Vec::new();
                for &s in &starts {
                    let mut data = Vec::new();
                    for b in s..s + count {
                        data.extend_from_slice(&block_content(w, b));
                        if !model.pending[b as usize].contains(&w) {
                            model.pending[b as usize].push(w);
                        }
                    }
                    bufs.push((s, data));
                }
                let log = vol.log().unwrap();
                // Writes first: the first is in flight when the checkpoint takes its
                // map; the others are sealed while it is written.
                let (writes, ck) = futures::join!(
                    futures::future::join_all(bufs.iter().map(|(s, d)| {
                        vol.write(s * BLOCK, IoBuf::from_slice(d), WriteFlags::default())
                    })),
                    log.checkpoint(),
                );
                ck.is_ok() && writes.iter().all(|r| r.is_ok())
            }
        };
        if !ok {
            assert!(
                power.cut.load(Ordering::Acquire),
                "op {i} ({op:?}) failed without a power cut"
            );
            break;
        }
    }
    let member_ops = power.ops.load(Ordering::Acquire);
    let counters = &vol.log().unwrap().counters;
    let head_segments = counters.checkpoint_head_segments.load(Ordering::Relaxed);
    let deltas = counters.checkpoint_deltas.load(Ordering::Relaxed);
    drop(vol);
    Run {
        images: power.images.lock().unwrap().take(),
        model,
        member_ops,
        head_segments,
        deltas,
    }
}

async fn check(vol: &Volume, model: &Model, what: &str) {
    let blocks = model.durable.len() as u64;
    let got = vol
        .read(0, IoBuf::new_zeroed((blocks * BLOCK) as usize))
        .await
        .unwrap();
    for b in 0..blocks {
        let s = (b * BLOCK) as usize;
        let content = &got[s..s + BLOCK as usize];
        if !model.allows(b, content) {
            let id = u32::from_le_bytes(content[..4].try_into().unwrap());
            panic!(
                "{what}: block {b} holds version {id} (or torn), allowed: durable {} then {:?}",
                model.durable[b as usize], model.pending[b as usize]
            );
        }
    }
}

async fn verify(images: Vec<RamDevice>, model: &Model, what: &str) {
    let rams: Vec<Arc<RamDevice>> = images.into_iter().map(Arc::new).collect();
    let devs: Vec<Arc<dyn BlockDevice>> = rams.iter().map(|r| r.clone() as _).collect();
    let vol = Volume::assemble_with(devs, options())
        .await
        .unwrap_or_else(|e| panic!("{what}: assembly failed: {e}"));
    check(&vol, model, &format!("{what} healthy")).await;
    vol.fail_member(2).await.unwrap();
    check(&vol, model, &format!("{what} degraded")).await;
}

/// Returns the segments the uncut run sealed while checkpoints were written, and its
/// delta checkpoints.
async fn crash_points(seed: u64, ops: usize, points: u64) -> (u64, u64) {
    let script = script(seed, ops);
    let full = run(&script, u64::MAX, seed).await;
    assert!(full.images.is_none());
    let total = full.member_ops;
    assert!(total > 50, "the workload issued only {total} member ops");
    let step = (total / points).max(1);
    let mut cuts = 0;
    for cut_at in (0..total).step_by(step as usize) {
        let r = run(&script, cut_at, seed + cut_at).await;
        let Some(images) = r.images else { continue };
        verify(
            images,
            &r.model,
            &format!("seed {seed} cut at {cut_at}/{total}"),
        )
        .await;
        cuts += 1;
    }
    assert!(cuts as u64 >= points / 2, "only {cuts} crash points hit");
    (full.head_segments, full.deltas)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_keeps_acknowledged_writes_and_tears_no_block() {
    let (mut head_segments, mut deltas) = (0, 0);
    for seed in [1u64, 2] {
        let (h, d) = crash_points(seed, 120, 60).await;
        head_segments += h;
        deltas += d;
    }
    // The cuts fell among segment writes that overlapped a checkpoint, and among delta
    // checkpoints, too.
    assert!(
        head_segments > 0,
        "no segment was sealed during a checkpoint"
    );
    assert!(deltas > 0, "no checkpoint was written as a delta");
}
