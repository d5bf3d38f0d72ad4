//! The QoS engine's time: a monotonic nanosecond clock behind a trait, so that tests drive
//! the token buckets and the contention controller with a virtual clock and get the same
//! answer every run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Monotonic time in nanoseconds since an arbitrary origin (never goes back).
pub trait QosClock: Send + Sync + 'static {
    fn now_ns(&self) -> u64;
}

/// The real clock: nanoseconds since the clock was made.
#[derive(Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl QosClock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        // u64 nanoseconds last 584 years.
        self.origin.elapsed().as_nanos() as u64
    }
}

/// A virtual clock that moves only when told to (tests, simulations).
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ns: AtomicU64,
}

impl ManualClock {
    pub fn new(start_ns: u64) -> ManualClock {
        ManualClock {
            now_ns: AtomicU64::new(start_ns),
        }
    }

    /// Moves the clock forward by `ns`.
    pub fn advance_ns(&self, ns: u64) {
        self.now_ns.fetch_add(ns, Ordering::AcqRel);
    }

    /// Moves the clock to `ns` (never backwards).
    pub fn set_ns(&self, ns: u64) {
        self.now_ns.fetch_max(ns, Ordering::AcqRel);
    }
}

impl QosClock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.now_ns.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_only_moves_forward() {
        let c = ManualClock::new(10);
        c.advance_ns(5);
        assert_eq!(c.now_ns(), 15);
        c.set_ns(3);
        assert_eq!(c.now_ns(), 15, "never backwards");
        c.set_ns(100);
        assert_eq!(c.now_ns(), 100);
    }

    #[test]
    fn monotonic_clock_does_not_go_back() {
        let c = MonotonicClock::new();
        let a = c.now_ns();
        let b = c.now_ns();
        assert!(b >= a);
    }
}
