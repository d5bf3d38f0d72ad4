//! What a QoS limit applies to ([`QosKey`]) and what it allows ([`QosLimits`]).

use serde::{Deserialize, Serialize};

/// The highest rate or burst accepted (per second or units): far above any device, low
/// enough for the buckets' fixed-point arithmetic.
pub const QOS_MAX_VALUE: u64 = 1 << 40;

/// The share of a second a default burst holds: a limit of N IOPS lets N/10 commands
/// through at once after an idle spell.
pub const DEFAULT_BURST_DIVISOR: u64 = 10;

/// What a limit applies to: the commands of one host (`host_nqn`) or of every host
/// together (`None`), on one namespace (`nsid`) or on every namespace of the subsystem
/// together (`None`). A command passes every limit whose key matches it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QosKey {
    pub subsystem_nqn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_nqn: Option<String>,
}

impl QosKey {
    /// Every host's commands on namespace `nsid` together (a volume's own limit).
    pub fn namespace(subsystem_nqn: impl Into<String>, nsid: u32) -> QosKey {
        QosKey {
            subsystem_nqn: subsystem_nqn.into(),
            nsid: Some(nsid),
            host_nqn: None,
        }
    }

    /// One host's commands on namespace `nsid`.
    pub fn host_on_namespace(
        subsystem_nqn: impl Into<String>,
        nsid: u32,
        host_nqn: impl Into<String>,
    ) -> QosKey {
        QosKey {
            subsystem_nqn: subsystem_nqn.into(),
            nsid: Some(nsid),
            host_nqn: Some(host_nqn.into()),
        }
    }

    /// One host's commands on every namespace of the subsystem together.
    pub fn host(subsystem_nqn: impl Into<String>, host_nqn: impl Into<String>) -> QosKey {
        QosKey {
            subsystem_nqn: subsystem_nqn.into(),
            nsid: None,
            host_nqn: Some(host_nqn.into()),
        }
    }

    /// Whether a command of `host_nqn` on `subsystem_nqn`/`nsid` passes this limit.
    pub fn matches(&self, subsystem_nqn: &str, nsid: u32, host_nqn: &str) -> bool {
        self.subsystem_nqn == subsystem_nqn
            && self.nsid.is_none_or(|n| n == nsid)
            && self.host_nqn.as_deref().is_none_or(|h| h == host_nqn)
    }
}

impl std::fmt::Display for QosKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.subsystem_nqn)?;
        match self.nsid {
            Some(n) => write!(f, " namespace {n}")?,
            None => write!(f, " (all namespaces)")?,
        }
        match &self.host_nqn {
            Some(h) => write!(f, " host {h}"),
            None => write!(f, " (all hosts)"),
        }
    }
}

/// Limits of one [`QosKey`]. Absent fields do not limit. Maxima are enforced by token
/// buckets (commands over them wait, in order, never fail); minima are guaranteed by the
/// contention controller when the node is saturated (`docs/qos.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QosLimits {
    /// Most commands per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iops: Option<u64>,
    /// Most data bytes per second (read + written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes_per_s: Option<u64>,
    /// Commands let through at once after an idle spell (default: a tenth of `max_iops`,
    /// at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_ios: Option<u64>,
    /// Bytes let through at once after an idle spell (default: a tenth of
    /// `max_bytes_per_s`, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_bytes: Option<u64>,
    /// Commands per second this namespace gets when the node is saturated (namespace-wide
    /// keys only: `nsid` set, no host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_iops: Option<u64>,
    /// Bytes per second this namespace gets when the node is saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_bytes_per_s: Option<u64>,
}

/// Why limits were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QosLimitsError(pub String);

impl QosLimits {
    /// No field set: the key is not limited.
    pub fn is_empty(&self) -> bool {
        *self == QosLimits::default()
    }

    /// Whether a minimum is set.
    pub fn has_minimum(&self) -> bool {
        self.min_iops.is_some() || self.min_bytes_per_s.is_some()
    }

    /// The burst of the IOPS bucket in commands.
    pub fn effective_burst_ios(&self) -> Option<u64> {
        self.max_iops
            .map(|r| self.burst_ios.unwrap_or((r / DEFAULT_BURST_DIVISOR).max(1)))
    }

    /// The burst of the bandwidth bucket in bytes.
    pub fn effective_burst_bytes(&self) -> Option<u64> {
        self.max_bytes_per_s.map(|r| {
            self.burst_bytes
                .unwrap_or((r / DEFAULT_BURST_DIVISOR).max(1))
        })
    }

    /// Checks the limits for `key`: values in 1..=[`QOS_MAX_VALUE`], a burst only with its
    /// maximum, a minimum only on a namespace-wide key and not above its maximum.
    pub fn validate(&self, key: &QosKey) -> Result<(), QosLimitsError> {
        let fields = [
            ("max_iops", self.max_iops),
            ("max_bytes_per_s", self.max_bytes_per_s),
            ("burst_ios", self.burst_ios),
            ("burst_bytes", self.burst_bytes),
            ("min_iops", self.min_iops),
            ("min_bytes_per_s", self.min_bytes_per_s),
        ];
        for (name, v) in fields {
            if let Some(v) = v
                && !(1..=QOS_MAX_VALUE).contains(&v)
            {
                return Err(QosLimitsError(format!(
                    "{name} {v} is out of range 1..={QOS_MAX_VALUE}"
                )));
            }
        }
        if self.burst_ios.is_some() && self.max_iops.is_none() {
            return Err(QosLimitsError("a burst of I/Os needs max_iops".into()));
        }
        if self.burst_bytes.is_some() && self.max_bytes_per_s.is_none() {
            return Err(QosLimitsError(
                "a burst of bytes needs max_bytes_per_s".into(),
            ));
        }
        if self.has_minimum() && (key.nsid.is_none() || key.host_nqn.is_some()) {
            return Err(QosLimitsError(format!(
                "a minimum applies to a namespace as a whole (an NSID and no host), not to {key}"
            )));
        }
        if let (Some(min), Some(max)) = (self.min_iops, self.max_iops)
            && min > max
        {
            return Err(QosLimitsError(format!(
                "min_iops {min} is above max_iops {max}"
            )));
        }
        if let (Some(min), Some(max)) = (self.min_bytes_per_s, self.max_bytes_per_s)
            && min > max
        {
            return Err(QosLimitsError(format!(
                "min_bytes_per_s {min} is above max_bytes_per_s {max}"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_what_they_name() {
        let ns = QosKey::namespace("s", 1);
        assert!(ns.matches("s", 1, "h1") && ns.matches("s", 1, "h2"));
        assert!(!ns.matches("s", 2, "h1") && !ns.matches("t", 1, "h1"));
        let host = QosKey::host("s", "h1");
        assert!(host.matches("s", 1, "h1") && host.matches("s", 7, "h1"));
        assert!(!host.matches("s", 1, "h2"));
        let both = QosKey::host_on_namespace("s", 3, "h1");
        assert!(both.matches("s", 3, "h1"));
        assert!(!both.matches("s", 1, "h1") && !both.matches("s", 3, "h2"));
    }

    #[test]
    fn default_bursts_are_a_tenth_of_a_second() {
        let l = QosLimits {
            max_iops: Some(1000),
            max_bytes_per_s: Some(5),
            ..QosLimits::default()
        };
        assert_eq!(l.effective_burst_ios(), Some(100));
        assert_eq!(l.effective_burst_bytes(), Some(1), "at least one unit");
        let l = QosLimits {
            burst_ios: Some(7),
            ..l
        };
        assert_eq!(l.effective_burst_ios(), Some(7));
        assert_eq!(QosLimits::default().effective_burst_ios(), None);
    }

    #[test]
    fn validation_explains_what_is_wrong() {
        let ns = QosKey::namespace("s", 1);
        let err = |l: QosLimits, k: &QosKey| l.validate(k).unwrap_err().0;
        assert!(
            err(
                QosLimits {
                    max_iops: Some(0),
                    ..Default::default()
                },
                &ns
            )
            .contains("max_iops 0 is out of range")
        );
        assert!(
            err(
                QosLimits {
                    burst_ios: Some(5),
                    ..Default::default()
                },
                &ns
            )
            .contains("needs max_iops")
        );
        assert!(
            err(
                QosLimits {
                    min_iops: Some(5),
                    ..Default::default()
                },
                &QosKey::host_on_namespace("s", 1, "h")
            )
            .contains("a minimum applies to a namespace as a whole")
        );
        assert!(
            err(
                QosLimits {
                    min_iops: Some(50),
                    max_iops: Some(10),
                    ..Default::default()
                },
                &ns
            )
            .contains("above max_iops")
        );
        QosLimits {
            min_iops: Some(5),
            max_iops: Some(10),
            max_bytes_per_s: Some(1 << 20),
            burst_bytes: Some(1 << 17),
            ..Default::default()
        }
        .validate(&ns)
        .unwrap();
    }
}
