//! Drive telemetry and failure prediction.
//!
//! - [`hist`]: a log-bucketed latency histogram of relaxed atomics (no lock, no
//!   allocation per I/O).
//! - [`counters`]: per device (drive, namespace or volume member) counters: latency per
//!   operation class, errors by kind, queue depth, bytes and operations.
//! - [`MeteredDevice`]: a `BlockDevice` wrapper that feeds the counters.
//! - [`series`]: a time-series store with bounded retention (fixed-size rings of
//!   per-second and per-minute samples) fed by [`series::Sampler`] with explicit times.
//! - [`predict`]: the documented model (`docs/prediction.md`) that grades each drive
//!   ok / suspect / failing from its series and those of its peers; pure and deterministic.
//!
//! This crate knows nothing of NVMe, volumes or the cluster: the storage node and the
//! processor node wrap their devices, sample them and act on the grades.

pub mod clock;
pub mod counters;
pub mod device;
pub mod hist;
pub mod media;
pub mod predict;
pub mod series;

pub use clock::{Clock, ManualClock, MonotonicClock};
pub use counters::{DeviceTelemetry, ErrorKind, OpClass, TelemetrySnapshot};
pub use device::MeteredDevice;
pub use hist::{HistogramSnapshot, LatencyHistogram};
pub use media::MediaReading;
pub use predict::{Assessment, Grade, PredictionConfig, Reason};
pub use series::{Retention, Sample, Sampler, SeriesStore, SeriesView};
