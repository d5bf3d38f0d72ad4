//! QoS limits of the node (`ferrobay node qos`): persisted in the node state (version 3),
//! applied to the target at bring-up and on every change.
//!
//! A change is validated, persisted, then applied; if the target refuses it, the
//! persisted change is undone. The catalog lock is held across both.

use nvmf_target::{QosKey, QosLimits};

use crate::api::{QosCapView, QosEntry, QosEntryStats, QosList};
use crate::catalog::Catalog;
use crate::naming;
use crate::state::QosRecord;

use super::{NodeError, StorageNode};

/// The target's key and limits of a persisted record.
pub(crate) fn key_and_limits(r: &QosRecord) -> (QosKey, QosLimits) {
    (
        QosKey {
            subsystem_nqn: r.subsystem_nqn.clone(),
            nsid: r.nsid,
            host_nqn: r.host_nqn.clone(),
        },
        QosLimits {
            max_iops: r.max_iops,
            max_bytes_per_s: r.max_bytes_per_s,
            burst_ios: r.burst_ios,
            burst_bytes: r.burst_bytes,
            min_iops: r.min_iops,
            min_bytes_per_s: r.min_bytes_per_s,
        },
    )
}

fn record_of(key: &QosKey, l: &QosLimits) -> QosRecord {
    QosRecord {
        subsystem_nqn: key.subsystem_nqn.clone(),
        nsid: key.nsid,
        host_nqn: key.host_nqn.clone(),
        max_iops: l.max_iops,
        max_bytes_per_s: l.max_bytes_per_s,
        burst_ios: l.burst_ios,
        burst_bytes: l.burst_bytes,
        min_iops: l.min_iops,
        min_bytes_per_s: l.min_bytes_per_s,
    }
}

/// Applies every persisted limit to the target (at bring-up).
pub(crate) fn bring_up(
    target: &nvmf_target::Target,
    records: &[QosRecord],
) -> Result<(), NodeError> {
    for r in records {
        let (key, limits) = key_and_limits(r);
        target.set_qos(key, limits)?;
    }
    Ok(())
}

impl StorageNode {
    /// Sets the limits of `entry`'s key (empty limits clear it).
    pub async fn set_qos(&self, entry: QosEntry) -> Result<QosEntry, NodeError> {
        let node = self.clone();
        super::ops::blocking(move || {
            node.check_running()?;
            let key = QosKey {
                subsystem_nqn: entry.subsystem_nqn.clone(),
                nsid: entry.nsid,
                host_nqn: entry.host_nqn.clone(),
            };
            if let Some(h) = &key.host_nqn {
                naming::validate_nqn(h)?;
            }
            if !entry.limits.is_empty() {
                entry
                    .limits
                    .validate(&key)
                    .map_err(|e| NodeError::BadRequest(e.0))?;
            }
            let mut c = node.catalog();
            node.set_qos_locked(&mut c, &key, &entry.limits)?;
            Ok(QosEntry {
                stats: None,
                ..entry
            })
        })
        .await
    }

    /// Removes the limits of a key; the limits it had.
    pub async fn clear_qos(&self, key: QosKey) -> Result<QosLimits, NodeError> {
        let node = self.clone();
        super::ops::blocking(move || {
            node.check_running()?;
            let mut c = node.catalog();
            let had = c
                .state()
                .qos
                .iter()
                .find(|q| q.same_key(&record_of(&key, &QosLimits::default())))
                .map(|q| key_and_limits(q).1)
                .ok_or_else(|| NodeError::NotFound(format!("no QoS limits on {key}")))?;
            node.set_qos_locked(&mut c, &key, &QosLimits::default())?;
            Ok(had)
        })
        .await
    }

    fn set_qos_locked(
        &self,
        c: &mut Catalog,
        key: &QosKey,
        limits: &QosLimits,
    ) -> Result<(), NodeError> {
        let old = c.set_qos(record_of(key, limits))?;
        let target = &self.inner.target;
        if let Err(e) = target.set_qos(key.clone(), *limits) {
            let restore = old.unwrap_or_else(|| record_of(key, &QosLimits::default()));
            if let Err(undo) = c.set_qos(restore) {
                tracing::error!(error = %undo, "cannot undo a QoS change in the node state");
            }
            return Err(e.into());
        }
        tracing::info!(%key, ?limits, "QoS limits changed");
        Ok(())
    }

    /// The limits of one key with what they did.
    pub fn qos_entry(&self, key: &QosKey) -> Result<QosEntry, NodeError> {
        self.qos_list()
            .limits
            .into_iter()
            .find(|e| {
                e.subsystem_nqn == key.subsystem_nqn
                    && e.nsid == key.nsid
                    && e.host_nqn == key.host_nqn
            })
            .ok_or_else(|| NodeError::NotFound(format!("no QoS limits on {key}")))
    }

    /// Every limit with what it did, and the contention caps in force.
    pub fn qos_list(&self) -> QosList {
        let stats = self.inner.target.qos_stats();
        let records = self.catalog().state().qos.clone();
        let limits = records
            .iter()
            .map(|r| {
                let (key, limits) = key_and_limits(r);
                let s = stats.limits.iter().find(|s| s.key == key);
                QosEntry {
                    subsystem_nqn: key.subsystem_nqn,
                    nsid: key.nsid,
                    host_nqn: key.host_nqn,
                    limits,
                    stats: Some(s.map_or_else(QosEntryStats::default, |s| QosEntryStats {
                        commands: s.commands,
                        bytes: s.bytes,
                        throttled_commands: s.throttled_commands,
                        throttled_seconds: s.throttled_ns as f64 / 1e9,
                    })),
                }
            })
            .collect();
        let caps = stats
            .caps
            .into_iter()
            .filter(|c| c.cap_iops.is_some() || c.cap_bytes_per_s.is_some())
            .map(|c| QosCapView {
                subsystem_nqn: c.subsystem_nqn,
                nsid: c.nsid,
                cap_iops: c.cap_iops,
                cap_bytes_per_s: c.cap_bytes_per_s,
                measured_iops: c.measured_iops,
                measured_bytes_per_s: c.measured_bytes_per_s,
                throttled_commands: c.throttled_commands,
                throttled_seconds: c.throttled_ns as f64 / 1e9,
            })
            .collect();
        QosList { limits, caps }
    }
}
