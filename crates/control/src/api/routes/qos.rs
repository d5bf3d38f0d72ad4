//! Volume QoS: the limits of a volume (every host together, with an optional minimum)
//! and of single hosts on it, kept in the volume's record (`docs/qos.md`).

use axum::extract::State;
use axum::response::Response;
use httpapi::error::ok;
use httpapi::extract::{Json, Path};
use httpapi::{ApiError, ErrorBody};
use nvmf_target::QosLimits;
use storage_node::api::QosLimitsRequest;

use super::err;
use crate::api::server::ApiState;
use crate::records::VolumeQos;

/// The path value for "the volume as a whole".
const ALL: &str = "all";

fn host_of(host: &str) -> Option<&str> {
    (host != ALL).then_some(host)
}

/// The volume's QoS limits and their generation.
#[utoipa::path(get, path = "/api/v1/volumes/{name}/qos", tag = "qos",
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 200, body = VolumeQos),
        (status = "default", description = "404 no such volume", body = ErrorBody)))]
pub(crate) async fn get_volume_qos(
    State(cfg): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let q = crate::qos::volume_qos(cfg.store.as_ref(), &name)
        .await
        .map_err(err)?;
    Ok(ok(&q))
}

/// Sets the limits of the volume (`host` = `all`) or of one host on it: they replace what
/// that key had (`{}` clears it). Every processor node exporting the volume applies them.
#[utoipa::path(put, path = "/api/v1/volumes/{name}/qos/{host}", tag = "qos",
    params(("name" = String, Path, description = "Volume name"),
        ("host" = String, Path, description = "Host NQN, or `all`: the volume as a whole")),
    request_body = QosLimitsRequest,
    responses((status = 200, description = "The volume's QoS after the change", body = VolumeQos),
        (status = "default", description = "400 bad limits (the reason), 404 no such volume", body = ErrorBody)))]
pub(crate) async fn put_volume_qos(
    State(cfg): State<ApiState>,
    Path((name, host)): Path<(String, String)>,
    Json(limits): Json<QosLimitsRequest>,
) -> Result<Response, ApiError> {
    let q = crate::qos::set_volume_qos(cfg.store.as_ref(), &name, host_of(&host), limits.into())
        .await
        .map_err(err)?;
    Ok(ok(&q))
}

/// Removes the limits of the volume (`host` = `all`) or of one host on it; answers the
/// limits it had.
#[utoipa::path(delete, path = "/api/v1/volumes/{name}/qos/{host}", tag = "qos",
    params(("name" = String, Path, description = "Volume name"),
        ("host" = String, Path, description = "Host NQN, or `all`: the volume as a whole")),
    responses((status = 200, description = "The limits it had", body = QosLimits),
        (status = "default", description = "404 no such volume, or no limits there", body = ErrorBody)))]
pub(crate) async fn delete_volume_qos(
    State(cfg): State<ApiState>,
    Path((name, host)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let had = crate::qos::clear_volume_qos(cfg.store.as_ref(), &name, host_of(&host))
        .await
        .map_err(err)?;
    Ok(ok(&had))
}
