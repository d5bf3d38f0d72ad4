//! Lease renewals over etcd's bidirectional keep-alive stream, one stream per lease,
//! reused across renewals. A renewal whose reply was not read (timed out, or its caller
//! gave up) poisons the stream: a late reply read by the next renewal would make a stale
//! renewal look fresh, so the stream is dropped and reopened instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::SinkExt;
use futures::channel::mpsc;
use tonic::Streaming;

use super::api::etcdserverpb::{LeaseKeepAliveRequest, LeaseKeepAliveResponse};
use super::client::Client;
use super::convert;
use crate::error::MetaError;
use crate::types::LeaseId;

/// Renewals queued on one stream; one at a time is in flight, so this is never reached.
const RENEWALS_QUEUED: usize = 4;

/// An open keep-alive stream: requests go in through `requests`, replies come back on
/// `replies`. Dropping it ends the call.
struct KeepAliveStream {
    requests: mpsc::Sender<LeaseKeepAliveRequest>,
    replies: Streaming<LeaseKeepAliveResponse>,
}

#[derive(Default)]
struct Slot {
    stream: Option<KeepAliveStream>,
    /// A renewal was sent and its reply not (yet) read.
    in_flight: bool,
}

#[derive(Default)]
pub(super) struct KeepAlives {
    slots: Mutex<HashMap<LeaseId, Arc<tokio::sync::Mutex<Slot>>>>,
}

impl KeepAlives {
    fn slot(&self, lease: LeaseId) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(lease).or_default().clone()
    }

    pub fn forget(&self, lease: LeaseId) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.remove(&lease);
    }

    /// Renews `lease`; returns the TTL (ms) the server set.
    pub async fn renew(
        &self,
        client: &Client,
        lease: LeaseId,
        timeout: Duration,
    ) -> Result<u64, MetaError> {
        let slot = self.slot(lease);
        let mut slot = slot.lock().await;
        if slot.in_flight {
            slot.stream = None;
        }
        slot.in_flight = true;
        let result = tokio::time::timeout(timeout, renew_on(client, lease, &mut slot.stream))
            .await
            .unwrap_or_else(|_| {
                Err(MetaError::Unavailable(format!(
                    "etcd: lease renewal timed out after {timeout:?}"
                )))
            });
        match &result {
            Ok(_) => slot.in_flight = false,
            Err(MetaError::LeaseNotFound(_)) => {
                drop(slot);
                self.forget(lease);
            }
            Err(_) => {
                slot.stream = None;
                slot.in_flight = false;
            }
        }
        result
    }
}

/// One renewal: a request on the lease's stream (opened with this request if there is
/// none) and its reply.
async fn renew_on(
    client: &Client,
    lease: LeaseId,
    stream: &mut Option<KeepAliveStream>,
) -> Result<u64, MetaError> {
    let request = LeaseKeepAliveRequest { id: lease.0 };
    let open = match stream {
        Some(open) => {
            open.requests
                .send(request)
                .await
                .map_err(|_| closed_stream())?;
            open
        }
        None => {
            // etcd answers the call only once the first request is in: queue it first.
            let (mut requests, queued) = mpsc::channel(RENEWALS_QUEUED);
            requests.send(request).await.map_err(|_| closed_stream())?;
            let replies = client
                .lease()
                .lease_keep_alive(queued)
                .await
                .map_err(|e| convert::error(e, Some(lease)))?
                .into_inner();
            stream.insert(KeepAliveStream { requests, replies })
        }
    };
    match open
        .replies
        .message()
        .await
        .map_err(|e| convert::error(e, Some(lease)))?
    {
        // etcd answers an unknown lease with TTL <= 0, not an error.
        Some(reply) if reply.ttl > 0 => {
            Ok(u64::try_from(reply.ttl).unwrap_or(0).saturating_mul(1000))
        }
        Some(_) => Err(MetaError::LeaseNotFound(lease)),
        None => Err(closed_stream()),
    }
}

fn closed_stream() -> MetaError {
    MetaError::Unavailable("etcd closed the lease keep-alive stream".into())
}
