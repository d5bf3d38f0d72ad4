//! The storage node service: the logic between the `ferrobay node` CLI and the
//! `nvmf-target` engine.
//!
//! - [`node`]: [`StorageNode::start`] brings a node up from its data dir and drives;
//!   operations for `ferrobay node ns|host|health`;
//! - [`http`]: the node's HTTP port (`/metrics`, JSON control API) and [`NodeClient`];
//! - [`state`]: the node's persistent state in its data dir (atomic, checksummed);
//! - [`catalog`]: the state plus allocators, changed one persisted step at a time;
//! - [`extent`]: carving namespaces out of drives; [`extent_device`]: a namespace made
//!   of several extents as one block device;
//! - [`naming`]: default NQNs, serial numbers, NGUID/EUI-64/UUID;
//! - [`nvme_smart`]: NVMe drives' own temperature and spare for the SMART log;
//! - [`text`]: plain-text tables of API results for the CLI.

pub mod api;
pub mod catalog;
pub mod extent;
pub mod extent_device;
pub mod http;
pub mod naming;
pub mod node;
pub mod nvme_smart;
pub mod state;
pub mod telemetry_metrics;
pub mod text;

pub use http::{ClientError, NodeClient};
pub use naming::{NodeDrive, parse_node_drive};
pub use node::{DriveWrapper, NodeConfig, NodeError, StorageNode};
