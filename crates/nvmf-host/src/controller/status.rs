//! What a controller tells its users through a watch channel: its connection state and
//! what asynchronous events reported (ANA, namespace changes, discovery log changes).

use std::sync::Arc;

use nvme_proto::features::AerEvent;
use nvme_proto::log::AnaLog;
use nvme_proto::log::ana::ana_state;

use crate::discovery::DiscoveryLogRead;

/// Where the controller's connection stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControllerState {
    /// Connected and enabled; I/O flows.
    Live,
    /// The connection was lost or is being reset; I/O marked for retry waits.
    Reconnecting {
        /// Connect attempts made since the loss.
        attempts: u32,
    },
    /// Gave up (controller-loss timeout): every command fails.
    Lost { reason: String },
    /// Disconnected or shut down by this host.
    Closed,
}

/// The controller's state and what it learnt from asynchronous events. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ControllerStatus {
    pub state: ControllerState,
    /// Successful connects so far: 1 after `Controller::connect`, +1 per reconnect.
    pub generation: u64,
    /// The controller ID of the current (or last) connection.
    pub cntlid: u16,
    /// Why the last connection ended (or the last reconnect attempt failed).
    pub last_error: Option<String>,
    /// The ANA log as last read (at connect and on each ANA change event); None when the
    /// controller does not report ANA.
    pub ana: Option<Arc<AnaLog>>,
    /// Asynchronous events received so far, and the last one.
    pub events: u64,
    pub last_event: Option<AerEvent>,
    /// Namespace attribute changed events and the namespaces the last one listed
    /// (Changed Namespace List, log page 0x04).
    pub ns_changes: u64,
    pub changed_namespaces: Arc<[u32]>,
    /// Discovery log change events, and the log as re-read after the last one.
    pub discovery_changes: u64,
    pub discovery_log: Option<Arc<DiscoveryLogRead>>,
}

impl ControllerStatus {
    pub(crate) fn new(cntlid: u16) -> Self {
        ControllerStatus {
            state: ControllerState::Reconnecting { attempts: 0 },
            generation: 0,
            cntlid,
            last_error: None,
            ana: None,
            events: 0,
            last_event: None,
            ns_changes: 0,
            changed_namespaces: Arc::from(Vec::new()),
            discovery_changes: 0,
            discovery_log: None,
        }
    }

    pub fn is_live(&self) -> bool {
        self.state == ControllerState::Live
    }

    /// The ANA state of group `anagrpid` (see `nvme_proto::log::ana::ana_state`), if the
    /// log names it.
    pub fn ana_group_state(&self, anagrpid: u32) -> Option<u8> {
        let log = self.ana.as_ref()?;
        log.groups
            .iter()
            .find(|g| g.anagrpid == anagrpid)
            .map(|g| g.state)
    }

    /// The ANA state of namespace `nsid`: from the group listing it, else from group
    /// `anagrpid` (logs read with "groups only" list no NSIDs). Without ANA reporting a
    /// namespace counts as optimized.
    pub fn ana_state_of(&self, nsid: u32, anagrpid: u32) -> u8 {
        let Some(log) = self.ana.as_ref() else {
            return ana_state::OPTIMIZED;
        };
        log.groups
            .iter()
            .find(|g| g.nsids.contains(&nsid))
            .or_else(|| log.groups.iter().find(|g| g.anagrpid == anagrpid))
            .map_or(ana_state::INACCESSIBLE, |g| g.state)
    }
}

/// Lower-case name of an ANA state.
pub fn ana_state_name(s: u8) -> &'static str {
    match s {
        ana_state::OPTIMIZED => "optimized",
        ana_state::NON_OPTIMIZED => "non-optimized",
        ana_state::INACCESSIBLE => "inaccessible",
        ana_state::PERSISTENT_LOSS => "persistent loss",
        ana_state::CHANGE => "change",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_proto::log::AnaGroupDescriptor;

    #[test]
    fn ana_lookup() {
        let mut s = ControllerStatus::new(1);
        assert_eq!(s.ana_state_of(1, 1), ana_state::OPTIMIZED);
        s.ana = Some(Arc::new(AnaLog {
            chgcnt: 1,
            groups: vec![
                AnaGroupDescriptor {
                    anagrpid: 1,
                    chgcnt: 1,
                    state: ana_state::NON_OPTIMIZED,
                    nsids: vec![3],
                },
                AnaGroupDescriptor {
                    anagrpid: 2,
                    chgcnt: 1,
                    state: ana_state::CHANGE,
                    nsids: vec![],
                },
            ],
        }));
        assert_eq!(s.ana_state_of(3, 9), ana_state::NON_OPTIMIZED);
        assert_eq!(s.ana_state_of(4, 2), ana_state::CHANGE);
        assert_eq!(s.ana_state_of(4, 7), ana_state::INACCESSIBLE);
        assert_eq!(s.ana_group_state(2), Some(ana_state::CHANGE));
        assert_eq!(ana_state_name(ana_state::CHANGE), "change");
    }
}
