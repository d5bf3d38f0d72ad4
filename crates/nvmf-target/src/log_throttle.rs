//! Rate limit for warnings that a peer can trigger at will (refused connections, handshake
//! timeouts): one message per interval, carrying how many were held back.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

pub(crate) struct LogThrottle {
    interval_ms: u64,
    epoch: Instant,
    /// Milliseconds since `epoch` before which messages are held back.
    next_ms: AtomicU64,
    held_back: AtomicU64,
}

impl LogThrottle {
    pub fn new(interval: Duration) -> Self {
        LogThrottle {
            interval_ms: interval.as_millis() as u64,
            epoch: Instant::now(),
            next_ms: AtomicU64::new(0),
            held_back: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when a message may be logged now (`n` were held back since the last one),
    /// `None` when this one is held back.
    pub fn admit(&self) -> Option<u64> {
        let now = self.epoch.elapsed().as_millis() as u64;
        let next = self.next_ms.load(Relaxed);
        if now >= next
            && self
                .next_ms
                .compare_exchange(next, now + self.interval_ms, Relaxed, Relaxed)
                .is_ok()
        {
            return Some(self.held_back.swap(0, Relaxed));
        }
        self.held_back.fetch_add(1, Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_message_per_interval_with_the_count_held_back() {
        let t = LogThrottle::new(Duration::from_secs(3600));
        assert_eq!(t.admit(), Some(0));
        for _ in 0..5 {
            assert_eq!(t.admit(), None);
        }
        // Next interval: the five held back are reported with the next message.
        t.next_ms.store(0, Relaxed);
        assert_eq!(t.admit(), Some(5));
        assert_eq!(t.admit(), None);
    }
}
