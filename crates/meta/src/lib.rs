//! Ferrobay's metadata store: nodes, drives, volumes, placement and owners.
//!
//! - [`MetaStore`]: the store trait (key/value with revisions, transactions with
//!   compare-and-swap, watches that resume from a revision, leases). Object-safe: the
//!   control plane holds an `Arc<dyn MetaStore>`.
//! - Backends: [`EmbeddedStore`] (redb in a data dir, one process) and [`EtcdStore`]
//!   (an etcd v3 cluster).
//! - [`LeaseKeeper`]: keeps a lease alive and says, before the store can hand the lease's
//!   keys to anyone else, that it may be lost.
//! - [`schema`]: key layout, typed JSON helpers and volume ownership with fencing epochs.
//!
//! See `docs/meta.md`.

mod clock;
mod embedded;
mod error;
mod etcd;
mod keeper;
pub mod schema;
mod store;
pub mod testing;
mod types;

pub use clock::{Clock, ManualClock, SystemClock};
pub use embedded::{EmbeddedOptions, EmbeddedStore};
pub use error::MetaError;
pub use etcd::{EtcdOptions, EtcdStore};
pub use keeper::{KeeperConfig, LeaseKeeper, LeaseState, LossReason, wait_lost};
pub use store::{MetaFuture, MetaStore, WatchStream};
pub use types::{
    CasOutcome, Compare, Expect, KeyValue, Lease, LeaseId, Listing, MAX_KEY_BYTES, MAX_TXN_OPS,
    MAX_VALUE_BYTES, Revision, Txn, TxnOp, TxnOutcome, WatchBatch, WatchEvent, validate_key,
    validate_prefix,
};
