//! The cluster REST API (`docs/api.md`), served by every processor node and by
//! `ferrobay up` on [`httpapi`]'s stack, and [`ApiClient`], its client for the CLI.
//!
//! - [`server`]: [`ApiServer`] and [`ApiConfig`]: the router, the bearer token, the
//!   OpenAPI document at `/api/v1/openapi.json`;
//! - [`doc`]: the document's head and [`doc::api_routes`], the one list of routes (each
//!   handler carries its own OpenAPI entry: adding a route is a handler plus one line);
//! - `routes/`: the handlers by resource: nodes (with their drives, namespaces and hosts),
//!   volumes, events, and `/metrics` + `/healthz`;
//! - [`text`]: text views of answers for the CLI.
//!
//! Versioning: every path is under `/api/v1`; within v1 fields and routes are only added
//! (clients ignore fields they do not know), a breaking change gets `/api/v2`.

mod client;
pub mod doc;
mod routes;
mod server;
pub mod text;
mod types;

pub use client::ApiClient;
pub use doc::openapi;
pub use server::{ApiConfig, ApiServer, MetricsFn};
pub use types::*;

/// Path prefix of every API call.
pub const API_PREFIX: &str = "/api/v1";
