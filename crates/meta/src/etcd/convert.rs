//! Conversions between etcd-client's types and ours.

use crate::error::MetaError;
use crate::types::{KeyValue, LeaseId, Revision};

/// etcd's message when a lease id is unknown (expired, revoked or never granted).
const LEASE_NOT_FOUND: &str = "requested lease not found";
/// etcd's message for a revision older than the last compaction.
pub(super) const COMPACTED: &str = "required revision has been compacted";
/// etcd's message for a revision newer than the store's.
pub(super) const FUTURE_REVISION: &str = "required revision is a future revision";

pub(super) fn revision(raw: i64) -> Result<Revision, MetaError> {
    u64::try_from(raw).map_err(|_| MetaError::Corrupt(format!("negative revision {raw} from etcd")))
}

pub(super) fn header_revision(
    header: Option<&etcd_client::ResponseHeader>,
) -> Result<Revision, MetaError> {
    let header = header.ok_or_else(|| MetaError::Corrupt("etcd response without header".into()))?;
    revision(header.revision())
}

pub(super) fn key_value(kv: &etcd_client::KeyValue) -> Result<KeyValue, MetaError> {
    let key = std::str::from_utf8(kv.key())
        .map_err(|_| MetaError::Corrupt("key from etcd is not UTF-8".into()))?;
    Ok(KeyValue {
        key: key.to_owned(),
        value: kv.value().to_vec(),
        mod_revision: revision(kv.mod_revision())?,
        create_revision: revision(kv.create_revision())?,
        lease: (kv.lease() != 0).then_some(LeaseId(kv.lease())),
    })
}

/// The message of an error, for matching etcd's server errors.
pub(super) fn message(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(status) => status.message().to_owned(),
        other => other.to_string(),
    }
}

/// Maps an etcd-client error; `lease` names the lease of the request, if any, for
/// [`MetaError::LeaseNotFound`].
pub(super) fn error(e: etcd_client::Error, lease: Option<LeaseId>) -> MetaError {
    use etcd_client::Error as E;
    let text = message(&e);
    let lease_gone = text.contains(LEASE_NOT_FOUND)
        || matches!(&e, E::LeaseKeepAliveError(m) if m.contains("not found"));
    if lease_gone && let Some(lease) = lease {
        return MetaError::LeaseNotFound(lease);
    }
    match e {
        E::GRpcStatus(status) => match i32::from(status.code()) {
            grpc_code::CANCELLED
            | grpc_code::UNKNOWN
            | grpc_code::DEADLINE_EXCEEDED
            | grpc_code::UNAVAILABLE => MetaError::Unavailable(format!("etcd: {status}")),
            grpc_code::INVALID_ARGUMENT
            | grpc_code::FAILED_PRECONDITION
            | grpc_code::OUT_OF_RANGE => MetaError::Invalid(format!("etcd: {}", status.message())),
            _ => MetaError::Backend(format!("etcd: {status}")),
        },
        E::TransportError(t) => MetaError::Unavailable(format!("etcd transport: {t}")),
        E::IoError(io) => MetaError::Unavailable(format!("etcd I/O: {io}")),
        other => MetaError::Backend(format!("etcd: {other}")),
    }
}

/// gRPC status codes (fixed by the gRPC specification), so that this crate need not
/// depend on tonic itself.
mod grpc_code {
    pub const CANCELLED: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const FAILED_PRECONDITION: i32 = 9;
    pub const OUT_OF_RANGE: i32 = 11;
    pub const UNAVAILABLE: i32 = 14;
}
