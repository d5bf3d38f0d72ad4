//! Lease renewals over etcd's bidirectional keep-alive stream, one stream per lease,
//! reused across renewals. A renewal whose reply was not read (timed out, or its caller
//! gave up) poisons the stream: a late reply read by the next renewal would make a stale
//! renewal look fresh, so the stream is dropped and reopened instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};

use super::convert;
use crate::error::MetaError;
use crate::types::LeaseId;

#[derive(Default)]
struct Slot {
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
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
        client: &etcd_client::Client,
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

async fn renew_on(
    client: &etcd_client::Client,
    lease: LeaseId,
    stream: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
) -> Result<u64, MetaError> {
    let (keeper, replies) = match stream {
        Some(open) => open,
        None => {
            // Opening the stream renews once and checks the lease exists.
            let opened = client
                .lease_client()
                .keep_alive(lease.0)
                .await
                .map_err(|e| convert::error(e, Some(lease)))?;
            stream.insert(opened)
        }
    };
    keeper
        .keep_alive()
        .await
        .map_err(|e| convert::error(e, Some(lease)))?;
    match replies
        .message()
        .await
        .map_err(|e| convert::error(e, Some(lease)))?
    {
        Some(reply) if reply.ttl() > 0 => {
            Ok(u64::try_from(reply.ttl()).unwrap_or(0).saturating_mul(1000))
        }
        Some(_) => Err(MetaError::LeaseNotFound(lease)),
        None => Err(MetaError::Unavailable(
            "etcd closed the lease keep-alive stream".into(),
        )),
    }
}
