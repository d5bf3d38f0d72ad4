//! QoS routes of the node's API (`docs/node-api.md`, `docs/qos.md`):
//!
//! - `GET /api/v1/qos`: every limit with its statistics, and the contention caps;
//! - `GET|PUT|DELETE /api/v1/qos/{nqn}/{nsid}/{host}`: the limits of one key, `nsid` a
//!   namespace ID or `all` (every namespace of the subsystem together), `host` a host NQN
//!   or `all` (every host together). `PUT` takes the limits (they replace the key's) and
//!   answers the entry; `DELETE` answers the limits the key had.

use axum::extract::State;
use axum::response::Response;
use httpapi::error::ok;
use httpapi::extract::{Json, Path};
use httpapi::{ApiError, ErrorBody};
use nvmf_target::{QosKey, QosLimits};

use super::routes::err;
use crate::api::{QosEntry, QosLimitsRequest, QosList};
use crate::node::StorageNode;

/// The path value for "every namespace" / "every host".
pub const ALL: &str = "all";

/// The `{nsid}` and `{host}` of a key's path (also its metrics labels): the namespace ID
/// and host NQN, or [`ALL`].
pub(crate) fn key_segments(key: &QosKey) -> (String, &str) {
    let nsid = key.nsid.map_or_else(|| ALL.to_string(), |n| n.to_string());
    (nsid, key.host_nqn.as_deref().unwrap_or(ALL))
}

/// The key a `/qos/{nqn}/{nsid}/{host}` path names.
fn key_of(nqn: String, nsid: &str, host: String) -> Result<QosKey, ApiError> {
    let nsid = match nsid {
        ALL => None,
        n => Some(n.parse::<u32>().map_err(|_| {
            ApiError::bad_request(format!("bad namespace ID {n:?} (a number or \"all\")"))
        })?),
    };
    Ok(QosKey {
        subsystem_nqn: nqn,
        nsid,
        host_nqn: (host != ALL).then_some(host),
    })
}

/// Every QoS limit with what it did, and the namespaces capped so that minimums are met.
#[utoipa::path(get, path = "/api/v1/qos", tag = "qos",
    responses((status = 200, body = QosList), (status = "default", body = ErrorBody)))]
pub(crate) async fn list_qos(State(node): State<StorageNode>) -> Response {
    ok(&node.qos_list())
}

/// The limits of one key with what they did.
#[utoipa::path(get, path = "/api/v1/qos/{nqn}/{nsid}/{host}", tag = "qos",
    params(("nqn" = String, Path, description = "Subsystem NQN"),
        ("nsid" = String, Path, description = "Namespace ID, or `all`: every namespace of the subsystem together"),
        ("host" = String, Path, description = "Host NQN, or `all`: every host together")),
    responses((status = 200, body = QosEntry),
        (status = "default", description = "404 the key has no limits", body = ErrorBody)))]
pub(crate) async fn get_qos(
    State(node): State<StorageNode>,
    Path((nqn, nsid, host)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let key = key_of(nqn, &nsid, host)?;
    Ok(ok(&node.qos_entry(&key).map_err(err)?))
}

/// Sets the limits of one key: they replace what it had (`{}` clears it). Persisted in
/// the node state before they apply.
#[utoipa::path(put, path = "/api/v1/qos/{nqn}/{nsid}/{host}", tag = "qos",
    params(("nqn" = String, Path, description = "Subsystem NQN"),
        ("nsid" = String, Path, description = "Namespace ID, or `all`: every namespace of the subsystem together"),
        ("host" = String, Path, description = "Host NQN, or `all`: every host together")),
    request_body = QosLimitsRequest,
    responses((status = 200, body = QosEntry),
        (status = "default", description = "400 bad limits (the reason), 404 no such subsystem or namespace", body = ErrorBody)))]
pub(crate) async fn put_qos(
    State(node): State<StorageNode>,
    Path((nqn, nsid, host)): Path<(String, String, String)>,
    Json(limits): Json<QosLimitsRequest>,
) -> Result<Response, ApiError> {
    let key = key_of(nqn, &nsid, host)?;
    let entry = QosEntry {
        subsystem_nqn: key.subsystem_nqn,
        nsid: key.nsid,
        host_nqn: key.host_nqn,
        limits: limits.into(),
        stats: None,
    };
    Ok(ok(&node.set_qos(entry).await.map_err(err)?))
}

/// Removes the limits of one key; answers the limits it had.
#[utoipa::path(delete, path = "/api/v1/qos/{nqn}/{nsid}/{host}", tag = "qos",
    params(("nqn" = String, Path, description = "Subsystem NQN"),
        ("nsid" = String, Path, description = "Namespace ID, or `all`"),
        ("host" = String, Path, description = "Host NQN, or `all`")),
    responses((status = 200, description = "The limits the key had", body = QosLimits),
        (status = "default", description = "404 the key has no limits", body = ErrorBody)))]
pub(crate) async fn delete_qos(
    State(node): State<StorageNode>,
    Path((nqn, nsid, host)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let key = key_of(nqn, &nsid, host)?;
    Ok(ok(&node.clear_qos(key).await.map_err(err)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_from_paths() {
        let k = key_of("nqn.s".into(), "all", "all".into()).unwrap();
        assert_eq!((k.nsid, k.host_nqn), (None, None));
        let k = key_of("nqn.s".into(), "3", "nqn.h".into()).unwrap();
        assert_eq!((k.nsid, k.host_nqn.as_deref()), (Some(3), Some("nqn.h")));
        assert!(key_of("nqn.s".into(), "x", "all".into()).is_err());
        for (nsid, host) in [("all", "all"), ("3", "nqn.h"), ("all", "nqn.h")] {
            let k = key_of("nqn.s".into(), nsid, host.into()).unwrap();
            let (n, h) = key_segments(&k);
            assert_eq!((n.as_str(), h), (nsid, host), "round trip");
        }
    }

    #[test]
    fn a_misspelt_limit_is_refused() {
        assert!(serde_json::from_str::<QosLimitsRequest>(r#"{"max_iop": 5}"#).is_err());
        let r: QosLimitsRequest = serde_json::from_str(r#"{"max_iops": 5}"#).unwrap();
        assert_eq!(QosLimits::from(r).max_iops, Some(5));
    }
}
