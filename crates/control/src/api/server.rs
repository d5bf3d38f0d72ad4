//! [`ApiServer`]: the cluster API on [`httpapi::HttpServer`], behind the bearer token.

use std::net::SocketAddr;
use std::sync::Arc;

use httpapi::HttpServer;
use httpapi::auth::{Token, require_token};
use httpapi::metrics::Page;
use httpapi::probe::{OPENAPI_PATH, PUBLIC_PATHS};
use meta::MetaStore;
use nvmf_host::HostIdentity;

use crate::error::ControlError;

/// Adds the processor node's own families to a `/metrics` page.
pub type MetricsFn = Arc<dyn Fn(&mut Page) + Send + Sync>;

/// What the API serves from.
#[derive(Clone)]
pub struct ApiConfig {
    pub store: Arc<dyn MetaStore>,
    /// The identity `POST /api/v1/volumes` uses towards storage nodes and members.
    pub host: HostIdentity,
    /// The bearer token every call but the public ones needs (usually
    /// [`crate::auth::cluster_token`]).
    pub token: Token,
    /// The serving node's name (for `/healthz`).
    pub node_name: String,
    pub metrics: Option<MetricsFn>,
    /// The serving processor node's member health (grades of the volumes it owns), for
    /// `GET /api/v1/predictions`; `None`: a server without a processor node.
    pub health: Option<Arc<crate::health::HealthMonitor>>,
    /// The serving node's upgrade signal (`POST /api/v1/node/upgrade`); `None`: a server
    /// without a daemon to re-execute.
    pub upgrade: Option<release::UpgradeSignal>,
}

/// The state every handler gets.
pub(crate) type ApiState = Arc<ApiConfig>;

/// A running API server.
pub struct ApiServer {
    http: HttpServer,
}

impl ApiServer {
    /// Listens on `addr` (port 0: any free port), plain HTTP.
    pub async fn start(addr: SocketAddr, config: ApiConfig) -> Result<ApiServer, ControlError> {
        ApiServer::start_tls(addr, config, None).await
    }

    /// [`ApiServer::start`] over TLS with `tls` (the dashboard too: it is on this port).
    pub async fn start_tls(
        addr: SocketAddr,
        config: ApiConfig,
        tls: Option<httpapi::tls::ServerTls>,
    ) -> Result<ApiServer, ControlError> {
        let http = HttpServer::serve_as(Some("api"), addr, router(config), tls)
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

    /// Stops accepting and lets requests in flight finish.
    pub async fn stop(self) {
        self.http.stop().await;
    }
}

fn router(cfg: ApiConfig) -> axum::Router {
    let token = cfg.token.clone();
    let (routes, doc) = super::doc::api_routes().split_for_parts();
    let doc = Arc::new(doc);
    let app = routes
        .route(
            OPENAPI_PATH,
            axum::routing::get(move || {
                let doc = doc.clone();
                async move { httpapi::openapi::serve(&doc) }
            }),
        )
        .with_state(Arc::new(cfg));
    // The token guards the 404/405 answers too: without it nothing is revealed. The
    // dashboard's files need none (the page asks the API with the token it holds).
    crate::dashboard::router().merge(require_token(
        httpapi::server::finish(app),
        token,
        PUBLIC_PATHS,
    ))
}
