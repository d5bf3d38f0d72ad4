//! Errors of the processor node runtime.

use meta::MetaError;
use meta::schema::{OwnershipError, SchemaError};

#[derive(Debug, thiserror::Error)]
pub enum ProcessorError {
    #[error("processor configuration: {0}")]
    Config(String),
    #[error("metadata store: {0}")]
    Meta(#[from] MetaError),
    #[error("metadata store: {0}")]
    Schema(#[from] SchemaError),
    #[error("volume ownership: {0}")]
    Ownership(#[from] OwnershipError),
    #[error("NVMe/TCP target: {0}")]
    Target(#[from] nvmf_target::TargetError),
    #[error("member: {0}")]
    Host(#[from] nvmf_host::HostError),
    #[error("volume: {0}")]
    Volume(#[from] volume::VolumeError),
    #[error("volume {volume}: {reason}")]
    Takeover { volume: String, reason: String },
    #[error(transparent)]
    Control(#[from] crate::ControlError),
}

impl From<ProcessorError> for crate::ControlError {
    fn from(e: ProcessorError) -> Self {
        use crate::ControlError as C;
        match e {
            ProcessorError::Meta(m) => C::Meta(m),
            ProcessorError::Schema(s) => s.into(),
            ProcessorError::Ownership(o) => o.into(),
            ProcessorError::Host(h) => C::Host(h),
            ProcessorError::Volume(v) => C::Volume(v),
            ProcessorError::Config(_) | ProcessorError::Target(_) => C::Invalid(e.to_string()),
            ProcessorError::Takeover { .. } => C::Conflict(e.to_string()),
            ProcessorError::Control(c) => c,
        }
    }
}
