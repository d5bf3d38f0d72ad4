//! What the discovery log shows beyond the target's own subsystems, and following changes
//! of what the target exports.

use std::sync::Arc;

use tokio::sync::watch;

use crate::discovery_source::DiscoveryLogSource;
use crate::sync::write;
use crate::target::Target;

impl Target {
    /// Installs the source of the discovery log's further entries (a central discovery
    /// controller's view of the cluster); hosts connected to the discovery controller get
    /// a discovery log change event.
    pub fn set_discovery_log_source(&self, source: Arc<dyn DiscoveryLogSource>) {
        *write(&self.inner.discovery_source) = Some(source);
        self.inner.discovery_log_changed();
    }

    /// Tells hosts connected to the discovery controller that the log changed (the
    /// installed source's entries did): bumps the generation and raises the discovery log
    /// change event on every discovery controller whose host enabled it.
    pub fn notify_discovery_log_changed(&self) {
        self.inner.discovery_log_changed();
    }

    /// The discovery generation, changing whenever what the discovery log shows does:
    /// subsystems added or removed, access lists, listeners, referrals, the source. A node
    /// follows it to publish what it exports.
    pub fn discovery_changes(&self) -> watch::Receiver<u64> {
        self.inner.discovery_changes.subscribe()
    }
}
