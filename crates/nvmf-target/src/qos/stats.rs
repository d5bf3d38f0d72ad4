//! QoS statistics for `/metrics` and events: per limit and per contention cap.

use serde::Serialize;

use super::limits::{QosKey, QosLimits};

/// One configured limit and what it did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QosLimitStats {
    pub key: QosKey,
    pub limits: QosLimits,
    /// Commands and data bytes that passed this limit.
    pub commands: u64,
    pub bytes: u64,
    /// Commands that waited, with this limit the one that held them longest, and their
    /// total wait in nanoseconds.
    pub throttled_commands: u64,
    pub throttled_ns: u64,
}

/// The contention controller's cap on one namespace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QosCapStats {
    pub subsystem_nqn: String,
    pub nsid: u32,
    /// The cap now (`None`: not capped).
    pub cap_iops: Option<u64>,
    pub cap_bytes_per_s: Option<u64>,
    /// Rates over the controller's last period.
    pub measured_iops: f64,
    pub measured_bytes_per_s: f64,
    /// Commands the cap made wait, and their total wait.
    pub throttled_commands: u64,
    pub throttled_ns: u64,
}

/// Everything the QoS engine counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct QosStats {
    pub limits: Vec<QosLimitStats>,
    pub caps: Vec<QosCapStats>,
}
