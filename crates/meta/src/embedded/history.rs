//! The embedded store's change history: a bounded ring of the last revisions' batches,
//! shared by every watcher. It plays the role of a broadcast channel (bounded, one copy of
//! each change for all watchers) and also lets a watch start from a past revision. A watcher
//! that falls behind the ring, or asks for a revision older than it, gets
//! [`MetaError::Compacted`] (its cue to re-list), never unbounded buffering.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use tokio::sync::watch;

use crate::error::MetaError;
use crate::store::WatchStream;
use crate::types::{Revision, WatchBatch, WatchEvent};

/// Non-matching batches a watcher skips before yielding to the executor.
const SKIP_BEFORE_YIELD: usize = 256;

pub(super) struct History {
    ring: Mutex<Ring>,
}

/// Invariant: `batches[i].revision == head + 1 - batches.len() + i` (revisions are
/// contiguous: every committed change gets exactly the next revision and one batch).
struct Ring {
    batches: VecDeque<(Arc<WatchBatch>, usize)>,
    capacity: usize,
    budget_bytes: usize,
    used_bytes: usize,
    head: Revision,
}

/// Roughly what a batch holds in memory.
fn batch_bytes(batch: &WatchBatch) -> usize {
    const PER_EVENT_BYTES: usize = 96;
    batch
        .events
        .iter()
        .map(|e| {
            PER_EVENT_BYTES
                + e.key().len()
                + match e {
                    WatchEvent::Put(kv) => kv.value.len(),
                    WatchEvent::Delete { .. } => 0,
                }
        })
        .sum()
}

impl Ring {
    fn oldest_available(&self) -> Revision {
        self.head + 1 - self.batches.len() as u64
    }

    fn pop_oldest(&mut self) {
        if let Some((_, bytes)) = self.batches.pop_front() {
            self.used_bytes -= bytes;
        }
    }
}

impl History {
    /// An empty history whose last revision is `head`: only later revisions can be watched.
    /// It keeps at most `capacity` revisions and about `budget_bytes` of events (always at
    /// least the latest revision).
    pub fn new(head: Revision, capacity: usize, budget_bytes: usize) -> Self {
        Self {
            ring: Mutex::new(Ring {
                batches: VecDeque::with_capacity(capacity.min(1024)),
                capacity: capacity.max(1),
                budget_bytes,
                used_bytes: 0,
                head,
            }),
        }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        // The ring holds no invariant a panic elsewhere could break half-way.
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends the batch of the next revision (the caller holds the store's write lock).
    pub fn push(&self, batch: WatchBatch) {
        let mut ring = self.ring();
        debug_assert_eq!(batch.revision, ring.head + 1);
        ring.head = batch.revision;
        let bytes = batch_bytes(&batch);
        while !ring.batches.is_empty()
            && (ring.batches.len() >= ring.capacity || ring.used_bytes + bytes > ring.budget_bytes)
        {
            ring.pop_oldest();
        }
        ring.used_bytes += bytes;
        ring.batches.push_back((Arc::new(batch), bytes));
    }

    pub fn head(&self) -> Revision {
        self.ring().head
    }

    /// Forgets revisions before `revision`.
    pub fn compact(&self, revision: Revision) -> Result<(), MetaError> {
        let mut ring = self.ring();
        if revision > ring.head {
            return Err(MetaError::Invalid(format!(
                "cannot compact revision {revision}: the current revision is {}",
                ring.head
            )));
        }
        while ring.oldest_available() < revision {
            ring.pop_oldest();
        }
        Ok(())
    }

    /// The batch of revision `next`, `None` if it does not exist yet.
    fn batch(&self, next: Revision) -> Result<Option<Arc<WatchBatch>>, MetaError> {
        let ring = self.ring();
        let oldest = ring.oldest_available();
        if next < oldest {
            return Err(MetaError::Compacted {
                requested: next,
                oldest_available: oldest,
            });
        }
        let index = usize::try_from(next - oldest).unwrap_or(usize::MAX);
        Ok(ring.batches.get(index).map(|(batch, _)| batch.clone()))
    }
}

/// A watch over `history` from revision `from` (0 = after the current head). A start
/// older than the history is reported as the stream's first item, as etcd does. `notify`
/// carries the latest revision; its sender lives in the store, so the stream ends with
/// [`MetaError::Closed`] once the store is dropped.
pub(super) fn watch_stream(
    history: Arc<History>,
    notify: watch::Receiver<Revision>,
    prefix: String,
    from: Revision,
) -> Result<WatchStream, MetaError> {
    let next = if from == 0 { history.head() + 1 } else { from };
    struct State {
        history: Arc<History>,
        notify: watch::Receiver<Revision>,
        prefix: String,
        next: Revision,
        done: bool,
    }
    let state = State {
        history,
        notify,
        prefix,
        next,
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        let mut skipped = 0usize;
        loop {
            // Mark the current revision seen before looking, so a push after the look
            // still wakes `changed()` below.
            st.notify.borrow_and_update();
            match st.history.batch(st.next) {
                Err(e) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
                Ok(Some(batch)) => {
                    st.next = batch.revision + 1;
                    let events: Vec<_> = batch
                        .events
                        .iter()
                        .filter(|e| e.key().starts_with(&st.prefix))
                        .cloned()
                        .collect();
                    if !events.is_empty() {
                        let out = WatchBatch {
                            revision: batch.revision,
                            events,
                        };
                        return Some((Ok(out), st));
                    }
                    skipped += 1;
                    if skipped.is_multiple_of(SKIP_BEFORE_YIELD) {
                        tokio::task::yield_now().await;
                    }
                }
                Ok(None) => {
                    if st.notify.changed().await.is_err() {
                        st.done = true;
                        return Some((Err(MetaError::Closed), st));
                    }
                }
            }
        }
    });
    Ok(stream.boxed())
}
