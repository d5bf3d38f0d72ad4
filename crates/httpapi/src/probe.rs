//! The paths every Ferrobay HTTP API serves the same way, and the liveness probe.

use serde::{Deserialize, Serialize};

/// Prometheus text, no token needed.
pub const METRICS_PATH: &str = "/metrics";
/// The liveness probe, no token needed.
pub const HEALTHZ_PATH: &str = "/healthz";
/// The OpenAPI document of the API, no token needed (it holds no cluster data).
pub const OPENAPI_PATH: &str = "/api/v1/openapi.json";
/// Paths served without a token (to GET/HEAD); everything else needs one.
pub const PUBLIC_PATHS: &[&str] = &[METRICS_PATH, HEALTHZ_PATH, OPENAPI_PATH];

/// `GET /healthz`: the probe load balancers and supervisors use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Liveness {
    /// `ok` whenever the process answers.
    pub status: String,
    /// The node's name.
    pub name: String,
    /// Ferrobay version.
    pub version: String,
}

impl Liveness {
    pub fn ok(name: &str, version: &str) -> Liveness {
        Liveness {
            status: "ok".into(),
            name: name.to_string(),
            version: version.to_string(),
        }
    }
}
