//! Opt-in busy polling for the tasks that own an NVMe/TCP socket (the target's connection
//! task, the host's queue driver).
//!
//! A task that finds nothing to do normally sleeps until its socket or a completion wakes
//! it: at queue depth 1 that is one thread wake-up per PDU, tens of microseconds on a
//! virtual machine whose idle vCPU halts. With a window of `window_us`, a task that made
//! progress keeps polling (it yields to the runtime, which checks its sockets without
//! sleeping, and runs again) until it has been idle that long; then it sleeps as before.
//! So a polling node spends a core only while I/O flows and nothing at rest. The runtime
//! must let the polling thread see socket readiness itself: one worker thread (as
//! `ferrobay node run --busy-poll-us` sets up), not a second worker asleep on the driver.

use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Longest window accepted: beyond a second polling is just a wasted core.
pub const MAX_BUSY_POLL_US: u32 = 1_000_000;

/// When a socket task should keep polling instead of sleeping.
#[derive(Debug, Clone)]
pub struct BusyPoll {
    window: Duration,
    /// The first idle turn after the last progress: the window runs from there (one turn
    /// later than the progress itself, so that busy turns need no clock read).
    idle_since: Option<Instant>,
    /// Progress since `idle_since` was taken.
    progressed: bool,
}

impl BusyPoll {
    /// `window_us` 0: never poll (the default, event-driven mode).
    pub fn new(window_us: u32) -> BusyPoll {
        BusyPoll {
            window: Duration::from_micros(u64::from(window_us.min(MAX_BUSY_POLL_US))),
            idle_since: None,
            progressed: false,
        }
    }

    /// Drives `turn` until it is ready: the loop of a task that owns a socket. `turn`
    /// does what it can, sets its flag when it did anything, and returns Pending with
    /// its wake-ups registered when it runs out of work. Then, within the window, the task
    /// yields to the runtime (which looks at the sockets without sleeping) and turns
    /// again, counting that in `turns`; otherwise it sleeps until woken, as without
    /// polling.
    pub async fn run<T>(
        &mut self,
        turns: Option<&AtomicU64>,
        mut turn: impl FnMut(&mut Context<'_>, &mut bool) -> Poll<T>,
    ) -> T {
        loop {
            let done = poll_fn(|cx| {
                let mut progressed = false;
                match turn(cx, &mut progressed) {
                    Poll::Ready(v) => Poll::Ready(Some(v)),
                    Poll::Pending if self.keep_polling(progressed, Instant::now) => {
                        Poll::Ready(None)
                    }
                    Poll::Pending => Poll::Pending,
                }
            })
            .await;
            match done {
                Some(v) => return v,
                None => {
                    if let Some(t) = turns {
                        t.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::task::yield_now().await;
                }
            }
        }
    }

    /// Called when the task runs out of work (`progressed`: it did something on this turn
    /// before that); `now` is asked for only on idle turns. True: yield and poll again;
    /// false: sleep until woken.
    pub fn keep_polling(&mut self, progressed: bool, now: impl FnOnce() -> Instant) -> bool {
        if self.window.is_zero() {
            return false;
        }
        if progressed {
            self.progressed = true;
            return true;
        }
        if std::mem::take(&mut self.progressed) {
            self.idle_since = Some(now());
            return true;
        }
        match self.idle_since {
            Some(t) if now().saturating_duration_since(t) < self.window => true,
            _ => {
                // Asleep from here; the next progress starts a new window.
                self.idle_since = None;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_never_polls() {
        let mut b = BusyPoll::new(0);
        assert!(!b.keep_polling(true, Instant::now));
    }

    #[test]
    fn polls_for_the_window_after_progress_then_sleeps() {
        let t0 = Instant::now();
        let at = |us: u64| move || t0 + Duration::from_micros(us);
        let no_clock = || -> Instant { panic!("a busy turn read the clock") };
        let mut b = BusyPoll::new(100);
        assert!(!b.keep_polling(false, at(0)), "no progress yet: sleep");
        assert!(b.keep_polling(true, no_clock));
        assert!(b.keep_polling(true, no_clock));
        // The window starts at the first idle turn.
        assert!(b.keep_polling(false, at(10)));
        assert!(b.keep_polling(false, at(109)));
        assert!(!b.keep_polling(false, at(110)));
        // Woken later without progress (a spurious wake-up): still asleep.
        assert!(!b.keep_polling(false, at(111)));
        // New progress opens a new window.
        assert!(b.keep_polling(true, no_clock));
        assert!(b.keep_polling(false, at(5000)));
        assert!(b.keep_polling(false, at(5050)));
        // Progress within the window restarts it.
        assert!(b.keep_polling(true, no_clock));
        assert!(b.keep_polling(false, at(5090)));
        assert!(b.keep_polling(false, at(5189)));
        assert!(!b.keep_polling(false, at(5190)));
    }

    /// Runs a turn that is Pending with progress until its `ready_at`-th call (waking
    /// itself first when `wakes`): the calls it took and the turns counted.
    async fn drive(window_us: u32, ready_at: u32, wakes: bool) -> (u32, u64) {
        let turns = AtomicU64::new(0);
        let mut calls = 0;
        BusyPoll::new(window_us)
            .run(Some(&turns), |cx, progressed| {
                calls += 1;
                if calls == ready_at {
                    return Poll::Ready(());
                }
                *progressed = true;
                if wakes {
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            })
            .await;
        (calls, turns.load(Ordering::Relaxed))
    }

    #[tokio::test]
    async fn run_turns_again_without_a_wake_up_while_polling() {
        // Pending with progress three times, never waking itself: only polling brings
        // it back.
        assert_eq!(drive(1000, 4, false).await, (4, 3));
    }

    #[tokio::test]
    async fn run_without_a_window_sleeps_until_woken() {
        assert_eq!(drive(0, 2, true).await, (2, 0), "nothing polled");
    }

    #[test]
    fn window_is_bounded() {
        let t0 = Instant::now();
        let mut b = BusyPoll::new(u32::MAX);
        assert!(b.keep_polling(true, || t0));
        assert!(b.keep_polling(false, || t0));
        assert!(!b.keep_polling(false, || t0 + Duration::from_secs(1)));
    }
}
