//! A log-bucketed latency histogram.
//!
//! Buckets are in microseconds: 0, 1, 2 and 3 µs get one bucket each; above, every power of
//! two is split into 4 equal sub-buckets (so a bucket is at most 25 % wide, enough to tell
//! a drive 3x slower than its peers). The last bucket (index 107, from 234.9 s) also counts
//! everything slower. Recording is two relaxed atomic adds: no lock, no allocation, so it
//! can sit on every I/O.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

/// Number of buckets.
pub const BUCKETS: usize = 108;

/// The bucket of a latency of `us` microseconds.
pub fn bucket_of(us: u64) -> usize {
    if us < 4 {
        return us as usize;
    }
    let p = 63 - us.leading_zeros() as usize; // >= 2
    let sub = ((us >> (p - 2)) & 3) as usize;
    (4 + (p - 2) * 4 + sub).min(BUCKETS - 1)
}

/// The smallest latency (µs) that lands in bucket `i` (`i < BUCKETS`).
pub fn bucket_lower_us(i: usize) -> u64 {
    if i < 4 {
        return i as u64;
    }
    let p = (i - 4) / 4 + 2;
    let sub = ((i - 4) % 4) as u64;
    (4 + sub) << (p - 2)
}

/// One past the largest latency (µs) of bucket `i`; `u64::MAX` for the last bucket.
pub fn bucket_upper_us(i: usize) -> u64 {
    if i + 1 >= BUCKETS {
        u64::MAX
    } else {
        bucket_lower_us(i + 1)
    }
}

/// Live histogram; shared by reference between the I/O path and the sampler.
#[derive(Debug)]
pub struct LatencyHistogram {
    counts: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl LatencyHistogram {
    pub fn new() -> LatencyHistogram {
        LatencyHistogram::default()
    }

    /// Counts one operation that took `us` microseconds.
    #[inline]
    pub fn record_us(&self, us: u64) {
        self.counts[bucket_of(us)].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self.counts.iter().map(|c| c.load(Relaxed)).collect(),
            sum_us: self.sum_us.load(Relaxed),
        }
    }
}

/// Counts per bucket (not cumulative) and the sum of all latencies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramSnapshot {
    /// `BUCKETS` entries (a snapshot decoded from elsewhere may hold fewer: missing
    /// buckets count zero).
    pub counts: Vec<u64>,
    pub sum_us: u64,
}

impl Default for HistogramSnapshot {
    fn default() -> Self {
        HistogramSnapshot {
            counts: vec![0; BUCKETS],
            sum_us: 0,
        }
    }
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }

    /// Mean latency in µs; 0 with no operations.
    pub fn mean_us(&self) -> u64 {
        self.sum_us.checked_div(self.count()).unwrap_or(0)
    }

    /// The latency (µs) below which a fraction `q` (0..=1) of operations fell, as the upper
    /// edge of the bucket holding that rank (the lower edge for the open last bucket);
    /// 0 with no operations.
    pub fn quantile_us(&self, q: f64) -> u64 {
        let total = self.count();
        if total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(c);
            if seen >= rank {
                return if i + 1 >= BUCKETS {
                    bucket_lower_us(i)
                } else {
                    bucket_upper_us(i) - 1
                };
            }
        }
        bucket_lower_us(BUCKETS - 1)
    }

    /// What happened between `earlier` and `self` (counters only grow; a counter that went
    /// down, e.g. a device that was replaced, counts from zero).
    pub fn since(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self
                .counts
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    let e = earlier.counts.get(i).copied().unwrap_or(0);
                    if c >= e { c - e } else { c }
                })
                .collect(),
            sum_us: if self.sum_us >= earlier.sum_us {
                self.sum_us - earlier.sum_us
            } else {
                self.sum_us
            },
        }
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, &b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.saturating_add(b);
        }
        self.sum_us = self.sum_us.saturating_add(other.sum_us);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn bucket_edges() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(3), 3);
        assert_eq!(bucket_of(4), 4);
        assert_eq!(bucket_of(7), 7);
        assert_eq!(bucket_of(8), 8);
        assert_eq!(bucket_of(9), 8);
        assert_eq!(bucket_of(10), 9);
        assert_eq!(bucket_of(15), 11);
        assert_eq!(bucket_of(16), 12);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_lower_us(BUCKETS - 1), 7 << 25);
        for i in 0..BUCKETS {
            assert_eq!(bucket_of(bucket_lower_us(i)), i, "bucket {i}");
            if i + 1 < BUCKETS {
                assert_eq!(bucket_of(bucket_upper_us(i) - 1), i, "bucket {i} top");
            }
        }
    }

    #[test]
    fn quantiles_and_mean() {
        let h = LatencyHistogram::new();
        for _ in 0..99 {
            h.record_us(100);
        }
        h.record_us(10_000);
        let s = h.snapshot();
        assert_eq!(s.count(), 100);
        assert_eq!(s.mean_us(), (99 * 100 + 10_000) / 100);
        let p50 = s.quantile_us(0.5);
        assert!((100..=111).contains(&p50), "{p50}");
        let p99 = s.quantile_us(0.99);
        assert!((100..=111).contains(&p99), "{p99}");
        let max = s.quantile_us(1.0);
        assert!((10_000..=12_287).contains(&max), "{max}");
        assert_eq!(HistogramSnapshot::default().quantile_us(0.99), 0);
        let later = {
            h.record_us(5);
            h.snapshot()
        };
        let d = later.since(&s);
        assert_eq!(d.count(), 1);
        assert_eq!(d.sum_us, 5);
    }

    proptest! {
        #[test]
        fn every_value_lands_in_a_bucket_that_holds_it(us in any::<u64>()) {
            let i = bucket_of(us);
            prop_assert!(i < BUCKETS);
            prop_assert!(bucket_lower_us(i) <= us);
            prop_assert!(us < bucket_upper_us(i) || i == BUCKETS - 1);
        }

        #[test]
        fn quantile_is_within_a_quarter_of_the_value(us in 4u64..(1 << 26)) {
            let h = LatencyHistogram::new();
            h.record_us(us);
            let q = h.snapshot().quantile_us(0.99);
            prop_assert!(q >= us && q <= us + us / 4, "{} -> {}", us, q);
        }
    }
}
