//! HTTP plumbing shared by the control APIs of storage nodes and processor nodes, so
//! that both serve the same conventions from one well-kept stack (axum on hyper):
//!
//! - [`server`]: [`HttpServer`] runs an axum `Router` (keep-alive, chunked bodies, bounded
//!   connections, head timeout, body limit, graceful shutdown); [`server::finish`] adds the
//!   JSON 404/405 answers and the body limit;
//! - [`error`]: [`ApiError`] → `{"error": "<one line>"}` with its status; [`error::json`];
//! - [`extract`]: `Json`, `Path`, `Query` extractors that reject with [`ApiError`];
//! - [`client`]: [`HttpClient`], pooled, with a timeout per call and the bearer token;
//! - [`metrics`]: [`metrics::Page`], `/metrics` through prometheus-client;
//! - [`auth`]: the bearer [`auth::Token`] (generated, kept 0600, compared in constant time)
//!   and [`auth::require_token`], the middleware that answers 401;
//! - [`openapi`]: the `bearer` security scheme and serving the generated documents;
//! - [`probe`]: the public paths (`/metrics`, `/healthz`, the OpenAPI document);
//! - [`tls`]: HTTPS (rustls, X.509): [`tls::ServerTls`] from PEM files, the trust of clients
//!   ([`tls::ClientTls`]), and [`tls::generate`] for a self-signed CA and server certificate;
//! - [`cert_dir`]: [`cert_dir::CertDir`], a CA and a server certificate kept in one
//!   directory, renewed under the same CA (`ferrobay gen-cert`, `ferrobay up --tls`).

pub mod auth;
pub mod cert_dir;
pub mod client;
pub mod error;
pub mod extract;
mod files;
pub mod metrics;
pub mod openapi;
pub mod probe;
pub mod server;
pub mod tls;

pub use client::{ClientError, HttpClient};
pub use error::{ApiError, ErrorBody};
pub use server::HttpServer;
