//! The three comparisons on one medium, each side by side, rounds alternating which side
//! goes first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bench::kv::{KvBenchConfig, KvPattern, run_kv};
use bench::{BenchConfig, CpuTime, Pattern, Progress, Report};
use blockdev::{BlockDevice, IoBuf, WriteFlags};
use serde_json::{Value, json};
use testkit::stats::median;

use crate::node::Rig;
use crate::settings::Settings;

const MIB: u64 = 1 << 20;
const SMALL: u64 = 4096;
/// Share of the KV namespace's capacity the 1 MiB Stores of a round fill, and the 4 KiB
/// Stores at most: each round starts with a new, empty namespace, and the two together
/// stay below the engine's compaction start (every key is new, nothing is overwritten,
/// so the measure has no compaction in it).
const SHARE_1M: f64 = 0.55;
const SHARE_4K: f64 = 0.25;

/// What one timed run did.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Side {
    pub ops: u64,
    pub secs: f64,
    pub iops: f64,
    pub mb_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Process CPU (node and host together: both run here) per million operations.
    pub cpu_s_per_million_ops: f64,
}

fn side(r: &Report, store_side: bool) -> anyhow::Result<Side> {
    if r.errors > 0 {
        anyhow::bail!(
            "{} run had {} errors: {}",
            r.pattern,
            r.errors,
            r.first_error.as_deref().unwrap_or("")
        );
    }
    let lat = if store_side {
        &r.write_latency
    } else {
        &r.read_latency
    };
    Ok(Side {
        ops: r.read_ios + r.write_ios,
        secs: r.elapsed_s,
        iops: r.iops,
        mb_per_s: r.mb_per_s,
        p50_us: lat.p50_us,
        p99_us: lat.p99_us,
        cpu_s_per_million_ops: r.cpu_s_per_million_ios,
    })
}

/// The rounds of both sides of one pair, their medians and the ratio of `figure`.
fn pair(
    nvm: &[Side],
    kv: &[Side],
    figure: &str,
    nvm_name: &str,
    kv_name: &str,
    note: &str,
) -> Value {
    let pick = |s: &Side| match figure {
        "mb_per_s" => s.mb_per_s,
        _ => s.iops,
    };
    let summary = |v: &[Side]| {
        json!({
            "median_iops": median(v.iter().map(|s| s.iops).collect()),
            "median_mb_per_s": median(v.iter().map(|s| s.mb_per_s).collect()),
            "median_p50_us": median(v.iter().map(|s| s.p50_us).collect()),
            "median_p99_us": median(v.iter().map(|s| s.p99_us).collect()),
            "median_cpu_s_per_million_ops": median(v.iter().map(|s| s.cpu_s_per_million_ops).collect()),
            "rounds": v,
        })
    };
    let n = median(nvm.iter().map(pick).collect());
    let k = median(kv.iter().map(pick).collect());
    json!({
        "figure": figure,
        nvm_name: summary(nvm),
        kv_name: summary(kv),
        "ratio": if n > 0.0 { k / n } else { 0.0 },
        "goal": 0.9,
        "note": note,
    })
}

fn block_cfg(pattern: Pattern, bs: u64, qd: u32) -> BenchConfig {
    BenchConfig {
        pattern,
        block_size_bytes: bs,
        iodepth: qd,
        jobs: 1,
        runtime_ms: 0,
        size_bytes: 0,
        offset_bytes: 0,
        range_bytes: 0,
        verify: false,
        verify_only: false,
        ..BenchConfig::default()
    }
}

fn kv_cfg(pattern: KvPattern, value: u64, qd: u32, keys: u64, key_base: u64) -> KvBenchConfig {
    KvBenchConfig {
        pattern,
        value_size_bytes: value,
        keys: keys.max(1),
        key_base,
        iodepth: qd,
        jobs: 1,
        runtime_ms: 0,
        verify: false,
        ..KvBenchConfig::default()
    }
}

/// Groups of `qd` concurrent sequential writes of `io` bytes, each group followed by a
/// Flush, through the NVM namespace, for `limit` (wrapping at the end of `region`).
async fn flushed_writes(
    dev: &Arc<dyn BlockDevice>,
    region_bytes: u64,
    io: u64,
    qd: usize,
    limit: Duration,
) -> anyhow::Result<Side> {
    let mut bufs: Vec<IoBuf> = (0..qd)
        .map(|_| IoBuf::from_slice(&vec![7u8; io as usize]))
        .collect();
    let mut hist = Vec::new();
    let cpu0 = CpuTime::now();
    let t = Instant::now();
    let mut off = 0u64;
    let mut ops = 0u64;
    while t.elapsed() < limit {
        if off + qd as u64 * io > region_bytes {
            off = 0;
        }
        let started = Instant::now();
        let writes = bufs.drain(..).enumerate().map(|(i, b)| {
            let dev = dev.clone();
            let at = off + i as u64 * io;
            async move { dev.write(at, b, WriteFlags::default()).await }
        });
        for r in futures::future::join_all(writes).await {
            bufs.push(r?);
        }
        dev.flush().await?;
        // Each write of the group is acknowledged durable after the flush, as a Store is.
        hist.push(started.elapsed().as_secs_f64() * 1e6);
        off += qd as u64 * io;
        ops += qd as u64;
    }
    Ok(timed_side(ops, io, t, &cpu0, hist))
}

/// A [`Side`] from a hand-timed run: `ops` operations of `io` bytes since `t` and `cpu0`,
/// `hist` their latencies in microseconds.
fn timed_side(ops: u64, io: u64, t: Instant, cpu0: &CpuTime, mut hist: Vec<f64>) -> Side {
    let secs = t.elapsed().as_secs_f64();
    let cpu = CpuTime::now().since(cpu0).total().as_secs_f64();
    hist.sort_by(f64::total_cmp);
    let q = |p: f64| {
        hist.get(((hist.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    Side {
        ops,
        secs,
        iops: ops as f64 / secs.max(1e-9),
        mb_per_s: (ops * io) as f64 / secs.max(1e-9) / 1e6,
        p50_us: q(0.5),
        p99_us: q(0.99),
        cpu_s_per_million_ops: if ops > 0 { cpu / ops as f64 * 1e6 } else { 0.0 },
    }
}

/// `count` sequential writes of `io` bytes at `qd` in flight, each with FUA: durable when
/// it completes, as a Store is when acknowledged.
async fn durable_writes(
    dev: &Arc<dyn BlockDevice>,
    count: u64,
    io: u64,
    qd: usize,
) -> anyhow::Result<Side> {
    use futures::StreamExt;
    let cpu0 = CpuTime::now();
    let t = Instant::now();
    let mut hist = Vec::with_capacity(count as usize);
    let mut running = futures::stream::FuturesUnordered::new();
    let mut bufs: Vec<IoBuf> = (0..qd)
        .map(|_| IoBuf::from_slice(&vec![7u8; io as usize]))
        .collect();
    let mut next = 0u64;
    let mut done = 0u64;
    while done < count {
        while next < count
            && let Some(b) = bufs.pop()
        {
            let dev = dev.clone();
            let at = next * io;
            next += 1;
            running.push(async move {
                let started = Instant::now();
                let r = dev.write(at, b, WriteFlags { fua: true }).await;
                (r, started.elapsed())
            });
        }
        let Some((r, took)) = running.next().await else {
            break;
        };
        bufs.push(r?);
        hist.push(took.as_secs_f64() * 1e6);
        done += 1;
    }
    Ok(timed_side(done, io, t, &cpu0, hist))
}

pub fn run_medium(s: &Settings, medium: &str) -> anyhow::Result<Value> {
    let rig = Rig::start(s, medium).with_context(|| format!("start the rig on {medium}"))?;
    let r = rig.host_rt.block_on(measure(s, &rig));
    let info = json!({
        "medium": medium,
        "drive": rig.drive_name,
        "nvm_namespace_bytes": rig.nvm_bytes,
        "kv_capacity_bytes": rig.kv_capacity_bytes,
        "io_queues": rig.ctrl.io_queues().len(),
        "queue_size": rig.ctrl.io_queue_size(),
    });
    rig.stop()?;
    let mut v = r?;
    if let (Some(o), Some(i)) = (v.as_object_mut(), info.as_object()) {
        for (k, x) in i {
            o.insert(k.clone(), x.clone());
        }
    }
    Ok(v)
}

async fn measure(s: &Settings, rig: &Rig) -> anyhow::Result<Value> {
    let nvm: Arc<dyn BlockDevice> = rig.nvm.clone();
    let quiet = Progress::Silent;
    let cap = rig.kv_capacity_bytes as f64;
    let big_keys = ((cap * SHARE_1M) as u64 / MIB)
        .min(rig.nvm_bytes / MIB)
        .max(4);
    let small_keys = ((cap * SHARE_4K) as u64 / SMALL).max(1024);
    let run_ms = s.run.as_millis() as u64;
    let (mut seq_nvm, mut seq_kv) = (Vec::new(), Vec::new());
    let (mut rd_nvm, mut rd_kv) = (Vec::new(), Vec::new());
    let (mut wr_nvm, mut wr_kv) = (Vec::new(), Vec::new());
    let mut seq_fua = Vec::new();
    let wanted = |p: &str| s.only.is_empty() || s.only.iter().any(|o| o == p);
    if wanted("store_1m") {
        // Warm-up, not measured: one pass of each side, so that no round pays for first
        // writes (a RAM drive's chunks allocated, a file's zeroed extents converted).
        eprintln!("kv_vs_nvm bench: warm-up pass");
        let c = BenchConfig {
            size_bytes: big_keys * MIB,
            ..block_cfg(Pattern::Write, MIB, 8)
        };
        bench::run(nvm.clone(), &c, "nvm", &quiet).await?;
        let c = kv_cfg(KvPattern::Store, MIB, 8, big_keys, 0);
        run_kv(rig.kv(), &c, "kv", &quiet).await?;
        rig.fresh_kv().await?;
    }
    for round in 0..s.rounds {
        let kv_first = round % 2 == 1;
        eprintln!("kv_vs_nvm bench: round {}/{}", round + 1, s.rounds);
        if round > 0 {
            rig.fresh_kv().await?;
        }
        let kv = rig.kv();
        // 1. 1 MiB: the same bytes each side (one pass).
        let seq_block = async {
            let c = BenchConfig {
                size_bytes: big_keys * MIB,
                ..block_cfg(Pattern::Write, MIB, 8)
            };
            let r = bench::run(nvm.clone(), &c, "nvm", &quiet).await?;
            // The Stores are durable when acknowledged: the writes end with a Flush.
            let t = Instant::now();
            nvm.flush().await?;
            let mut sd = side(&r, true)?;
            sd.secs += t.elapsed().as_secs_f64();
            sd.mb_per_s = (sd.ops * MIB) as f64 / sd.secs / 1e6;
            sd.iops = sd.ops as f64 / sd.secs;
            anyhow::Ok(sd)
        };
        let base_1m = 0;
        let seq_store = async {
            let c = kv_cfg(KvPattern::Store, MIB, 8, big_keys, base_1m);
            side(&run_kv(kv.clone(), &c, "kv", &quiet).await?, true)
        };
        // Reference, not the goal's baseline: the same writes each durable when they
        // complete (FUA), as every Store is.
        let seq_durable = durable_writes(&nvm, big_keys, MIB, 8);
        if wanted("store_1m") {
            if kv_first {
                seq_kv.push(seq_store.await?);
                seq_nvm.push(seq_block.await?);
                seq_fua.push(seq_durable.await?);
            } else {
                seq_fua.push(seq_durable.await?);
                seq_nvm.push(seq_block.await?);
                seq_kv.push(seq_store.await?);
            }
        }
        if !wanted("store_4k") {
            continue;
        }

        // 3. 4 KiB Stores at QD 32 (new keys) vs writes in flushed groups of 32.
        let base_4k = 1 << 40;
        let store_run = async {
            let c = KvBenchConfig {
                runtime_ms: run_ms,
                ..kv_cfg(KvPattern::Store, SMALL, 32, small_keys, base_4k)
            };
            let r = run_kv(kv.clone(), &c, "kv", &quiet).await?;
            anyhow::Ok((side(&r, true)?, r.write_ios))
        };
        let flushed = flushed_writes(&nvm, rig.nvm_bytes, SMALL, 32, s.run);
        let stored = if kv_first {
            let (k, n) = store_run.await?;
            wr_kv.push(k);
            wr_nvm.push(flushed.await?);
            n
        } else {
            wr_nvm.push(flushed.await?);
            let (k, n) = store_run.await?;
            wr_kv.push(k);
            n
        };

        // 2. 4 KiB Retrieves of the keys just stored vs random reads of as many bytes.
        let stored = stored.min(small_keys).max(1);
        let region = (stored * SMALL).clamp(MIB, big_keys * MIB);
        let reads = async {
            let c = BenchConfig {
                runtime_ms: run_ms,
                range_bytes: region,
                ..block_cfg(Pattern::RandRead, SMALL, 32)
            };
            side(&bench::run(nvm.clone(), &c, "nvm", &quiet).await?, false)
        };
        let retrieves = async {
            let c = KvBenchConfig {
                runtime_ms: run_ms,
                ..kv_cfg(KvPattern::Retrieve, SMALL, 32, stored, base_4k)
            };
            side(&run_kv(kv.clone(), &c, "kv", &quiet).await?, false)
        };
        if kv_first {
            rd_kv.push(retrieves.await?);
            rd_nvm.push(reads.await?);
        } else {
            rd_nvm.push(reads.await?);
            rd_kv.push(retrieves.await?);
        }
    }
    let fua_mb_per_s = median(seq_fua.iter().map(|s: &Side| s.mb_per_s).collect());
    let kv_mb_per_s = median(seq_kv.iter().map(|s| s.mb_per_s).collect());
    Ok(json!({
        "store_1m_qd8_vs_durable_writes": {
            "note": "reference: the same 1 MiB sequential writes at QD 8, each with FUA (durable on completion, as a Store); not the goal's baseline",
            "nvm_seq_write_1m_qd8_fua": {
                "median_mb_per_s": fua_mb_per_s,
                "rounds": seq_fua,
            },
            "ratio": if fua_mb_per_s > 0.0 { kv_mb_per_s / fua_mb_per_s } else { 0.0 },
        },
        "store_1m_qd8": pair(
            &seq_nvm,
            &seq_kv,
            "mb_per_s",
            "nvm_seq_write_1m_qd8",
            "kv_store_1m_qd8",
            &format!("{big_keys} MiB each side per round: one pass of 1 MiB writes then a Flush, vs {big_keys} Stores of new keys"),
        ),
        "retrieve_4k_qd32": pair(
            &rd_nvm,
            &rd_kv,
            "iops",
            "nvm_rand_read_4k_qd32",
            "kv_retrieve_4k_qd32",
            "random reads over a region as large as the values the round stored, vs Retrieves of those keys",
        ),
        "store_4k_qd32": pair(
            &wr_nvm,
            &wr_kv,
            "iops",
            "nvm_seq_write_4k_qd32_flush_per_32",
            "kv_store_4k_qd32",
            "groups of 32 sequential writes each followed by a Flush, vs Stores of new keys (each durable when acknowledged)",
        ),
    }))
}
