//! The etcd backend: an etcd v3 cluster through the `etcd-client` crate.
//!
//! Revisions are etcd's (`mod_revision` of a key, header revision of a response); a
//! compare-and-swap is an etcd Txn comparing `mod_revision` (or `version == 0` for an
//! absent key); watches are etcd watches with `start_revision`, re-created from the next
//! revision when the connection breaks; leases are etcd leases (TTL in whole seconds,
//! rounded up, at least the server's minimum).

mod convert;
mod keepalive;
mod watch;

use std::time::Duration;

use etcd_client::{Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, TxnOpResponse};

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
    client: etcd_client::Client,
    options: EtcdOptions,
    keep_alives: std::sync::Arc<KeepAlives>,
}

impl EtcdStore {
    /// Connects to the cluster at `endpoints` (`http://host:port`). The connection is made
    /// lazily: this succeeds while the cluster is down, and requests fail until it is up.
    pub async fn connect(endpoints: &[String], options: EtcdOptions) -> Result<Self, MetaError> {
        if endpoints.is_empty() {
            return Err(MetaError::Invalid("no etcd endpoints".into()));
        }
        let connect = ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_timeout(options.request_timeout)
            // HTTP/2 pings find a dead connection (a cut link sends no reset).
            .with_keep_alive(options.request_timeout / 2, options.request_timeout / 2)
            .with_keep_alive_while_idle(true)
            // Fail at once on a member cut off from its cluster instead of serving stale
            // reads or hanging watches.
            .with_require_leader(true);
        let client = etcd_client::Client::connect(endpoints, Some(connect))
            .await
            .map_err(|e| convert::error(e, None))?;
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
            .map(|c| match c.expect {
                Expect::Absent => Compare::version(c.key.as_str(), CompareOp::Equal, 0),
                Expect::ModRevision(rev) => Compare::mod_revision(
                    c.key.as_str(),
                    CompareOp::Equal,
                    i64::try_from(rev).unwrap_or(i64::MAX),
                ),
            })
            .collect();
        let ops: Vec<etcd_client::TxnOp> = txn
            .ops
            .into_iter()
            .map(|op| match op {
                TxnOp::Put { key, value, lease } => {
                    let options = lease.map(|l| PutOptions::new().with_lease(l.0));
                    etcd_client::TxnOp::put(key, value, options)
                }
                TxnOp::Delete { key } => etcd_client::TxnOp::delete(key, None),
            })
            .collect();
        let reads: Vec<etcd_client::TxnOp> = txn
            .compares
            .iter()
            .map(|c| etcd_client::TxnOp::get(c.key.as_str(), None))
            .collect();
        let request = etcd_client::Txn::new()
            .when(compares)
            .and_then(ops)
            .or_else(reads);
        let reply = self
            .client
            .kv_client()
            .txn(request)
            .await
            .map_err(|e| convert::error(e, lease))?;
        let revision = convert::header_revision(reply.header())?;
        if reply.succeeded() {
            let deleted = reply
                .op_responses()
                .iter()
                .map(|r| match r {
                    TxnOpResponse::Delete(d) => u64::try_from(d.deleted()).unwrap_or(0),
                    _ => 0,
                })
                .sum();
            return Ok(TxnOutcome::Committed { revision, deleted });
        }
        let mut current = Vec::with_capacity(txn.compares.len());
        for response in reply.op_responses() {
            let TxnOpResponse::Get(get) = response else {
                return Err(MetaError::Corrupt(
                    "etcd txn: unexpected reply to a read".into(),
                ));
            };
            current.push(get.kvs().first().map(convert::key_value).transpose()?);
        }
        Ok(TxnOutcome::Failed { current })
    }
}

impl MetaStore for EtcdStore {
    fn get<'a>(&'a self, key: &'a str) -> MetaFuture<'a, Option<KeyValue>> {
        Box::pin(self.timed(async move {
            validate_key(key)?;
            let reply = self
                .client
                .kv_client()
                .get(key, None)
                .await
                .map_err(|e| convert::error(e, None))?;
            reply.kvs().first().map(convert::key_value).transpose()
        }))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> MetaFuture<'a, Listing> {
        Box::pin(self.timed(async move {
            validate_prefix(prefix)?;
            let options = if prefix.is_empty() {
                GetOptions::new().with_all_keys()
            } else {
                GetOptions::new().with_prefix()
            };
            let reply = self
                .client
                .kv_client()
                .get(prefix, Some(options))
                .await
                .map_err(|e| convert::error(e, None))?;
            let kvs = reply
                .kvs()
                .iter()
                .map(convert::key_value)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Listing {
                kvs,
                revision: convert::header_revision(reply.header())?,
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
            let options = etcd_client::CompactionOptions::new().with_physical();
            match self.client.kv_client().compact(rev, Some(options)).await {
                Ok(_) => Ok(()),
                Err(e) if convert::message(&e).contains(convert::COMPACTED) => Ok(()),
                Err(e) if convert::message(&e).contains(convert::FUTURE_REVISION) => Err(
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
            let reply = self
                .client
                .lease_client()
                .grant(ttl_s, None)
                .await
                .map_err(|e| convert::error(e, None))?;
            if !reply.error().is_empty() {
                return Err(MetaError::Backend(format!(
                    "etcd lease grant: {}",
                    reply.error()
                )));
            }
            let granted_s = u64::try_from(reply.ttl())
                .ok()
                .filter(|s| *s > 0)
                .ok_or_else(|| MetaError::Corrupt(format!("etcd granted TTL {}", reply.ttl())))?;
            Ok(Lease {
                id: LeaseId(reply.id()),
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
            match self.client.lease_client().revoke(lease.0).await {
                Ok(_) => Ok(true),
                Err(e) => match convert::error(e, Some(lease)) {
                    MetaError::LeaseNotFound(_) => Ok(false),
                    other => Err(other),
                },
            }
        }))
    }
}
