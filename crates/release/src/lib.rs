//! Release identity and compatibility: what this build is ([`BuildInfo`]), which cluster
//! protocols it speaks, whether two builds may run side by side in one cluster
//! ([`BuildInfo::works_beside`]), what another binary on disk is ([`probe`]), and the
//! signal a daemon waits on to re-execute itself as a new binary ([`UpgradeSignal`]).
//!
//! The cluster protocol is one number for everything nodes exchange among themselves
//! beyond the NVMe standards: the records in the metadata store and the node APIs. A
//! build speaks `protocol` and still works beside builds down to `oldest_protocol`
//! (it reads what they write and writes nothing they cannot read). Two builds work side
//! by side when their ranges meet; an incompatible mix is refused where it would start
//! (docs/upgrade.md).

mod probe;
mod signal;
pub mod sockets;

pub use probe::{ProbeError, probe};
pub use signal::{UpgradeRequest, UpgradeSignal};

/// The cluster protocol this build speaks.
pub const CLUSTER_PROTOCOL: u32 = 1;
/// The oldest cluster protocol this build works beside.
pub const OLDEST_CLUSTER_PROTOCOL: u32 = 1;

const _: () = assert!(OLDEST_CLUSTER_PROTOCOL >= 1 && OLDEST_CLUSTER_PROTOCOL <= CLUSTER_PROTOCOL);

/// What a build is: `ferrobay version --json` prints it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BuildInfo {
    /// The package version (`0.1.0`).
    pub version: String,
    /// The cluster protocol it speaks.
    pub protocol: u32,
    /// The oldest cluster protocol it works beside.
    pub oldest_protocol: u32,
}

impl BuildInfo {
    /// This build.
    pub fn this() -> BuildInfo {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: CLUSTER_PROTOCOL,
            oldest_protocol: OLDEST_CLUSTER_PROTOCOL,
        }
    }

    /// Whether this build and `other` may run in one cluster: their protocol ranges
    /// meet (a cluster runs at the newest protocol every node speaks: the lowest
    /// `protocol` among them).
    pub fn works_beside(&self, other: &BuildInfo) -> bool {
        self.oldest_protocol.max(other.oldest_protocol) <= self.protocol.min(other.protocol)
    }

    /// `ferrobay 0.1.0 (cluster protocol 1)` or `... (cluster protocols 1-2)`.
    pub fn describe(&self) -> String {
        if self.oldest_protocol == self.protocol {
            format!(
                "ferrobay {} (cluster protocol {})",
                self.version, self.protocol
            )
        } else {
            format!(
                "ferrobay {} (cluster protocols {}-{})",
                self.version, self.oldest_protocol, self.protocol
            )
        }
    }

    /// A one-line reason why `self` may not join a cluster where `node` runs `theirs`,
    /// or None when they work side by side.
    pub fn refusal_beside(&self, node: &str, theirs: &BuildInfo) -> Option<String> {
        if self.works_beside(theirs) {
            return None;
        }
        let what = if theirs.protocol < self.oldest_protocol {
            format!(
                "upgrade {node} first, to a build that speaks cluster protocol {} or newer",
                self.oldest_protocol
            )
        } else {
            format!(
                "upgrade this node to a build that speaks cluster protocol {}",
                theirs.oldest_protocol.max(self.protocol + 1)
            )
        };
        Some(format!(
            "{} cannot run beside node {node}, which runs {}: {what}",
            self.describe(),
            theirs.describe()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(oldest: u32, protocol: u32) -> BuildInfo {
        BuildInfo {
            version: format!("0.{protocol}.0"),
            protocol,
            oldest_protocol: oldest,
        }
    }

    #[test]
    fn ranges_that_meet_work_side_by_side() {
        assert!(build(1, 1).works_beside(&build(1, 1)));
        // A new build that still speaks the old protocol: the rolling-upgrade case.
        assert!(build(1, 2).works_beside(&build(1, 1)));
        assert!(build(1, 1).works_beside(&build(1, 2)));
        assert!(build(2, 3).works_beside(&build(1, 2)));
    }

    #[test]
    fn an_incompatible_mix_is_refused_with_a_reason() {
        // The new build dropped protocol 1: the old node must go first.
        let new = build(2, 2);
        let old = build(1, 1);
        assert!(!new.works_beside(&old) && !old.works_beside(&new));
        let why = new.refusal_beside("n2", &old).expect("refused");
        assert!(
            why.contains("node n2") && why.contains("upgrade n2 first"),
            "{why}"
        );
        let why = old.refusal_beside("n3", &new).expect("refused");
        assert!(
            why.contains("upgrade this node") && why.contains("protocol 2"),
            "{why}"
        );
        assert!(build(1, 2).refusal_beside("n1", &build(1, 1)).is_none());
    }

    #[test]
    fn this_build_is_described() {
        let me = BuildInfo::this();
        assert!(me.works_beside(&me));
        assert_eq!(
            me.describe(),
            format!(
                "ferrobay {} (cluster protocol 1)",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert_eq!(
            build(1, 2).describe(),
            "ferrobay 0.2.0 (cluster protocols 1-2)"
        );
    }
}

/// Why a binary cannot replace this one.
#[derive(Debug, thiserror::Error)]
pub enum CandidateError {
    #[error("the binary must be an absolute path, not {0:?}")]
    RelativePath(std::path::PathBuf),
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error("{0}")]
    Incompatible(String),
}

/// What `binary` is, if it may replace this build on a node of a cluster whose other
/// nodes run this build (the rolling-upgrade case): it must work beside this build.
pub fn check_candidate(binary: &std::path::Path, node: &str) -> Result<BuildInfo, CandidateError> {
    if !binary.is_absolute() {
        return Err(CandidateError::RelativePath(binary.to_path_buf()));
    }
    let candidate = probe(binary)?;
    match candidate.refusal_beside(node, &BuildInfo::this()) {
        Some(why) => Err(CandidateError::Incompatible(why)),
        None => Ok(candidate),
    }
}
