//! The cluster API's OpenAPI document: its head here, its paths from the handlers.
//!
//! To add a route (telemetry, predictions, QoS, ...): write the handler in a module of
//! `routes/` with its `#[utoipa::path(..., path = "/api/v1/...", tag = "...")]` (bodies
//! and answers deriving `utoipa::ToSchema`), add `.routes(routes!(handler))` to
//! [`api_routes`], add its tag below if it is a new one, and regenerate the committed
//! document (`FERROBAY_UPDATE_OPENAPI=1 cargo test -p control --test api openapi`).

use httpapi::openapi::BearerAuth;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::routes::{events, nodes, qos, system, telemetry, volumes};
use super::server::ApiState;

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Ferrobay cluster API",
        description = "The cluster from one place: storage and processor nodes, drives, namespaces and access lists of every storage node, volumes, telemetry, failure predictions, events. Served by every processor node and by `ferrobay up`. Every call but /metrics, /healthz and this document needs the bearer token; errors are `{\"error\": \"...\"}` (docs/api.md).",
        license(name = "Apache-2.0"),
        version = "1"
    ),
    modifiers(&BearerAuth),
    components(schemas(httpapi::ErrorBody)),
    tags(
        (name = "system", description = "Liveness and metrics"),
        (name = "nodes", description = "Storage and processor nodes, and the drives, namespaces and access lists of storage nodes"),
        (name = "volumes", description = "Erasure-coded volumes: create, move, delete, status"),
        (name = "events", description = "The cluster's event log"),
        (name = "qos", description = "QoS limits of volumes and of hosts on them (docs/qos.md)"),
        (name = "telemetry", description = "Drive and namespace telemetry of storage nodes, and failure-prediction grades of drives and volume members (docs/prediction.md)"),
    )
)]
struct ClusterApiDoc;

/// Every route of the cluster API with its OpenAPI entry: the one list.
pub(crate) fn api_routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::with_openapi(ClusterApiDoc::openapi())
        .routes(routes!(system::metrics))
        .routes(routes!(system::healthz))
        .routes(routes!(system::upgrade))
        .routes(routes!(nodes::list_nodes))
        .routes(routes!(nodes::get_node))
        .routes(routes!(nodes::node_drives))
        .routes(routes!(nodes::node_namespaces))
        .routes(routes!(nodes::all_drives))
        .routes(routes!(nodes::all_namespaces))
        .routes(routes!(nodes::all_hosts))
        .routes(routes!(nodes::allow_host))
        .routes(routes!(nodes::deny_host))
        .routes(routes!(nodes::allow_any_host))
        .routes(routes!(volumes::list_volumes, volumes::create_volume))
        .routes(routes!(volumes::get_volume, volumes::delete_volume))
        .routes(routes!(volumes::volume_status))
        .routes(routes!(volumes::move_volume))
        .routes(routes!(qos::get_volume_qos))
        .routes(routes!(qos::put_volume_qos, qos::delete_volume_qos))
        .routes(routes!(volumes::replace_member))
        .routes(routes!(events::list_events))
        .routes(routes!(telemetry::all_telemetry))
        .routes(routes!(telemetry::node_telemetry))
        .routes(routes!(telemetry::all_predictions))
        .routes(routes!(telemetry::node_predictions))
}

/// The cluster API's OpenAPI document (what `/api/v1/openapi.json` serves).
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_routes().into_openapi()
}
