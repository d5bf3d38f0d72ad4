//! QoS management: limits per key, the QoS clock, statistics, and the contention
//! controller's task (running while any minimum is configured).

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::TargetError;
use crate::qos::QosClock;
use crate::qos::contention::{ContentionController, NsId, NsSample};
use crate::qos::limits::{QosKey, QosLimits};
use crate::qos::registry::Change;
use crate::qos::stats::QosStats;
use crate::stats::NsStatsSnapshot;
use crate::subsystem::SubsysKind;
use crate::sync::{lock, read};
use crate::target::{Target, TargetInner, check_nqn};

/// How often the contention controller measures and re-plans.
pub const QOS_CONTROL_PERIOD: Duration = Duration::from_millis(100);

impl Target {
    /// Sets the limits of `key` (empty limits clear it). Commands already waiting keep
    /// their turn; new ones see the new rates at once.
    pub fn set_qos(&self, key: QosKey, limits: QosLimits) -> Result<(), TargetError> {
        check_nqn(&key.subsystem_nqn)?;
        if let Some(h) = &key.host_nqn {
            check_nqn(h)?;
        }
        if key.nsid.is_some_and(|n| n == 0 || n == u32::MAX) {
            return Err(TargetError::InvalidQos(format!(
                "namespace ID {} is not a namespace",
                key.nsid.unwrap_or(0)
            )));
        }
        let exists = self
            .inner
            .subsystem(&key.subsystem_nqn)
            .is_some_and(|s| s.kind == SubsysKind::Nvm);
        if !exists {
            return Err(TargetError::NoSuchSubsystem(key.subsystem_nqn));
        }
        if limits.is_empty() {
            self.clear_qos(&key);
            return Ok(());
        }
        limits
            .validate(&key)
            .map_err(|e| TargetError::InvalidQos(e.0))?;
        let nqn = key.subsystem_nqn.clone();
        tracing::info!(%key, ?limits, "QoS limits set");
        let change = self.inner.qos.set(key, limits);
        self.inner.qos_changed(&nqn, change);
        Ok(())
    }

    /// Removes the limits of `key`; the limits it had, if any.
    pub fn clear_qos(&self, key: &QosKey) -> Option<QosLimits> {
        let (old, change) = self.inner.qos.clear(key)?;
        tracing::info!(%key, "QoS limits cleared");
        self.inner.qos_changed(&key.subsystem_nqn, change);
        Some(old)
    }

    /// Every configured key with its limits, in key order.
    pub fn qos_limits(&self) -> Vec<(QosKey, QosLimits)> {
        self.inner.qos.list()
    }

    /// What each limit and contention cap did (commands, throttled commands and time).
    pub fn qos_stats(&self) -> QosStats {
        self.inner.qos.stats()
    }

    /// Replaces the QoS clock (tests: a virtual clock). Connections pick it up with their
    /// next namespace lookup.
    pub fn set_qos_clock(&self, clock: Arc<dyn QosClock>) {
        self.inner.qos.set_clock(clock);
        self.inner.invalidate_all_ns_caches();
    }
}

impl TargetInner {
    pub(crate) fn invalidate_all_ns_caches(&self) {
        for s in read(&self.subsystems).values() {
            s.bump_ns_generation();
        }
    }

    /// Makes connections re-resolve their gates and starts or stops the controller.
    pub(crate) fn qos_changed(self: &Arc<Self>, nqn: &str, change: Change) {
        match change {
            Change::Subsystem => {
                if let Some(s) = self.subsystem(nqn) {
                    s.bump_ns_generation();
                }
            }
            Change::Contention { on } => {
                self.invalidate_all_ns_caches();
                let mut task = lock(&self.qos_controller);
                if let Some(t) = task.take() {
                    t.abort();
                }
                if on {
                    match tokio::runtime::Handle::try_current() {
                        Ok(rt) => {
                            *task = Some(rt.spawn(control_loop(Arc::downgrade(self))));
                        }
                        Err(_) => {
                            tracing::warn!("QoS minimums set outside a tokio runtime: not enforced")
                        }
                    }
                }
            }
        }
    }

    /// A namespace is gone: its limits and cap go with it (a new namespace with its NSID
    /// starts without limits).
    pub(crate) fn qos_forget_namespace(self: &Arc<Self>, nqn: &str, nsid: u32) {
        let change = self.qos.clear_namespace(nqn, nsid);
        self.qos_changed(nqn, change);
    }

    /// A subsystem is gone: its limits and caps go with it.
    pub(crate) fn qos_forget_subsystem(self: &Arc<Self>, nqn: &str) {
        let change = self.qos.clear_subsystem(nqn);
        if matches!(change, Change::Contention { .. }) {
            self.qos_changed(nqn, change);
        }
    }
}

/// Measures every namespace each period and applies the controller's caps.
async fn control_loop(weak: Weak<TargetInner>) {
    let mut ctl = ContentionController::new();
    let mut prev: BTreeMap<NsId, (NsStatsSnapshot, u64)> = BTreeMap::new();
    let mut tick = tokio::time::interval(QOS_CONTROL_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = weak.upgrade() else { return };
        let samples = measure(&inner, &mut prev);
        let plan = ctl.step(&samples);
        for ((nqn, nsid), caps) in plan {
            inner.qos.cap_of(&nqn, nsid).set_caps(caps[0], caps[1]);
        }
        inner.qos.record_measurements(&samples);
    }
}

/// Rates and average queue of every namespace since the last call.
fn measure(
    inner: &TargetInner,
    prev: &mut BTreeMap<NsId, (NsStatsSnapshot, u64)>,
) -> Vec<NsSample> {
    let now = inner.qos.clock().now_ns();
    let mins = inner.qos.minimums();
    let subsystems: Vec<_> = read(&inner.subsystems).values().cloned().collect();
    let mut next = BTreeMap::new();
    let mut samples = Vec::new();
    for s in subsystems {
        for ns in s.namespaces() {
            let snap = ns.counters.snapshot();
            let id = (s.nqn.clone(), ns.nsid);
            if let Some((p, t)) = prev.get(&id)
                && now > *t
            {
                let dt_s = (now - t) as f64 / 1e9;
                let ops = (snap.read_ops + snap.write_ops + snap.other_ops)
                    .saturating_sub(p.read_ops + p.write_ops + p.other_ops);
                let bytes = (snap.read_bytes + snap.write_bytes)
                    .saturating_sub(p.read_bytes + p.write_bytes);
                let busy_us = snap.latency_sum_us.saturating_sub(p.latency_sum_us);
                let queued = inner
                    .qos
                    .cap_of(&id.0, id.1)
                    .queued
                    .load(std::sync::atomic::Ordering::Relaxed)
                    .max(0);
                let (min_iops, min_bytes_per_s) = mins.get(&id).copied().unwrap_or((None, None));
                samples.push(NsSample {
                    id: id.clone(),
                    iops: ops as f64 / dt_s,
                    bytes_per_s: bytes as f64 / dt_s,
                    // Little's law: time spent on the device per second = commands there.
                    avg_queue: busy_us as f64 / (dt_s * 1e6) + queued as f64,
                    min_iops,
                    min_bytes_per_s,
                });
            }
            next.insert(id, (snap, now));
        }
    }
    *prev = next;
    samples
}
