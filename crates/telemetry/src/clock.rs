//! Time seam: the I/O path reads a monotonic nanosecond counter through [`Clock`] so tests
//! can measure latencies on a clock they move by hand.

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

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    ns: AtomicU64,
}

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    pub fn advance_ns(&self, ns: u64) {
        self.ns.fetch_add(ns, Relaxed);
    }

    pub fn set_ns(&self, ns: u64) {
        self.ns.store(ns, Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.ns.load(Relaxed)
    }
}
