//! When a grade starts a proactive copy.

use serde::{Deserialize, Serialize};
use telemetry::Grade;

/// The proactive copy policy of a node. The copy itself is paced by the volume's rebuild
/// throttle (`EngineOptions::throttle`), like a rebuild.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProactivePolicy {
    /// Start copies at all (off: grades are only reported).
    pub enabled: bool,
    /// The grade that starts a copy (`failing` by default; `suspect` is more eager).
    pub on_grade: Grade,
    /// Copies running at once on this node, over all its volumes (each volume runs at
    /// most one).
    pub max_concurrent: usize,
}

impl Default for ProactivePolicy {
    fn default() -> Self {
        ProactivePolicy {
            enabled: true,
            on_grade: Grade::Failing,
            max_concurrent: 1,
        }
    }
}

impl ProactivePolicy {
    pub fn acts_on(&self, grade: Grade) -> bool {
        self.enabled && grade >= self.on_grade && grade > Grade::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acts_only_when_enabled_and_bad_enough() {
        let p = ProactivePolicy::default();
        assert!(p.acts_on(Grade::Failing));
        assert!(!p.acts_on(Grade::Suspect));
        let eager = ProactivePolicy {
            on_grade: Grade::Suspect,
            ..p.clone()
        };
        assert!(eager.acts_on(Grade::Suspect));
        let never = ProactivePolicy {
            on_grade: Grade::Ok,
            ..p.clone()
        };
        assert!(!never.acts_on(Grade::Ok), "ok never starts a copy");
        let off = ProactivePolicy {
            enabled: false,
            ..p
        };
        assert!(!off.acts_on(Grade::Failing));
    }
}
