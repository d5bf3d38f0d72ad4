//! The node's HTTP port: Prometheus `/metrics` and the JSON control API under `/api/v1`
//! (`docs/node-api.md`), on the shared stack of [`httpapi`], plus [`NodeClient`], the
//! client the CLI and the control plane use.

pub mod client;
pub mod metrics;
pub mod qos_metrics;
mod qos_routes;
mod routes;

pub use client::NodeClient;
pub use httpapi::{ClientError, HttpServer};
pub use routes::{accept_upgrade, openapi};

/// Serves the node's metrics and control API on `addr` (port 0 picks a free port); every
/// call but the public ones needs `token`. Over TLS with `tls`.
pub async fn serve(
    addr: std::net::SocketAddr,
    node: crate::StorageNode,
    token: httpapi::auth::Token,
    tls: Option<httpapi::tls::ServerTls>,
) -> std::io::Result<HttpServer> {
    HttpServer::serve_as(Some("http"), addr, routes::router(node, token), tls).await
}
