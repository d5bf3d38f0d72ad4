//! Time seam: throttling and "quiet region" timing go through [`Clock`] so tests never wait.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

/// A boxed sleep.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Monotonic time and sleeping.
pub trait Clock: Send + Sync + 'static {
    /// Time since an arbitrary fixed origin.
    fn now(&self) -> Duration;
    fn sleep(&self, duration: Duration) -> Sleep;
}

/// Tokio's clock (honours `tokio::time::pause`, so paused-time tests run instantly).
#[derive(Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    pub fn new() -> TokioClock {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A virtual clock: `sleep` advances it and returns at once; `advance` moves it by hand.
/// Records the total time slept, for throttling tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    state: Mutex<(Duration, Duration)>,
}

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    pub fn advance(&self, by: Duration) {
        self.lock().0 += by;
    }

    /// Sum of all durations passed to `sleep`.
    pub fn slept(&self) -> Duration {
        self.lock().1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Duration, Duration)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        self.lock().0
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        {
            let mut st = self.lock();
            st.0 += duration;
            st.1 += duration;
        }
        Box::pin(std::future::ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_advances_on_sleep() {
        let c = ManualClock::new();
        c.sleep(Duration::from_secs(3)).await;
        c.advance(Duration::from_secs(1));
        assert_eq!(c.now(), Duration::from_secs(4));
        assert_eq!(c.slept(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let c = TokioClock::new();
        c.sleep(Duration::from_secs(10)).await;
        assert!(c.now() >= Duration::from_secs(10));
    }
}
