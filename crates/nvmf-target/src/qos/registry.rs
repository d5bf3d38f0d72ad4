//! The target's QoS configuration and state: the limits by key, the contention caps by
//! namespace, and the clock; [`QosRegistry::gate`] resolves what one host's commands on
//! one namespace pass (at a connection's namespace-cache miss, never per command).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::contention::{NsId, NsSample};
use super::gate::{LimitState, NsCap, QosGate};
use super::limits::{QosKey, QosLimits};
use super::stats::{QosCapStats, QosLimitStats, QosStats};
use super::{MonotonicClock, QosClock};
use crate::sync::{lock, read, write};

struct LimitEntry {
    limits: QosLimits,
    state: Arc<LimitState>,
}

/// What changed with a configuration call, so that the target can invalidate the
/// namespace caches that must see it and start or stop the contention controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// Only connections of this key's subsystem must re-resolve.
    Subsystem,
    /// Minimums appeared or all went away: every connection must re-resolve (caps come
    /// or go on every namespace).
    Contention { on: bool },
}

pub(crate) struct QosRegistry {
    clock: RwLock<Arc<dyn QosClock>>,
    limits: RwLock<BTreeMap<QosKey, LimitEntry>>,
    /// Contention caps, one per namespace while any minimum is configured.
    caps: RwLock<BTreeMap<NsId, Arc<NsCap>>>,
    contention: AtomicBool,
    /// The controller's last measurement per namespace (for stats).
    measured: Mutex<BTreeMap<NsId, NsSample>>,
}

impl Default for QosRegistry {
    fn default() -> Self {
        QosRegistry {
            clock: RwLock::new(Arc::new(MonotonicClock::new())),
            limits: RwLock::new(BTreeMap::new()),
            caps: RwLock::new(BTreeMap::new()),
            contention: AtomicBool::new(false),
            measured: Mutex::new(BTreeMap::new()),
        }
    }
}

impl QosRegistry {
    pub fn clock(&self) -> Arc<dyn QosClock> {
        read(&self.clock).clone()
    }

    pub fn set_clock(&self, c: Arc<dyn QosClock>) {
        *write(&self.clock) = c;
    }

    pub fn contention_on(&self) -> bool {
        self.contention.load(Ordering::Acquire)
    }

    /// What `host_nqn`'s commands on `subsystem_nqn`/`nsid` pass; `None` when nothing
    /// applies (the unlimited path: no QoS work per command at all).
    pub fn gate(&self, subsystem_nqn: &str, nsid: u32, host_nqn: &str) -> Option<Arc<QosGate>> {
        let limits: Vec<Arc<LimitState>> = read(&self.limits)
            .iter()
            .filter(|(k, e)| k.matches(subsystem_nqn, nsid, host_nqn) && e.state.limits_rate())
            .map(|(_, e)| e.state.clone())
            .collect();
        let cap = self
            .contention_on()
            .then(|| self.cap_of(subsystem_nqn, nsid));
        if limits.is_empty() && cap.is_none() {
            return None;
        }
        Some(Arc::new(QosGate {
            limits,
            cap,
            clock: self.clock(),
        }))
    }

    /// The contention cap of a namespace, made on first use.
    pub fn cap_of(&self, subsystem_nqn: &str, nsid: u32) -> Arc<NsCap> {
        let id = (subsystem_nqn.to_string(), nsid);
        if let Some(c) = read(&self.caps).get(&id) {
            return c.clone();
        }
        write(&self.caps)
            .entry(id)
            .or_insert_with(|| Arc::new(NsCap::new()))
            .clone()
    }

    /// Sets (or replaces) the limits of `key` (validated by the caller). Connections
    /// already holding the limit see new rates at once.
    pub fn set(&self, key: QosKey, limits: QosLimits) -> Change {
        let had_min = self.any_minimum();
        {
            let mut map = write(&self.limits);
            match map.get_mut(&key) {
                Some(e) => {
                    e.state.configure(&limits);
                    e.limits = limits;
                }
                None => {
                    let state = Arc::new(LimitState::new(&limits));
                    map.insert(key, LimitEntry { limits, state });
                }
            }
        }
        self.contention_change(had_min)
    }

    /// Removes the limits of `key`; the limits it had.
    pub fn clear(&self, key: &QosKey) -> Option<(QosLimits, Change)> {
        let had_min = self.any_minimum();
        let e = write(&self.limits).remove(key)?;
        Some((e.limits, self.contention_change(had_min)))
    }

    /// Removes every limit and cap of a subsystem (it is gone).
    pub fn clear_subsystem(&self, subsystem_nqn: &str) -> Change {
        let had_min = self.any_minimum();
        write(&self.limits).retain(|k, _| k.subsystem_nqn != subsystem_nqn);
        write(&self.caps).retain(|(nqn, _), _| nqn != subsystem_nqn);
        lock(&self.measured).retain(|(nqn, _), _| nqn != subsystem_nqn);
        self.contention_change(had_min)
    }

    /// Removes every limit and the cap of one namespace (it is gone).
    pub fn clear_namespace(&self, subsystem_nqn: &str, nsid: u32) -> Change {
        let had_min = self.any_minimum();
        write(&self.limits)
            .retain(|k, _| !(k.subsystem_nqn == subsystem_nqn && k.nsid == Some(nsid)));
        let id = (subsystem_nqn.to_string(), nsid);
        write(&self.caps).remove(&id);
        lock(&self.measured).remove(&id);
        self.contention_change(had_min)
    }

    fn any_minimum(&self) -> bool {
        read(&self.limits).values().any(|e| e.limits.has_minimum())
    }

    fn contention_change(&self, had_min: bool) -> Change {
        let has_min = self.any_minimum();
        if has_min == had_min {
            return Change::Subsystem;
        }
        self.contention.store(has_min, Ordering::Release);
        if !has_min {
            write(&self.caps).clear();
            lock(&self.measured).clear();
        }
        Change::Contention { on: has_min }
    }

    /// Every configured key and its limits, in key order.
    pub fn list(&self) -> Vec<(QosKey, QosLimits)> {
        read(&self.limits)
            .iter()
            .map(|(k, e)| (k.clone(), e.limits))
            .collect()
    }

    /// The minimums of namespace-wide keys, by namespace.
    pub fn minimums(&self) -> BTreeMap<NsId, (Option<u64>, Option<u64>)> {
        read(&self.limits)
            .iter()
            .filter(|(_, e)| e.limits.has_minimum())
            .filter_map(|(k, e)| {
                let nsid = k.nsid?;
                Some((
                    (k.subsystem_nqn.clone(), nsid),
                    (e.limits.min_iops, e.limits.min_bytes_per_s),
                ))
            })
            .collect()
    }

    #[cfg(test)]
    pub fn caps(&self) -> Vec<Arc<NsCap>> {
        read(&self.caps).values().cloned().collect()
    }

    pub fn record_measurements(&self, samples: &[NsSample]) {
        let mut m = lock(&self.measured);
        m.clear();
        for s in samples {
            m.insert(s.id.clone(), s.clone());
        }
    }

    pub fn stats(&self) -> QosStats {
        use std::sync::atomic::Ordering::Relaxed;
        let limits = read(&self.limits)
            .iter()
            .map(|(k, e)| {
                let c = &e.state.counters;
                QosLimitStats {
                    key: k.clone(),
                    limits: e.limits,
                    commands: c.commands.load(Relaxed),
                    bytes: c.bytes.load(Relaxed),
                    throttled_commands: c.throttled_commands.load(Relaxed),
                    throttled_ns: c.throttled_ns.load(Relaxed),
                }
            })
            .collect();
        let measured = lock(&self.measured);
        let caps = read(&self.caps)
            .iter()
            .map(|(id, c)| {
                let m = measured.get(id);
                QosCapStats {
                    subsystem_nqn: id.0.clone(),
                    nsid: id.1,
                    cap_iops: c.iops.rate_per_s(),
                    cap_bytes_per_s: c.bytes.rate_per_s(),
                    measured_iops: m.map_or(0.0, |s| s.iops),
                    measured_bytes_per_s: m.map_or(0.0, |s| s.bytes_per_s),
                    throttled_commands: c.counters.throttled_commands.load(Relaxed),
                    throttled_ns: c.counters.throttled_ns.load(Relaxed),
                }
            })
            .collect();
        QosStats { limits, caps }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(iops: u64) -> QosLimits {
        QosLimits {
            max_iops: Some(iops),
            ..QosLimits::default()
        }
    }

    #[test]
    fn nothing_configured_means_no_gate() {
        let r = QosRegistry::default();
        assert!(r.gate("s", 1, "h").is_none());
        r.set(QosKey::namespace("other", 1), limits(10));
        assert!(r.gate("s", 1, "h").is_none(), "another subsystem's limit");
        r.set(QosKey::host_on_namespace("s", 1, "h2"), limits(10));
        assert!(r.gate("s", 1, "h").is_none(), "another host's limit");
        assert!(r.gate("s", 1, "h2").is_some());
    }

    #[test]
    fn every_matching_limit_is_in_the_gate() {
        let r = QosRegistry::default();
        r.set(QosKey::namespace("s", 1), limits(100));
        r.set(QosKey::host("s", "h"), limits(50));
        r.set(QosKey::host_on_namespace("s", 1, "h"), limits(20));
        r.set(
            QosKey {
                subsystem_nqn: "s".into(),
                nsid: None,
                host_nqn: None,
            },
            limits(500),
        );
        let g = r.gate("s", 1, "h").unwrap();
        assert_eq!(g.limits.len(), 4);
        assert!(g.cap.is_none());
        assert_eq!(r.gate("s", 2, "h").unwrap().limits.len(), 2);
        assert_eq!(r.gate("s", 2, "x").unwrap().limits.len(), 1);
    }

    #[test]
    fn a_minimum_turns_caps_on_for_every_namespace() {
        let r = QosRegistry::default();
        let key = QosKey::namespace("s", 1);
        let change = r.set(
            key.clone(),
            QosLimits {
                min_iops: Some(100),
                ..Default::default()
            },
        );
        assert_eq!(change, Change::Contention { on: true });
        // A minimum alone limits nothing, but every namespace now passes its cap.
        let g = r.gate("t", 9, "h").unwrap();
        assert!(g.limits.is_empty() && g.cap.is_some());
        assert_eq!(
            r.set(QosKey::namespace("s", 2), limits(5)),
            Change::Subsystem
        );
        assert_eq!(
            r.clear(&key).map(|x| x.1),
            Some(Change::Contention { on: false })
        );
        assert!(r.gate("t", 9, "h").is_none());
        assert!(r.caps().is_empty());
    }

    #[test]
    fn changed_limits_reach_existing_gates() {
        let r = QosRegistry::default();
        let key = QosKey::namespace("s", 1);
        r.set(key.clone(), limits(1000));
        let g = r.gate("s", 1, "h").unwrap();
        r.set(key.clone(), limits(10));
        assert_eq!(g.limits[0].iops.rate_per_s(), Some(10));
        assert_eq!(r.list(), vec![(key, limits(10))]);
        r.clear_subsystem("s");
        assert!(r.list().is_empty());
    }
}
