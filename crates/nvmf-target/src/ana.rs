//! Asymmetric Namespace Access: the state of each ANA group as seen through one listener
//! (port), the limits reported in Identify Controller, and the ANA log page.
//!
//! As in Linux nvmet, ANA groups are target-wide and each listener holds one state per
//! group (optimized unless set otherwise). A namespace belongs to one group for its life.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use nvme_proto::Status;
use nvme_proto::log::{AnaGroupDescriptor, AnaLog, ana_state};

use crate::sync::{read, write};

/// Highest ANA group ID (ANAGRPMAX) and, unless MDTS is tiny, the number of groups
/// (NANAGRPID). Same as Linux nvmet.
pub const ANA_MAX_GROUPS: u32 = 128;
/// ANA Transition Time reported in Identify Controller, seconds.
pub const ANA_TRANSITION_TIME_S: u8 = 10;

const ANA_LOG_HEADER_BYTES: u64 = 16;
const ANA_GROUP_DESC_BYTES: u64 = 32;

/// The ANA state of a group on a listener.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AnaState {
    #[default]
    Optimized,
    NonOptimized,
    Inaccessible,
    PersistentLoss,
    /// ANA transition ("change" state): I/O gets ANA Transition until the new state is set.
    Change,
}

impl AnaState {
    /// The state code of the ANA log page.
    pub const fn code(self) -> u8 {
        match self {
            AnaState::Optimized => ana_state::OPTIMIZED,
            AnaState::NonOptimized => ana_state::NON_OPTIMIZED,
            AnaState::Inaccessible => ana_state::INACCESSIBLE,
            AnaState::PersistentLoss => ana_state::PERSISTENT_LOSS,
            AnaState::Change => ana_state::CHANGE,
        }
    }

    pub const fn from_code(code: u8) -> Option<AnaState> {
        match code {
            ana_state::OPTIMIZED => Some(AnaState::Optimized),
            ana_state::NON_OPTIMIZED => Some(AnaState::NonOptimized),
            ana_state::INACCESSIBLE => Some(AnaState::Inaccessible),
            ana_state::PERSISTENT_LOSS => Some(AnaState::PersistentLoss),
            ana_state::CHANGE => Some(AnaState::Change),
            _ => None,
        }
    }

    /// The path status I/O gets in this state, or `None` when I/O is served.
    pub const fn io_status(self) -> Option<Status> {
        match self {
            AnaState::Optimized | AnaState::NonOptimized => None,
            AnaState::Inaccessible => Some(Status::ANA_INACCESSIBLE),
            AnaState::PersistentLoss => Some(Status::ANA_PERSISTENT_LOSS),
            AnaState::Change => Some(Status::ANA_TRANSITION),
        }
    }
}

impl std::fmt::Display for AnaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AnaState::Optimized => "optimized",
            AnaState::NonOptimized => "non-optimized",
            AnaState::Inaccessible => "inaccessible",
            AnaState::PersistentLoss => "persistent-loss",
            AnaState::Change => "change",
        })
    }
}

impl std::str::FromStr for AnaState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "optimized" => Ok(AnaState::Optimized),
            "non-optimized" | "nonoptimized" => Ok(AnaState::NonOptimized),
            "inaccessible" => Ok(AnaState::Inaccessible),
            "persistent-loss" | "persistentloss" => Ok(AnaState::PersistentLoss),
            "change" | "transition" => Ok(AnaState::Change),
            other => Err(format!(
                "unknown ANA state {other:?} (expected optimized, non-optimized, inaccessible, \
                 persistent-loss or change)"
            )),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct GroupEntry {
    state: AnaState,
    /// The listener's change count when this group last changed.
    chgcnt: u64,
}

/// The ANA states of one listener.
#[derive(Debug, Default)]
pub(crate) struct ListenerAna {
    groups: RwLock<BTreeMap<u32, GroupEntry>>,
    /// Bumped on every change: the ANA log's change count.
    chgcnt: AtomicU64,
    /// Fast path of the I/O check: some group is in a state that refuses I/O.
    restricted: AtomicBool,
}

impl ListenerAna {
    pub fn state(&self, group: u32) -> AnaState {
        read(&self.groups)
            .get(&group)
            .map(|e| e.state)
            .unwrap_or_default()
    }

    /// The status I/O to a namespace of `group` gets through this listener, if refused.
    #[inline]
    pub fn check_io(&self, group: u32) -> Result<(), Status> {
        if !self.restricted.load(Ordering::Acquire) {
            return Ok(());
        }
        match self.state(group).io_status() {
            None => Ok(()),
            Some(st) => Err(st),
        }
    }

    /// Sets a group's state; returns whether it changed.
    pub fn set(&self, group: u32, state: AnaState) -> bool {
        let mut g = write(&self.groups);
        let old = g.get(&group).map(|e| e.state).unwrap_or_default();
        if old == state {
            return false;
        }
        let chgcnt = self.chgcnt.fetch_add(1, Ordering::AcqRel) + 1;
        g.insert(group, GroupEntry { state, chgcnt });
        let restricted = g.values().any(|e| e.state.io_status().is_some());
        self.restricted.store(restricted, Ordering::Release);
        true
    }

    pub fn change_count(&self) -> u64 {
        self.chgcnt.load(Ordering::Acquire)
    }

    /// The ANA log for namespaces given as (group, NSID) pairs, sorted by NSID; with
    /// `groups_only` (LSP RGO) the descriptors carry no NSIDs.
    pub fn log(&self, namespaces: &[(u32, u32)], groups_only: bool) -> AnaLog {
        let mut by_group: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for &(group, nsid) in namespaces {
            by_group.entry(group).or_default().push(nsid);
        }
        let g = read(&self.groups);
        let groups = by_group
            .into_iter()
            .map(|(anagrpid, mut nsids)| {
                let e = g.get(&anagrpid).copied().unwrap_or(GroupEntry {
                    state: AnaState::default(),
                    chgcnt: 0,
                });
                nsids.sort_unstable();
                AnaGroupDescriptor {
                    anagrpid,
                    chgcnt: e.chgcnt,
                    state: e.state.code(),
                    nsids: if groups_only { Vec::new() } else { nsids },
                }
            })
            .collect();
        AnaLog {
            chgcnt: self.change_count(),
            groups,
        }
    }
}

/// NANAGRPID and MNAN such that the largest ANA log a host sizes from them
/// (header + NANAGRPID descriptors + MNAN NSIDs) fits in MDTS: Linux disables ANA
/// otherwise. MNAN stays in 1..=`max_namespaces` (Linux requires MNAN ≤ NN).
pub(crate) const fn ana_limits(mdts_bytes: u32, max_namespaces: u32) -> (u32, u32) {
    let mdts = mdts_bytes as u64;
    let mut groups = ANA_MAX_GROUPS as u64;
    let mut budget = mdts.saturating_sub(ANA_LOG_HEADER_BYTES);
    if budget < groups * ANA_GROUP_DESC_BYTES + 4 {
        groups = budget.saturating_sub(4) / ANA_GROUP_DESC_BYTES;
        if groups == 0 {
            groups = 1;
        }
    }
    budget = budget.saturating_sub(groups * ANA_GROUP_DESC_BYTES);
    let mut mnan = budget / 4;
    if mnan > max_namespaces as u64 {
        mnan = max_namespaces as u64;
    }
    if mnan == 0 {
        mnan = 1;
    }
    (groups as u32, mnan as u32)
}

/// Bytes of the largest ANA log the host expects (what it checks against MDTS).
pub(crate) const fn ana_log_max_bytes(groups: u32, mnan: u32) -> u64 {
    ANA_LOG_HEADER_BYTES + groups as u64 * ANA_GROUP_DESC_BYTES + mnan as u64 * 4
}

// The default MDTS fits the full limits.
const _: () = {
    let (g, m) = ana_limits(1 << 20, 1024);
    assert!(g == ANA_MAX_GROUPS && m == 1024);
    assert!(ana_log_max_bytes(g, m) <= 1 << 20);
};
// The smallest MDTS still yields a log that fits.
const _: () = {
    let (g, m) = ana_limits(4096, 1024);
    assert!(g >= 1 && m >= 1 && ana_log_max_bytes(g, m) <= 4096);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_roundtrip() {
        for s in [
            AnaState::Optimized,
            AnaState::NonOptimized,
            AnaState::Inaccessible,
            AnaState::PersistentLoss,
            AnaState::Change,
        ] {
            assert_eq!(AnaState::from_code(s.code()), Some(s));
            assert_eq!(s.to_string().parse::<AnaState>(), Ok(s));
        }
        assert_eq!(AnaState::from_code(0), None);
        assert!("bogus".parse::<AnaState>().is_err());
    }

    #[test]
    fn limits_fit_mdts() {
        for shift in 12..=24 {
            let mdts = 1u32 << shift;
            let (g, m) = ana_limits(mdts, 1024);
            assert!((1..=ANA_MAX_GROUPS).contains(&g), "{mdts}");
            assert!((1..=1024).contains(&m), "{mdts}");
            assert!(ana_log_max_bytes(g, m) <= u64::from(mdts), "{mdts}");
        }
    }

    #[test]
    fn set_and_log() {
        let a = ListenerAna::default();
        assert_eq!(a.check_io(1), Ok(()));
        assert!(
            !a.set(1, AnaState::Optimized),
            "default state is not a change"
        );
        assert!(a.set(2, AnaState::Inaccessible));
        assert_eq!(a.check_io(1), Ok(()));
        assert_eq!(a.check_io(2), Err(Status::ANA_INACCESSIBLE));
        assert!(a.set(2, AnaState::Change));
        assert_eq!(a.check_io(2), Err(Status::ANA_TRANSITION));
        assert!(a.set(2, AnaState::NonOptimized));
        assert_eq!(a.check_io(2), Ok(()));
        let log = a.log(&[(2, 7), (1, 3), (2, 5)], false);
        assert_eq!(log.chgcnt, a.change_count());
        assert_eq!(log.groups.len(), 2);
        assert_eq!(log.groups[0].anagrpid, 1);
        assert_eq!(log.groups[0].nsids, vec![3]);
        assert_eq!(log.groups[1].state, ana_state::NON_OPTIMIZED);
        assert_eq!(log.groups[1].nsids, vec![5, 7]);
        assert_eq!(log.groups[1].chgcnt, a.change_count());
        let rgo = a.log(&[(2, 7)], true);
        assert!(rgo.groups[0].nsids.is_empty());
    }
}
