//! The API's request handler, on `storage_node::http::HttpServer`.

use std::net::SocketAddr;
use std::sync::Arc;

use meta::MetaStore;
use nvmf_host::HostIdentity;
use serde::de::DeserializeOwned;
use storage_node::http::server::HandlerFuture;
use storage_node::http::wire::{Request, Response, decode_segment};
use storage_node::http::{Handler, HttpServer};

use super::{API_PREFIX, MoveAccepted, MoveRequest};
use crate::error::ControlError;
use crate::provision::{self, CreateVolume};
use crate::records::NodeRole;
use crate::registration::list_nodes;

/// Extra Prometheus text appended to `/metrics` (the processor node's own counters).
pub type MetricsFn = Arc<dyn Fn() -> String + Send + Sync>;

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
        let http = HttpServer::serve(addr, Arc::new(ApiHandler { cfg: config }))
            .await
            .map_err(|e| ControlError::ApiTransport {
                addr: addr.to_string(),
                reason: format!("cannot listen: {e}"),
            })?;
        Ok(ApiServer { http })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// Stops accepting (requests in flight finish on their own).
    pub async fn stop(self) {
        self.http.stop().await;
    }
}

struct ApiHandler {
    cfg: ApiConfig,
}

impl Handler for ApiHandler {
    fn handle(&self, req: Request) -> HandlerFuture {
        let cfg = self.cfg.clone();
        Box::pin(async move {
            match route(&cfg, &req).await {
                Ok(r) => r,
                Err(e) => Response::error(e.http_status(), &e.to_string()),
            }
        })
    }
}

fn body<T: DeserializeOwned>(req: &Request) -> Result<T, ControlError> {
    serde_json::from_slice(&req.body)
        .map_err(|e| ControlError::Invalid(format!("request body is not valid JSON: {e}")))
}

fn method_not_allowed(allowed: &str) -> ControlError {
    ControlError::Api {
        status: 405,
        message: format!("method not allowed here (use {allowed})"),
    }
}

fn flag(req: &Request, name: &str) -> bool {
    req.query.as_deref().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == name || kv == format!("{name}=true") || kv == format!("{name}=1"))
    })
}

async fn route(cfg: &ApiConfig, req: &Request) -> Result<Response, ControlError> {
    let store = cfg.store.as_ref();
    if req.path == "/metrics" {
        if req.method != "GET" {
            return Err(method_not_allowed("GET"));
        }
        return Ok(Response::new(
            200,
            "text/plain; version=0.0.4",
            metrics(cfg).await?,
        ));
    }
    let Some(rest) = req.path.strip_prefix(API_PREFIX) else {
        return Err(ControlError::NotFound(format!("no such path {}", req.path)));
    };
    let segs = rest
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode_segment)
        .collect::<Result<Vec<String>, _>>()
        .map_err(|e| ControlError::Invalid(format!("path: {e}")))?;
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let m = req.method.as_str();
    match segs.as_slice() {
        ["volumes"] => match m {
            "GET" => {
                let mut views = Vec::new();
                for r in provision::list_volumes(store).await? {
                    // Deleted between the listing and the read: skip it.
                    if let Some(v) = provision::volume_view(store, &r.name).await? {
                        views.push(v);
                    }
                }
                Ok(Response::json(200, &views))
            }
            "POST" => {
                let create: CreateVolume = body(req)?;
                let record = provision::create_volume(store, &create, &cfg.host).await?;
                Ok(Response::json(201, &record))
            }
            _ => Err(method_not_allowed("GET or POST")),
        },
        ["volumes", name] => match m {
            "GET" => match provision::volume_view(store, name).await? {
                Some(v) => Ok(Response::json(200, &v)),
                None => Err(ControlError::NotFound(format!("no volume named {name:?}"))),
            },
            "DELETE" => {
                let record =
                    provision::delete_volume(store, name, flag(req, "force"), &cfg.host).await?;
                Ok(Response::json(200, &record))
            }
            _ => Err(method_not_allowed("GET or DELETE")),
        },
        ["volumes", name, "move"] => match m {
            "POST" => {
                let mv: MoveRequest = body(req)?;
                provision::request_move(store, name, &mv.to).await?;
                Ok(Response::json(
                    202,
                    &MoveAccepted {
                        volume: name.to_string(),
                        to: mv.to,
                    },
                ))
            }
            _ => Err(method_not_allowed("POST")),
        },
        ["nodes"] => match m {
            "GET" => Ok(Response::json(200, &list_nodes(store).await?)),
            _ => Err(method_not_allowed("GET")),
        },
        _ => Err(ControlError::NotFound(format!("no such path {}", req.path))),
    }
}

async fn metrics(cfg: &ApiConfig) -> Result<String, ControlError> {
    let store = cfg.store.as_ref();
    let volumes = provision::list_volumes(store).await?;
    let nodes = list_nodes(store).await?;
    let mut out = String::new();
    out.push_str("# HELP ferrobay_cluster_volumes Volumes in the cluster.\n");
    out.push_str("# TYPE ferrobay_cluster_volumes gauge\n");
    out.push_str(&format!("ferrobay_cluster_volumes {}\n", volumes.len()));
    out.push_str("# HELP ferrobay_cluster_nodes Live nodes by role.\n");
    out.push_str("# TYPE ferrobay_cluster_nodes gauge\n");
    for (role, name) in [
        (NodeRole::Storage, "storage"),
        (NodeRole::Processor, "processor"),
    ] {
        let n = nodes.iter().filter(|n| n.role == role).count();
        out.push_str(&format!("ferrobay_cluster_nodes{{role=\"{name}\"}} {n}\n"));
    }
    out.push_str("# HELP ferrobay_volume_owned Whether a processor node owns the volume.\n");
    out.push_str("# TYPE ferrobay_volume_owned gauge\n");
    for v in &volumes {
        let owned = meta::schema::current_owner(store, &v.name).await?.is_some();
        out.push_str(&format!(
            "ferrobay_volume_owned{{volume=\"{}\"}} {}\n",
            v.name,
            u8::from(owned)
        ));
    }
    if let Some(f) = &cfg.metrics {
        out.push_str(&f());
    }
    Ok(out)
}
