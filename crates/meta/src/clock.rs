//! Monotonic time as a seam: leases and the lease keeper read time only through [`Clock`],
//! so tests can run them on a [`ManualClock`].

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A monotonic clock. Times are durations since the clock's own origin.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Duration;
    /// Resolves once `now() >= deadline`.
    fn sleep_until(&self, deadline: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// The real monotonic clock (tokio's, so that paused tokio time also works).
#[derive(Clone, Debug)]
pub struct SystemClock {
    origin: tokio::time::Instant,
}

impl SystemClock {
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn sleep_until(&self, deadline: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep_until(self.origin + deadline))
    }
}

/// A clock that moves only when told to ([`ManualClock::advance`]).
#[derive(Debug)]
pub struct ManualClock {
    now: tokio::sync::watch::Sender<Duration>,
}

impl ManualClock {
    pub fn new() -> Self {
        Self {
            now: tokio::sync::watch::Sender::new(Duration::ZERO),
        }
    }

    /// Moves time forward and wakes every sleeper whose deadline has come.
    pub fn advance(&self, by: Duration) {
        self.now.send_modify(|now| *now += by);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        *self.now.borrow()
    }

    fn sleep_until(&self, deadline: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // The sender lives as long as the clock; if it is gone, time never moves again.
            if rx.wait_for(|now| *now >= deadline).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_in_order() {
        let clock = std::sync::Arc::new(ManualClock::new());
        let early = tokio::spawn(clock.sleep_until(Duration::from_millis(10)));
        let late = tokio::spawn(clock.sleep_until(Duration::from_millis(20)));
        tokio::task::yield_now().await;
        assert!(!early.is_finished());
        clock.advance(Duration::from_millis(10));
        early.await.expect("early sleeper");
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!late.is_finished(), "late sleeper woke 10 ms early");
        clock.advance(Duration::from_millis(10));
        late.await.expect("late sleeper");
        assert_eq!(clock.now(), Duration::from_millis(20));
    }

    #[tokio::test(start_paused = true)]
    async fn system_clock_follows_tokio_time() {
        let clock = SystemClock::new();
        let t0 = clock.now();
        clock.sleep_until(t0 + Duration::from_secs(5)).await;
        assert!(clock.now() >= t0 + Duration::from_secs(5));
    }
}
