//! `/metrics` and `/healthz` (no token).

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use httpapi::ApiError;
use httpapi::error::ok;
use httpapi::metrics::Page;
use httpapi::probe::Liveness;

use httpapi::error::json;
use httpapi::extract::Json;
use storage_node::api::{UpgradeAccepted, UpgradeRequestBody};

use super::err;
use crate::api::server::ApiState;
use crate::error::ControlError;
use crate::provision;
use crate::records::NodeRole;
use crate::registration::list_nodes;

/// Prometheus text: cluster gauges and the serving processor node's own families.
#[utoipa::path(get, path = "/metrics", tag = "system", security(()),
    responses((status = 200, description = "Prometheus text format 0.0.4 (docs/cluster.md)", content_type = "text/plain")))]
pub(crate) async fn metrics(State(cfg): State<ApiState>) -> Result<Response, ApiError> {
    let text = render(&cfg).await.map_err(err)?;
    let mut r = text.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(httpapi::metrics::CONTENT_TYPE),
    );
    Ok(r)
}

async fn render(cfg: &crate::api::ApiConfig) -> Result<String, ControlError> {
    let store = cfg.store.as_ref();
    let volumes = provision::list_volumes(store).await?;
    let nodes = list_nodes(store).await?;
    let mut page = Page::new();
    page.gauge("ferrobay_cluster_volumes", "Volumes in the cluster.")
        .add(&[], volumes.len() as u64);
    let by_role = page.gauge("ferrobay_cluster_nodes", "Live nodes by role.");
    for (role, name) in [
        (NodeRole::Storage, "storage"),
        (NodeRole::Processor, "processor"),
    ] {
        let n = nodes.iter().filter(|n| n.role == role).count();
        by_role.add(&[("role", name)], n as u64);
    }
    let mut owned = Vec::with_capacity(volumes.len());
    for v in &volumes {
        owned.push(meta::schema::current_owner(store, &v.name).await?.is_some());
    }
    let f = page.gauge(
        "ferrobay_volume_owned",
        "Whether a processor node owns the volume (1) or not (0).",
    );
    for (v, owned) in volumes.iter().zip(owned) {
        f.add(&[("volume", &v.name)], u64::from(owned));
    }
    if let Some(extra) = &cfg.metrics {
        extra(&mut page);
    }
    Ok(page.render())
}

/// Liveness probe (no token).
#[utoipa::path(get, path = "/healthz", tag = "system", security(()),
    responses((status = 200, body = Liveness)))]
pub(crate) async fn healthz(State(cfg): State<ApiState>) -> Response {
    ok(&Liveness::ok(&cfg.node_name, env!("CARGO_PKG_VERSION")))
}

/// Re-execute the serving processor node as another `ferrobay` binary: probed
/// (`version --json`), it must work beside every live node's build; a processor node
/// that owns volumes refuses unless `force` (move them first: `ferrobay cluster upgrade`
/// does). Then the node stops cleanly and starts again as the new binary, same arguments
/// and pid (docs/upgrade.md).
#[utoipa::path(post, path = "/api/v1/node/upgrade", tag = "system", request_body = UpgradeRequestBody,
    responses((status = 202, body = UpgradeAccepted),
        (status = 400, description = "not an absolute path, or not a ferrobay binary", body = httpapi::ErrorBody),
        (status = 404, description = "this server runs no node", body = httpapi::ErrorBody),
        (status = 409, description = "owns volumes, an incompatible build, or an upgrade under way", body = httpapi::ErrorBody),
        (status = "default", body = httpapi::ErrorBody)))]
pub(crate) async fn upgrade(
    State(cfg): State<ApiState>,
    Json(req): Json<UpgradeRequestBody>,
) -> Result<Response, ApiError> {
    let Some(signal) = &cfg.upgrade else {
        return Err(ApiError::new(
            404,
            "this API server runs no node to upgrade".to_string(),
        ));
    };
    let store = cfg.store.as_ref();
    if !req.force {
        let owned = crate::upgrade::owned_by(store, &cfg.node_name)
            .await
            .map_err(err)?;
        if !owned.is_empty() {
            return Err(ApiError::new(
                409,
                format!(
                    "processor node {} owns volumes {}: move them to another processor node first (ferrobay cluster upgrade does), or force",
                    cfg.node_name,
                    owned.join(", ")
                ),
            ));
        }
    }
    let beside: Vec<(String, release::BuildInfo)> = list_nodes(store)
        .await
        .map_err(err)?
        .into_iter()
        .filter(|n| n.name != cfg.node_name)
        .map(|n| (n.name.clone(), n.build()))
        .collect();
    let accepted: UpgradeAccepted =
        storage_node::http::accept_upgrade(&cfg.node_name, signal, &req.binary, &beside).await?;
    Ok(json(axum::http::StatusCode::ACCEPTED, &accepted))
}
