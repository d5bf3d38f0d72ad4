//! The control plane of a Ferrobay cluster (`docs/cluster.md`).
//!
//! - [`records`]: what the metadata store holds about nodes and volumes (serde JSON under
//!   the keys of [`meta::schema`]).
//! - [`metaurl`]: opening the store a `--meta` URL names.
//! - [`registration`]: live nodes under leases, processor slots.
//! - [`provision`]: creating volumes across storage nodes (Namespace Management over the
//!   fabric), deleting, listing, moving them.
//! - [`api`]: the cluster REST API (served by processor nodes and `ferrobay up`) and its
//!   client.
//! - [`auth`]: the cluster's API token (in the store) and clients of storage nodes with it.
//! - [`events`]: the cluster event log (member failed, rebuild, takeover, handoff...).
//! - [`dashboard`]: the web dashboard the API port serves at `/ui/`.
//! - [`processor`]: processor nodes (ownership, fencing, ANA export, failover, handoff).
//! - [`devcluster`]: `ferrobay up`, a whole cluster in one process.
//! - [`ControlError`] (module [`error`]): the error of every operation here.

pub mod api;
pub mod auth;
pub mod dashboard;
pub mod devcluster;
pub mod error;
pub mod events;
pub mod metaurl;
pub mod processor;
pub mod provision;
pub mod records;
pub mod registration;

pub use error::ControlError;
