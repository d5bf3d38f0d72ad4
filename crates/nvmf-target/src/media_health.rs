//! What the drives behind a subsystem say about themselves, for the SMART / Health log:
//! the target has no temperature sensor or spare blocks of its own, the drives may.

use nvme_proto::log::SmartLog;
use nvme_proto::log::smart::critical_warning;

/// A reading of the media behind one subsystem. `None`: not reported, which the log
/// shows the way the spec allows (composite temperature 0 = not reported) and Linux
/// nvmet does (available spare and its threshold 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MediaHealth {
    /// Composite temperature, kelvin.
    pub composite_temperature_k: Option<u16>,
    pub available_spare: Option<AvailableSpare>,
}

/// Remaining spare capacity and the threshold below which it is a critical warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvailableSpare {
    /// Normalized percentage, 0..=100.
    pub pct: u8,
    pub threshold_pct: u8,
}

impl MediaHealth {
    /// The reading of several drives as one: the hottest temperature, the drive with the
    /// least spare (the one a host should worry about).
    #[must_use]
    pub fn worst(self, other: MediaHealth) -> MediaHealth {
        MediaHealth {
            composite_temperature_k: self
                .composite_temperature_k
                .max(other.composite_temperature_k),
            available_spare: match (self.available_spare, other.available_spare) {
                (Some(a), Some(b)) => Some(if b.pct < a.pct { b } else { a }),
                (a, b) => a.or(b),
            },
        }
    }

    /// Fills the log's temperature and spare fields, and the spare critical warning.
    pub fn fill(&self, log: &mut SmartLog) {
        log.composite_temperature_k = self.composite_temperature_k.unwrap_or(0);
        if let Some(s) = self.available_spare {
            log.available_spare_pct = s.pct;
            log.available_spare_threshold_pct = s.threshold_pct;
            if s.pct < s.threshold_pct {
                log.critical_warning |= critical_warning::SPARE_BELOW_THRESHOLD;
            }
        }
    }
}

/// Where the target gets [`MediaHealth`] from (the node layer knows the drives).
pub trait MediaHealthSource: Send + Sync {
    /// The reading for the drives behind subsystem `subnqn`'s namespaces.
    fn media_health(&self, subnqn: &str) -> MediaHealth;
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn spare(pct: u8, threshold_pct: u8) -> Option<AvailableSpare> {
        Some(AvailableSpare { pct, threshold_pct })
    }

    #[test]
    fn not_reported_leaves_zeroes() {
        let mut log = SmartLog::default();
        MediaHealth::default().fill(&mut log);
        assert_eq!(log, SmartLog::default());
    }

    #[test]
    fn readings_fill_the_log_and_spare_below_threshold_warns() {
        let mut log = SmartLog::default();
        let m = MediaHealth {
            composite_temperature_k: Some(318),
            available_spare: spare(100, 10),
        };
        m.fill(&mut log);
        assert_eq!(
            (log.composite_temperature_k, log.available_spare_pct),
            (318, 100)
        );
        assert_eq!(log.available_spare_threshold_pct, 10);
        assert_eq!(log.critical_warning, 0);
        let mut log = SmartLog::default();
        MediaHealth {
            available_spare: spare(5, 10),
            ..m
        }
        .fill(&mut log);
        assert_eq!(
            log.critical_warning,
            critical_warning::SPARE_BELOW_THRESHOLD
        );
    }

    #[test]
    fn worst_of_several_drives() {
        let a = MediaHealth {
            composite_temperature_k: Some(310),
            available_spare: spare(90, 10),
        };
        let b = MediaHealth {
            composite_temperature_k: Some(320),
            available_spare: spare(95, 5),
        };
        assert_eq!(
            a.worst(b),
            MediaHealth {
                composite_temperature_k: Some(320),
                available_spare: spare(90, 10),
            }
        );
        assert_eq!(a.worst(MediaHealth::default()), a);
        assert_eq!(MediaHealth::default().worst(b), b);
    }
}
