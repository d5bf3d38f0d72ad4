//! The API's routes, served by [`httpapi::HttpServer`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use httpapi::error::{json, ok};
use httpapi::extract::{Json, Path, Query};
use httpapi::metrics::Page;
use httpapi::{ApiError, HttpServer};
use meta::MetaStore;
use nvmf_host::HostIdentity;

use super::{API_PREFIX, MoveAccepted, MoveRequest};
use crate::error::ControlError;
use crate::provision::{self, CreateVolume};
use crate::records::NodeRole;
use crate::registration::list_nodes;

/// Adds the processor node's own families to a `/metrics` page.
pub type MetricsFn = Arc<dyn Fn(&mut Page) + Send + Sync>;

/// What the API serves from.
#[derive(Clone)]
pub struct ApiConfig {
    pub store: Arc<dyn MetaStore>,
    /// The identity `POST /v1/volumes` uses towards storage nodes and members.
    pub host: HostIdentity,
    pub metrics: Option<MetricsFn>,
}

/// A running API server.
pub struct ApiServer {
    http: HttpServer,
}

impl ApiServer {
    /// Listens on `addr` (port 0: any free port).
    pub async fn start(addr: SocketAddr, config: ApiConfig) -> Result<ApiServer, ControlError> {
        let http = HttpServer::serve(addr, router(config)).await.map_err(|e| {
            ControlError::ApiTransport {
                addr: addr.to_string(),
                reason: format!("cannot listen: {e}"),
            }
        })?;
        Ok(ApiServer { http })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// Stops accepting and lets requests in flight finish.
    pub async fn stop(self) {
        self.http.stop().await;
    }
}

fn router(cfg: ApiConfig) -> Router {
    let api = Router::new()
        .route("/volumes", get(list_volumes).post(create_volume))
        .route("/volumes/{name}", get(get_volume).delete(delete_volume))
        .route("/volumes/{name}/move", post(move_volume))
        .route(
            "/volumes/{name}/members/{slot}/replace",
            post(replace_member),
        )
        .route("/nodes", get(nodes))
        .route("/drives", get(drives))
        .route("/events", get(events));
    let app = Router::new()
        .route("/metrics", get(metrics))
        .nest(API_PREFIX, api)
        .merge(crate::dashboard::router())
        .with_state(Arc::new(cfg));
    httpapi::server::finish(app)
}

type Cfg = State<Arc<ApiConfig>>;

fn err(e: ControlError) -> ApiError {
    ApiError::new(e.http_status(), e.to_string())
}

fn flag(q: &HashMap<String, String>, name: &str) -> bool {
    q.get(name)
        .is_some_and(|v| v.is_empty() || v == "true" || v == "1")
}

async fn list_volumes(State(cfg): Cfg) -> Result<Response, ApiError> {
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

async fn create_volume(
    State(cfg): Cfg,
    Json(create): Json<CreateVolume>,
) -> Result<Response, ApiError> {
    let record = provision::create_volume(cfg.store.as_ref(), &create, &cfg.host)
        .await
        .map_err(err)?;
    Ok(json(StatusCode::CREATED, &record))
}

async fn get_volume(State(cfg): Cfg, Path(name): Path<String>) -> Result<Response, ApiError> {
    match provision::volume_view(cfg.store.as_ref(), &name)
        .await
        .map_err(err)?
    {
        Some(v) => Ok(ok(&v)),
        None => Err(ApiError::not_found(format!("no volume named {name:?}"))),
    }
}

async fn delete_volume(
    State(cfg): Cfg,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let record = provision::delete_volume(cfg.store.as_ref(), &name, flag(&q, "force"), &cfg.host)
        .await
        .map_err(err)?;
    Ok(ok(&record))
}

async fn move_volume(
    State(cfg): Cfg,
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

async fn replace_member(
    State(cfg): Cfg,
    Path((name, slot)): Path<(String, usize)>,
    Json(req): Json<provision::replace::ReplaceMember>,
) -> Result<Response, ApiError> {
    let accepted =
        provision::replace::request_replace(cfg.store.as_ref(), &name, slot, &req, &cfg.host)
            .await
            .map_err(err)?;
    Ok(json(StatusCode::ACCEPTED, &accepted))
}

async fn nodes(State(cfg): Cfg) -> Result<Response, ApiError> {
    Ok(ok(&list_nodes(cfg.store.as_ref()).await.map_err(err)?))
}

async fn drives(State(cfg): Cfg) -> Result<Response, ApiError> {
    Ok(ok(&super::cluster_views::drives(cfg.store.as_ref())
        .await
        .map_err(err)?))
}

async fn events(
    State(cfg): Cfg,
    Query(q): Query<super::cluster_views::EventsQuery>,
) -> Result<Response, ApiError> {
    Ok(ok(&super::cluster_views::events(cfg.store.as_ref(), &q)
        .await
        .map_err(err)?))
}

async fn metrics(State(cfg): Cfg) -> Result<Response, ApiError> {
    let text = render_metrics(&cfg).await.map_err(err)?;
    let mut r = text.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(httpapi::metrics::CONTENT_TYPE),
    );
    Ok(r)
}

async fn render_metrics(cfg: &ApiConfig) -> Result<String, ControlError> {
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
