//! One job: keeps `iodepth` I/Os in flight on its slice of the range until the run's
//! byte or time limit, checking what it reads; then, when it wrote with `--verify`,
//! reads back every block it wrote and checks it (as fio's verify phase does).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use hdrhistogram::Histogram;

use crate::config::{BenchConfig, Pattern};
use crate::report::VerifyReport;
use crate::slots::IoSlots;
use crate::stamp::{SECTOR_BYTES, stamp_block};
use crate::verify::{ExtentTracker, InOrder, check_block};

/// Latencies above this are clamped into the top bucket.
pub(crate) const MAX_LATENCY_NS: u64 = 120_000_000_000;

/// What the jobs of a run share with it.
#[derive(Default)]
pub(crate) struct Shared {
    pub ios: AtomicU64,
    pub bytes: AtomicU64,
    /// Blocks read back and checked after the load.
    pub read_back: AtomicU64,
    pub stop: AtomicBool,
}

/// What a job's load did, as the report counts it (in the KV mode, reads are Retrieves
/// and writes are Stores).
pub(crate) struct LoadResult {
    pub read_hist: Histogram<u64>,
    pub write_hist: Histogram<u64>,
    pub read_ios: u64,
    pub write_ios: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// When the load ended, since the run started (the read-back comes after).
    pub load_elapsed: Duration,
}

impl LoadResult {
    pub(crate) fn new() -> LoadResult {
        LoadResult {
            read_hist: new_histogram(),
            write_hist: new_histogram(),
            read_ios: 0,
            write_ios: 0,
            read_bytes: 0,
            write_bytes: 0,
            errors: 0,
            first_error: None,
            load_elapsed: Duration::ZERO,
        }
    }

    /// Counts a failed command; the first one's description (made only then) is kept.
    pub(crate) fn error(&mut self, what: impl FnOnce() -> String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what());
        }
    }
}

pub(crate) struct JobResult {
    pub load: LoadResult,
    pub verify: VerifyReport,
}

pub(crate) fn new_histogram() -> Histogram<u64> {
    // 3 significant digits from 1 ns to MAX_LATENCY_NS: cannot fail for these bounds.
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("constant histogram bounds are valid")
}

/// splitmix64: small, fast, good enough for offsets and keys (the KV mode uses it too).
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
    }
}

struct Done {
    block: u64,
    /// Position in a sequential pass (checked in this order), or 0.
    seq: u64,
    op: Op,
    started: Instant,
    result: Result<IoBuf, blockdev::BlockError>,
    write_id: u32,
}

/// One I/O, as the single future type a job's slots hold.
#[allow(clippy::too_many_arguments)]
async fn one_io(
    dev: &dyn BlockDevice,
    op: Op,
    block: u64,
    seq: u64,
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
        seq,
        op,
        started,
        result,
        write_id,
    }
}

/// A job's state across its load and its read-back.
struct Job<'a> {
    dev: &'a dyn BlockDevice,
    cfg: &'a BenchConfig,
    shared: &'a Shared,
    slice_start: u64,
    bs: u64,
    /// Last write id acknowledged per block (0: not written by this run, or its last
    /// write failed and its content is unknown). Empty unless verifying writes.
    last_write: Vec<u32>,
    pool: Vec<IoBuf>,
    /// Sequential reads that verify are checked in order, across block boundaries.
    in_order: InOrder,
    res: JobResult,
}

impl Job<'_> {
    fn offset(&self, block: u64) -> u64 {
        self.slice_start + block * self.bs
    }

    fn buffer(&mut self) -> IoBuf {
        self.pool
            .pop()
            .unwrap_or_else(|| IoBuf::new_zeroed(self.bs as usize))
    }

    fn error(&mut self, op: Op, block: u64, e: &blockdev::BlockError) {
        let offset = self.offset(block);
        self.res
            .load
            .error(|| format!("{} at offset {offset}: {e}", op_name(op)));
    }

    /// Checks the block read at pass position `seq` (None: the read failed); `ordered`
    /// when it is part of a sequential pass.
    fn check(&mut self, block: u64, seq: u64, buf: Option<IoBuf>, ordered: bool) {
        let expected = self.last_write.get(block as usize).copied().unwrap_or(0);
        let offset = self.offset(block);
        if buf.is_none() {
            self.res.verify.blocks_unreadable += 1;
        }
        if ordered {
            let v = &mut self.res.verify;
            self.in_order
                .done(seq, offset, expected, buf, self.cfg, v, &mut self.pool);
        } else if let Some(buf) = buf {
            let mut fresh = ExtentTracker::default();
            check_block(
                &buf,
                offset,
                expected,
                self.cfg,
                &mut fresh,
                &mut self.res.verify,
            );
            self.pool.push(buf);
        }
    }
}

pub(crate) async fn job(
    dev: Arc<dyn BlockDevice>,
    cfg: BenchConfig,
    job_index: u32,
    slice_start: u64,
    slice_len: u64,
    shared: Arc<Shared>,
    t0: Instant,
) -> JobResult {
    let bs = cfg.block_size_bytes;
    let blocks = slice_len / bs;
    let tracks_writes = cfg.verify && !cfg.verify_only;
    let mut j = Job {
        dev: &*dev,
        cfg: &cfg,
        shared: &shared,
        slice_start,
        bs,
        last_write: if tracks_writes {
            vec![0; blocks as usize]
        } else {
            Vec::new()
        },
        pool: (0..cfg.iodepth)
            .map(|_| IoBuf::new_zeroed(bs as usize))
            .collect(),
        in_order: InOrder::default(),
        res: JobResult {
            load: LoadResult::new(),
            verify: VerifyReport::default(),
        },
    };
    load(&mut j, job_index, blocks).await;
    j.res.load.load_elapsed = t0.elapsed();
    if tracks_writes {
        read_back(&mut j).await;
    }
    j.res
}

/// The load: the configured pattern until the byte or time limit.
async fn load(j: &mut Job<'_>, job_index: u32, blocks: u64) {
    let cfg = j.cfg;
    let bs = j.bs;
    let byte_limit = if cfg.size_bytes > 0 {
        cfg.size_bytes
    } else if cfg.runtime_ms == 0 {
        blocks * bs
    } else {
        u64::MAX
    };
    let sequential = !cfg.pattern.is_random() || cfg.verify_only;
    let mut rng = Rng(cfg.seed ^ (u64::from(job_index) << 48) ^ 0x5eed);
    let mut in_flight: HashSet<u64> = HashSet::with_capacity(cfg.iodepth as usize * 2);
    let mut issued_bytes = 0u64;
    let mut seq_next = 0u64;
    let mut write_counter = 0u32;
    let dev = j.dev;
    // A fixed slot per I/O in flight, reused: nothing is allocated per I/O.
    let mut ios = IoSlots::new(cfg.iodepth as usize);
    loop {
        while ios.has_free() && issued_bytes < byte_limit && !j.shared.stop.load(Ordering::Relaxed)
        {
            let seq = seq_next;
            let Some(block) = pick_block(cfg, &mut rng, blocks, &mut seq_next, &in_flight) else {
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
            let mut buf = j.buffer();
            let offset = j.offset(block);
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
            ios.start(one_io(dev, op, block, seq, offset, buf, write_id, started));
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
        j.shared.ios.fetch_add(1, Ordering::Relaxed);
        j.shared.bytes.fetch_add(bs, Ordering::Relaxed);
        let (block, seq, op, write_id) = (done.block, done.seq, done.op, done.write_id);
        let buf = match done.result {
            Ok(b) => Some(b),
            Err(e) => {
                j.error(op, block, &e);
                None
            }
        };
        match (op, buf) {
            (Op::Read, Some(b)) => {
                let _ = j.res.load.read_hist.record(lat_ns);
                j.res.load.read_ios += 1;
                j.res.load.read_bytes += bs;
                if cfg.verify {
                    j.check(block, seq, Some(b), sequential);
                } else {
                    j.pool.push(b);
                }
            }
            (Op::Read, None) => {
                if cfg.verify {
                    j.check(block, seq, None, sequential);
                }
                j.pool.push(IoBuf::new_zeroed(bs as usize));
            }
            (Op::Write, Some(b)) => {
                let _ = j.res.load.write_hist.record(lat_ns);
                j.res.load.write_ios += 1;
                j.res.load.write_bytes += bs;
                if let Some(slot) = j.last_write.get_mut(block as usize) {
                    *slot = write_id;
                    j.res.verify.blocks_written += 1;
                    j.res.verify.sectors_written += bs / SECTOR_BYTES as u64;
                }
                j.pool.push(b);
            }
            (Op::Write, None) => {
                // What a failed write left is unknown: its block is not checked.
                if let Some(slot) = j.last_write.get_mut(block as usize) {
                    *slot = 0;
                }
                j.pool.push(IoBuf::new_zeroed(bs as usize));
            }
        }
    }
}

/// Reads back, in order, every block the load wrote and checks it holds the last write
/// acknowledged for it.
async fn read_back(j: &mut Job<'_>) {
    let started = Instant::now();
    j.in_order = InOrder::default();
    let dev = j.dev;
    let written: Vec<u64> = (0..j.last_write.len() as u64)
        .filter(|&b| j.last_write[b as usize] != 0)
        .collect();
    let mut next = written.into_iter().enumerate();
    let mut ios = IoSlots::new(j.cfg.iodepth as usize);
    loop {
        while ios.has_free() {
            let Some((seq, block)) = next.next() else {
                break;
            };
            let buf = j.buffer();
            let offset = j.offset(block);
            ios.start(one_io(
                dev,
                Op::Read,
                block,
                seq as u64,
                offset,
                buf,
                0,
                Instant::now(),
            ));
        }
        if ios.is_empty() {
            break;
        }
        let done = ios.next().await;
        tokio::task::consume_budget().await;
        j.res.verify.blocks_read_back += 1;
        j.shared.read_back.fetch_add(1, Ordering::Relaxed);
        let buf = match done.result {
            Ok(b) => Some(b),
            Err(e) => {
                j.error(Op::Read, done.block, &e);
                j.pool.push(IoBuf::new_zeroed(j.bs as usize));
                None
            }
        };
        j.check(done.block, done.seq, buf, true);
    }
    j.res.verify.read_back_s = started.elapsed().as_secs_f64();
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
