//! The etcd backend: an etcd v3 cluster over its gRPC API (`api`, generated code committed
//! so that building needs no protoc; `client` holds the connection).
//!
//! Revisions are etcd's (`mod_revision` of a key, header revision of a response); a
//! compare-and-swap is an etcd Txn comparing `mod_revision` (or `version == 0` for an
//! absent key); watches are etcd watches with `start_revision`, re-created from the next
//! revision when the connection breaks; leases are etcd leases (TTL in whole seconds,
//! rounded up, at least the server's minimum).

mod api;
mod client;
mod convert;
mod keepalive;
mod watch;

use std::time::Duration;

use api::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use api::etcdserverpb::request_op::Request;
use api::etcdserverpb::response_op::Response;
use api::etcdserverpb::{
    CompactionRequest, Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseRevokeRequest,
    PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use client::{Client, prefix_range};

use crate::error::MetaError;
use crate::store::{MetaFuture, MetaStore, WatchStream};
use crate::types::{
    Expect, KeyValue, Lease, LeaseId, Listing, Revision, Txn, TxnOp, TxnOutcome, validate_key,
    validate_prefix,
};
use keepalive::KeepAlives;

/// How an [`EtcdStore`] talks to etcd.
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// Limit of every request (a renewal that takes longer counts as failed).
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// Longest wait between attempts to re-create a broken watch.
    pub reconnect_max: Duration,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            reconnect_max: Duration::from_secs(1),
        }
    }
}

/// A store on an etcd cluster. Cheap to clone.
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    options: EtcdOptions,
    keep_alives: std::sync::Arc<KeepAlives>,
}

impl EtcdStore {
    /// Connects to the cluster at `endpoints` (`http://host:port`). The connection is made
    /// lazily: this succeeds while the cluster is down, and requests fail until it is up.
    pub async fn connect(endpoints: &[String], options: EtcdOptions) -> Result<Self, MetaError> {
        let client = Client::connect(endpoints, &options).await?;
        Ok(Self {
            client,
            options,
            keep_alives: Default::default(),
        })
    }

    async fn timed<T>(
        &self,
        fut: impl Future<Output = Result<T, MetaError>>,
    ) -> Result<T, MetaError> {
        let limit = self.options.request_timeout;
        tokio::time::timeout(limit, fut).await.unwrap_or_else(|_| {
            Err(MetaError::Unavailable(format!(
                "etcd did not answer within {limit:?}"
            )))
        })
    }

    async fn txn_inner(&self, txn: Txn) -> Result<TxnOutcome, MetaError> {
        txn.validate()?;
        let lease = txn.ops.iter().find_map(|op| match op {
            TxnOp::Put { lease, .. } => *lease,
            TxnOp::Delete { .. } => None,
        });
        let compares: Vec<Compare> = txn
            .compares
            .iter()
            .map(|c| {
                let (target, value) = match c.expect {
                    Expect::Absent => (CompareTarget::Version, TargetUnion::Version(0)),
                    Expect::ModRevision(rev) => (
                        CompareTarget::Mod,
                        TargetUnion::ModRevision(i64::try_from(rev).unwrap_or(i64::MAX)),
                    ),
                };
                Compare {
                    result: CompareResult::Equal.into(),
                    target: target.into(),
                    key: c.key.as_bytes().to_vec(),
                    range_end: Vec::new(),
                    target_union: Some(value),
                }
            })
            .collect();
        let ops: Vec<RequestOp> = txn
            .ops
            .into_iter()
            .map(|op| match op {
                TxnOp::Put { key, value, lease } => Request::RequestPut(PutRequest {
                    key: key.into_bytes(),
                    value,
                    lease: lease.map_or(0, |l| l.0),
                    ..PutRequest::default()
                }),
                TxnOp::Delete { key } => Request::RequestDeleteRange(DeleteRangeRequest {
                    key: key.into_bytes(),
                    ..DeleteRangeRequest::default()
                }),
            })
            .map(|request| RequestOp {
                request: Some(request),
            })
            .collect();
        // When a compare fails, the current value of every compared key, for the caller.
        let reads: Vec<RequestOp> = txn
            .compares
            .iter()
            .map(|c| RequestOp {
                request: Some(Request::RequestRange(RangeRequest {
                    key: c.key.as_bytes().to_vec(),
                    ..RangeRequest::default()
                })),
            })
            .collect();
        let request = TxnRequest {
            compare: compares,
            success: ops,
            failure: reads,
        };
        let reply = self
            .client
            .kv()
            .txn(request)
            .await
            .map_err(|e| convert::error(e, lease))?
            .into_inner();
        let revision = convert::header_revision(reply.header.as_ref())?;
        if reply.succeeded {
            let deleted = reply
                .responses
                .iter()
                .map(|r| match &r.response {
                    Some(Response::ResponseDeleteRange(d)) => u64::try_from(d.deleted).unwrap_or(0),
                    _ => 0,
                })
                .sum();
            return Ok(TxnOutcome::Committed { revision, deleted });
        }
        let mut current = Vec::with_capacity(txn.compares.len());
        for response in reply.responses {
            let Some(Response::ResponseRange(range)) = response.response else {
                return Err(MetaError::Corrupt(
                    "etcd txn: unexpected reply to a read".into(),
                ));
            };
            current.push(range.kvs.first().map(convert::key_value).transpose()?);
        }
        Ok(TxnOutcome::Failed { current })
    }
}

impl MetaStore for EtcdStore {
    fn get<'a>(&'a self, key: &'a str) -> MetaFuture<'a, Option<KeyValue>> {
        Box::pin(self.timed(async move {
            validate_key(key)?;
            let request = RangeRequest {
                key: key.as_bytes().to_vec(),
                ..RangeRequest::default()
            };
            let reply = self
                .client
                .kv()
                .range(request)
                .await
                .map_err(|e| convert::error(e, None))?
                .into_inner();
            reply.kvs.first().map(convert::key_value).transpose()
        }))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> MetaFuture<'a, Listing> {
        Box::pin(self.timed(async move {
            validate_prefix(prefix)?;
            let (key, range_end) = prefix_range(prefix);
            let request = RangeRequest {
                key,
                range_end,
                ..RangeRequest::default()
            };
            let reply = self
                .client
                .kv()
                .range(request)
                .await
                .map_err(|e| convert::error(e, None))?
                .into_inner();
            let kvs = reply
                .kvs
                .iter()
                .map(convert::key_value)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Listing {
                kvs,
                revision: convert::header_revision(reply.header.as_ref())?,
            })
        }))
    }

    fn txn(&self, txn: Txn) -> MetaFuture<'_, TxnOutcome> {
        Box::pin(self.timed(self.txn_inner(txn)))
    }

    fn watch<'a>(
        &'a self,
        prefix: &'a str,
        from_revision: Revision,
    ) -> MetaFuture<'a, WatchStream> {
        Box::pin(async move {
            validate_prefix(prefix)?;
            let params = watch::WatchParams {
                client: self.client.clone(),
                prefix: prefix.to_owned(),
                request_timeout: self.options.request_timeout,
                reconnect_max: self.options.reconnect_max,
            };
            watch::open(params, from_revision).await
        })
    }

    fn compact(&self, revision: Revision) -> MetaFuture<'_, ()> {
        Box::pin(self.timed(async move {
            let rev = i64::try_from(revision)
                .map_err(|_| MetaError::Invalid(format!("revision {revision} out of range")))?;
            let request = CompactionRequest {
                revision: rev,
                // Wait until the compacted revisions are gone from the backend.
                physical: true,
            };
            match self.client.kv().compact(request).await {
                Ok(_) => Ok(()),
                Err(e) if e.message().contains(convert::COMPACTED) => Ok(()),
                Err(e) if e.message().contains(convert::FUTURE_REVISION) => Err(
                    MetaError::Invalid(format!("cannot compact future revision {revision}")),
                ),
                Err(e) => Err(convert::error(e, None)),
            }
        }))
    }

    fn grant_lease(&self, ttl_ms: u64) -> MetaFuture<'_, Lease> {
        Box::pin(self.timed(async move {
            if ttl_ms == 0 {
                return Err(MetaError::Invalid("lease TTL of 0 ms".into()));
            }
            let ttl_s = i64::try_from(ttl_ms.div_ceil(1000))
                .map_err(|_| MetaError::Invalid(format!("lease TTL {ttl_ms} ms too long")))?;
            // Id 0: the server picks one.
            let request = LeaseGrantRequest { ttl: ttl_s, id: 0 };
            let reply = self
                .client
                .lease()
                .lease_grant(request)
                .await
                .map_err(|e| convert::error(e, None))?
                .into_inner();
            if !reply.error.is_empty() {
                return Err(MetaError::Backend(format!(
                    "etcd lease grant: {}",
                    reply.error
                )));
            }
            let granted_s = u64::try_from(reply.ttl)
                .ok()
                .filter(|s| *s > 0)
                .ok_or_else(|| MetaError::Corrupt(format!("etcd granted TTL {}", reply.ttl)))?;
            Ok(Lease {
                id: LeaseId(reply.id),
                ttl_ms: granted_s.saturating_mul(1000),
            })
        }))
    }

    fn keep_alive(&self, lease: LeaseId) -> MetaFuture<'_, u64> {
        Box::pin(
            self.keep_alives
                .renew(&self.client, lease, self.options.request_timeout),
        )
    }

    fn revoke_lease(&self, lease: LeaseId) -> MetaFuture<'_, bool> {
        Box::pin(self.timed(async move {
            self.keep_alives.forget(lease);
            let request = LeaseRevokeRequest { id: lease.0 };
            match self.client.lease().lease_revoke(request).await {
                Ok(_) => Ok(true),
                Err(e) => match convert::error(e, Some(lease)) {
                    MetaError::LeaseNotFound(_) => Ok(false),
                    other => Err(other),
                },
            }
        }))
    }
}
