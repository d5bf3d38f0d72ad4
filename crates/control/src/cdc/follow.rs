//! Following the node records: list `/ferrobay/nodes/`, then watch it from the listing's
//! revision; every change rebuilds the [`ClusterView`], and a view that differs from the
//! one served is swapped in (next generation) and announced to persistent discovery
//! connections. A broken watch (store restarted, history compacted) starts over with a
//! fresh listing after a pause.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use meta::schema::{NODES, decode_json};
use meta::{KeyValue, MetaStore, WatchEvent};
use nvmf_target::{DiscoveryLogSource, DiscoverySnapshot, Target};
use tokio::sync::watch;

use super::view::ClusterView;
use crate::records::NodeRecord;

/// First pause after a failure; doubles up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The view being served and its generation (the [`DiscoveryLogSource`] of the CDC's
/// target).
#[derive(Default)]
pub(crate) struct Served {
    state: RwLock<(u64, Arc<ClusterView>)>,
}

impl Served {
    pub fn generation(&self) -> u64 {
        self.read().0
    }

    pub fn view(&self) -> Arc<ClusterView> {
        self.read().1.clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, (u64, Arc<ClusterView>)> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Swaps `view` in if it differs; true if it did.
    fn offer(&self, view: ClusterView) -> bool {
        let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
        if *s.1 == view {
            return false;
        }
        s.0 += 1;
        s.1 = Arc::new(view);
        true
    }
}

impl DiscoveryLogSource for Served {
    fn snapshot(&self, hostnqn: &str, local: SocketAddr) -> DiscoverySnapshot {
        let s = self.read();
        DiscoverySnapshot {
            generation: s.0,
            entries: s.1.entries_for(hostnqn, local),
        }
    }
}

/// The node records by key, as last read.
#[derive(Default)]
struct Records {
    nodes: BTreeMap<String, NodeRecord>,
}

impl Records {
    fn put(&mut self, kv: &KeyValue) {
        match decode_json::<NodeRecord>(kv) {
            Ok(v) => {
                self.nodes.insert(kv.key.clone(), v.value);
            }
            Err(e) => {
                // One bad record must not hide the rest of the cluster.
                tracing::warn!(key = %kv.key, "cdc: node record skipped: {e}");
                self.nodes.remove(&kv.key);
            }
        }
    }

    fn view(&self, co_located: bool) -> ClusterView {
        let nodes: Vec<NodeRecord> = self.nodes.values().cloned().collect();
        ClusterView::from_nodes(&nodes, co_located)
    }
}

/// Follows the records until `stop` says true.
pub(crate) async fn run(
    store: Arc<dyn MetaStore>,
    served: Arc<Served>,
    target: Target,
    co_located: bool,
    mut stop: watch::Receiver<bool>,
) {
    let mut retry = RETRY_MIN;
    let mut last_notes: Vec<String> = Vec::new();
    loop {
        let result = tokio::select! {
            r = follow_once(store.as_ref(), &served, &target, co_located, &mut last_notes, &mut retry) => r,
            () = crate::processor::stopped(&mut stop) => return,
        };
        if let Err(e) = result {
            tracing::warn!("cdc: following the node records: {e} (again in {retry:?})");
        }
        tokio::select! {
            () = tokio::time::sleep(retry) => {}
            () = crate::processor::stopped(&mut stop) => return,
        }
        retry = (retry * 2).min(RETRY_MAX);
    }
}

/// One listing and the watch after it, until the watch breaks.
async fn follow_once(
    store: &dyn MetaStore,
    served: &Served,
    target: &Target,
    co_located: bool,
    last_notes: &mut Vec<String>,
    retry: &mut Duration,
) -> Result<(), meta::MetaError> {
    let listing = store.list(NODES).await?;
    let mut records = Records::default();
    for kv in &listing.kvs {
        records.put(kv);
    }
    apply(&records, served, target, co_located, last_notes);
    let mut watch = store.watch(NODES, listing.revision + 1).await?;
    *retry = RETRY_MIN;
    while let Some(batch) = watch.next().await {
        let batch = batch?;
        for ev in &batch.events {
            match ev {
                WatchEvent::Put(kv) => records.put(kv),
                WatchEvent::Delete { key } => {
                    records.nodes.remove(key);
                }
            }
        }
        apply(&records, served, target, co_located, last_notes);
    }
    Err(meta::MetaError::Unavailable("the watch ended".into()))
}

fn apply(
    records: &Records,
    served: &Served,
    target: &Target,
    co_located: bool,
    last_notes: &mut Vec<String>,
) {
    let view = records.view(co_located);
    if view.notes() != last_notes.as_slice() {
        for n in view.notes() {
            if !last_notes.contains(n) {
                tracing::warn!("cdc: {n}");
            }
        }
        *last_notes = view.notes().to_vec();
    }
    let entries = view.all_entries().len();
    if served.offer(view) {
        tracing::info!(
            nodes = records.nodes.len(),
            entries,
            generation = served.generation(),
            "cdc: discovery log changed"
        );
        target.notify_discovery_log_changed();
    }
}
