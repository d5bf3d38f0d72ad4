//! Quality of service: limits on commands and bytes per second, per host and per
//! namespace, and minimums for namespaces when the node is saturated (`docs/qos.md`).
//!
//! - [`limits`]: what a limit applies to ([`QosKey`]: subsystem, optional namespace,
//!   optional host) and what it allows ([`QosLimits`]).
//! - `bucket`: a token bucket as one atomic (the time it would be full again); commands
//!   over a limit go into debt and wait their turn instead of failing.
//! - `gate`: the limits one host's commands on one namespace pass, resolved once per
//!   connection and namespace; a namespace/host without limits has no gate at all, so the
//!   unlimited path costs one `Option` test per command.
//! - `contention`: the feedback controller that caps other namespaces while one with a
//!   minimum falls short (pure logic, tested against a simulated node).
//! - `registry`: the target's configuration and state; [`stats`]: counters for metrics.
//! - time: the `telemetry` crate's monotonic clock ([`QosClock`]; [`ManualClock`] for
//!   tests).
//!
//! Commands that must wait are parked in their connection's throttle queue
//! (`transport::throttle`), released in start-time order by the connection's own task:
//! no extra task, no lock, and nothing but a `BinaryHeap` push (capacity reserved once per
//! connection) per throttled command.

pub(crate) mod bucket;
pub(crate) mod contention;
pub(crate) mod gate;
pub mod limits;
#[doc(hidden)]
pub mod measure;
pub(crate) mod registry;
pub mod stats;

pub use limits::{QOS_MAX_VALUE, QosKey, QosLimits, QosLimitsError};
pub use stats::{QosCapStats, QosLimitStats, QosStats};
/// The QoS engine's time: the monotonic nanosecond clock the drive meters read too, so
/// that tests drive the token buckets and the contention controller by hand.
pub use telemetry::clock::{Clock as QosClock, ManualClock, MonotonicClock};
