//! The node's HTTP routes: `/metrics` and the JSON control API under `/api/v1`.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use httpapi::ApiError;
use httpapi::error::{json, ok};
use httpapi::extract::{Json, Path};

use crate::api::{
    API_PREFIX, AllowAnyHostRequest, AttachRequest, CreateNamespaceRequest, HostRequest,
};
use crate::node::{ErrorKind, NodeError, StorageNode};

/// The node's router, ready to serve.
pub(crate) fn router(node: StorageNode) -> Router {
    let api = Router::new()
        .route("/node", get(node_info))
        .route("/health", get(health))
        .route("/namespaces", get(list_namespaces).post(create_namespace))
        .route(
            "/namespaces/{nqn}/{nsid}",
            get(get_namespace).delete(delete_namespace),
        )
        .route("/namespaces/{nqn}/{nsid}/attach", post(attach))
        .route("/namespaces/{nqn}/{nsid}/detach", post(detach))
        .route("/subsystems", get(subsystems))
        .route("/subsystems/{nqn}/hosts", post(allow_host))
        .route("/subsystems/{nqn}/hosts/{host}", delete(deny_host))
        .route("/subsystems/{nqn}/allow_any_host", put(allow_any_host))
        .route("/qos", get(super::qos_routes::list))
        .route(
            "/qos/{nqn}/{nsid}/{host}",
            get(super::qos_routes::get_one)
                .put(super::qos_routes::put)
                .delete(super::qos_routes::delete),
        );
    let app = Router::new()
        .route("/metrics", get(metrics))
        .nest(API_PREFIX, api)
        .with_state(node);
    httpapi::server::finish(app)
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

async fn metrics(State(node): State<StorageNode>) -> Response {
    let mut r = super::metrics::render(&node).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(super::metrics::CONTENT_TYPE),
    );
    r
}

async fn node_info(State(node): State<StorageNode>) -> Response {
    ok(&node.info())
}

async fn health(State(node): State<StorageNode>) -> Response {
    ok(&node.health())
}

async fn list_namespaces(State(node): State<StorageNode>) -> Response {
    ok(&node.list_namespaces())
}

async fn create_namespace(
    State(node): State<StorageNode>,
    Json(r): Json<CreateNamespaceRequest>,
) -> Result<Response, ApiError> {
    let v = node.create_namespace(r).await.map_err(err)?;
    Ok(json(StatusCode::CREATED, &v))
}

async fn get_namespace(
    State(node): State<StorageNode>,
    Path((nqn, nsid)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    Ok(ok(&node.namespace(&nqn, nsid_of(&nsid)?).map_err(err)?))
}

async fn delete_namespace(
    State(node): State<StorageNode>,
    Path((nqn, nsid)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    node.delete_namespace(&nqn, nsid_of(&nsid)?)
        .await
        .map_err(err)?;
    Ok(ok(&serde_json::json!({})))
}

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

async fn subsystems(State(node): State<StorageNode>) -> Response {
    ok(&node.subsystems())
}

async fn allow_host(
    State(node): State<StorageNode>,
    Path(nqn): Path<String>,
    Json(r): Json<HostRequest>,
) -> Result<Response, ApiError> {
    Ok(ok(&node
        .allow_host(&nqn, &r.host_nqn)
        .await
        .map_err(err)?))
}

async fn deny_host(
    State(node): State<StorageNode>,
    Path((nqn, host)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    Ok(ok(&node.deny_host(&nqn, &host).await.map_err(err)?))
}

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
