//! NVMe/TCP target: subsystems, controllers, queues and namespaces over [`blockdev::BlockDevice`],
//! the discovery controller, reservations (through a seam) and keep-alive.
//!
//! ```no_run
//! # async fn demo() -> Result<(), nvmf_target::TargetError> {
//! use std::sync::Arc;
//! use nvmf_target::{NamespaceConfig, SubsystemConfig, Target, TargetConfig};
//! let target = Target::new(TargetConfig::default())?;
//! target.add_subsystem(SubsystemConfig::new("nqn.2026-01.io.ferrobay:n1:ram0"))?;
//! let dev = Arc::new(blockdev::RamDevice::new("ram0", 1 << 30));
//! target.add_namespace("nqn.2026-01.io.ferrobay:n1:ram0", NamespaceConfig::whole_device(1, dev))?;
//! let l = target.listen("127.0.0.1:4420".parse().unwrap()).await?;
//! println!("listening on {}", l.local_addr());
//! # Ok(()) }
//! ```
//!
//! Seams for the node layer: [`NamespaceManager`] (Namespace Management / Attachment
//! commands), [`KvBackend`] (the store behind a Key Value namespace,
//! [`Target::add_kv_namespace`]), [`Reservations`] (per-namespace reservation state machine),
//! [`Target::set_persistent_health`] (SMART counters that survive restarts),
//! [`MediaHealthSource`] (the drives' own temperature and spare, for the SMART log),
//! [`DiscoveryLogSource`] (discovery log entries the target does not host: a central
//! discovery controller), [`QosClock`] (the QoS engine's time) and [`Target::stats`] /
//! [`Target::qos_stats`] (metrics).
//!
//! QoS ([`qos`], `docs/qos.md`): [`Target::set_qos`] limits IOPS and bandwidth per
//! [`QosKey`] (a subsystem or namespace, all hosts or one); commands over a limit wait in
//! order on their connection, never fail; minimums are met under contention by capping
//! the other namespaces.
//!
//! Multipath: every namespace belongs to an ANA group ([`NamespaceConfig::ana_group`]);
//! each listener holds a state per group ([`Target::set_ana_state`],
//! [`ListenerHandle::set_ana_state`]) that its controllers report in the ANA log and
//! enforce on I/O.

mod ana;
pub mod auth;
mod cmd;
mod config;
mod controller;
mod discovery;
mod discovery_source;
mod error;
mod ext_telemetry;
mod fence;
mod fuzz;
mod kv_backend;
mod kv_mem;
mod log_throttle;
mod media_health;
mod namespace;
mod ns_manager;
mod pool;
pub mod qos;
pub mod reservation;
mod resv_api;
mod stats;
mod subsystem;
mod sync;
mod target;
mod transport;

pub use ana::{ANA_MAX_GROUPS, ANA_TRANSITION_TIME_S, AnaState};
pub use auth::{AuthExchange, AuthRandom, DhchapHostConfig, OsAuthRandom, fuzz_auth_exchange};
pub use config::{
    ADMIN_IN_CAPSULE_BYTES, DEFAULT_ANA_GROUP, DiscoveryControllerType, KvNamespaceConfig,
    MIN_MAXH2CDATA_BYTES, NamespaceConfig, PAGE_BYTES, SubsystemConfig, TargetConfig,
};
pub use discovery_source::{DiscoveryLogSource, DiscoverySnapshot};
pub use error::TargetError;
pub use ext_telemetry::TelemetrySource;
pub use fuzz::{
    FUZZ_HOSTNQN, FUZZ_KV_NSID, FUZZ_SUBNQN, fuzz_one_connection, fuzz_seed_admin_session,
    fuzz_seed_io_session, fuzz_seed_kv_session,
};
pub use kv_backend::{KvBackend, KvBackendError, KvBufFuture, KvFuture, KvRetrieved, KvUsage};
pub use kv_mem::MemKvBackend;
pub use media_health::{AvailableSpare, MediaHealth, MediaHealthSource};
pub use namespace::{Attachment, NamespaceInfo};
pub use ns_manager::{CreateKvNamespace, CreateNamespace, NamespaceManager};
pub use qos::{
    ManualClock, MonotonicClock, QosCapStats, QosClock, QosKey, QosLimitStats, QosLimits, QosStats,
};
pub use reservation::{ReservationSnapshot, ReservationState, ReservationStore};
pub use resv_api::{HostRef, NoReservations, Reservations, ResvEffects};
pub use stats::{
    AdmissionStats, BusyPollStats, ConnStatsSnapshot, HealthSnapshot, LATENCY_BUCKET_COUNT,
    LATENCY_BUCKETS_US, NamespaceStats, NsStatsSnapshot, PersistentHealth, TargetStats,
};
pub use target::{ListenerHandle, ListenerOptions, QOS_CONTROL_PERIOD, SubsystemAccess, Target};

/// The well-known discovery subsystem NQN.
pub use nvme_proto::fabrics::DISCOVERY_NQN;
/// One discovery log entry (what a [`DiscoveryLogSource`] returns).
pub use nvme_proto::log::DiscoveryLogEntry;
