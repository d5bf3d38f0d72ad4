//! The cluster API's handlers, by resource (listed once in [`super::doc::api_routes`]).

pub(crate) mod events;
pub(crate) mod nodes;
pub(crate) mod qos;
pub(crate) mod system;
pub(crate) mod telemetry;
pub(crate) mod volumes;

use httpapi::ApiError;

use crate::error::ControlError;

/// A control-plane error as the API answers it.
pub(crate) fn err(e: ControlError) -> ApiError {
    ApiError::new(e.http_status(), e.to_string())
}
