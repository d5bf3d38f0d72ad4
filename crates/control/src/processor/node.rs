//! The node's registration, through [`crate::registration`]: its slot (which fixes the
//! cntlid range) and its lease with the NodeRecord under it.

use std::sync::Arc;
use std::time::Duration;

use meta::MetaStore;

use crate::ControlError;
use crate::records::NodeRecord;
use crate::registration::{Registration, register_node};

/// Registers `record` under a new lease of `ttl_ms` (after a lost lease too: its start
/// time stays the node's).
pub(crate) async fn register(
    store: &Arc<dyn MetaStore>,
    record: &NodeRecord,
    ttl_ms: u64,
) -> Result<Registration, ControlError> {
    register_node(store.clone(), record.clone(), Duration::from_millis(ttl_ms)).await
}

/// Backoff between registration attempts after a lost lease.
pub(crate) const REREGISTER_DELAY: Duration = Duration::from_millis(250);
/// Pause before rewriting a record the store did not take.
pub(crate) const REPUBLISH_DELAY: Duration = Duration::from_millis(500);
