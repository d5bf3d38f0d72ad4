//! The processor node's HTTP API (JSON; `docs/cluster.md`), served over
//! [`httpapi`]'s axum server, and [`ApiClient`] for the CLI.
//!
//! | method | path | body | answer |
//! |---|---|---|---|
//! | GET | /v1/volumes | | `[VolumeView]` |
//! | POST | /v1/volumes | `CreateVolume` | 201 `VolumeRecord` |
//! | GET | /v1/volumes/NAME | | `VolumeView` |
//! | DELETE | /v1/volumes/NAME[?force=true] | | `VolumeRecord` |
//! | POST | /v1/volumes/NAME/move | `{"to": "p2"}` | 202 `{"volume", "to"}` |
//! | POST | /v1/volumes/NAME/members/SLOT/replace | `{"storage_node": "n2"}` | 202 `ReplaceRequest` |
//! | GET | /v1/nodes | | `[NodeRecord]` |
//! | GET | /v1/drives | | `[DriveView]`: every live storage node's drives |
//! | GET | /v1/events[?since=&before=&limit=] | | `EventPage`, newest first |
//! | GET | /metrics | | Prometheus text |
//!
//! Errors: `{"error": "one line"}` with 400 (bad request), 404 (no such volume or
//! path), 405, 409 (name taken, volume owned), 502 (a storage node failed), 503 (store
//! unreachable).

mod client;
pub mod cluster_views;
mod server;

pub use client::ApiClient;
pub use server::{ApiConfig, ApiServer, MetricsFn};

use serde::{Deserialize, Serialize};

/// Path prefix of every API call.
pub const API_PREFIX: &str = "/v1";

/// `POST /v1/volumes/NAME/move`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRequest {
    pub to: String,
}

/// The answer to a move request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveAccepted {
    pub volume: String,
    pub to: String,
}
