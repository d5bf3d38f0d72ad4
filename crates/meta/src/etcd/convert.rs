//! Conversions between etcd's API types and ours.

use tonic::{Code, Status};

use super::api::{etcdserverpb, mvccpb};
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
    header: Option<&etcdserverpb::ResponseHeader>,
) -> Result<Revision, MetaError> {
    let header = header.ok_or_else(|| MetaError::Corrupt("etcd response without header".into()))?;
    revision(header.revision)
}

pub(super) fn key_value(kv: &mvccpb::KeyValue) -> Result<KeyValue, MetaError> {
    let key = std::str::from_utf8(&kv.key)
        .map_err(|_| MetaError::Corrupt("key from etcd is not UTF-8".into()))?;
    Ok(KeyValue {
        key: key.to_owned(),
        value: kv.value.clone(),
        mod_revision: revision(kv.mod_revision)?,
        create_revision: revision(kv.create_revision)?,
        lease: (kv.lease != 0).then_some(LeaseId(kv.lease)),
    })
}

/// Maps a failed call; `lease` names the lease of the request, if any, for
/// [`MetaError::LeaseNotFound`].
///
/// A status etcd sent is classified by its code. One made on this side of the wire (no
/// connection, a broken HTTP/2 stream, the request timeout) carries the local error as its
/// source and means etcd could not be reached: the request may or may not have been
/// applied.
pub(super) fn error(status: Status, lease: Option<LeaseId>) -> MetaError {
    if status.message().contains(LEASE_NOT_FOUND)
        && let Some(lease) = lease
    {
        return MetaError::LeaseNotFound(lease);
    }
    let text = describe(&status);
    if std::error::Error::source(&status).is_some() {
        return MetaError::Unavailable(format!("etcd: {text}"));
    }
    match status.code() {
        Code::Cancelled | Code::Unknown | Code::DeadlineExceeded | Code::Unavailable => {
            MetaError::Unavailable(format!("etcd: {text}"))
        }
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            MetaError::Invalid(format!("etcd: {}", status.message()))
        }
        _ => MetaError::Backend(format!("etcd: {text}")),
    }
}

/// One line for a person: the message (or the code's description when there is none), the
/// code, and the chain of local causes.
fn describe(status: &Status) -> String {
    let mut text = if status.message().is_empty() {
        status.code().description().to_owned()
    } else {
        status.message().to_owned()
    };
    text.push_str(&format!(" ({:?})", status.code()));
    let mut cause = std::error::Error::source(status);
    while let Some(e) = cause {
        let line = e.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_statuses_map_by_code() {
        let lease = LeaseId(7);
        assert!(matches!(
            error(
                Status::not_found("etcdserver: requested lease not found"),
                Some(lease)
            ),
            MetaError::LeaseNotFound(LeaseId(7))
        ));
        assert!(matches!(
            error(Status::unavailable("etcdserver: no leader"), None),
            MetaError::Unavailable(m) if m == "etcd: etcdserver: no leader (Unavailable)"
        ));
        assert!(matches!(
            error(Status::invalid_argument("etcdserver: key is not provided"), None),
            MetaError::Invalid(m) if m == "etcd: etcdserver: key is not provided"
        ));
        assert!(matches!(
            error(
                Status::permission_denied("etcdserver: permission denied"),
                None
            ),
            MetaError::Backend(_)
        ));
    }

    #[test]
    fn local_failures_are_unavailable_whatever_their_code() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        let status = Status::from_error(Box::new(io));
        let MetaError::Unavailable(text) = error(status, None) else {
            panic!("not unavailable");
        };
        assert!(text.contains("connection reset"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }
}
