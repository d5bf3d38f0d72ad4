//! Per-stripe ordering: a fixed table of async mutexes indexed by a hash of the stripe
//! (row or chunk), so the table is bounded and locking never allocates per stripe.
//! Several stripes are always locked in ascending table order, so there is no deadlock.

use tokio::sync::{Mutex, MutexGuard};

/// Table size: collisions only serialise unrelated stripes now and then.
const LOCK_SLOTS: usize = 4096;
const _: () = assert!(LOCK_SLOTS.is_power_of_two());

pub(crate) struct StripeLocks {
    slots: Box<[Mutex<()>]>,
}

pub(crate) type StripeGuards<'a> = Vec<MutexGuard<'a, ()>>;

impl StripeLocks {
    pub fn new() -> StripeLocks {
        StripeLocks {
            slots: (0..LOCK_SLOTS).map(|_| Mutex::new(())).collect(),
        }
    }

    fn index(unit: u64) -> usize {
        // Fibonacci hashing spreads neighbouring stripes over the table.
        (unit.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - LOCK_SLOTS.trailing_zeros())) as usize
    }

    /// Locks every unit of `units` (FIFO per slot: writes to one stripe stay in order).
    pub async fn lock(&self, units: impl IntoIterator<Item = u64>) -> StripeGuards<'_> {
        let mut idx: Vec<usize> = units.into_iter().map(Self::index).collect();
        idx.sort_unstable();
        idx.dedup();
        let mut guards = Vec::with_capacity(idx.len());
        for i in idx {
            guards.push(self.slots[i].lock().await);
        }
        guards
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn same_stripe_is_exclusive_and_overlapping_sets_do_not_deadlock() {
        let locks = Arc::new(StripeLocks::new());
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for t in 0..8u64 {
            let locks = locks.clone();
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                // Overlapping, differently ordered sets.
                let units = if t % 2 == 0 {
                    vec![1, 2, 3]
                } else {
                    vec![3, 2, 1, 99]
                };
                let _g = locks.lock(units).await;
                order
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((t, "in"));
                tokio::time::sleep(Duration::from_millis(10)).await;
                order
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((t, "out"));
            }));
        }
        for t in tasks {
            t.await.unwrap_or_else(|e| panic!("{e}"));
        }
        let order = order.lock().unwrap_or_else(|e| e.into_inner());
        // Strict alternation in/out: never two holders at once.
        for pair in order.chunks(2) {
            assert_eq!(pair[0].0, pair[1].0);
            assert_eq!((pair[0].1, pair[1].1), ("in", "out"));
        }
        assert_eq!(order.len(), 16);
    }
}
