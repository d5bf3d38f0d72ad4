//! One KV job: keeps `iodepth` commands in flight on its share of the keys until the run's
//! time limit (or one pass: one command per key), checking what it retrieves; then, when it stored
//! with `--verify`, retrieves every key it stored and checks it holds the last Store
//! acknowledged for it.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use blockdev::IoBuf;

use super::config::{KvBenchConfig, KvPattern};
use super::stamp::{ValueCheck, check_value, key_of, stamp_value};
use super::{KvOpError, KvTarget};
use crate::job::{LoadResult, MAX_LATENCY_NS, Rng, Shared};
use crate::report::KvVerifyReport;
use crate::slots::IoSlots;
use crate::verify::MAX_FIRST_ERRORS;

/// `last_write` value of a key this run stored with a Store that failed: its content is
/// unknown, it is not checked. Write ids never take it.
const UNKNOWN: u32 = u32::MAX;

pub(crate) struct KvJobResult {
    pub load: LoadResult,
    /// Retrieves of keys without a value.
    pub not_found: u64,
    pub verify: KvVerifyReport,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Store,
    Retrieve,
}

struct Done {
    /// Key index within the job's share.
    slot: u64,
    op: Op,
    started: Instant,
    result: Result<u32, KvOpError>,
    buf: IoBuf,
    write_id: u32,
}

/// One command, as the single future type the job's slots hold.
async fn one_op<T: KvTarget>(
    target: &T,
    op: Op,
    slot: u64,
    index: u64,
    buf: IoBuf,
    write_id: u32,
    started: Instant,
) -> Done {
    let key = key_of(index);
    let (result, buf) = match op {
        Op::Store => {
            let (r, b) = target.store(&key, buf).await;
            (r.map(|()| 0), b)
        }
        Op::Retrieve => target.retrieve(&key, buf).await,
    };
    Done {
        slot,
        op,
        started,
        result,
        buf,
        write_id,
    }
}

/// The `i`-th key of a pass visiting each of `n` keys once: a step coprime with `n`.
pub(super) fn scrambled(i: u64, n: u64, stride: u64) -> u64 {
    ((u128::from(i) * u128::from(stride)) % u128::from(n.max(1))) as u64
}

/// A step near 0.618 n (random around it) with no factor in common with `n`.
pub(super) fn coprime_stride(n: u64, rng: &mut Rng) -> u64 {
    fn gcd(mut a: u64, mut b: u64) -> u64 {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    }
    if n <= 2 {
        return 1;
    }
    let mut s = (n as f64 * 0.618) as u64 + rng.below(n / 16 + 1);
    while gcd(s % n, n) != 1 {
        s += 1;
    }
    s % n
}

struct Job<'a, T> {
    target: &'a T,
    cfg: &'a KvBenchConfig,
    shared: &'a Shared,
    /// Index of the job's first key.
    first_key: u64,
    /// Write id of the last Store acknowledged per key (0: not stored by this run;
    /// UNKNOWN: its last Store failed). Empty unless verifying Stores.
    last_write: Vec<u32>,
    pool: Vec<IoBuf>,
    res: KvJobResult,
}

impl<T: KvTarget> Job<'_, T> {
    fn buffer(&mut self) -> IoBuf {
        self.pool
            .pop()
            .unwrap_or_else(|| IoBuf::new_zeroed(self.cfg.value_size_bytes as usize))
    }

    fn note_error(&mut self, what: String) {
        self.res.load.error(|| what);
    }

    fn verify_error(&mut self, what: String) {
        self.res.verify.values_failed += 1;
        if self.res.verify.first_errors.len() < MAX_FIRST_ERRORS {
            self.res.verify.first_errors.push(what);
        }
    }

    /// Checks a Retrieve of the key at `slot` that returned `size` bytes into `buf`.
    fn check(&mut self, slot: u64, size: u32, buf: &IoBuf) {
        let index = self.first_key + slot;
        let expected = self.last_write.get(slot as usize).copied().unwrap_or(0);
        if expected == UNKNOWN {
            return;
        }
        self.res.verify.values_checked += 1;
        let want = self.cfg.value_size_bytes;
        if u64::from(size) != want {
            self.res.verify.wrong_size += 1;
            self.verify_error(format!(
                "key {index}: value of {size} bytes, {want} expected"
            ));
            return;
        }
        match check_value(&buf[..want as usize], index) {
            ValueCheck::Ok {
                generation,
                write_id,
            } => {
                if expected != 0 && (write_id != expected || generation != self.cfg.generation) {
                    self.res.verify.lost += 1;
                    self.verify_error(format!(
                        "key {index}: holds write {write_id:#x} of generation {generation}, \
                         the last acknowledged Store was write {expected:#x} of generation {}",
                        self.cfg.generation
                    ));
                }
            }
            ValueCheck::OtherKey { index: other } => {
                self.res.verify.misdirected += 1;
                self.verify_error(format!("key {index}: holds the value of key {other}"));
            }
            ValueCheck::Corrupt => {
                self.res.verify.corrupt += 1;
                self.verify_error(format!(
                    "key {index}: not a valid value (stamp, length or checksum)"
                ));
            }
        }
    }

    /// A Retrieve of the key at `slot` found no value.
    fn not_found(&mut self, slot: u64) {
        let index = self.first_key + slot;
        let expected = self.last_write.get(slot as usize).copied().unwrap_or(0);
        self.res.not_found += 1;
        if expected != 0 && expected != UNKNOWN {
            self.res.verify.values_checked += 1;
            self.res.verify.lost += 1;
            self.verify_error(format!(
                "key {index}: does not exist, its Store (write {expected:#x}) was acknowledged"
            ));
        } else if self.cfg.pattern == KvPattern::Retrieve {
            // Retrieve runs read what an earlier run stored: a missing key is an error.
            self.note_error(format!(
                "retrieve of key {index}: key does not exist (store the keys first: --rw store)"
            ));
        }
    }
}

pub(crate) async fn kv_job<T: KvTarget>(
    target: Arc<T>,
    cfg: KvBenchConfig,
    job_index: u32,
    first_key: u64,
    keys: u64,
    shared: Arc<Shared>,
    t0: Instant,
) -> KvJobResult {
    let tracks = cfg.verify && cfg.pattern.does_stores();
    let mut j = Job {
        target: &*target,
        cfg: &cfg,
        shared: &shared,
        first_key,
        last_write: if tracks {
            vec![0; keys as usize]
        } else {
            Vec::new()
        },
        pool: (0..cfg.iodepth)
            .map(|_| IoBuf::new_zeroed(cfg.value_size_bytes as usize))
            .collect(),
        res: KvJobResult {
            load: LoadResult::new(),
            not_found: 0,
            verify: KvVerifyReport::default(),
        },
    };
    load(&mut j, job_index, keys).await;
    j.res.load.load_elapsed = t0.elapsed();
    if tracks {
        read_back(&mut j).await;
    }
    j.res
}

async fn load<T: KvTarget>(j: &mut Job<'_, T>, job_index: u32, keys: u64) {
    let cfg = j.cfg;
    let value_bytes = cfg.value_size_bytes;
    let limit = if cfg.runtime_ms == 0 { keys } else { u64::MAX };
    let mut rng = Rng(cfg.seed ^ (u64::from(job_index) << 48) ^ 0x6b76);
    let stride = coprime_stride(keys, &mut rng);
    let mut in_flight: HashSet<u64> = HashSet::with_capacity(cfg.iodepth as usize * 2);
    let mut issued = 0u64;
    let mut next_seq = 0u64;
    let mut write_counter = 0u32;
    let target = j.target;
    let mut ios = IoSlots::new(cfg.iodepth as usize);
    loop {
        while ios.has_free() && issued < limit && !j.shared.stop.load(Ordering::Relaxed) {
            let op = match cfg.pattern {
                KvPattern::Store => Op::Store,
                KvPattern::Retrieve => Op::Retrieve,
                KvPattern::Mixed { retrieve_percent } => {
                    if rng.below(100) < u64::from(retrieve_percent) {
                        Op::Retrieve
                    } else {
                        Op::Store
                    }
                }
            };
            // A store run goes through the keys in order, a retrieve run through all of
            // them in a scrambled order (each once per pass), a mixed run at random;
            // never a key with a command in flight (verification stays exact).
            let slot = match cfg.pattern {
                KvPattern::Store | KvPattern::Retrieve => {
                    let s = match cfg.pattern {
                        KvPattern::Store => next_seq % keys,
                        _ => scrambled(next_seq, keys, stride),
                    };
                    if in_flight.contains(&s) {
                        None
                    } else {
                        next_seq += 1;
                        Some(s)
                    }
                }
                KvPattern::Mixed { .. } => (0..16)
                    .map(|_| rng.below(keys))
                    .find(|s| !in_flight.contains(s)),
            };
            let Some(slot) = slot else { break };
            let mut buf = j.buffer();
            in_flight.insert(slot);
            issued += 1;
            let write_id = match op {
                Op::Retrieve => 0,
                Op::Store => {
                    // Never 0 (not stored) nor UNKNOWN.
                    write_counter = (write_counter + 1) % 0x00FF_FFFF;
                    let id = (job_index << 24) | write_counter.max(1);
                    if cfg.verify {
                        stamp_value(&mut buf, j.first_key + slot, cfg.generation, id);
                    }
                    id
                }
            };
            let started = Instant::now();
            ios.start(one_op(
                target,
                op,
                slot,
                j.first_key + slot,
                buf,
                write_id,
                started,
            ));
        }
        if ios.is_empty() {
            break;
        }
        let done = ios.next().await;
        // Jobs share the runtime's workers with the client's own tasks.
        tokio::task::consume_budget().await;
        let lat_ns = (done.started.elapsed().as_nanos() as u64).clamp(1, MAX_LATENCY_NS);
        in_flight.remove(&done.slot);
        j.shared.ios.fetch_add(1, Ordering::Relaxed);
        let Done {
            slot,
            op,
            result,
            buf,
            write_id,
            ..
        } = done;
        match (op, result) {
            (Op::Store, Ok(_)) => {
                let _ = j.res.load.write_hist.record(lat_ns);
                j.res.load.write_ios += 1;
                j.res.load.write_bytes += value_bytes;
                j.shared.bytes.fetch_add(value_bytes, Ordering::Relaxed);
                if let Some(w) = j.last_write.get_mut(slot as usize) {
                    *w = write_id;
                    j.res.verify.values_stored += 1;
                }
            }
            (Op::Store, Err(e)) => {
                // What a failed Store left is unknown: the key is not checked.
                if let Some(w) = j.last_write.get_mut(slot as usize) {
                    *w = UNKNOWN;
                }
                j.note_error(format!("store of key {}: {e}", j.first_key + slot));
            }
            (Op::Retrieve, Ok(size)) => {
                let _ = j.res.load.read_hist.record(lat_ns);
                j.res.load.read_ios += 1;
                let got = u64::from(size).min(value_bytes);
                j.res.load.read_bytes += got;
                j.shared.bytes.fetch_add(got, Ordering::Relaxed);
                if cfg.verify {
                    j.check(slot, size, &buf);
                }
            }
            (Op::Retrieve, Err(KvOpError::NotFound)) => {
                let _ = j.res.load.read_hist.record(lat_ns);
                j.res.load.read_ios += 1;
                j.not_found(slot);
            }
            (Op::Retrieve, Err(e)) => {
                if cfg.verify {
                    j.res.verify.unreadable += 1;
                }
                j.note_error(format!("retrieve of key {}: {e}", j.first_key + slot));
            }
        }
        j.pool.push(buf);
    }
}

/// Retrieves every key the load stored and checks it holds the last acknowledged Store.
async fn read_back<T: KvTarget>(j: &mut Job<'_, T>) {
    let started = Instant::now();
    let target = j.target;
    let stored: Vec<u64> = (0..j.last_write.len() as u64)
        .filter(|&s| !matches!(j.last_write[s as usize], 0 | UNKNOWN))
        .collect();
    let mut next = stored.into_iter();
    let mut ios = IoSlots::new(j.cfg.iodepth as usize);
    loop {
        while ios.has_free() {
            let Some(slot) = next.next() else { break };
            let buf = j.buffer();
            ios.start(one_op(
                target,
                Op::Retrieve,
                slot,
                j.first_key + slot,
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
        j.res.verify.values_read_back += 1;
        j.shared.read_back.fetch_add(1, Ordering::Relaxed);
        match done.result {
            Ok(size) => j.check(done.slot, size, &done.buf),
            Err(KvOpError::NotFound) => {
                let expected = j.last_write[done.slot as usize];
                let index = j.first_key + done.slot;
                j.res.verify.values_checked += 1;
                j.res.verify.lost += 1;
                j.verify_error(format!(
                    "key {index}: does not exist, its Store (write {expected:#x}) was acknowledged"
                ));
            }
            Err(e) => {
                j.res.verify.unreadable += 1;
                j.note_error(format!("read-back of key {}: {e}", j.first_key + done.slot));
            }
        }
        j.pool.push(done.buf);
    }
    j.res.verify.read_back_s = started.elapsed().as_secs_f64();
}
