//! Time seam and the compaction throttle. Same pattern as `volume::clock` (kept separate
//! because `kv` does not depend on the volume engine): everything that waits goes through
//! [`Clock`], so throttle tests run on a [`ManualClock`] and never sleep.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A boxed sleep.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Monotonic time and sleeping.
pub trait Clock: Send + Sync + 'static {
    /// Time since an arbitrary fixed origin.
    fn now(&self) -> Duration;
    fn sleep(&self, duration: Duration) -> Sleep;
}

/// Tokio's clock (honours `tokio::time::pause`).
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
/// Records the total time slept.
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

/// Most idle time a pacer turns into a burst: after a pause, work may run ahead of the
/// rate by this much, no more.
const MAX_CREDIT: Duration = Duration::from_millis(100);

/// Paces background I/O to `bytes_per_sec` (0 = unlimited): after each piece of work,
/// [`Pacer::pay`] sleeps until the bytes done so far are due at that rate. Lateness is
/// not rounded away per call, so the average rate holds however small the pieces are.
pub(crate) struct Pacer {
    clock: Arc<dyn Clock>,
    bytes_per_sec: u64,
    /// Clock time at which the work done so far is due.
    due: Duration,
}

impl Pacer {
    pub fn new(clock: Arc<dyn Clock>, bytes_per_sec: u64) -> Pacer {
        let due = clock.now();
        Pacer {
            clock,
            bytes_per_sec,
            due,
        }
    }

    /// Records `bytes` of work and sleeps off any lead over the rate (returns the time
    /// slept). `unthrottled` skips the sleep (and the debt) when foreground commands wait
    /// for space.
    pub async fn pay(&mut self, bytes: u64, unthrottled: bool) -> Duration {
        let now = self.clock.now();
        if self.bytes_per_sec == 0 || unthrottled {
            self.due = now;
            return Duration::ZERO;
        }
        let floor = now.saturating_sub(MAX_CREDIT);
        self.due =
            self.due.max(floor) + Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec as f64);
        if self.due > now {
            let wait = self.due - now;
            self.clock.sleep(wait).await;
            return wait;
        }
        Duration::ZERO
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

    #[tokio::test]
    async fn pacer_holds_the_rate_with_small_pieces() {
        let clock = Arc::new(ManualClock::new());
        let mut p = Pacer::new(clock.clone(), 10 << 20);
        // 100 MiB in 4 KiB pieces, each taking 1 us of "work".
        for _ in 0..(100 << 20) / 4096 {
            clock.advance(Duration::from_micros(1));
            p.pay(4096, false).await;
        }
        let secs = clock.now().as_secs_f64();
        assert!((secs - 10.0).abs() < 0.01, "took {secs} s");
    }

    #[tokio::test]
    async fn pacer_gives_little_credit_after_idle_and_none_when_unthrottled() {
        let clock = Arc::new(ManualClock::new());
        let mut p = Pacer::new(clock.clone(), 1 << 20);
        clock.advance(Duration::from_secs(60));
        // After a minute idle, 1 MiB still costs about 1 s minus the 100 ms credit.
        p.pay(1 << 20, false).await;
        let slept = clock.slept().as_secs_f64();
        assert!((slept - 0.9).abs() < 0.01, "slept {slept}");
        p.pay(100 << 20, true).await;
        assert!((clock.slept().as_secs_f64() - slept).abs() < 1e-9);
        // Unlimited.
        let mut p = Pacer::new(clock.clone(), 0);
        p.pay(1 << 30, false).await;
        assert!((clock.slept().as_secs_f64() - slept).abs() < 1e-9);
    }
}
