//! The node's HTTP routes: `/metrics`, `/healthz` and the JSON control API under
//! `/api/v1`, each handler with its OpenAPI entry (`docs/api/node-openapi.json`).
//!
//! Adding a route: write the handler with its `#[utoipa::path]`, add it to
//! [`api_routes`]; the document and the router follow.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use httpapi::auth::{Token, require_token};
use httpapi::error::{json, ok};
use httpapi::extract::{Json, Path};
use httpapi::openapi::BearerAuth;
use httpapi::probe::{Liveness, PUBLIC_PATHS};
use httpapi::{ApiError, ErrorBody};
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{
    AllowAnyHostRequest, AttachRequest, CreateNamespaceRequest, HealthReport, HostRequest,
    NamespaceView, NodeInfo, PredictionReport, SubsystemView, TelemetryReport, UpgradeAccepted,
    UpgradeRequestBody,
};
use crate::node::{ErrorKind, NodeError, StorageNode};

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Ferrobay storage node API",
        description = "Node-local operations of one storage node: its namespaces, subsystems and allowed hosts, QoS limits, health. Errors are `{\"error\": \"...\"}`; every call but /metrics, /healthz and this document needs the bearer token (docs/api.md, docs/node-api.md).",
        license(name = "Apache-2.0"),
        version = "1"
    ),
    modifiers(&BearerAuth),
    components(schemas(ErrorBody)),
    tags(
        (name = "node", description = "The node, its health and metrics"),
        (name = "telemetry", description = "Drive and namespace telemetry, and each drive's failure-prediction grade (docs/prediction.md)"),
        (name = "namespaces", description = "Namespaces carved from the node's drives"),
        (name = "subsystems", description = "Subsystems and the hosts allowed to connect"),
        (name = "qos", description = "QoS limits per namespace and host, and the caps that keep minimums (docs/qos.md)"),
    )
)]
struct NodeApiDoc;

/// Every route of the node with its OpenAPI entry.
fn api_routes() -> OpenApiRouter<StorageNode> {
    OpenApiRouter::with_openapi(NodeApiDoc::openapi())
        .routes(routes!(metrics))
        .routes(routes!(healthz))
        .routes(routes!(node_info))
        .routes(routes!(upgrade))
        .routes(routes!(health))
        .routes(routes!(telemetry))
        .routes(routes!(predictions))
        .routes(routes!(list_namespaces, create_namespace))
        .routes(routes!(get_namespace, delete_namespace))
        .routes(routes!(attach))
        .routes(routes!(detach))
        .routes(routes!(subsystems))
        .routes(routes!(allow_host))
        .routes(routes!(deny_host))
        .routes(routes!(allow_any_host))
        .routes(routes!(super::qos_routes::list_qos))
        .routes(routes!(
            super::qos_routes::get_qos,
            super::qos_routes::put_qos,
            super::qos_routes::delete_qos
        ))
}

/// The node API's OpenAPI document (what `/api/v1/openapi.json` serves).
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_routes().into_openapi()
}

/// The node's router, ready to serve: every route but the public ones needs `token`.
pub(crate) fn router(node: StorageNode, token: Token) -> Router {
    let (routes, doc) = api_routes().split_for_parts();
    let doc = std::sync::Arc::new(doc);
    let app = routes
        .route(
            httpapi::probe::OPENAPI_PATH,
            axum::routing::get(move || {
                let doc = doc.clone();
                async move { httpapi::openapi::serve(&doc) }
            }),
        )
        .with_state(node);
    // The token guards the 404/405 answers too: without it nothing is revealed.
    require_token(httpapi::server::finish(app), token, PUBLIC_PATHS)
}

fn status_of(e: &NodeError) -> u16 {
    match e.kind() {
        ErrorKind::BadRequest => 400,
        ErrorKind::NotFound => 404,
        ErrorKind::Conflict => 409,
        ErrorKind::InsufficientCapacity => 507,
        ErrorKind::Internal => 500,
    }
}

pub(super) fn err(e: NodeError) -> ApiError {
    ApiError::new(status_of(&e), e.to_string())
}

fn nsid_of(s: &str) -> Result<u32, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("bad namespace ID {s:?}")))
}

/// Prometheus text (no token).
#[utoipa::path(get, path = "/metrics", tag = "node", security(()),
    responses((status = 200, description = "Prometheus text format 0.0.4 (docs/node-api.md)", content_type = "text/plain")))]
async fn metrics(State(node): State<StorageNode>) -> Response {
    let mut r = super::metrics::render(&node).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(super::metrics::CONTENT_TYPE),
    );
    r
}

/// Liveness probe (no token).
#[utoipa::path(get, path = "/healthz", tag = "node", security(()),
    responses((status = 200, body = Liveness)))]
async fn healthz(State(node): State<StorageNode>) -> Response {
    ok(&Liveness::ok(node.name(), env!("CARGO_PKG_VERSION")))
}

/// The node: name, UUID, listeners.
#[utoipa::path(get, path = "/api/v1/node", tag = "node",
    responses((status = 200, body = NodeInfo), (status = "default", body = ErrorBody)))]
async fn node_info(State(node): State<StorageNode>) -> Response {
    ok(&node.info())
}

/// Re-execute the node as another `ferrobay` binary: it is probed (`version --json`)
/// and must work beside this build; then the node stops cleanly (hosts see their
/// connections close) and starts again from its data dir as the new binary, with the
/// same arguments and pid (docs/upgrade.md).
#[utoipa::path(post, path = "/api/v1/node/upgrade", tag = "node", request_body = UpgradeRequestBody,
    responses((status = 202, body = UpgradeAccepted),
        (status = 400, description = "not an absolute path, or not a ferrobay binary", body = ErrorBody),
        (status = 409, description = "the build cannot run beside this one, or an upgrade is already under way", body = ErrorBody),
        (status = "default", body = ErrorBody)))]
async fn upgrade(State(node): State<StorageNode>, Json(req): Json<UpgradeRequestBody>) -> Response {
    match accept_upgrade(node.name(), node.upgrade_signal(), &req.binary, &[]).await {
        Ok(accepted) => json(StatusCode::ACCEPTED, &accepted),
        Err(e) => e.into_response(),
    }
}

/// Probes `binary`, checks it against this build and the builds of the `beside` nodes
/// (name, build) and raises `signal`: what both node kinds' upgrade routes do.
pub async fn accept_upgrade(
    node: &str,
    signal: &release::UpgradeSignal,
    binary: &str,
    beside: &[(String, release::BuildInfo)],
) -> Result<UpgradeAccepted, ApiError> {
    let path = std::path::PathBuf::from(binary);
    let name = node.to_string();
    let checked = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || release::check_candidate(&path, &name))
            .await
            .map_err(|e| ApiError::new(500, format!("probing {binary}: {e}")))?
    };
    let to = match checked {
        Ok(b) => b,
        Err(e @ release::CandidateError::Incompatible(_)) => {
            return Err(ApiError::new(409, e.to_string()));
        }
        Err(e) => return Err(ApiError::bad_request(e.to_string())),
    };
    for (other, build) in beside {
        if let Some(why) = to.refusal_beside(other, build) {
            return Err(ApiError::new(409, why));
        }
    }
    if !signal.request(release::UpgradeRequest { binary: path }) {
        return Err(ApiError::new(
            409,
            format!("an upgrade of {node} is already under way"),
        ));
    }
    tracing::info!(node, binary, to = %to.describe(), "upgrade requested: stopping, then re-executing");
    Ok(UpgradeAccepted {
        node: node.to_string(),
        from: release::BuildInfo::this().into(),
        to: to.into(),
    })
}

/// SMART-like health of the node and each drive.
#[utoipa::path(get, path = "/api/v1/health", tag = "node",
    responses((status = 200, body = HealthReport), (status = "default", body = ErrorBody)))]
async fn health(State(node): State<StorageNode>) -> Response {
    ok(&node.health())
}

/// Per drive and namespace: operations, bytes and latency percentiles per operation
/// class, errors by kind, queue depth; per drive its SMART reading and grade.
#[utoipa::path(get, path = "/api/v1/telemetry", tag = "telemetry",
    responses((status = 200, body = TelemetryReport), (status = "default", body = ErrorBody)))]
async fn telemetry(State(node): State<StorageNode>) -> Response {
    ok(&node.telemetry_report())
}

/// Each drive's failure-prediction grade (ok, suspect, failing), why, and since when.
#[utoipa::path(get, path = "/api/v1/predictions", tag = "telemetry",
    responses((status = 200, body = PredictionReport), (status = "default", body = ErrorBody)))]
async fn predictions(State(node): State<StorageNode>) -> Response {
    ok(&node.predictions())
}

/// Every namespace of the node.
#[utoipa::path(get, path = "/api/v1/namespaces", tag = "namespaces",
    responses((status = 200, body = Vec<NamespaceView>), (status = "default", body = ErrorBody)))]
async fn list_namespaces(State(node): State<StorageNode>) -> Response {
    ok(&node.list_namespaces())
}

/// Carves a namespace (NVM or Key Value) from a drive.
#[utoipa::path(post, path = "/api/v1/namespaces", tag = "namespaces",
    request_body = CreateNamespaceRequest,
    responses((status = 201, body = NamespaceView),
        (status = "default", description = "400 bad request, 404 no such drive/subsystem, 409 NSID taken, 507 no room", body = ErrorBody)))]
async fn create_namespace(
    State(node): State<StorageNode>,
    Json(r): Json<CreateNamespaceRequest>,
) -> Result<Response, ApiError> {
    let v = node.create_namespace(r).await.map_err(err)?;
    Ok(json(StatusCode::CREATED, &v))
}

/// One namespace.
#[utoipa::path(get, path = "/api/v1/namespaces/{nqn}/{nsid}", tag = "namespaces",
    params(("nqn" = String, Path, description = "Subsystem NQN"), ("nsid" = u32, Path, description = "Namespace ID")),
    responses((status = 200, body = NamespaceView), (status = "default", body = ErrorBody)))]
async fn get_namespace(
    State(node): State<StorageNode>,
    Path((nqn, nsid)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    Ok(ok(&node.namespace(&nqn, nsid_of(&nsid)?).map_err(err)?))
}

/// Deletes a namespace (its space goes back to the drive).
#[utoipa::path(delete, path = "/api/v1/namespaces/{nqn}/{nsid}", tag = "namespaces",
    params(("nqn" = String, Path, description = "Subsystem NQN"), ("nsid" = u32, Path, description = "Namespace ID")),
    responses((status = 200, description = "`{}`"), (status = "default", body = ErrorBody)))]
async fn delete_namespace(
    State(node): State<StorageNode>,
    Path((nqn, nsid)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    node.delete_namespace(&nqn, nsid_of(&nsid)?)
        .await
        .map_err(err)?;
    Ok(ok(&serde_json::json!({})))
}

/// Attaches a namespace to every host or to the listed hosts.
#[utoipa::path(post, path = "/api/v1/namespaces/{nqn}/{nsid}/attach", tag = "namespaces",
    params(("nqn" = String, Path, description = "Subsystem NQN"), ("nsid" = u32, Path, description = "Namespace ID")),
    request_body = AttachRequest,
    responses((status = 200, body = NamespaceView), (status = "default", body = ErrorBody)))]
async fn attach(
    State(node): State<StorageNode>,
    Path((nqn, nsid)): Path<(String, String)>,
    Json(r): Json<AttachRequest>,
) -> Result<Response, ApiError> {
    let nsid = nsid_of(&nsid)?;
    Ok(ok(&node
        .attach_namespace(&nqn, nsid, r)
        .await
        .map_err(err)?))
}

/// Detaches a namespace from every host or from the listed hosts.
#[utoipa::path(post, path = "/api/v1/namespaces/{nqn}/{nsid}/detach", tag = "namespaces",
    params(("nqn" = String, Path, description = "Subsystem NQN"), ("nsid" = u32, Path, description = "Namespace ID")),
    request_body = AttachRequest,
    responses((status = 200, body = NamespaceView), (status = "default", body = ErrorBody)))]
async fn detach(
    State(node): State<StorageNode>,
    Path((nqn, nsid)): Path<(String, String)>,
    Json(r): Json<AttachRequest>,
) -> Result<Response, ApiError> {
    let nsid = nsid_of(&nsid)?;
    Ok(ok(&node
        .detach_namespace(&nqn, nsid, r)
        .await
        .map_err(err)?))
}

/// Every subsystem with its allowed hosts and connected controllers.
#[utoipa::path(get, path = "/api/v1/subsystems", tag = "subsystems",
    responses((status = 200, body = Vec<SubsystemView>), (status = "default", body = ErrorBody)))]
async fn subsystems(State(node): State<StorageNode>) -> Response {
    ok(&node.subsystems())
}

/// Allows a host (turns any-host off).
#[utoipa::path(post, path = "/api/v1/subsystems/{nqn}/hosts", tag = "subsystems",
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    request_body = HostRequest,
    responses((status = 200, body = SubsystemView), (status = "default", body = ErrorBody)))]
async fn allow_host(
    State(node): State<StorageNode>,
    Path(nqn): Path<String>,
    Json(mut r): Json<HostRequest>,
) -> Result<Response, ApiError> {
    let tls = r.tls_psk.take().map(|psk| crate::state::TlsPskHostRecord {
        host_nqn: r.host_nqn.clone(),
        psk,
    });
    let view = match r.dhchap_secret {
        None if r.dhchap_concat => {
            return Err(err(NodeError::BadRequest(
                "secure channel concatenation needs a DH-HMAC-CHAP host secret".into(),
            )));
        }
        None if r.dhchap_ctrl_secret.is_some() => {
            return Err(err(NodeError::BadRequest(
                "a DH-HMAC-CHAP controller secret needs a host secret".into(),
            )));
        }
        None => node.allow_host(&nqn, &r.host_nqn).await,
        Some(secret) => {
            let rec = crate::state::DhchapHostRecord {
                host_nqn: r.host_nqn,
                secret,
                ctrl_secret: r.dhchap_ctrl_secret,
                hashes: r.dhchap_hashes,
                dhgroups: r.dhchap_dhgroups,
                concat: r.dhchap_concat,
            };
            node.allow_host_dhchap(&nqn, rec).await
        }
    };
    let view = match (view, tls) {
        (Ok(_), Some(rec)) => node.allow_host_tls(&nqn, rec).await,
        (v, _) => v,
    };
    Ok(ok(&view.map_err(err)?))
}

/// Removes a host (its controllers are disconnected).
#[utoipa::path(delete, path = "/api/v1/subsystems/{nqn}/hosts/{host}", tag = "subsystems",
    params(("nqn" = String, Path, description = "Subsystem NQN"), ("host" = String, Path, description = "Host NQN")),
    responses((status = 200, body = SubsystemView), (status = "default", body = ErrorBody)))]
async fn deny_host(
    State(node): State<StorageNode>,
    Path((nqn, host)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    Ok(ok(&node.deny_host(&nqn, &host).await.map_err(err)?))
}

/// Lets every host connect, or only the allowed ones.
#[utoipa::path(put, path = "/api/v1/subsystems/{nqn}/allow_any_host", tag = "subsystems",
    params(("nqn" = String, Path, description = "Subsystem NQN")),
    request_body = AllowAnyHostRequest,
    responses((status = 200, body = SubsystemView), (status = "default", body = ErrorBody)))]
async fn allow_any_host(
    State(node): State<StorageNode>,
    Path(nqn): Path<String>,
    Json(r): Json<AllowAnyHostRequest>,
) -> Result<Response, ApiError> {
    Ok(ok(&node
        .set_allow_any_host(&nqn, r.allow_any_host)
        .await
        .map_err(err)?))
}
