//! The error of the control plane's operations. Every message is one line; the HTTP API
//! answers with [`ControlError::http_status`].

use meta::MetaError;
use meta::schema::{OwnershipError, SchemaError};

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A `--meta` URL that names no store.
    #[error("invalid metadata store URL {url:?}: {reason}")]
    MetaUrl { url: String, reason: String },
    /// The request itself is wrong (bad name, level, size, placement...).
    #[error("{0}")]
    Invalid(String),
    /// A volume or node that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request clashes with the cluster's state (name taken, volume owned...).
    #[error("{0}")]
    Conflict(String),
    /// A build that cannot run beside the cluster's other nodes (docs/upgrade.md).
    #[error("{0}")]
    Incompatible(String),
    /// A storage node (or member target) refused or failed an operation.
    #[error("storage node {node}: {reason}")]
    Storage { node: String, reason: String },
    #[error("volume: {0}")]
    Volume(#[from] volume::VolumeError),
    #[error("NVMe/TCP: {0}")]
    Host(#[from] nvmf_host::HostError),
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error(transparent)]
    Schema(SchemaError),
    /// A processor node's API refused the request (its message).
    #[error("{message}")]
    Api { status: u16, message: String },
    /// A processor node's API could not be reached or answered garbage.
    #[error("API at {addr}: {reason}")]
    ApiTransport { addr: String, reason: String },
}

impl From<SchemaError> for ControlError {
    fn from(e: SchemaError) -> Self {
        match e {
            SchemaError::Meta(m) => ControlError::Meta(m),
            SchemaError::InvalidName { .. } => ControlError::Invalid(e.to_string()),
            other => ControlError::Schema(other),
        }
    }
}

impl From<OwnershipError> for ControlError {
    fn from(e: OwnershipError) -> Self {
        match e {
            OwnershipError::Schema(s) => s.into(),
            other => ControlError::Conflict(other.to_string()),
        }
    }
}

impl ControlError {
    /// The HTTP status the API answers this error with.
    pub fn http_status(&self) -> u16 {
        match self {
            ControlError::MetaUrl { .. } | ControlError::Invalid(_) => 400,
            ControlError::NotFound(_) => 404,
            ControlError::Conflict(_) | ControlError::Incompatible(_) => 409,
            ControlError::Api { status, .. } => *status,
            ControlError::Meta(MetaError::Unavailable(_)) => 503,
            ControlError::Volume(
                volume::VolumeError::Invalid(_)
                | volume::VolumeError::Layout(_)
                | volume::VolumeError::TooSmall { .. }
                | volume::VolumeError::BlockSize { .. },
            ) => 400,
            // A member that already carries a volume.
            ControlError::Volume(volume::VolumeError::InUse { .. }) => 409,
            // A member target failed while the volume was being formatted.
            ControlError::Volume(
                volume::VolumeError::Member { .. } | volume::VolumeError::Io(_),
            ) => 502,
            ControlError::Storage { .. }
            | ControlError::Host(_)
            | ControlError::ApiTransport { .. } => 502,
            ControlError::Volume(_) | ControlError::Meta(_) | ControlError::Schema(_) => 500,
        }
    }

    pub(crate) fn storage(node: &str, reason: impl std::fmt::Display) -> ControlError {
        ControlError::Storage {
            node: node.to_string(),
            reason: reason.to_string().replace(['\n', '\r'], " "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_one_line_messages() {
        let cases = [
            (ControlError::Invalid("bad".into()), 400),
            (ControlError::NotFound("no".into()), 404),
            (ControlError::Conflict("taken".into()), 409),
            (ControlError::storage("n1", "line one\nline two"), 502),
            (
                ControlError::Meta(MetaError::Unavailable("down".into())),
                503,
            ),
            (
                ControlError::Volume(volume::VolumeError::InUse {
                    name: "d".into(),
                    volume: uuid::Uuid::nil(),
                }),
                409,
            ),
            (
                SchemaError::InvalidName {
                    name: "a/b".into(),
                    reason: "slash",
                }
                .into(),
                400,
            ),
        ];
        for (e, status) in cases {
            assert_eq!(e.http_status(), status, "{e}");
            assert!(!e.to_string().contains('\n'), "{e}");
        }
    }
}
