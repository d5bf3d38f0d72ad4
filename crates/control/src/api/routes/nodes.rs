//! Nodes from the cluster records, and what each storage node's own API says about its
//! drives, namespaces and access lists (asked with the cluster's token, all nodes at once,
//! each bounded by [`NODE_TIMEOUT`]).

use std::time::Duration;

use axum::extract::State;
use axum::response::Response;
use httpapi::error::ok;
use httpapi::extract::{Json, Path};
use httpapi::{ApiError, ClientError, ErrorBody};
use storage_node::NodeClient;
use storage_node::api::{
    AllowAnyHostRequest, DriveHealth, HostRequest, NamespaceView, SubsystemView,
};

use super::err;
use crate::api::server::ApiState;
use crate::api::{NodeDrives, NodeHosts, NodeNamespaces};
use crate::error::ControlError;
use crate::records::{NodeRecord, NodeRole};
use crate::registration;

/// Longest wait for one storage node's answer.
pub(super) const NODE_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) async fn storage_nodes(cfg: &ApiState) -> Result<Vec<NodeRecord>, ApiError> {
    Ok(registration::list_nodes(cfg.store.as_ref())
        .await
        .map_err(err)?
        .into_iter()
        .filter(|n| n.role == NodeRole::Storage)
        .collect())
}

/// The live storage node `name`, or 404 / 400.
pub(super) async fn storage_node(cfg: &ApiState, name: &str) -> Result<NodeRecord, ApiError> {
    let node = registration::get_node(cfg.store.as_ref(), name)
        .await
        .map_err(err)?
        .ok_or_else(|| ApiError::not_found(format!("no live node named {name:?}")))?;
    if node.role != NodeRole::Storage {
        return Err(ApiError::bad_request(format!(
            "{name} is a processor node: it has no drives"
        )));
    }
    Ok(node)
}

pub(super) async fn client(cfg: &ApiState, node: &NodeRecord) -> Result<NodeClient, ControlError> {
    Ok(crate::auth::node_client(cfg.store.as_ref(), node)
        .await?
        .with_timeout(NODE_TIMEOUT))
}

/// A storage node's refusal or silence as this API's error (its status if it answered,
/// else 502).
pub(super) fn node_err(node: &str, e: ClientError) -> ApiError {
    match e {
        ClientError::Api { status, message } if status < 500 => ApiError::new(status, message),
        other => err(ControlError::storage(node, other)),
    }
}

/// Asks every storage node at once; a node that fails gets its `error` instead.
pub(super) async fn fan_out<T, F, Fut>(
    cfg: &ApiState,
    ask: F,
) -> Result<Vec<(String, Result<T, String>)>, ApiError>
where
    F: Fn(NodeClient) -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let nodes = storage_nodes(cfg).await?;
    if nodes.is_empty() {
        return Ok(Vec::new());
    }
    // One read of the token for all the nodes.
    let token = crate::auth::cluster_token(cfg.store.as_ref())
        .await
        .map_err(err)?;
    let asks = nodes.iter().map(|n| {
        let (ask, token) = (&ask, &token);
        async move {
            let r = match crate::auth::node_client_with(n, token) {
                Ok(c) => ask(c.with_timeout(NODE_TIMEOUT))
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            (n.name.clone(), r)
        }
    });
    Ok(futures::future::join_all(asks).await)
}

/// Every live node (storage and processor) from the cluster records.
#[utoipa::path(get, path = "/api/v1/nodes", tag = "nodes",
    responses((status = 200, body = Vec<NodeRecord>), (status = "default", body = ErrorBody)))]
pub(crate) async fn list_nodes(State(cfg): State<ApiState>) -> Result<Response, ApiError> {
    Ok(ok(&registration::list_nodes(cfg.store.as_ref())
        .await
        .map_err(err)?))
}

/// One live node.
#[utoipa::path(get, path = "/api/v1/nodes/{name}", tag = "nodes",
    params(("name" = String, Path, description = "Node name")),
    responses((status = 200, body = NodeRecord), (status = "default", body = ErrorBody)))]
pub(crate) async fn get_node(
    State(cfg): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    match registration::get_node(cfg.store.as_ref(), &name)
        .await
        .map_err(err)?
    {
        Some(n) => Ok(ok(&n)),
        None => Err(ApiError::not_found(format!("no live node named {name:?}"))),
    }
}

/// The drives of one storage node with their health counters.
#[utoipa::path(get, path = "/api/v1/nodes/{name}/drives", tag = "nodes",
    params(("name" = String, Path, description = "Storage node name")),
    responses((status = 200, body = Vec<DriveHealth>),
        (status = "default", description = "404 no such node, 400 a processor node, 502 the node did not answer", body = ErrorBody)))]
pub(crate) async fn node_drives(
    State(cfg): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let node = storage_node(&cfg, &name).await?;
    let c = client(&cfg, &node).await.map_err(err)?;
    let health = c.health().await.map_err(|e| node_err(&name, e))?;
    Ok(ok(&health.drives))
}

/// The namespaces of one storage node.
#[utoipa::path(get, path = "/api/v1/nodes/{name}/namespaces", tag = "nodes",
    params(("name" = String, Path, description = "Storage node name")),
    responses((status = 200, body = Vec<NamespaceView>),
        (status = "default", description = "404 no such node, 400 a processor node, 502 the node did not answer", body = ErrorBody)))]
pub(crate) async fn node_namespaces(
    State(cfg): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let node = storage_node(&cfg, &name).await?;
    let c = client(&cfg, &node).await.map_err(err)?;
    let ns = c.list_namespaces().await.map_err(|e| node_err(&name, e))?;
    Ok(ok(&ns))
}

/// The drives of every storage node (a node that does not answer carries `error`).
#[utoipa::path(get, path = "/api/v1/drives", tag = "nodes",
    responses((status = 200, body = Vec<NodeDrives>), (status = "default", body = ErrorBody)))]
pub(crate) async fn all_drives(State(cfg): State<ApiState>) -> Result<Response, ApiError> {
    let all = fan_out(&cfg, |c| async move { c.health().await.map(|h| h.drives) }).await?;
    let v: Vec<NodeDrives> = all
        .into_iter()
        .map(|(node, r)| match r {
            Ok(drives) => NodeDrives {
                node,
                drives,
                error: None,
            },
            Err(e) => NodeDrives {
                node,
                drives: Vec::new(),
                error: Some(e),
            },
        })
        .collect();
    Ok(ok(&v))
}

/// The namespaces of every storage node (a node that does not answer carries `error`).
#[utoipa::path(get, path = "/api/v1/namespaces", tag = "nodes",
    responses((status = 200, body = Vec<NodeNamespaces>), (status = "default", body = ErrorBody)))]
pub(crate) async fn all_namespaces(State(cfg): State<ApiState>) -> Result<Response, ApiError> {
    let all = fan_out(&cfg, |c| async move { c.list_namespaces().await }).await?;
    let v: Vec<NodeNamespaces> = all
        .into_iter()
        .map(|(node, r)| match r {
            Ok(namespaces) => NodeNamespaces {
                node,
                namespaces,
                error: None,
            },
            Err(e) => NodeNamespaces {
                node,
                namespaces: Vec::new(),
                error: Some(e),
            },
        })
        .collect();
    Ok(ok(&v))
}

/// The access lists of every storage node: subsystems and the hosts allowed on each.
#[utoipa::path(get, path = "/api/v1/hosts", tag = "nodes",
    responses((status = 200, body = Vec<NodeHosts>), (status = "default", body = ErrorBody)))]
pub(crate) async fn all_hosts(State(cfg): State<ApiState>) -> Result<Response, ApiError> {
    let all = fan_out(&cfg, |c| async move { c.subsystems().await }).await?;
    let v: Vec<NodeHosts> = all
        .into_iter()
        .map(|(node, r)| match r {
            Ok(subsystems) => NodeHosts {
                node,
                subsystems,
                error: None,
            },
            Err(e) => NodeHosts {
                node,
                subsystems: Vec::new(),
                error: Some(e),
            },
        })
        .collect();
    Ok(ok(&v))
}

/// Allows a host on a storage node's subsystem (any-host goes off), with its DH-HMAC-CHAP
/// secrets when given (passed on to the node as they are).
#[utoipa::path(post, path = "/api/v1/nodes/{name}/subsystems/{nqn}/hosts", tag = "nodes",
    params(("name" = String, Path, description = "Storage node name"), ("nqn" = String, Path, description = "Subsystem NQN")),
    request_body = HostRequest,
    responses((status = 200, body = SubsystemView), (status = "default", body = ErrorBody)))]
pub(crate) async fn allow_host(
    State(cfg): State<ApiState>,
    Path((name, nqn)): Path<(String, String)>,
    Json(r): Json<HostRequest>,
) -> Result<Response, ApiError> {
    let node = storage_node(&cfg, &name).await?;
    let c = client(&cfg, &node).await.map_err(err)?;
    let v = c
        .allow_host_with(&nqn, &r)
        .await
        .map_err(|e| node_err(&name, e))?;
    Ok(ok(&v))
}

/// Removes a host from a storage node's subsystem (its controllers are disconnected).
#[utoipa::path(delete, path = "/api/v1/nodes/{name}/subsystems/{nqn}/hosts/{host}", tag = "nodes",
    params(("name" = String, Path, description = "Storage node name"), ("nqn" = String, Path, description = "Subsystem NQN"), ("host" = String, Path, description = "Host NQN")),
    responses((status = 200, body = SubsystemView), (status = "default", body = ErrorBody)))]
pub(crate) async fn deny_host(
    State(cfg): State<ApiState>,
    Path((name, nqn, host)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let node = storage_node(&cfg, &name).await?;
    let c = client(&cfg, &node).await.map_err(err)?;
    let v = c
        .deny_host(&nqn, &host)
        .await
        .map_err(|e| node_err(&name, e))?;
    Ok(ok(&v))
}

/// Lets every host connect to a storage node's subsystem, or only the allowed ones.
#[utoipa::path(put, path = "/api/v1/nodes/{name}/subsystems/{nqn}/allow_any_host", tag = "nodes",
    params(("name" = String, Path, description = "Storage node name"), ("nqn" = String, Path, description = "Subsystem NQN")),
    request_body = AllowAnyHostRequest,
    responses((status = 200, body = SubsystemView), (status = "default", body = ErrorBody)))]
pub(crate) async fn allow_any_host(
    State(cfg): State<ApiState>,
    Path((name, nqn)): Path<(String, String)>,
    Json(r): Json<AllowAnyHostRequest>,
) -> Result<Response, ApiError> {
    let node = storage_node(&cfg, &name).await?;
    let c = client(&cfg, &node).await.map_err(err)?;
    let v = c
        .set_allow_any_host(&nqn, r.allow_any_host)
        .await
        .map_err(|e| node_err(&name, e))?;
    Ok(ok(&v))
}
