//! A fixed set of I/O futures polled by one job: a slot per I/O in flight, reused with
//! `Pin::set`, and a waker per slot made once, so starting and finishing an I/O allocates
//! nothing (a `FuturesUnordered` allocates a task node per future pushed).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Slots whose futures were woken (or are new) and must be polled, one bit each.
struct ReadySet {
    bits: Box<[AtomicU64]>,
    /// The job task polling the slots.
    parent: AtomicWaker,
}

impl ReadySet {
    fn mark(&self, i: usize) {
        if let Some(w) = self.bits.get(i / 64) {
            w.fetch_or(1 << (i % 64), Ordering::AcqRel);
        }
    }
}

/// The waker of slot `index`.
struct SlotWake {
    index: usize,
    set: Arc<ReadySet>,
}

impl Wake for SlotWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.set.mark(self.index);
        self.set.parent.wake();
    }
}

pub(crate) struct IoSlots<F> {
    futs: Vec<Pin<Box<Option<F>>>>,
    wakers: Vec<Waker>,
    set: Arc<ReadySet>,
    free: Vec<usize>,
    /// Where the next scan starts: slots are served round robin, so a slot reused at
    /// once (an I/O that completes when first polled) cannot starve the others.
    cursor: usize,
}

impl<F: Future> IoSlots<F> {
    pub fn new(n: usize) -> Self {
        let set = Arc::new(ReadySet {
            bits: (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            parent: AtomicWaker::new(),
        });
        IoSlots {
            futs: (0..n).map(|_| Box::pin(None)).collect(),
            wakers: (0..n)
                .map(|index| {
                    Waker::from(Arc::new(SlotWake {
                        index,
                        set: set.clone(),
                    }))
                })
                .collect(),
            set,
            free: (0..n).rev().collect(),
            cursor: 0,
        }
    }

    pub fn has_free(&self) -> bool {
        !self.free.is_empty()
    }
    /// No I/O in flight.
    pub fn is_empty(&self) -> bool {
        self.free.len() == self.futs.len()
    }

    /// Puts `fut` in a free slot; it is first polled by the next [`IoSlots::next`].
    /// Without a free slot the future is dropped (callers check [`IoSlots::has_free`]).
    pub fn start(&mut self, fut: F) {
        let Some(i) = self.free.pop() else {
            return;
        };
        if let Some(slot) = self.futs.get_mut(i) {
            slot.as_mut().set(Some(fut));
            self.set.mark(i);
        }
    }

    /// The next finished I/O (pending forever while none is in flight).
    pub async fn next(&mut self) -> F::Output {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Registered first: a wake during the scan below is not lost.
        self.set.parent.register(cx.waker());
        let words = self.set.bits.len();
        if words == 0 {
            return Poll::Pending;
        }
        let first = self.cursor / 64;
        // The first word twice: its bits from the cursor on now, those below it last.
        for k in 0..=words {
            let w = (first + k) % words;
            let mut bits = self.set.bits[w].swap(0, Ordering::AcqRel);
            if k == 0 {
                let below = bits & ((1u64 << (self.cursor % 64)) - 1);
                if below != 0 {
                    self.set.bits[w].fetch_or(below, Ordering::AcqRel);
                }
                bits &= !below;
            }
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let i = w * 64 + b;
                let (Some(slot), Some(waker)) = (self.futs.get_mut(i), self.wakers.get(i)) else {
                    continue;
                };
                let Some(fut) = slot.as_mut().as_pin_mut() else {
                    continue;
                };
                if let Poll::Ready(out) = fut.poll(&mut Context::from_waker(waker)) {
                    slot.as_mut().set(None);
                    self.free.push(i);
                    self.cursor = (i + 1) % self.futs.len();
                    // The rest of this word waits for the next call.
                    if bits != 0 {
                        self.set.bits[w].fetch_or(bits, Ordering::AcqRel);
                    }
                    return Poll::Ready(out);
                }
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Futures that are ready when first polled, and a slot reused at once: every slot
    /// still gets its turn.
    #[tokio::test]
    async fn ready_futures_are_served_round_robin() {
        let mut s = IoSlots::new(100);
        let mut next = 0u32;
        while s.has_free() {
            s.start(std::future::ready(next));
            next += 1;
        }
        for expected in 0..1000 {
            // They finish in the order they were started, as in a fair queue.
            assert_eq!(s.next().await, expected);
            s.start(std::future::ready(next));
            next += 1;
        }
    }

    #[tokio::test]
    async fn runs_every_future_and_reuses_slots() {
        let mut s = IoSlots::new(70);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mk = |i: u32, d: u64| {
            let tx = tx.clone();
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(d)).await;
                let _ = tx.send(i);
                i
            }
        };
        let mut got = Vec::new();
        let mut next = 0u32;
        while got.len() < 300 {
            while s.has_free() && next < 300 {
                s.start(mk(next, u64::from(next % 3)));
                next += 1;
            }
            got.push(s.next().await);
        }
        assert!(s.is_empty());
        got.sort_unstable();
        assert_eq!(got, (0..300).collect::<Vec<_>>());
        let mut sent = 0;
        while rx.try_recv().is_ok() {
            sent += 1;
        }
        assert_eq!(sent, 300);
    }
}
