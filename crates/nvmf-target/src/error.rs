//! Errors of the target's management API.

/// Why a management call (add a subsystem, listen, ...) failed.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
    #[error("invalid NQN {nqn:?}: {reason}")]
    InvalidNqn { nqn: String, reason: String },
    #[error("subsystem {0} already exists")]
    SubsystemExists(String),
    #[error("no subsystem {0}")]
    NoSuchSubsystem(String),
    #[error("namespace {nsid} already exists in {nqn}")]
    NamespaceExists { nqn: String, nsid: u32 },
    #[error("no namespace {nsid} in {nqn}")]
    NoSuchNamespace { nqn: String, nsid: u32 },
    #[error("invalid namespace: {0}")]
    InvalidNamespace(String),
    #[error("no free namespace ID in {0}")]
    NoFreeNsid(String),
    #[error("no listener with port ID {0}")]
    NoSuchListener(u16),
    #[error("invalid QoS limits: {0}")]
    InvalidQos(String),
    #[error("the target is shut down")]
    ShutDown,
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}
