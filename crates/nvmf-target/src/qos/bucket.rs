//! A token bucket kept as one number: the time at which it would be full again.
//!
//! The classic bucket holds up to `burst` tokens and gains `rate` per second; a command
//! takes `cost` tokens. Here the bucket may go into debt instead of refusing: a command
//! always takes its tokens at once (so the commands behind it see them gone, which keeps
//! them in order), and starts when the level is back to zero or above. In time units
//! (1 token = `1/rate` s), with `full_at` the time the bucket would be full again:
//!
//! ```text
//! charge(cost, now):  full_at' = max(full_at, now) + cost/rate
//!                     start    = full_at' - burst/rate      (at once if <= now)
//! ```
//!
//! One compare-and-swap on one atomic per charge; no lock, no allocation. Start times are
//! non-decreasing in charge order, so commands released by start time leave in the order
//! they were charged, and a bucket never lets more than `burst + rate * t` through in any
//! window of length `t`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Fractional bits of the nanoseconds-per-unit figure (bytes at 10 GB/s cost 0.1 ns each).
const FRAC_BITS: u32 = 16;
/// The bucket keeps time in ticks of 1/16 ns, so that rounding each command's cost up
/// loses at most 1/16 ns per command (0.04% of a 512-byte command at 3 GB/s); u64 ticks
/// last 36 years of uptime.
const TICK_BITS: u32 = 4;
const NS_PER_S: u128 = 1_000_000_000;

pub(crate) struct Bucket {
    /// Nanoseconds per unit in fixed point (`FRAC_BITS` fraction bits); 0: no limit.
    ns_per_unit_fp: AtomicU64,
    /// The burst as time (ticks): how far `full_at` may run ahead of now before commands
    /// wait.
    burst_ticks: AtomicU64,
    /// When the bucket would be full again, in ticks of the QoS clock.
    full_at_ticks: AtomicU64,
}

impl Bucket {
    /// A bucket that limits nothing until [`Bucket::set_rate`].
    pub fn unlimited() -> Bucket {
        Bucket {
            ns_per_unit_fp: AtomicU64::new(0),
            burst_ticks: AtomicU64::new(0),
            full_at_ticks: AtomicU64::new(0),
        }
    }

    /// A bucket of `per_s` units per second holding up to `burst` units.
    #[cfg(test)]
    pub fn new(per_s: Option<u64>, burst: u64) -> Bucket {
        let b = Bucket::unlimited();
        b.set_rate(per_s, burst);
        b
    }

    /// Changes the rate (`None`: no limit) and the burst; the debt already taken stays.
    pub fn set_rate(&self, per_s: Option<u64>, burst: u64) {
        let per = match per_s {
            Some(r) if r > 0 => {
                // Rounded up: the bucket errs on the slow side, never above its rate.
                let fp = (NS_PER_S << FRAC_BITS).div_ceil(u128::from(r));
                u64::try_from(fp).unwrap_or(u64::MAX).max(1)
            }
            _ => 0,
        };
        self.burst_ticks
            .store(cost_ticks(per, burst), Ordering::Relaxed);
        self.ns_per_unit_fp.store(per, Ordering::Release);
    }

    pub fn is_limited(&self) -> bool {
        self.ns_per_unit_fp.load(Ordering::Relaxed) != 0
    }

    /// The rate in units per second (`None`: no limit), rounded.
    pub fn rate_per_s(&self) -> Option<u64> {
        match self.ns_per_unit_fp.load(Ordering::Relaxed) {
            0 => None,
            per => Some(((NS_PER_S << FRAC_BITS) / u128::from(per)) as u64),
        }
    }

    /// Takes `units` at `now_ns` and returns when the command may start (at once when the
    /// answer is `<= now_ns`). Zero units or no limit: `now_ns`, nothing taken.
    #[inline]
    pub fn charge(&self, units: u64, now_ns: u64) -> u64 {
        let per = self.ns_per_unit_fp.load(Ordering::Acquire);
        if per == 0 || units == 0 {
            return now_ns;
        }
        let cost = cost_ticks(per, units);
        let burst = self.burst_ticks.load(Ordering::Relaxed);
        let now = now_ns.saturating_mul(1 << TICK_BITS);
        let mut cur = self.full_at_ticks.load(Ordering::Relaxed);
        loop {
            let next = cur.max(now).saturating_add(cost);
            match self.full_at_ticks.compare_exchange_weak(
                cur,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                // Rounded up to the next nanosecond: never early.
                Ok(_) => return next.saturating_sub(burst).div_ceil(1 << TICK_BITS),
                Err(seen) => cur = seen,
            }
        }
    }
}

/// `units` at `per` (fixed-point ns per unit) in ticks, rounded up.
fn cost_ticks(per: u64, units: u64) -> u64 {
    const SHIFT: u32 = FRAC_BITS - TICK_BITS;
    let fp = u128::from(per) * u128::from(units);
    let ticks = (fp + (1u128 << SHIFT) - 1) >> SHIFT;
    u64::try_from(ticks).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    #[test]
    fn unlimited_bucket_never_delays() {
        let b = Bucket::unlimited();
        for i in 0..1000 {
            assert!(b.charge(4096, i) <= i);
        }
        assert!(!b.is_limited());
        assert_eq!(b.rate_per_s(), None);
    }

    #[test]
    fn burst_then_rate() {
        // 1000/s, burst 10: ten commands at once, then one per millisecond.
        let b = Bucket::new(Some(1000), 10);
        let now = 5 * S;
        for i in 0..10 {
            assert!(b.charge(1, now) <= now, "command {i} of the burst waits");
        }
        for i in 1..=20u64 {
            assert_eq!(
                b.charge(1, now),
                now + i * MS,
                "command {i} after the burst"
            );
        }
        assert_eq!(b.rate_per_s(), Some(1000));
    }

    #[test]
    fn an_idle_bucket_refills_up_to_its_burst_only() {
        let b = Bucket::new(Some(100), 5);
        let t0 = S;
        for _ in 0..5 {
            assert!(b.charge(1, t0) <= t0);
        }
        // An hour idle still gives only 5 at once.
        let t1 = t0 + 3600 * S;
        for _ in 0..5 {
            assert!(b.charge(1, t1) <= t1);
        }
        assert_eq!(b.charge(1, t1), t1 + 10 * MS);
    }

    #[test]
    fn a_command_larger_than_the_burst_waits_its_share() {
        // 1 MB/s, 64 KiB burst, one 1 MiB command: it waits for what the burst lacks.
        let b = Bucket::new(Some(1_000_000), 65_536);
        let start = b.charge(1 << 20, S);
        let expect = S + (1_048_576 - 65_536) * 1000;
        assert!(start.abs_diff(expect) <= 2, "{start} vs {expect}");
    }

    #[test]
    fn start_times_never_go_back() {
        let b = Bucket::new(Some(777), 3);
        let mut last = 0;
        for i in 0..500u64 {
            let s = b.charge(1 + i % 3, S + i * 100_000);
            assert!(s >= last);
            last = s;
        }
    }

    #[test]
    fn rate_change_keeps_the_debt() {
        let b = Bucket::new(Some(1000), 1);
        assert!(b.charge(1, S) <= S);
        assert_eq!(b.charge(1, S), S + MS);
        b.set_rate(Some(100), 1);
        // The next one pays at the new rate after the debt already taken.
        // The debt is time: 2 ms taken at the old rate; the 10 ms the new command costs
        // is covered by the new burst (1 unit = 10 ms) but for that debt.
        assert_eq!(b.charge(1, S), S + 2 * MS);
        b.set_rate(None, 0);
        assert_eq!(b.charge(1, S), S, "no limit any more");
    }

    #[test]
    fn fine_byte_rates_stay_exact() {
        // 3 GB/s in 512-byte commands: the fixed point keeps the sub-nanosecond part.
        let b = Bucket::new(Some(3_000_000_000), 512);
        let mut last = 0;
        let n = 1_000_000u64;
        for _ in 0..n {
            last = b.charge(512, 0);
        }
        // n * 512 bytes at 3 GB/s, minus the one-command burst.
        let ideal = (n * 512 - 512) as f64 / 3.0;
        assert!(
            ((last as f64 - ideal) / ideal).abs() < 5e-4,
            "{last} vs {ideal}"
        );
    }

    proptest! {
        /// Over any window, a saturated bucket lets through no more than burst + rate * t
        /// and (once in debt) no less than rate * t - 1 unit: the rate holds to the unit.
        #[test]
        fn window_rate_holds(
            rate in 1u64..200_000,
            burst in 1u64..1000,
            costs in proptest::collection::vec(1u64..64, 50..400),
            gaps in proptest::collection::vec(0u64..2_000_000, 50..400),
        ) {
            let b = Bucket::new(Some(rate), burst);
            let mut now = S;
            let mut starts = Vec::new();
            for (c, g) in costs.iter().zip(gaps.iter().cycle()) {
                now += g;
                let s = b.charge(*c, now).max(now);
                starts.push((s, *c));
            }
            // Any window of start times [s_i, s_k] holds at most
            // max(burst, c_i) + rate * (s_k - s_i) units (+1 for rounding): the bucket's
            // promise (a command larger than the burst counts from its own debt).
            for i in 0..starts.len() {
                let mut units = 0u64;
                let first_cost = starts[i].1;
                for (s, c) in &starts[i..] {
                    units += c;
                    let t_ns = s - starts[i].0;
                    let allowed = burst.max(first_cost) as f64
                        + rate as f64 * t_ns as f64 / S as f64
                        + 1.0;
                    prop_assert!(
                        (units as f64) <= allowed,
                        "{units} units in {t_ns} ns (rate {rate}, burst {burst})"
                    );
                }
            }
        }

        /// Back-to-back charges at one instant are spaced exactly by their cost.
        #[test]
        fn saturated_spacing_is_exact(rate in 1u64..1_000_000, n in 2u64..200) {
            let b = Bucket::new(Some(rate), 1);
            let first = b.charge(1, S);
            let mut last = first;
            for _ in 1..n {
                last = b.charge(1, S);
            }
            let expect = (n - 1) as f64 * S as f64 / rate as f64;
            let got = (last - first) as f64;
            // Rounded up per command: at most 1 ns per command slower.
            prop_assert!(got >= expect - 1.0 && got <= expect + n as f64 + 1.0,
                "{got} vs {expect}");
        }
    }
}
