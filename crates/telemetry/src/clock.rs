//! Time seam: the I/O path reads a monotonic nanosecond counter through [`Clock`] so tests
//! can measure latencies on a clock they move by hand. The QoS engine of `nvmf-target`
//! runs on the same clock (its token buckets and contention controller).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// A monotonic clock in nanoseconds since an arbitrary origin.
pub trait Clock: Send + Sync + 'static {
    fn now_ns(&self) -> u64;
}

/// The process's monotonic clock (`Instant`).
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

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock that moves only when told to (tests, simulations).
#[derive(Debug, Default)]
pub struct ManualClock {
    ns: AtomicU64,
}

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    /// A clock that reads `ns` until moved.
    pub fn at(ns: u64) -> ManualClock {
        ManualClock {
            ns: AtomicU64::new(ns),
        }
    }

    /// Moves the clock forward by `ns`.
    pub fn advance_ns(&self, ns: u64) {
        self.ns.fetch_add(ns, Relaxed);
    }

    /// Moves the clock to `ns` (never backwards: it is monotonic).
    pub fn set_ns(&self, ns: u64) {
        self.ns.fetch_max(ns, Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.ns.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_only_moves_forward() {
        let c = ManualClock::at(10);
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
