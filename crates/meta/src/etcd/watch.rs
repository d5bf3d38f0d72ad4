//! Watches over etcd that survive reconnects: a task reads etcd's watch stream and, when
//! it breaks, re-creates the watch from the revision after the last one delivered, so the
//! consumer sees every revision exactly once, in order. A compacted start revision ends the
//! stream with [`MetaError::Compacted`].

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;

use super::convert;
use crate::error::MetaError;
use crate::store::WatchStream;
use crate::types::{Revision, WatchBatch, WatchEvent};

/// Batches buffered between the reading task and the consumer; past this the task stops
/// reading and etcd holds the backlog (it moves slow watchers to its own catch-up path).
const WATCH_BUFFER_BATCHES: usize = 64;
const RECONNECT_FIRST: Duration = Duration::from_millis(50);

pub(super) struct WatchParams {
    pub client: etcd_client::Client,
    pub prefix: String,
    pub request_timeout: Duration,
    pub reconnect_max: Duration,
}

pub(super) async fn open(params: WatchParams, from: Revision) -> Result<WatchStream, MetaError> {
    let (stream, next) = establish(&params, from).await?;
    let (tx, rx) = mpsc::channel(WATCH_BUFFER_BATCHES);
    tokio::spawn(pump(params, stream, next, tx));
    Ok(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed())
}

/// Creates the etcd watch and waits for its confirmation; returns the stream and the first
/// revision it will deliver.
async fn establish(
    params: &WatchParams,
    from: Revision,
) -> Result<(etcd_client::WatchStream, Revision), MetaError> {
    let start = i64::try_from(from)
        .map_err(|_| MetaError::Invalid(format!("revision {from} out of range")))?;
    let mut options = etcd_client::WatchOptions::new().with_start_revision(start);
    options = if params.prefix.is_empty() {
        options.with_all_keys()
    } else {
        options.with_prefix()
    };
    let created = async {
        let mut stream = params
            .client
            .watch_client()
            .watch(params.prefix.as_str(), Some(options))
            .await
            .map_err(|e| convert::error(e, None))?;
        let reply = stream
            .message()
            .await
            .map_err(|e| convert::error(e, None))?
            .ok_or_else(|| MetaError::Unavailable("etcd closed the watch at creation".into()))?;
        if !reply.created() || reply.canceled() {
            return Err(MetaError::Backend(format!(
                "etcd refused the watch: {}",
                reply.cancel_reason()
            )));
        }
        let next = if from == 0 {
            convert::header_revision(reply.header())? + 1
        } else {
            from
        };
        Ok((stream, next))
    };
    tokio::time::timeout(params.request_timeout, created)
        .await
        .unwrap_or_else(|_| {
            Err(MetaError::Unavailable(
                "etcd: watch creation timed out".into(),
            ))
        })
}

async fn pump(
    params: WatchParams,
    mut stream: etcd_client::WatchStream,
    mut next: Revision,
    tx: mpsc::Sender<Result<WatchBatch, MetaError>>,
) {
    loop {
        let message = tokio::select! {
            () = tx.closed() => return,
            message = stream.message() => message,
        };
        match message {
            Ok(Some(reply)) => {
                if reply.compact_revision() > 0 {
                    let oldest_available = u64::try_from(reply.compact_revision()).unwrap_or(0);
                    let _ = tx
                        .send(Err(MetaError::Compacted {
                            requested: next,
                            oldest_available,
                        }))
                        .await;
                    return;
                }
                if reply.canceled() {
                    let reason = format!("etcd cancelled the watch: {}", reply.cancel_reason());
                    let _ = tx.send(Err(MetaError::Backend(reason))).await;
                    return;
                }
                match batches(reply.events()) {
                    Ok(batches) => {
                        for batch in batches {
                            // etcd does not repeat revisions, but a reconnect must never
                            // deliver one twice.
                            if batch.revision < next {
                                continue;
                            }
                            next = batch.revision + 1;
                            if tx.send(Ok(batch)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
            Ok(None) | Err(_) => match reconnect(&params, next, &tx).await {
                Some(fresh) => stream = fresh,
                None => return,
            },
        }
    }
}

/// Re-creates the watch from `next`, retrying with backoff until it works or the consumer
/// is gone (`None`).
async fn reconnect(
    params: &WatchParams,
    next: Revision,
    tx: &mpsc::Sender<Result<WatchBatch, MetaError>>,
) -> Option<etcd_client::WatchStream> {
    let mut backoff = RECONNECT_FIRST;
    loop {
        if tx.is_closed() {
            return None;
        }
        match establish(params, next).await {
            Ok((stream, _)) => {
                tracing::debug!(prefix = params.prefix, next, "meta: etcd watch resumed");
                return Some(stream);
            }
            Err(e) => {
                tracing::debug!(prefix = params.prefix, "meta: etcd watch reconnect: {e}");
            }
        }
        tokio::select! {
            () = tx.closed() => return None,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(params.reconnect_max);
    }
}

/// Groups etcd events (in revision order) into one batch per revision.
fn batches(events: &[etcd_client::Event]) -> Result<Vec<WatchBatch>, MetaError> {
    let mut out: Vec<WatchBatch> = Vec::new();
    for event in events {
        let kv = event
            .kv()
            .ok_or_else(|| MetaError::Corrupt("etcd watch event without key".into()))?;
        let kv = convert::key_value(kv)?;
        let revision = kv.mod_revision;
        let event = match event.event_type() {
            etcd_client::EventType::Put => WatchEvent::Put(kv),
            etcd_client::EventType::Delete => WatchEvent::Delete { key: kv.key },
        };
        match out.last_mut() {
            Some(last) if last.revision == revision => last.events.push(event),
            Some(last) if last.revision > revision => {
                return Err(MetaError::Corrupt(format!(
                    "etcd watch events out of order: {revision} after {}",
                    last.revision
                )));
            }
            _ => out.push(WatchBatch {
                revision,
                events: vec![event],
            }),
        }
    }
    Ok(out)
}
