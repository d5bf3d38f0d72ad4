//! The load engine: `jobs` workers, each keeping `iodepth` I/Os in flight on its own slice.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use hdrhistogram::Histogram;

use crate::slots::IoSlots;

use crate::config::{BenchConfig, ConfigError, Pattern};
use crate::cpu::CpuTime;
use crate::progress::Progress;
use crate::report::{LatencyReport, Report, VerifyReport};
use crate::stamp::{StampCheck, check_sector, stamp_block};

/// Why a run could not happen (I/O errors during a run are counted in the report instead).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("bench worker failed: {0}")]
    Worker(String),
}

const MAX_FIRST_ERRORS: usize = 8;
/// Latencies above this are clamped into the top bucket.
const MAX_LATENCY_NS: u64 = 120_000_000_000;

#[derive(Default)]
struct Shared {
    ios: AtomicU64,
    bytes: AtomicU64,
    stop: AtomicBool,
}

struct JobResult {
    read_hist: Histogram<u64>,
    write_hist: Histogram<u64>,
    read_ios: u64,
    write_ios: u64,
    read_bytes: u64,
    write_bytes: u64,
    errors: u64,
    first_error: Option<String>,
    verify: VerifyReport,
}

/// Runs the configured load against `dev` and reports what happened.
pub async fn run(
    dev: Arc<dyn BlockDevice>,
    cfg: &BenchConfig,
    target_name: &str,
    progress: &Progress,
) -> Result<Report, BenchError> {
    let info = dev.info().clone();
    let (start, range) = cfg.validate(info.size_bytes, info.logical_block_bytes)?;
    let shared = Arc::new(Shared::default());
    let per_job = range / u64::from(cfg.jobs) / cfg.block_size_bytes * cfg.block_size_bytes;
    let cpu0 = CpuTime::now();
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for j in 0..cfg.jobs {
        let dev = dev.clone();
        let cfg = cfg.clone();
        let shared = shared.clone();
        let slice_start = start + u64::from(j) * per_job;
        // Jobs are tasks on the caller's runtime, where the device's own tasks (an
        // NVMe/TCP queue's socket driver) run too: a job on a thread of its own paid two
        // cross-thread wakeups per I/O (measured: 2x the CPU per I/O, -30% IOPS at QD32).
        handles.push(tokio::spawn(job(dev, cfg, j, slice_start, per_job, shared)));
    }
    let deadline = (cfg.runtime_ms > 0).then(|| t0 + Duration::from_millis(cfg.runtime_ms));
    let mut tick = tokio::time::interval(progress.interval());
    tick.tick().await;
    let all = futures::future::join_all(handles);
    tokio::pin!(all);
    let results = loop {
        tokio::select! {
            r = &mut all => break r,
            _ = tick.tick() => {
                progress.update(t0.elapsed(), shared.ios.load(Ordering::Relaxed), shared.bytes.load(Ordering::Relaxed));
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    shared.stop.store(true, Ordering::Relaxed);
                }
            }
            _ = sleep_until_opt(deadline) => shared.stop.store(true, Ordering::Relaxed),
        }
    };
    let elapsed = t0.elapsed();
    let cpu = CpuTime::now().since(&cpu0);
    progress.finish();

    let mut read_hist = new_histogram();
    let mut write_hist = new_histogram();
    let mut rep = Report {
        target: target_name.to_string(),
        pattern: if cfg.verify_only {
            "verify".into()
        } else {
            cfg.pattern.name().into()
        },
        block_size_bytes: cfg.block_size_bytes,
        iodepth: cfg.iodepth,
        jobs: cfg.jobs,
        elapsed_s: elapsed.as_secs_f64(),
        ..Report::default()
    };
    let mut verify = VerifyReport::default();
    for r in results {
        let r = r.map_err(|_| BenchError::Worker("a job thread ended without a result".into()))?;
        read_hist
            .add(&r.read_hist)
            .map_err(|e| BenchError::Worker(e.to_string()))?;
        write_hist
            .add(&r.write_hist)
            .map_err(|e| BenchError::Worker(e.to_string()))?;
        rep.read_ios += r.read_ios;
        rep.write_ios += r.write_ios;
        rep.read_bytes += r.read_bytes;
        rep.write_bytes += r.write_bytes;
        rep.errors += r.errors;
        if rep.first_error.is_none() {
            rep.first_error = r.first_error;
        }
        merge_verify(&mut verify, r.verify);
    }
    let ios = rep.read_ios + rep.write_ios;
    let secs = rep.elapsed_s.max(1e-9);
    rep.iops = ios as f64 / secs;
    rep.mb_per_s = (rep.read_bytes + rep.write_bytes) as f64 / secs / 1e6;
    rep.read_latency = LatencyReport::from_histogram(&read_hist);
    rep.write_latency = LatencyReport::from_histogram(&write_hist);
    rep.cpu_s = cpu.total().as_secs_f64();
    rep.cpu_s_per_million_ios = if ios > 0 {
        rep.cpu_s / ios as f64 * 1e6
    } else {
        0.0
    };
    if cfg.verify || cfg.verify_only {
        rep.verify = Some(verify);
    }
    Ok(rep)
}

async fn sleep_until_opt(d: Option<Instant>) {
    match d {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

fn new_histogram() -> Histogram<u64> {
    // 3 significant digits from 1 ns to MAX_LATENCY_NS: cannot fail for these bounds.
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("constant histogram bounds are valid")
}

fn merge_verify(into: &mut VerifyReport, v: VerifyReport) {
    into.sectors_checked += v.sectors_checked;
    into.sectors_unwritten += v.sectors_unwritten;
    into.lost += v.lost;
    into.misdirected += v.misdirected;
    into.torn += v.torn;
    into.corrupt += v.corrupt;
    for e in v.first_errors {
        if into.first_errors.len() < MAX_FIRST_ERRORS {
            into.first_errors.push(e);
        }
    }
}

/// splitmix64: small, fast, good enough for offsets.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

#[derive(Clone, Copy)]
enum Op {
    Read,
    Write,
}

struct Done {
    block: u64,
    op: Op,
    started: Instant,
    result: Result<IoBuf, blockdev::BlockError>,
    write_id: u32,
}

/// One I/O, as the single future type a job's slots hold.
async fn one_io(
    dev: &dyn BlockDevice,
    op: Op,
    block: u64,
    offset: u64,
    buf: IoBuf,
    write_id: u32,
    started: Instant,
) -> Done {
    let result = match op {
        Op::Read => dev.read(offset, buf).await,
        Op::Write => dev.write(offset, buf, WriteFlags::default()).await,
    };
    Done {
        block,
        op,
        started,
        result,
        write_id,
    }
}

async fn job(
    dev: Arc<dyn BlockDevice>,
    cfg: BenchConfig,
    job_index: u32,
    slice_start: u64,
    slice_len: u64,
    shared: Arc<Shared>,
) -> JobResult {
    let bs = cfg.block_size_bytes;
    let blocks = slice_len / bs;
    let byte_limit = if cfg.size_bytes > 0 {
        cfg.size_bytes
    } else if cfg.runtime_ms == 0 {
        slice_len
    } else {
        u64::MAX
    };
    let mut rng = Rng(cfg.seed ^ (u64::from(job_index) << 48) ^ 0x5eed);
    let tracks_writes = cfg.verify && !cfg.verify_only;
    // Last write id acknowledged per block (0 = not written in this run).
    let mut last_write: Vec<u32> = if tracks_writes {
        vec![0; blocks as usize]
    } else {
        Vec::new()
    };
    let mut in_flight: HashSet<u64> = HashSet::with_capacity(cfg.iodepth as usize * 2);
    let mut pool: Vec<IoBuf> = (0..cfg.iodepth)
        .map(|_| IoBuf::new_zeroed(bs as usize))
        .collect();
    let mut res = JobResult {
        read_hist: new_histogram(),
        write_hist: new_histogram(),
        read_ios: 0,
        write_ios: 0,
        read_bytes: 0,
        write_bytes: 0,
        errors: 0,
        first_error: None,
        verify: VerifyReport::default(),
    };
    let mut issued_bytes = 0u64;
    let mut seq_next = 0u64;
    let mut write_counter = 0u32;
    let dev_ref: &dyn BlockDevice = &*dev;
    // A fixed slot per I/O in flight, reused: nothing is allocated per I/O.
    let mut ios = IoSlots::new(cfg.iodepth as usize);
    loop {
        while ios.has_free() && issued_bytes < byte_limit && !shared.stop.load(Ordering::Relaxed) {
            let Some(block) = pick_block(&cfg, &mut rng, blocks, &mut seq_next, &in_flight) else {
                break;
            };
            let op = match (cfg.verify_only, cfg.pattern) {
                (true, _) | (_, Pattern::RandRead | Pattern::Read) => Op::Read,
                (_, Pattern::RandWrite | Pattern::Write) => Op::Write,
                (_, Pattern::RandRw { read_percent }) => {
                    if rng.below(100) < u64::from(read_percent) {
                        Op::Read
                    } else {
                        Op::Write
                    }
                }
            };
            let mut buf = pool.pop().unwrap_or_else(|| IoBuf::new_zeroed(bs as usize));
            let offset = slice_start + block * bs;
            in_flight.insert(block);
            issued_bytes += bs;
            let write_id = match op {
                Op::Read => 0,
                Op::Write => {
                    write_counter = write_counter.wrapping_add(1);
                    let write_id = ((job_index << 24) | (write_counter & 0x00FF_FFFF)).max(1);
                    if cfg.verify {
                        stamp_block(&mut buf, offset, cfg.generation, write_id);
                    }
                    write_id
                }
            };
            let started = Instant::now();
            ios.start(one_io(dev_ref, op, block, offset, buf, write_id, started));
        }
        if ios.is_empty() {
            break;
        }
        let done = ios.next().await;
        // Jobs share the runtime's workers: a device whose I/Os complete at once (RAM)
        // must not keep a worker from its other tasks (timers, the run's deadline).
        tokio::task::consume_budget().await;
        let lat_ns = (done.started.elapsed().as_nanos() as u64).clamp(1, MAX_LATENCY_NS);
        in_flight.remove(&done.block);
        shared.ios.fetch_add(1, Ordering::Relaxed);
        shared.bytes.fetch_add(bs, Ordering::Relaxed);
        match done.result {
            Err(e) => {
                res.errors += 1;
                if res.first_error.is_none() {
                    res.first_error = Some(format!(
                        "{} at offset {}: {e}",
                        op_name(&done.op),
                        slice_start + done.block * bs
                    ));
                }
                pool.push(IoBuf::new_zeroed(bs as usize));
            }
            Ok(buf) => {
                match done.op {
                    Op::Read => {
                        let _ = res.read_hist.record(lat_ns);
                        res.read_ios += 1;
                        res.read_bytes += bs;
                        if cfg.verify || cfg.verify_only {
                            let expected =
                                last_write.get(done.block as usize).copied().unwrap_or(0);
                            check_block(
                                &buf,
                                slice_start + done.block * bs,
                                expected,
                                &cfg,
                                &mut res.verify,
                            );
                        }
                    }
                    Op::Write => {
                        let _ = res.write_hist.record(lat_ns);
                        res.write_ios += 1;
                        res.write_bytes += bs;
                        if let Some(slot) = last_write.get_mut(done.block as usize) {
                            *slot = done.write_id;
                        }
                    }
                }
                pool.push(buf);
            }
        }
    }
    res
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
    }
}

/// The next block to access, avoiding blocks with I/O in flight so verification is exact.
fn pick_block(
    cfg: &BenchConfig,
    rng: &mut Rng,
    blocks: u64,
    seq_next: &mut u64,
    in_flight: &HashSet<u64>,
) -> Option<u64> {
    if blocks == 0 {
        return None;
    }
    if cfg.pattern.is_random() && !cfg.verify_only {
        for _ in 0..16 {
            let b = rng.below(blocks);
            if !in_flight.contains(&b) {
                return Some(b);
            }
        }
        None
    } else {
        let b = *seq_next % blocks;
        if in_flight.contains(&b) {
            return None;
        }
        *seq_next += 1;
        Some(b)
    }
}

/// Checks every sector of a block read at `offset`; `expected_write_id` is the last write
/// acknowledged for it in this run (0 when unknown).
fn check_block(
    buf: &[u8],
    offset: u64,
    expected_write_id: u32,
    cfg: &BenchConfig,
    v: &mut VerifyReport,
) {
    let mut ids = Vec::new();
    let note = |v: &mut VerifyReport, msg: String| {
        if v.first_errors.len() < MAX_FIRST_ERRORS {
            v.first_errors.push(msg);
        }
    };
    for (i, sector) in buf.chunks_exact(512).enumerate() {
        let off = offset + 512 * i as u64;
        v.sectors_checked += 1;
        match check_sector(sector, off) {
            StampCheck::Unwritten => {
                v.sectors_unwritten += 1;
                if expected_write_id != 0 {
                    v.lost += 1;
                    note(
                        v,
                        format!(
                            "sector at {off}: reads as never written, but a write was acknowledged"
                        ),
                    );
                }
                ids.push(0);
            }
            StampCheck::Corrupt => {
                v.corrupt += 1;
                note(v, format!("sector at {off}: not a valid stamp (corrupt)"));
            }
            StampCheck::Misdirected { found_offset_bytes } => {
                v.misdirected += 1;
                note(
                    v,
                    format!("sector at {off}: holds data written for offset {found_offset_bytes}"),
                );
            }
            StampCheck::Ok {
                generation,
                write_id,
            } => {
                if expected_write_id != 0 && write_id != expected_write_id {
                    v.lost += 1;
                    note(
                        v,
                        format!(
                            "sector at {off}: write {write_id:#x} found, {expected_write_id:#x} was acknowledged last"
                        ),
                    );
                } else if cfg.verify_only && generation > cfg.generation {
                    v.corrupt += 1;
                    note(
                        v,
                        format!(
                            "sector at {off}: generation {generation} is newer than {}",
                            cfg.generation
                        ),
                    );
                }
                ids.push(write_id);
            }
        }
    }
    if ids.windows(2).any(|w| w[0] != w[1]) {
        v.torn += 1;
        note(
            v,
            format!("block at {offset}: sectors come from different writes (torn)"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockdev::{FaultAction, FaultOps, FaultRule, FaultyDevice, RamDevice};

    fn cfg(pattern: Pattern) -> BenchConfig {
        BenchConfig {
            pattern,
            block_size_bytes: 4096,
            iodepth: 8,
            jobs: 2,
            runtime_ms: 0,
            size_bytes: 0,
            verify: true,
            ..BenchConfig::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn write_then_verify_pass_is_clean() {
        let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("r", 4 << 20));
        let w = run(dev.clone(), &cfg(Pattern::Write), "ram", &Progress::Silent)
            .await
            .unwrap();
        assert_eq!(w.write_ios, 1024);
        assert_eq!(w.errors, 0);
        let mut c = cfg(Pattern::Read);
        c.verify_only = true;
        let r = run(dev.clone(), &c, "ram", &Progress::Silent)
            .await
            .unwrap();
        let v = r.verify.unwrap();
        assert_eq!(v.sectors_checked, 8192);
        assert_eq!(v.mismatches(), 0, "{v:?}");
        assert_eq!(v.sectors_unwritten, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn randrw_verify_catches_dropped_writes() {
        let ram: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("r", 1 << 20));
        let faulty = FaultyDevice::new(ram);
        let handle = faulty.handle();
        let dev: Arc<dyn BlockDevice> = Arc::new(faulty);
        let mut c = cfg(Pattern::RandRw { read_percent: 50 });
        c.size_bytes = 8 << 20;
        let clean = run(dev.clone(), &c, "ram", &Progress::Silent)
            .await
            .unwrap();
        assert_eq!(clean.verify.as_ref().unwrap().mismatches(), 0);
        handle.add(FaultRule::new(FaultOps::WRITE, FaultAction::DropWrite));
        let bad = run(dev.clone(), &c, "ram", &Progress::Silent)
            .await
            .unwrap();
        assert!(
            bad.verify.unwrap().lost > 0,
            "dropped writes must show up as lost"
        );
    }

    /// Jobs on a device that completes every I/O at once, more jobs than workers: the
    /// run still ends at its deadline (jobs yield to the runtime's other tasks).
    #[test]
    fn jobs_on_an_instant_device_stop_at_the_deadline() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let r = rt.block_on(async {
                let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("r", 4 << 20));
                let mut c = cfg(Pattern::RandRead);
                c.verify = false;
                c.jobs = 4;
                c.runtime_ms = 200;
                tokio::spawn(async move { run(dev, &c, "ram", &Progress::Silent).await })
                    .await
                    .unwrap()
                    .unwrap()
            });
            let _ = tx.send(r);
        });
        let r = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the run did not end at its deadline");
        assert!(r.read_ios > 0 && r.errors == 0, "{r:?}");
        assert!(r.elapsed_s < 5.0, "{}", r.elapsed_s);
    }

    #[tokio::test]
    async fn bad_config_is_one_line() {
        let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("r", 1 << 20));
        let mut c = cfg(Pattern::Read);
        c.block_size_bytes = 1000;
        let e = run(dev, &c, "ram", &Progress::Silent)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("--bs 1000") && !e.contains('\n'), "{e}");
    }
}
