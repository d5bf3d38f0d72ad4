//! The seam through which a discovery controller serves entries its target does not host:
//! a central discovery controller (CDC) lists the subsystems of a whole cluster, which
//! live on other nodes. The target asks the source on every read of the discovery log,
//! per host, and appends what it returns to its own entries.

use std::net::SocketAddr;

use nvme_proto::log::DiscoveryLogEntry;

/// What a [`DiscoveryLogSource`] shows one host at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiscoverySnapshot {
    /// The source's generation these entries belong to: it must grow whenever what any
    /// host sees changes (the log's GENCTR is the target's own generation plus this, so a
    /// host that reads the log in pieces notices a change between two pieces).
    pub generation: u64,
    /// The entries for this host, in the order the log lists them (after the target's
    /// own). Access control is the source's job: return only what this host may use.
    pub entries: Vec<DiscoveryLogEntry>,
}

/// Entries beyond the target's own subsystems, installed with
/// [`crate::Target::set_discovery_log_source`]. After a change, call
/// [`crate::Target::notify_discovery_log_changed`] so that persistent discovery
/// connections get the discovery log change event.
pub trait DiscoveryLogSource: Send + Sync {
    /// The entries host `hostnqn` may see, with their generation, taken atomically.
    /// `local` is the target's address the host's connection came in on (an entry on a
    /// loopback address means nothing to a host that came from elsewhere).
    fn snapshot(&self, hostnqn: &str, local: SocketAddr) -> DiscoverySnapshot;
}
