//! The chunk engine behind rebuild, resync and scrub: which rows to visit in which chunks
//! ([`chunks`]), a few chunks in flight at once ([`Window`]), buffers allocated once and
//! reused ([`BufPool`]), and the throttle ([`Pacer`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use blockdev::IoBuf;
use futures::StreamExt;
use futures::stream::FuturesOrdered;

use crate::clock::Clock;
use crate::config::Throttle;

/// A throttled task rests only once it owes at least this much sleep: a rest drains the
/// chunks in flight, so short busy bursts would never fill the pipeline. At the default
/// 20 % that is ~25 ms of work, then ~100 ms of rest.
pub(crate) const REST_MIN: Duration = Duration::from_millis(100);

/// One chunk of rows `[r0, r1)`. When it completes (in order), everything below `next`
/// is done: rows between `r1` and `next` were not to be visited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub r0: u64,
    pub r1: u64,
    pub next: u64,
}

impl Chunk {
    pub fn rows(&self) -> u64 {
        self.r1 - self.r0
    }
}

/// Splits sorted, disjoint row ranges into chunks of at most `step` rows (a chunk never
/// spans two ranges). `end` is what `next` of the last chunk says (the end of the space).
pub(crate) fn chunks(
    ranges: impl IntoIterator<Item = (u64, u64)>,
    step: u64,
    end: u64,
) -> impl Iterator<Item = Chunk> {
    let step = step.max(1);
    let mut pieces = ranges
        .into_iter()
        .filter(|&(a, b)| a < b)
        .flat_map(move |(a, b)| {
            (a..b)
                .step_by(usize::try_from(step).unwrap_or(usize::MAX))
                .map(move |r0| (r0, (r0 + step).min(b)))
        })
        .peekable();
    std::iter::from_fn(move || {
        let (r0, r1) = pieces.next()?;
        let next = pieces.peek().map_or(end.max(r1), |&(n, _)| n);
        Some(Chunk { r0, r1, next })
    })
}

/// Merges sorted row ranges that touch.
pub(crate) fn merge_ranges(ranges: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in ranges.into_iter().filter(|&(a, b)| a < b) {
        match out.last_mut() {
            Some(last) if last.1 >= a => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The rows in both `a` and `b` (each sorted and disjoint).
pub(crate) fn intersect_ranges(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        let (lo, hi) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if lo < hi {
            out.push((lo, hi));
        }
        if a[i].1 <= b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// Near layouts: the chunks with a copy in rows `[r0, r1)` of `members` members holding
/// `copies` copies, clipped to `chunks` (what resync and scrub visit per batch).
pub(crate) fn near_chunk_span(
    r0: u64,
    r1: u64,
    members: u64,
    copies: u64,
    chunks: u64,
) -> std::ops::Range<u64> {
    let first = (r0 * members).div_ceil(copies);
    let last = (r1 * members).div_ceil(copies).min(chunks);
    first..last.max(first)
}

/// Up to `depth` futures in flight, completed in submission order (so a rebuild frontier
/// only ever moves over finished chunks).
pub(crate) struct Window<'a, T> {
    futs: FuturesOrdered<Pin<Box<dyn Future<Output = T> + Send + 'a>>>,
    depth: usize,
}

impl<'a, T> Window<'a, T> {
    pub fn new(depth: usize) -> Self {
        Window {
            futs: FuturesOrdered::new(),
            depth: depth.max(1),
        }
    }

    pub fn has_room(&self) -> bool {
        self.futs.len() < self.depth
    }

    pub fn is_empty(&self) -> bool {
        self.futs.is_empty()
    }

    pub fn push(&mut self, fut: impl Future<Output = T> + Send + 'a) {
        self.futs.push_back(Box::pin(fut));
    }

    /// The oldest future's output (`None` when nothing is in flight).
    pub async fn next(&mut self) -> Option<T> {
        self.futs.next().await
    }
}

/// Member I/O buffers reused from chunk to chunk: allocated (and zeroed) once, then only
/// ever filled by reads or reconstruction. Holds at most `max` idle buffers.
pub(crate) struct BufPool {
    idle: Mutex<Vec<IoBuf>>,
    max: usize,
}

impl BufPool {
    pub fn new(max: usize) -> BufPool {
        BufPool {
            idle: Mutex::new(Vec::with_capacity(max)),
            max,
        }
    }

    /// A buffer of `len` bytes with unspecified content (the caller overwrites it all).
    pub fn get(&self, len: usize) -> IoBuf {
        let found = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.iter()
                .position(|b| b.capacity() >= len)
                .map(|i| idle.swap_remove(i))
        };
        let mut buf = found.unwrap_or_else(|| IoBuf::new_zeroed(len));
        buf.set_len(len);
        buf
    }

    pub fn put(&self, buf: IoBuf) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max {
            idle.push(buf);
        }
    }
}

/// Paces background work so that members are busy about `fraction` of the time (or move
/// at most so many bytes per second).
///
/// `Fraction`: work time is the wall time outside rests; every piece of it adds
/// `busy * (1 - f) / f` to a sleep debt, and a rest pays what it actually slept (a timer
/// that oversleeps is paid back on the next rest). Nothing is rounded away per batch, so
/// the duty cycle holds however short the batches are. A rest comes once the debt reaches
/// [`REST_MIN`], with nothing in flight.
///
/// `BytesPerSec`: a batch is issued only when the bytes issued before it are due at that
/// rate; otherwise the task rests until they are.
pub(crate) struct Pacer {
    throttle: Throttle,
    clock: Arc<dyn Clock>,
    started: Duration,
    /// End of the last rest (or the start): work since then is busy time.
    mark: Duration,
    issued_bytes: u64,
    /// Fraction: sleep owed, seconds (negative after oversleeping).
    debt_secs: f64,
    busy: Duration,
    rested: Duration,
}

impl Pacer {
    pub fn new(throttle: Throttle, clock: Arc<dyn Clock>) -> Pacer {
        let now = clock.now();
        Pacer {
            throttle,
            clock,
            started: now,
            mark: now,
            issued_bytes: 0,
            debt_secs: 0.0,
            busy: Duration::ZERO,
            rested: Duration::ZERO,
        }
    }

    /// Sleep owed now, seconds (<= 0: none).
    fn owed_secs(&self) -> f64 {
        match self.throttle {
            Throttle::Fraction(f) if f > 0.0 && f < 1.0 => self.debt_secs,
            Throttle::BytesPerSec(rate) if rate > 0 => {
                let due = self.issued_bytes as f64 / rate as f64;
                due - self.clock.now().saturating_sub(self.started).as_secs_f64()
            }
            _ => 0.0,
        }
    }

    /// Whether another batch may start now.
    pub fn may_issue(&self) -> bool {
        match self.throttle {
            Throttle::BytesPerSec(rate) if rate > 0 => self.owed_secs() <= 0.0,
            _ => self.owed_secs() < REST_MIN.as_secs_f64(),
        }
    }

    /// Records a batch of `bytes` member bytes being started.
    pub fn issue(&mut self, bytes: u64) {
        self.issued_bytes += bytes;
    }

    /// Records finished work (call as batches complete).
    pub fn record(&mut self) {
        let now = self.clock.now();
        let busy = now.saturating_sub(self.mark);
        self.mark = now;
        self.busy += busy;
        if let Throttle::Fraction(f) = self.throttle
            && f > 0.0
            && f < 1.0
        {
            self.debt_secs += busy.as_secs_f64() * (1.0 - f) / f;
        }
    }

    /// Sleeps off what is owed (call with nothing in flight).
    pub async fn rest(&mut self) {
        let owed = self.owed_secs();
        if owed > 0.0 {
            let before = self.clock.now();
            self.clock.sleep(Duration::from_secs_f64(owed)).await;
            let after = self.clock.now();
            let slept = after.saturating_sub(before);
            self.rested += slept;
            self.debt_secs -= slept.as_secs_f64();
        }
        self.mark = self.clock.now();
    }

    /// Busy time so far (wall time outside rests, up to the last `record`).
    #[cfg(test)]
    pub fn busy(&self) -> Duration {
        self.busy
    }

    /// Time spent resting so far.
    #[cfg(test)]
    pub fn rested(&self) -> Duration {
        self.rested
    }

    /// Busy share of the time so far (1 before anything happened).
    pub fn busy_fraction(&self) -> f64 {
        let total = (self.busy + self.rested).as_secs_f64();
        if total > 0.0 {
            self.busy.as_secs_f64() / total
        } else {
            1.0
        }
    }
}

/// Rate and ETA from bytes done, bytes total and seconds elapsed.
pub(crate) fn rate_eta(done: u64, total: u64, elapsed_secs: f64) -> (f64, Option<f64>) {
    let rate = if elapsed_secs > 0.0 {
        done as f64 / elapsed_secs
    } else {
        0.0
    };
    let eta = (rate > 0.0).then(|| total.saturating_sub(done) as f64 / rate);
    (rate, eta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, Sleep};

    #[test]
    fn intersections_keep_only_rows_in_both() {
        let a = [(0, 10), (20, 30)];
        let b = [(0, 1), (5, 6), (9, 21), (29, 40)];
        assert_eq!(
            intersect_ranges(&a, &b),
            vec![(0, 1), (5, 6), (9, 10), (20, 21), (29, 30)]
        );
        assert!(intersect_ranges(&a, &[]).is_empty());
        assert_eq!(intersect_ranges(&[(3, 8)], &[(0, 100)]), vec![(3, 8)]);
    }

    #[test]
    fn chunks_split_ranges_and_point_to_the_next() {
        let c: Vec<Chunk> = chunks([(0, 5), (8, 9), (12, 20)], 4, 30).collect();
        let want = [(0, 4, 4), (4, 5, 8), (8, 9, 12), (12, 16, 16), (16, 20, 30)];
        assert_eq!(c.len(), want.len());
        for (c, &(r0, r1, next)) in c.iter().zip(&want) {
            assert_eq!((c.r0, c.r1, c.next), (r0, r1, next));
        }
        assert_eq!(chunks([(3, 3)], 4, 9).count(), 0);
        assert_eq!(
            merge_ranges([(0, 2), (2, 4), (6, 7), (6, 9)]),
            vec![(0, 4), (6, 9)]
        );
    }

    #[test]
    fn near_span_matches_copies() {
        // 4 members, 2 copies: row r holds chunks 2r and 2r+1.
        assert_eq!(near_chunk_span(0, 3, 4, 2, 100), 0..6);
        // 3 members, 2 copies: rows 0..2 hold slots 0..6 = chunks 0..3.
        assert_eq!(near_chunk_span(0, 2, 3, 2, 100), 0..3);
        assert_eq!(near_chunk_span(1, 2, 3, 2, 2), 2..2);
    }

    #[test]
    fn pool_reuses_buffers() {
        let pool = BufPool::new(2);
        let mut a = pool.get(8192);
        a[0] = 7;
        let ptr = a.as_ptr();
        pool.put(a);
        let b = pool.get(4096);
        assert_eq!(b.as_ptr(), ptr);
        assert_eq!(b.len(), 4096);
    }

    /// Drives a pacer like a chunk loop: each chunk is `busy` of work (`advance` makes the
    /// clock move by it).
    async fn duty_cycle(
        clock: Arc<dyn Clock>,
        advance: &dyn Fn(Duration),
        f: f64,
        chunks: &[Duration],
    ) -> f64 {
        let mut p = Pacer::new(Throttle::Fraction(f), clock.clone());
        let t0 = clock.now();
        let mut busy = Duration::ZERO;
        for &c in chunks {
            assert!(p.may_issue());
            p.issue(1 << 20);
            advance(c);
            busy += c;
            p.record();
            if !p.may_issue() {
                p.rest().await;
            }
        }
        assert_eq!(p.busy(), busy);
        let got = busy.as_secs_f64() / clock.now().saturating_sub(t0).as_secs_f64();
        assert!((p.busy_fraction() - got).abs() < 1e-9);
        got
    }

    /// Like tokio's timer: sleeps round up to the next millisecond, plus one.
    #[derive(Default)]
    struct CoarseClock(ManualClock);

    impl Clock for CoarseClock {
        fn now(&self) -> Duration {
            self.0.now()
        }
        fn sleep(&self, d: Duration) -> Sleep {
            let ms = d.as_nanos().div_ceil(1_000_000) as u64 + 1;
            self.0.sleep(Duration::from_millis(ms))
        }
    }

    #[tokio::test]
    async fn fraction_duty_cycle_is_within_ten_percent() {
        for f in [0.05, 0.2, 0.5, 0.8] {
            // Many short chunks (the old per-chunk sleep lost most of the time in timer
            // rounding), few long ones, and irregular ones.
            let short = vec![Duration::from_micros(300); 20_000];
            let long = vec![Duration::from_millis(40); 200];
            let mixed: Vec<Duration> = (0..5_000u64)
                .map(|i| Duration::from_micros(50 + (i * 7919) % 3000))
                .collect();
            for work in [&short, &long, &mixed] {
                let manual = Arc::new(ManualClock::new());
                let m = manual.clone();
                let got = duty_cycle(manual, &|d| m.advance(d), f, work).await;
                assert!(
                    (got - f).abs() <= 0.1 * f,
                    "fraction {f}: duty cycle {got:.4} with {} chunks",
                    work.len()
                );
                let coarse = Arc::new(CoarseClock::default());
                let c = coarse.clone();
                let got = duty_cycle(coarse, &|d| c.0.advance(d), f, work).await;
                assert!(
                    (got - f).abs() <= 0.1 * f,
                    "fraction {f}, coarse timer: duty cycle {got:.4} with {} chunks",
                    work.len()
                );
            }
        }
    }

    #[tokio::test]
    async fn bytes_per_sec_follows_the_byte_budget() {
        let clock = Arc::new(ManualClock::new());
        let mut p = Pacer::new(Throttle::BytesPerSec(10 << 20), clock.clone());
        for _ in 0..100 {
            if !p.may_issue() {
                p.rest().await;
            }
            assert!(p.may_issue());
            p.issue(1 << 20);
            clock.advance(Duration::from_millis(1));
            p.record();
        }
        p.rest().await;
        // 100 MiB at 10 MiB/s: 10 s, most of it resting.
        let t = clock.now().as_secs_f64();
        assert!((9.99..=10.01).contains(&t), "{t}");
        assert!(p.rested() > Duration::from_secs(9));
    }

    #[tokio::test]
    async fn unlimited_never_rests() {
        let clock = Arc::new(ManualClock::new());
        let mut p = Pacer::new(Throttle::Unlimited, clock.clone());
        p.issue(1 << 30);
        clock.advance(Duration::from_secs(1));
        p.record();
        assert!(p.may_issue());
        p.rest().await;
        assert_eq!(clock.slept(), Duration::ZERO);
    }

    #[test]
    fn rate_and_eta() {
        assert_eq!(rate_eta(50, 150, 2.0), (25.0, Some(4.0)));
        assert_eq!(rate_eta(0, 150, 0.0), (0.0, None));
    }
}
