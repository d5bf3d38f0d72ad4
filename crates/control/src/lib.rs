//! The control plane of a Ferrobay cluster (`docs/cluster.md`).
//!
//! - [`records`]: what the metadata store holds about nodes and volumes (serde JSON under
//!   the keys of [`meta::schema`]).
//! - [`metaurl`]: opening the store a `--meta` URL names.
//! - [`registration`]: live nodes under leases (records kept current), processor slots.
//! - [`exports`]: what a node's record says it exports (subsystems, access lists).
//! - [`cdc`]: the central discovery controller: every subsystem of the cluster, from the
//!   node records, per host.
//! - [`provision`]: creating volumes across storage nodes (Namespace Management over the
//!   fabric), deleting, listing, moving them; object pools of KV namespaces.
//! - [`pool_gateway`]: an S3 gateway on an object pool, following its record.
//! - [`qos`]: volume QoS limits in the volume records.
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
pub mod cdc;
pub mod dashboard;
pub mod devcluster;
pub mod error;
pub mod events;
pub mod exports;
pub mod health;
pub mod metaurl;
pub mod pool_gateway;
pub mod processor;
pub mod provision;
pub mod qos;
pub mod records;
pub mod registration;
pub mod upgrade;
pub mod volume_auth;

pub use error::ControlError;
