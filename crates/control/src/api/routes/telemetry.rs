//! Telemetry and failure prediction of the cluster (`docs/prediction.md`):
//!
//! - `GET /api/v1/telemetry`, `GET /api/v1/nodes/{name}/telemetry`: storage nodes'
//!   drive and namespace telemetry, from their own APIs;
//! - `GET /api/v1/predictions`, `GET /api/v1/nodes/{name}/predictions`: storage nodes'
//!   drive grades, and processor nodes' volume-member grades with their proactive copies.
//!   The serving processor node answers its own members; another processor node is asked
//!   through its API (`?local=true`, so that a request is forwarded at most once).

use axum::extract::State;
use axum::response::Response;
use httpapi::error::ok;
use httpapi::extract::{Path, Query};
use httpapi::{ApiError, ErrorBody, HttpClient};
use storage_node::api::{Prediction, TelemetryReport};

use super::err;
use super::nodes::{NODE_TIMEOUT, client, fan_out, node_err, storage_node};
use crate::api::server::ApiState;
use crate::api::{MemberPrediction, NodePredictions, NodeTelemetry, PredictionsQuery};
use crate::records::{NodeRecord, NodeRole};
use crate::registration;

/// The drive and namespace telemetry of one storage node.
#[utoipa::path(get, path = "/api/v1/nodes/{name}/telemetry", tag = "telemetry",
    params(("name" = String, Path, description = "Storage node name")),
    responses((status = 200, body = TelemetryReport),
        (status = "default", description = "404 no such node, 400 a processor node, 502 the node did not answer", body = ErrorBody)))]
pub(crate) async fn node_telemetry(
    State(cfg): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let node = storage_node(&cfg, &name).await?;
    let c = client(&cfg, &node).await.map_err(err)?;
    Ok(ok(&c.telemetry().await.map_err(|e| node_err(&name, e))?))
}

/// The drive and namespace telemetry of every storage node (a node that does not answer
/// carries `error`).
#[utoipa::path(get, path = "/api/v1/telemetry", tag = "telemetry",
    responses((status = 200, body = Vec<NodeTelemetry>), (status = "default", body = ErrorBody)))]
pub(crate) async fn all_telemetry(State(cfg): State<ApiState>) -> Result<Response, ApiError> {
    let all = fan_out(&cfg, |c| async move { c.telemetry().await }).await?;
    let v: Vec<NodeTelemetry> = all
        .into_iter()
        .map(|(node, r)| match r {
            Ok(t) => NodeTelemetry {
                node,
                drives: t.drives,
                namespaces: t.namespaces,
                error: None,
            },
            Err(e) => NodeTelemetry {
                node,
                drives: Vec::new(),
                namespaces: Vec::new(),
                error: Some(e),
            },
        })
        .collect();
    Ok(ok(&v))
}

/// The grades of one node: a storage node's drives, or the members of the volumes a
/// processor node owns.
#[utoipa::path(get, path = "/api/v1/nodes/{name}/predictions", tag = "telemetry",
    params(("name" = String, Path, description = "Node name"), PredictionsQuery),
    responses((status = 200, body = NodePredictions),
        (status = "default", description = "404 no such node, 502 the node did not answer", body = ErrorBody)))]
pub(crate) async fn node_predictions(
    State(cfg): State<ApiState>,
    Path(name): Path<String>,
    Query(q): Query<PredictionsQuery>,
) -> Result<Response, ApiError> {
    let node = registration::get_node(cfg.store.as_ref(), &name)
        .await
        .map_err(err)?
        .ok_or_else(|| ApiError::not_found(format!("no live node named {name:?}")))?;
    Ok(ok(&predictions_of(&cfg, &node, q.local).await?))
}

/// The grades of every live node (a node that does not answer carries `error`).
#[utoipa::path(get, path = "/api/v1/predictions", tag = "telemetry",
    responses((status = 200, body = Vec<NodePredictions>), (status = "default", body = ErrorBody)))]
pub(crate) async fn all_predictions(State(cfg): State<ApiState>) -> Result<Response, ApiError> {
    let nodes = registration::list_nodes(cfg.store.as_ref())
        .await
        .map_err(err)?;
    let cfg = &cfg;
    let asks = nodes.iter().map(|n| async move {
        predictions_of(cfg, n, false)
            .await
            .unwrap_or_else(|e| NodePredictions {
                node: n.name.clone(),
                role: n.role,
                drives: Vec::new(),
                members: Vec::new(),
                error: Some(e.message),
            })
    });
    Ok(ok(&futures::future::join_all(asks).await))
}

async fn predictions_of(
    cfg: &ApiState,
    node: &NodeRecord,
    local: bool,
) -> Result<NodePredictions, ApiError> {
    let mut out = NodePredictions {
        node: node.name.clone(),
        role: node.role,
        drives: Vec::new(),
        members: Vec::new(),
        error: None,
    };
    match node.role {
        NodeRole::Storage => {
            let c = client(cfg, node).await.map_err(err)?;
            out.drives = c
                .predictions()
                .await
                .map_err(|e| node_err(&node.name, e))?
                .drives;
        }
        NodeRole::Processor if node.name == cfg.node_name => out.members = own_members(cfg),
        NodeRole::Processor if local => {
            return Err(ApiError::new(
                502,
                format!(
                    "this API serves processor node {}, not {}",
                    cfg.node_name, node.name
                ),
            ));
        }
        NodeRole::Processor => return forward(cfg, node).await,
    }
    Ok(out)
}

/// The members of the volumes the serving processor node owns.
fn own_members(cfg: &ApiState) -> Vec<MemberPrediction> {
    let Some(health) = &cfg.health else {
        return Vec::new();
    };
    let now = crate::events::now_unix_ms();
    health
        .grades()
        .into_iter()
        .map(|g| MemberPrediction {
            prediction: Prediction::of(&g.assessment, Some(now.saturating_sub(g.graded_for_ms))),
            volume: g.volume,
            member: g.member,
            device: g.device,
            proactive_copy: g.proactive_copy,
        })
        .collect()
}

/// Asks another processor node's API for its own members (with the cluster token).
async fn forward(cfg: &ApiState, node: &NodeRecord) -> Result<NodePredictions, ApiError> {
    let addr = node.api_addr.ok_or_else(|| {
        ApiError::new(
            502,
            format!("processor node {} serves no HTTP API", node.name),
        )
    })?;
    let path = format!(
        "{}?local=true",
        httpapi::client::path(
            crate::api::API_PREFIX,
            &["nodes", &node.name, "predictions"]
        )
    );
    HttpClient::new(addr.to_string())
        .with_timeout(NODE_TIMEOUT)
        .with_token(Some(cfg.token.as_str().to_string()))
        .call("GET", &path, None)
        .await
        .map_err(|e| node_err(&node.name, e))
}
