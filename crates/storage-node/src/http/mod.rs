//! The node's HTTP port: Prometheus `/metrics` and the JSON control API, over a minimal
//! HTTP/1.1 implementation (one request per connection), plus the client the CLI uses.

pub mod client;
pub mod metrics;
mod routes;
pub mod server;
pub mod wire;

pub use client::{ClientError, NodeClient};
pub use server::{Handler, HttpServer};
