//! What a command passes on its way to the device: the limits whose keys match its host
//! and namespace ([`LimitState`]) and the namespace's contention cap ([`NsCap`]),
//! resolved once per connection and namespace into a [`QosGate`].

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use super::QosClock;
use super::bucket::Bucket;
use super::limits::QosLimits;

/// Commands and waiting time one limit accounts for.
#[derive(Default)]
pub(crate) struct ThrottleCounters {
    /// Commands charged.
    pub commands: AtomicU64,
    /// Data bytes charged.
    pub bytes: AtomicU64,
    /// Commands that had to wait, with this limit the one they waited longest for.
    pub throttled_commands: AtomicU64,
    /// Their waiting time, nanoseconds.
    pub throttled_ns: AtomicU64,
}

impl ThrottleCounters {
    fn charged(&self, bytes: u64) {
        self.commands.fetch_add(1, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
    }

    fn waited(&self, ns: u64) {
        self.throttled_commands.fetch_add(1, Relaxed);
        self.throttled_ns.fetch_add(ns, Relaxed);
    }
}

/// A configured limit's buckets; shared by every connection it applies to and updated in
/// place when its limits change.
pub(crate) struct LimitState {
    pub iops: Bucket,
    pub bytes: Bucket,
    pub counters: ThrottleCounters,
}

impl LimitState {
    pub fn new(limits: &QosLimits) -> LimitState {
        let s = LimitState {
            iops: Bucket::unlimited(),
            bytes: Bucket::unlimited(),
            counters: ThrottleCounters::default(),
        };
        s.configure(limits);
        s
    }

    pub fn configure(&self, l: &QosLimits) {
        self.iops
            .set_rate(l.max_iops, l.effective_burst_ios().unwrap_or(0));
        self.bytes
            .set_rate(l.max_bytes_per_s, l.effective_burst_bytes().unwrap_or(0));
    }

    /// Whether the limit caps anything (a minimum alone does not).
    pub fn limits_rate(&self) -> bool {
        self.iops.is_limited() || self.bytes.is_limited()
    }
}

/// The contention controller's cap on one namespace (all hosts together), unlimited
/// unless the node is saturated and a namespace with a minimum lacks its share.
pub(crate) struct NsCap {
    pub iops: Bucket,
    pub bytes: Bucket,
    pub counters: ThrottleCounters,
    /// Commands of this namespace waiting in a QoS queue now (demand the device
    /// counters do not see).
    pub queued: AtomicI64,
}

impl NsCap {
    pub fn new() -> NsCap {
        NsCap {
            iops: Bucket::unlimited(),
            bytes: Bucket::unlimited(),
            counters: ThrottleCounters::default(),
            queued: AtomicI64::new(0),
        }
    }

    /// Burst of a cap: 10 ms of its rate, at least one command / 128 KiB.
    pub fn set_caps(&self, iops: Option<u64>, bytes_per_s: Option<u64>) {
        self.iops
            .set_rate(iops, iops.map_or(0, |r| (r / 100).max(1)));
        self.bytes.set_rate(
            bytes_per_s,
            bytes_per_s.map_or(0, |r| (r / 100).max(128 << 10)),
        );
    }
}

/// Which limit made a command wait (for its accounting).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Binding {
    Limit(usize),
    Cap,
}

/// A command's admission: when it may start and which limit held it back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Admission {
    pub start_ns: u64,
    pub now_ns: u64,
    pub binding: Option<Binding>,
}

impl Admission {
    pub fn waits(&self) -> bool {
        self.start_ns > self.now_ns
    }
}

/// Every limit one host's commands on one namespace pass, resolved once per connection
/// and namespace (and again when the configuration changes).
pub(crate) struct QosGate {
    pub limits: Vec<Arc<LimitState>>,
    pub cap: Option<Arc<NsCap>>,
    pub clock: Arc<dyn QosClock>,
}

impl QosGate {
    /// Charges one command of `bytes` data bytes to every bucket it passes.
    pub fn admit(&self, bytes: u64) -> Admission {
        let now = self.clock.now_ns();
        let mut start = now;
        let mut binding = None;
        for (i, l) in self.limits.iter().enumerate() {
            l.counters.charged(bytes);
            let s = l.iops.charge(1, now).max(l.bytes.charge(bytes, now));
            if s > start {
                start = s;
                binding = Some(Binding::Limit(i));
            }
        }
        if let Some(c) = &self.cap {
            // Not counted per command: a cap is on every namespace while a minimum exists,
            // and a shared counter would bounce between cores on each command of it.
            let s = c.iops.charge(1, now).max(c.bytes.charge(bytes, now));
            if s > start {
                start = s;
                binding = Some(Binding::Cap);
            }
        }
        Admission {
            start_ns: start,
            now_ns: now,
            binding,
        }
    }

    /// A command admitted with `a` waits in the connection's queue.
    pub fn queued(&self, a: &Admission) {
        let waited = a.start_ns.saturating_sub(a.now_ns);
        match a.binding {
            Some(Binding::Limit(i)) => {
                if let Some(l) = self.limits.get(i) {
                    l.counters.waited(waited);
                }
            }
            Some(Binding::Cap) => {
                if let Some(c) = &self.cap {
                    c.counters.waited(waited);
                }
            }
            None => {}
        }
        if let Some(c) = &self.cap {
            c.queued.fetch_add(1, Relaxed);
        }
    }

    /// A queued command left the queue (released or aborted).
    pub fn dequeued(&self) {
        if let Some(c) = &self.cap {
            c.queued.fetch_sub(1, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qos::ManualClock;

    const S: u64 = 1_000_000_000;

    fn gate(limits: &[QosLimits], clock: Arc<ManualClock>) -> QosGate {
        QosGate {
            limits: limits
                .iter()
                .map(|l| Arc::new(LimitState::new(l)))
                .collect(),
            cap: Some(Arc::new(NsCap::new())),
            clock,
        }
    }

    #[test]
    fn the_tightest_limit_binds_and_is_accounted() {
        let clock = Arc::new(ManualClock::at(S));
        let g = gate(
            &[
                QosLimits {
                    max_iops: Some(1000),
                    burst_ios: Some(1),
                    ..Default::default()
                },
                QosLimits {
                    max_bytes_per_s: Some(4096 * 100),
                    burst_bytes: Some(4096),
                    ..Default::default()
                },
            ],
            clock.clone(),
        );
        let a = g.admit(4096);
        assert!(!a.waits());
        let b = g.admit(4096);
        // IOPS: 1 ms; bytes: 10 ms. The bandwidth limit binds.
        assert!(b.waits());
        assert_eq!(b.binding, Some(Binding::Limit(1)));
        assert_eq!(b.start_ns - b.now_ns, 10_000_000);
        g.queued(&b);
        assert_eq!(g.limits[1].counters.throttled_commands.load(Relaxed), 1);
        assert_eq!(g.limits[1].counters.throttled_ns.load(Relaxed), 10_000_000);
        assert_eq!(g.limits[0].counters.throttled_commands.load(Relaxed), 0);
        assert_eq!(g.limits[0].counters.commands.load(Relaxed), 2);
        assert_eq!(g.cap.as_ref().map(|c| c.queued.load(Relaxed)), Some(1));
        g.dequeued();
        assert_eq!(g.cap.as_ref().map(|c| c.queued.load(Relaxed)), Some(0));
    }

    #[test]
    fn zero_byte_commands_pass_the_bandwidth_bucket() {
        let clock = Arc::new(ManualClock::at(S));
        let g = gate(
            &[QosLimits {
                max_bytes_per_s: Some(1000),
                burst_bytes: Some(1),
                ..Default::default()
            }],
            clock,
        );
        assert!(g.admit(100_000).waits() || g.admit(100_000).waits());
        // A flush moves no data: no bandwidth to wait for.
        assert!(!g.admit(0).waits());
    }

    #[test]
    fn the_cap_binds_when_set() {
        let clock = Arc::new(ManualClock::at(S));
        let g = gate(&[], clock.clone());
        for _ in 0..100 {
            assert!(!g.admit(4096).waits(), "no cap set: never waits");
        }
        g.cap.as_ref().unwrap().set_caps(Some(100), None);
        let mut waited = 0;
        for _ in 0..10 {
            if g.admit(4096).waits() {
                waited += 1;
            }
        }
        assert_eq!(waited, 9, "burst of 1 at 100 IOPS");
        clock.advance_ns(S);
        assert!(!g.admit(4096).waits());
    }
}
