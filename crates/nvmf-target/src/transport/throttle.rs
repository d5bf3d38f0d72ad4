//! The connection's throttle queue: commands over a QoS limit wait here, in start-time
//! order (ties in arrival order), until their turn; the connection's own task releases
//! them. Bounded by the queue depth (a command is in the table while it waits); the heap's
//! capacity is reserved once, so a throttled command allocates nothing.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::qos::gate::QosGate;

struct Entry {
    start_ns: u64,
    seq: u64,
    slot: u16,
    gate: Arc<QosGate>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.start_ns, self.seq) == (o.start_ns, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.start_ns, self.seq).cmp(&(o.start_ns, o.seq))
    }
}

/// A command whose turn has come.
pub(crate) struct Due {
    pub slot: u16,
    pub seq: u64,
}

#[derive(Default)]
pub(crate) struct ThrottleQueue {
    heap: BinaryHeap<Reverse<Entry>>,
    next_seq: u64,
    timer: Option<Pin<Box<Sleep>>>,
    /// The start time the timer is set for.
    armed_for_ns: u64,
}

impl ThrottleQueue {
    /// Puts the command in `slot` in line until `start_ns`; returns its entry number (kept
    /// in the slot, so that a stale entry of an aborted command is recognized).
    /// `queue_depth`: the connection's queue size, reserved at the first push.
    pub fn push(
        &mut self,
        slot: u16,
        start_ns: u64,
        gate: Arc<QosGate>,
        queue_depth: usize,
    ) -> u64 {
        if self.heap.capacity() == 0 {
            self.heap.reserve(queue_depth.max(1));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Reverse(Entry {
            start_ns,
            seq,
            slot,
            gate,
        }));
        seq
    }

    /// The next command whose turn has come; otherwise sets the timer for the earliest
    /// one (the task is woken then) and returns `None`.
    pub fn poll_due(&mut self, cx: &mut Context<'_>) -> Option<Due> {
        loop {
            let first = self.heap.peek()?;
            let now = first.0.gate.clock.now_ns();
            let start = first.0.start_ns;
            if start <= now {
                let Reverse(e) = self.heap.pop()?;
                e.gate.dequeued();
                return Some(Due {
                    slot: e.slot,
                    seq: e.seq,
                });
            }
            let timer = self
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::ZERO)));
            if self.armed_for_ns != start || timer.is_elapsed() {
                timer
                    .as_mut()
                    .reset(Instant::now() + Duration::from_nanos(start - now));
                self.armed_for_ns = start;
            }
            match timer.as_mut().poll(cx) {
                // Due by the timer; the clock decides on the next round.
                Poll::Ready(()) => continue,
                Poll::Pending => return None,
            }
        }
    }

    /// The connection ends: commands still waiting never run.
    pub fn clear(&mut self) {
        for Reverse(e) in self.heap.drain() {
            e.gate.dequeued();
        }
    }
}
