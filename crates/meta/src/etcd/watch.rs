//! Watches over etcd that survive reconnects: a task reads etcd's watch stream and, when
//! it breaks, re-creates the watch from the revision after the last one delivered, so the
//! consumer sees every revision exactly once, in order. A compacted start revision ends the
//! stream with [`MetaError::Compacted`].

use std::time::Duration;

use futures::channel::mpsc as requests_mpsc;
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tonic::Streaming;

use super::api::etcdserverpb::watch_request::RequestUnion;
use super::api::etcdserverpb::{WatchCreateRequest, WatchRequest, WatchResponse};
use super::api::mvccpb;
use super::client::{Client, prefix_range};
use super::convert;
use crate::error::MetaError;
use crate::store::WatchStream;
use crate::types::{Revision, WatchBatch, WatchEvent};

/// Batches buffered between the reading task and the consumer; past this the task stops
/// reading and etcd holds the backlog (it moves slow watchers to its own catch-up path).
const WATCH_BUFFER_BATCHES: usize = 64;
const RECONNECT_FIRST: Duration = Duration::from_millis(50);
/// Requests queued on a watch stream: only the one that creates the watch is ever sent.
const WATCH_REQUESTS_QUEUED: usize = 1;

pub(super) struct WatchParams {
    pub client: Client,
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

/// An etcd watch call. Holding `_requests` keeps the request side open, as etcd's own
/// clients do, for as long as the watch is read.
struct EtcdWatch {
    _requests: requests_mpsc::Sender<WatchRequest>,
    replies: Streaming<WatchResponse>,
}

/// Creates the etcd watch and waits for its confirmation; returns the stream and the first
/// revision it will deliver.
async fn establish(
    params: &WatchParams,
    from: Revision,
) -> Result<(EtcdWatch, Revision), MetaError> {
    let start_revision = i64::try_from(from)
        .map_err(|_| MetaError::Invalid(format!("revision {from} out of range")))?;
    let (key, range_end) = prefix_range(&params.prefix);
    let create = WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key,
            range_end,
            start_revision,
            ..WatchCreateRequest::default()
        })),
    };
    let created = async {
        // etcd answers the call only once the create request is in: queue it first.
        let (mut requests, queued) = requests_mpsc::channel(WATCH_REQUESTS_QUEUED);
        requests.send(create).await.map_err(|_| {
            MetaError::Unavailable("etcd watch: request stream closed at creation".into())
        })?;
        let mut replies = params
            .client
            .watch()
            .watch(queued)
            .await
            .map_err(|e| convert::error(e, None))?
            .into_inner();
        let reply = replies
            .message()
            .await
            .map_err(|e| convert::error(e, None))?
            .ok_or_else(|| MetaError::Unavailable("etcd closed the watch at creation".into()))?;
        if !reply.created || reply.canceled {
            return Err(MetaError::Backend(format!(
                "etcd refused the watch: {}",
                reply.cancel_reason
            )));
        }
        let next = if from == 0 {
            convert::header_revision(reply.header.as_ref())? + 1
        } else {
            from
        };
        let watch = EtcdWatch {
            _requests: requests,
            replies,
        };
        Ok((watch, next))
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
    mut stream: EtcdWatch,
    mut next: Revision,
    tx: mpsc::Sender<Result<WatchBatch, MetaError>>,
) {
    loop {
        let message = tokio::select! {
            () = tx.closed() => return,
            message = stream.replies.message() => message,
        };
        match message {
            Ok(Some(reply)) => {
                if reply.compact_revision > 0 {
                    let oldest_available = u64::try_from(reply.compact_revision).unwrap_or(0);
                    let _ = tx
                        .send(Err(MetaError::Compacted {
                            requested: next,
                            oldest_available,
                        }))
                        .await;
                    return;
                }
                if reply.canceled {
                    let reason = format!("etcd cancelled the watch: {}", reply.cancel_reason);
                    let _ = tx.send(Err(MetaError::Backend(reason))).await;
                    return;
                }
                match batches(&reply.events) {
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
) -> Option<EtcdWatch> {
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
fn batches(events: &[mvccpb::Event]) -> Result<Vec<WatchBatch>, MetaError> {
    use mvccpb::event::EventType;
    let mut out: Vec<WatchBatch> = Vec::new();
    for event in events {
        let kv = event
            .kv
            .as_ref()
            .ok_or_else(|| MetaError::Corrupt("etcd watch event without key".into()))?;
        let kv = convert::key_value(kv)?;
        let revision = kv.mod_revision;
        let event = match EventType::try_from(event.r#type) {
            Ok(EventType::Put) => WatchEvent::Put(kv),
            Ok(EventType::Delete) => WatchEvent::Delete { key: kv.key },
            Err(_) => {
                return Err(MetaError::Corrupt(format!(
                    "etcd watch event of unknown type {}",
                    event.r#type
                )));
            }
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
