//! QoS routes of the node's API (`docs/node-api.md`, `docs/qos.md`):
//!
//! - `GET /api/v1/qos`: every limit with its statistics, and the contention caps;
//! - `GET|PUT|DELETE /api/v1/qos/{nqn}/{nsid}/{host}`: the limits of one key, `nsid` a
//!   namespace ID or `all` (every namespace of the subsystem together), `host` a host NQN
//!   or `all` (every host together). `PUT` takes the limits (they replace the key's) and
//!   answers the entry; `DELETE` answers the limits the key had.

use axum::extract::State;
use axum::response::Response;
use httpapi::ApiError;
use httpapi::error::ok;
use httpapi::extract::{Json, Path};
use nvmf_target::{QosKey, QosLimits};

use crate::api::QosEntry;
use crate::node::StorageNode;

/// The path value for "every namespace" / "every host".
pub const ALL: &str = "all";

/// The key a `/qos/{nqn}/{nsid}/{host}` path names.
pub(crate) fn key_of(nqn: String, nsid: &str, host: String) -> Result<QosKey, ApiError> {
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

pub(crate) async fn list(State(node): State<StorageNode>) -> Response {
    ok(&node.qos_list())
}

pub(crate) async fn get_one(
    State(node): State<StorageNode>,
    Path((nqn, nsid, host)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let key = key_of(nqn, &nsid, host)?;
    Ok(ok(&node.qos_entry(&key).map_err(super::routes::err)?))
}

pub(crate) async fn put(
    State(node): State<StorageNode>,
    Path((nqn, nsid, host)): Path<(String, String, String)>,
    Json(limits): Json<QosLimits>,
) -> Result<Response, ApiError> {
    let key = key_of(nqn, &nsid, host)?;
    let entry = QosEntry {
        subsystem_nqn: key.subsystem_nqn,
        nsid: key.nsid,
        host_nqn: key.host_nqn,
        limits,
        stats: None,
    };
    Ok(ok(&node
        .set_qos(entry)
        .await
        .map_err(super::routes::err)?))
}

pub(crate) async fn delete(
    State(node): State<StorageNode>,
    Path((nqn, nsid, host)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let key = key_of(nqn, &nsid, host)?;
    Ok(ok(&node
        .clear_qos(key)
        .await
        .map_err(super::routes::err)?))
}
