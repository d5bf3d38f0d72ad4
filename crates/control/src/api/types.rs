//! Request and answer bodies of the cluster API that are not records of their own.

use serde::{Deserialize, Serialize};
use storage_node::api::{DriveHealth, NamespaceView, SubsystemView};
use utoipa::ToSchema;

/// `POST /api/v1/volumes/{name}/move`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveRequest {
    /// The processor node to own the volume.
    pub to: String,
}

/// The answer to a move request (the handoff happens in the background).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MoveAccepted {
    pub volume: String,
    pub to: String,
}

/// The drives of one storage node, as its API reports them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeDrives {
    pub node: String,
    pub drives: Vec<DriveHealth>,
    /// Why the node could not be asked (then `drives` is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The namespaces of one storage node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeNamespaces {
    pub node: String,
    pub namespaces: Vec<NamespaceView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The access lists of one storage node: its subsystems and the hosts allowed on each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeHosts {
    pub node: String,
    pub subsystems: Vec<SubsystemView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /api/v1/events` query.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams,
)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events with a greater id (a follower passes the last `last_id` it saw).
    #[serde(default)]
    pub since: u64,
    /// Only events with a smaller id (the `next_before` of the previous page).
    #[serde(default)]
    pub before: Option<u64>,
    /// Most events in the page (1 to 1000; default 100).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `DELETE /api/v1/volumes/{name}` query.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams,
)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteQuery {
    /// Delete even if a processor node owns the volume (it is stopped first).
    #[serde(default)]
    pub force: bool,
}
