//! Volumes: list, view, create, delete, move, status, replace a member.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use httpapi::error::{json, ok};
use httpapi::extract::{Json, Path, Query};
use httpapi::{ApiError, ErrorBody};

use super::err;
use crate::api::server::ApiState;
use crate::api::{DeleteQuery, MoveAccepted, MoveRequest};
use crate::provision::replace::{self, ReplaceMember, ReplaceRequest};
use crate::provision::{self, CreateVolume, VolumeView};
use crate::records::{VolumeRecord, VolumeStatusRecord};

/// Every volume with its owner and last published status.
#[utoipa::path(get, path = "/api/v1/volumes", tag = "volumes",
    responses((status = 200, body = Vec<VolumeView>), (status = "default", body = ErrorBody)))]
pub(crate) async fn list_volumes(State(cfg): State<ApiState>) -> Result<Response, ApiError> {
    let store = cfg.store.as_ref();
    let mut views = Vec::new();
    for r in provision::list_volumes(store).await.map_err(err)? {
        // Deleted between the listing and the read: skip it.
        if let Some(v) = provision::volume_view(store, &r.name).await.map_err(err)? {
            views.push(v);
        }
    }
    Ok(ok(&views))
}

/// Creates a volume: one new namespace on each named storage node, or the given members.
#[utoipa::path(post, path = "/api/v1/volumes", tag = "volumes", request_body = CreateVolume,
    responses((status = 201, body = VolumeRecord),
        (status = "default", description = "400 bad request, 409 name taken, 502 a storage node failed", body = ErrorBody)))]
pub(crate) async fn create_volume(
    State(cfg): State<ApiState>,
    Json(create): Json<CreateVolume>,
) -> Result<Response, ApiError> {
    let record = provision::create_volume(cfg.store.as_ref(), &create, &cfg.host)
        .await
        .map_err(err)?;
    Ok(json(StatusCode::CREATED, &record))
}

/// One volume with its owner and last published status.
#[utoipa::path(get, path = "/api/v1/volumes/{name}", tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 200, body = VolumeView), (status = "default", body = ErrorBody)))]
pub(crate) async fn get_volume(
    State(cfg): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(ok(&view(&cfg, &name).await?))
}

/// The view of volume `name`, or 404.
async fn view(cfg: &ApiState, name: &str) -> Result<VolumeView, ApiError> {
    provision::volume_view(cfg.store.as_ref(), name)
        .await
        .map_err(err)?
        .ok_or_else(|| ApiError::not_found(format!("no volume named {name:?}")))
}

/// The owner's live view: member states, rebuild, resync and scrub progress.
#[utoipa::path(get, path = "/api/v1/volumes/{name}/status", tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 200, body = VolumeStatusRecord),
        (status = "default", description = "404 no such volume, or no processor node owns it now", body = ErrorBody)))]
pub(crate) async fn volume_status(
    State(cfg): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    match view(&cfg, &name).await?.status {
        Some(s) => Ok(ok(&s)),
        None => Err(ApiError::not_found(format!(
            "volume {name:?} has no status: no processor node owns it now"
        ))),
    }
}

/// Deletes a volume and the namespaces provisioning made for it.
#[utoipa::path(delete, path = "/api/v1/volumes/{name}", tag = "volumes",
    params(("name" = String, Path, description = "Volume name"), DeleteQuery),
    responses((status = 200, description = "The deleted record", body = VolumeRecord),
        (status = "default", description = "404 no such volume, 409 owned (use force)", body = ErrorBody)))]
pub(crate) async fn delete_volume(
    State(cfg): State<ApiState>,
    Path(name): Path<String>,
    Query(q): Query<DeleteQuery>,
) -> Result<Response, ApiError> {
    let record = provision::delete_volume(cfg.store.as_ref(), &name, q.force, &cfg.host)
        .await
        .map_err(err)?;
    Ok(ok(&record))
}

/// Asks the owner to hand the volume over to `to` (clean, no resync).
#[utoipa::path(post, path = "/api/v1/volumes/{name}/move", tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    request_body = MoveRequest,
    responses((status = 202, body = MoveAccepted),
        (status = "default", description = "400 `to` is not a live processor node, 404 no such volume", body = ErrorBody)))]
pub(crate) async fn move_volume(
    State(cfg): State<ApiState>,
    Path(name): Path<String>,
    Json(mv): Json<MoveRequest>,
) -> Result<Response, ApiError> {
    provision::request_move(cfg.store.as_ref(), &name, &mv.to)
        .await
        .map_err(err)?;
    Ok(json(
        StatusCode::ACCEPTED,
        &MoveAccepted {
            volume: name,
            to: mv.to,
        },
    ))
}

/// Replaces member `slot` with a new namespace on `storage_node` (allocated now); the
/// owner puts it in, the volume rebuilds onto it, and the old namespace is deleted
/// (`member_replaced` in the event log).
#[utoipa::path(post, path = "/api/v1/volumes/{name}/members/{slot}/replace", tag = "volumes",
    params(("name" = String, Path, description = "Volume name"),
        ("slot" = usize, Path, description = "Member slot (0-based)")),
    request_body = ReplaceMember,
    responses((status = 202, body = ReplaceRequest),
        (status = "default", description = "400 no such slot, storage node not live or holding another member, 404 no such volume, 409 no owner or a replacement pending, 502 the storage node failed", body = ErrorBody)))]
pub(crate) async fn replace_member(
    State(cfg): State<ApiState>,
    Path((name, slot)): Path<(String, usize)>,
    Json(req): Json<ReplaceMember>,
) -> Result<Response, ApiError> {
    let accepted = replace::request_replace(cfg.store.as_ref(), &name, slot, &req, &cfg.host)
        .await
        .map_err(err)?;
    Ok(json(StatusCode::ACCEPTED, &accepted))
}
