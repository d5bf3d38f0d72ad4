//! The control plane of a Ferrobay cluster.
//!
//! - [`records`]: what the metadata store holds about nodes and volumes (serde JSON under
//!   the keys of [`meta::schema`]).
pub mod records;
