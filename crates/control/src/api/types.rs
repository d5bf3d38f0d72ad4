//! Request and answer bodies of the cluster API that are not records of their own.

use serde::{Deserialize, Serialize};
use storage_node::api::{
    DriveHealth, DrivePrediction, DriveTelemetry, NamespaceTelemetry, NamespaceView, Prediction,
    SubsystemView,
};
use utoipa::ToSchema;

use crate::records::NodeRole;

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

/// The telemetry of one storage node (`GET /api/v1/telemetry`), as its API reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NodeTelemetry {
    pub node: String,
    pub drives: Vec<DriveTelemetry>,
    pub namespaces: Vec<NamespaceTelemetry>,
    /// Why the node could not be asked (then the lists are empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One volume member's grade, as the processor node that owns the volume sees it (with
/// fail-slow against the other members of the volume).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MemberPrediction {
    pub volume: String,
    /// Member slot in the volume.
    pub member: usize,
    /// The member's device as the volume names it (its storage node's namespace).
    pub device: String,
    pub prediction: Prediction,
    /// A proactive copy of this member onto a spare runs now (`docs/prediction.md`).
    pub proactive_copy: bool,
}

/// The failure-prediction grades of one node: a storage node's drives, or the members of
/// the volumes a processor node owns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodePredictions {
    pub node: String,
    pub role: NodeRole,
    /// A storage node's drives.
    #[serde(default)]
    pub drives: Vec<DrivePrediction>,
    /// A processor node's volume members.
    #[serde(default)]
    pub members: Vec<MemberPrediction>,
    /// Why the node could not be asked (then the lists are empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /api/v1/nodes/{name}/predictions` query.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams,
)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PredictionsQuery {
    /// Answer only from this server, never forwarding to another processor node's API
    /// (what processor nodes set when they ask each other).
    #[serde(default)]
    pub local: bool,
}
