//! Minimums under contention: a feedback controller that caps the other namespaces of the
//! node while a namespace with a minimum gets less than it and asks for more.
//!
//! Every period (the target runs it every 100 ms) it gets each namespace's measured rates
//! (commands and bytes per second) and its average number of commands in flight, and
//! returns a cap (IOPS, bytes/s, or none) for every namespace. Each dimension (IOPS,
//! bandwidth) is handled on its own. A *reserved* namespace has a minimum and demand (on
//! average at least [`DEMAND_QUEUE`] commands in flight); the others are *donors*, each
//! with a floor (its own minimum, else [`FLOOR`]) it is never capped below: nobody starves.
//!
//! 1. *Short*: a reserved namespace below `(1 - SHORT_TOLERANCE) * min`. The node is
//!    saturated: the deficit `sum(TARGET * min - rate)` over the short ones is taken from
//!    the donors, `GAIN` of it per period, in proportion to what each runs above its floor
//!    (`ref` = its cap if it has one, else its rate):
//!    `cap = ref - GAIN * deficit * (ref - floor) / sum(ref - floor)`, at least the floor.
//!    The next period measures again and cuts again while a deficit remains; the gain
//!    below 1 keeps the loop from overshooting while the device's backlog drains.
//! 2. *Surplus*: every reserved namespace runs above `(1 + HEADROOM) * min`: the smallest
//!    surplus `rate - TARGET * min` is given back, `GAIN` of it per period, to the donors
//!    that use their caps. Between the two bands caps hold, so the loop settles around
//!    `TARGET * min` instead of oscillating across the minimum.
//! 3. *Idle*: no reserved namespace has demand: caps relax by [`RELAX_FACTOR`] per period
//!    and go once the namespace uses less than half of its cap.
//! 4. *Not saturated after all*: if cutting the donors makes the node's total rate fall
//!    below [`WORK_LOSS`] of what it was when cutting began, the short namespace could not
//!    use what was freed (its host asks for no more: a minimum above what its queue depth
//!    can reach). Caps are dropped and the minimum is not enforced for
//!    [`COOLDOWN_PERIODS`], so one unreachable minimum does not idle the node.
//!
//! Rates are smoothed over periods (exponential average, weight [`SMOOTHING`] for the
//! newest): a 100 ms sample of a few hundred commands is noisy.
//!
//! Pure logic over plain numbers (no clock, no I/O): the tests run it against a simulated
//! node.

use std::collections::BTreeMap;

/// A namespace: subsystem NQN and NSID.
pub type NsId = (String, u32);

/// Average commands in flight from which a namespace counts as asking for more.
pub const DEMAND_QUEUE: f64 = 0.5;
/// A namespace below `(1 - SHORT_TOLERANCE) * min` is short.
pub const SHORT_TOLERANCE: f64 = 0.03;
/// What the loop aims a reserved namespace at: a little above its minimum, so that
/// measurement noise does not dip it below.
pub const TARGET: f64 = 1.05;
/// Caps are given back only while every minimum is met with this much to spare.
pub const HEADROOM: f64 = 0.12;
/// Share of the deficit (or surplus) corrected per period.
pub const GAIN: f64 = 0.5;
/// Growth of a cap per period while no reserved namespace has demand.
pub const RELAX_FACTOR: f64 = 1.10;
/// The least a namespace is capped to, per dimension (IOPS, bytes/s): no starvation.
pub const FLOOR: [f64; 2] = [20.0, 1024.0 * 1024.0];
/// The node's total rate falling below this share of its rate when cutting began means
/// it was not saturated.
pub const WORK_LOSS: f64 = 0.5;
/// Weight of the newest period in the smoothed rates.
pub const SMOOTHING: f64 = 0.5;
/// Periods a minimum found unreachable is not enforced.
pub const COOLDOWN_PERIODS: u32 = 30;

/// One namespace as measured over the last period.
#[derive(Clone, Debug, PartialEq)]
pub struct NsSample {
    pub id: NsId,
    pub iops: f64,
    pub bytes_per_s: f64,
    /// Average commands on the device (or waiting in a QoS queue) over the period.
    pub avg_queue: f64,
    pub min_iops: Option<u64>,
    pub min_bytes_per_s: Option<u64>,
}

impl NsSample {
    fn rate(&self, d: usize) -> f64 {
        if d == 0 { self.iops } else { self.bytes_per_s }
    }

    fn min(&self, d: usize) -> Option<f64> {
        let m = if d == 0 {
            self.min_iops
        } else {
            self.min_bytes_per_s
        };
        m.map(|v| v as f64)
    }

    fn has_demand(&self) -> bool {
        self.avg_queue >= DEMAND_QUEUE
    }
}

/// Caps of one namespace: IOPS and bytes per second (`None`: not capped).
pub type Caps = [Option<u64>; 2];

#[derive(Clone, Debug, Default)]
struct DimState {
    /// The node's total rate when the current round of cutting began.
    baseline_total: Option<f64>,
    cooldown: u32,
}

/// The controller's memory between periods.
#[derive(Clone, Debug, Default)]
pub struct ContentionController {
    caps: BTreeMap<NsId, [Option<f64>; 2]>,
    /// Smoothed rates per namespace (IOPS, bytes/s).
    smoothed: BTreeMap<NsId, [f64; 2]>,
    dims: [DimState; 2],
}

impl ContentionController {
    pub fn new() -> ContentionController {
        ContentionController::default()
    }

    /// Whether any namespace is capped now.
    #[cfg(test)]
    pub fn any_cap(&self) -> bool {
        self.caps.values().any(|c| c.iter().any(Option::is_some))
    }

    /// One period: the caps every sampled namespace gets now (namespaces not sampled
    /// lose theirs).
    pub fn step(&mut self, samples: &[NsSample]) -> BTreeMap<NsId, Caps> {
        self.caps
            .retain(|id, _| samples.iter().any(|s| &s.id == id));
        self.smoothed
            .retain(|id, _| samples.iter().any(|s| &s.id == id));
        let smooth: Vec<NsSample> = samples
            .iter()
            .map(|s| {
                let now = [s.iops, s.bytes_per_s];
                let avg = self.smoothed.entry(s.id.clone()).or_insert(now);
                for d in 0..2 {
                    avg[d] = SMOOTHING * now[d] + (1.0 - SMOOTHING) * avg[d];
                }
                NsSample {
                    iops: avg[0],
                    bytes_per_s: avg[1],
                    ..s.clone()
                }
            })
            .collect();
        let samples = &smooth[..];
        for d in 0..2 {
            self.step_dim(samples, d);
        }
        samples
            .iter()
            .map(|s| {
                let c = self.caps.get(&s.id).copied().unwrap_or([None, None]);
                (s.id.clone(), c.map(|v| v.map(|x| x.ceil().max(1.0) as u64)))
            })
            .collect()
    }

    fn step_dim(&mut self, samples: &[NsSample], d: usize) {
        let total: f64 = samples.iter().map(|s| s.rate(d)).sum();
        if self.dims[d].cooldown > 0 {
            self.dims[d].cooldown -= 1;
            self.relax_idle(samples, d);
            return;
        }
        let reserved: Vec<&NsSample> = samples
            .iter()
            .filter(|s| s.has_demand() && s.min(d).is_some())
            .collect();
        let min_of = |s: &NsSample| s.min(d).unwrap_or(0.0);
        let short: Vec<&NsSample> = reserved
            .iter()
            .copied()
            .filter(|s| s.rate(d) < min_of(s) * (1.0 - SHORT_TOLERANCE))
            .collect();
        if short.is_empty() {
            self.dims[d].baseline_total = None;
            if reserved.is_empty() {
                self.relax_idle(samples, d);
                return;
            }
            let surplus = reserved
                .iter()
                .map(|s| s.rate(d) - min_of(s) * TARGET)
                .fold(f64::MAX, f64::min);
            let room = reserved
                .iter()
                .all(|s| s.rate(d) >= min_of(s) * (1.0 + HEADROOM));
            if room {
                self.give_back(samples, d, GAIN * surplus);
            }
            return;
        }
        let baseline = *self.dims[d].baseline_total.get_or_insert(total);
        if total < baseline * WORK_LOSS {
            // Cutting the others only idled the node: not saturated.
            tracing::info!(
                dimension = if d == 0 { "iops" } else { "bandwidth" },
                total,
                baseline,
                "QoS: a minimum is out of reach of its host's demand; caps dropped for now"
            );
            self.dims[d] = DimState {
                baseline_total: None,
                cooldown: COOLDOWN_PERIODS,
            };
            for c in self.caps.values_mut() {
                c[d] = None;
            }
            self.caps.retain(|_, c| c.iter().any(Option::is_some));
            return;
        }
        let deficit: f64 = short.iter().map(|s| min_of(s) * TARGET - s.rate(d)).sum();
        let floor = |s: &NsSample| s.min(d).unwrap_or(0.0).max(FLOOR[d]);
        let reference = |caps: &BTreeMap<NsId, [Option<f64>; 2]>, s: &NsSample| {
            caps.get(&s.id)
                .and_then(|c| c[d])
                .map_or(s.rate(d), |c| c.min(s.rate(d).max(c * 0.5)))
        };
        let donors: Vec<(&NsSample, f64)> = samples
            .iter()
            .filter(|s| !short.iter().any(|x| x.id == s.id))
            .map(|s| (s, reference(&self.caps, s)))
            .filter(|(s, r)| *r > floor(s))
            .collect();
        let excess: f64 = donors.iter().map(|(s, r)| r - floor(s)).sum();
        if excess <= 0.0 {
            return;
        }
        for (s, r) in donors {
            let above = r - floor(s);
            let cut = (GAIN * deficit * above / excess).min(above);
            let new_cap = (r - cut).max(floor(s));
            self.caps.entry(s.id.clone()).or_default()[d] = Some(new_cap);
        }
    }

    /// Gives `amount` back to the capped namespaces that use their caps, in proportion
    /// to their caps.
    fn give_back(&mut self, samples: &[NsSample], d: usize, amount: f64) {
        let using: Vec<(NsId, f64)> = samples
            .iter()
            .filter_map(|s| {
                let cap = self.caps.get(&s.id)?[d]?;
                (s.rate(d) >= cap * 0.9).then(|| (s.id.clone(), cap))
            })
            .collect();
        let sum: f64 = using.iter().map(|(_, c)| c).sum();
        if sum <= 0.0 || amount <= 0.0 {
            return;
        }
        for (id, cap) in using {
            if let Some(c) = self.caps.get_mut(&id) {
                c[d] = Some(cap + amount * cap / sum);
            }
        }
    }

    /// No minimum to defend: caps grow and go once unused.
    fn relax_idle(&mut self, samples: &[NsSample], d: usize) {
        for s in samples {
            let Some(c) = self.caps.get_mut(&s.id) else {
                continue;
            };
            if let Some(cap) = c[d] {
                c[d] = if s.rate(d) < cap / 2.0 {
                    None
                } else {
                    Some(cap * RELAX_FACTOR)
                };
            }
        }
        self.caps.retain(|_, c| c.iter().any(Option::is_some));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A simulated node of `capacity` IOPS shared by closed-loop hosts: each namespace
    /// gets a share in proportion to its queue depth, a capped one at most its cap (what
    /// it leaves goes to the others), and a namespace never more than its host can ask
    /// for (`qd / latency`).
    struct SimNs {
        qd: f64,
        min: Option<u64>,
        host_max: f64,
    }

    fn rates(capacity: f64, ns: &[SimNs], caps: &[Option<u64>]) -> Vec<f64> {
        let mut rate = vec![0.0; ns.len()];
        let mut open: Vec<usize> = (0..ns.len()).filter(|&i| ns[i].qd > 0.0).collect();
        let mut left = capacity;
        // Water-filling: fix the namespaces held below their fair share by a cap or
        // their host, share the rest again.
        loop {
            let w: f64 = open.iter().map(|&i| ns[i].qd).sum();
            if open.is_empty() || w <= 0.0 {
                break;
            }
            let bound = |i: usize| ns[i].host_max.min(caps[i].map_or(f64::MAX, |c| c as f64));
            let fixed: Vec<usize> = open
                .iter()
                .copied()
                .filter(|&i| bound(i) < left * ns[i].qd / w)
                .collect();
            if fixed.is_empty() {
                for &i in &open {
                    rate[i] = left * ns[i].qd / w;
                }
                break;
            }
            for &i in &fixed {
                rate[i] = bound(i);
                left -= rate[i];
            }
            open.retain(|i| !fixed.contains(i));
        }
        rate
    }

    fn samples(ns: &[SimNs], rate: &[f64]) -> Vec<NsSample> {
        ns.iter()
            .zip(rate)
            .enumerate()
            .map(|(i, (n, r))| NsSample {
                id: ("s".to_string(), i as u32 + 1),
                iops: *r,
                bytes_per_s: r * 4096.0,
                avg_queue: n.qd,
                min_iops: n.min,
                min_bytes_per_s: None,
            })
            .collect()
    }

    /// Runs `steps` periods; returns the rates of the last one and the caps.
    fn run(
        c: &mut ContentionController,
        capacity: f64,
        ns: &[SimNs],
        steps: usize,
    ) -> (Vec<f64>, Vec<Option<u64>>) {
        let mut caps = vec![None; ns.len()];
        let mut r = rates(capacity, ns, &caps);
        for _ in 0..steps {
            let plan = c.step(&samples(ns, &r));
            for (i, cap) in caps.iter_mut().enumerate() {
                *cap = plan
                    .get(&("s".to_string(), i as u32 + 1))
                    .and_then(|c| c[0]);
            }
            r = rates(capacity, ns, &caps);
        }
        (r, caps)
    }

    fn ns(qd: f64, min: Option<u64>) -> SimNs {
        SimNs {
            qd,
            min,
            host_max: f64::MAX,
        }
    }

    #[test]
    fn a_minimum_is_met_under_contention_and_nobody_starves() {
        // 10k IOPS; the reserved namespace (QD 4, min 4000) would get 1111 alone.
        let node = [ns(4.0, Some(4000)), ns(16.0, None), ns(16.0, None)];
        let before = rates(10_000.0, &node, &[None, None, None]);
        assert!(before[0] < 1200.0);
        let mut c = ContentionController::new();
        let (r, caps) = run(&mut c, 10_000.0, &node, 30);
        assert!(r[0] >= 4000.0 * 0.97, "reserved gets its minimum: {r:?}");
        assert!(r[1] > FLOOR[0] && r[2] > FLOOR[0], "nobody starves: {r:?}");
        assert!((r[1] - r[2]).abs() < 1.0, "the others share alike: {r:?}");
        assert!(caps[0].is_none(), "the reserved namespace is never capped");
        let total: f64 = r.iter().sum();
        assert!((total - 10_000.0).abs() < 1.0, "work conserving: {total}");
    }

    #[test]
    fn caps_go_away_when_the_reserved_namespace_goes_idle() {
        let mut node = [ns(4.0, Some(4000)), ns(16.0, None), ns(16.0, None)];
        let mut c = ContentionController::new();
        let (_, caps) = run(&mut c, 10_000.0, &node, 30);
        assert!(caps[1].is_some());
        node[0].qd = 0.0;
        let (r, caps) = run(&mut c, 10_000.0, &node, 60);
        assert_eq!(caps, vec![None, None, None], "{r:?}");
        assert!(!c.any_cap());
        assert!((r[1] - 5000.0).abs() < 1.0);
    }

    #[test]
    fn no_caps_while_the_minimum_is_met_anyway() {
        let node = [ns(16.0, Some(1000)), ns(16.0, None)];
        let mut c = ContentionController::new();
        let (r, caps) = run(&mut c, 10_000.0, &node, 20);
        assert_eq!(caps, vec![None, None]);
        assert!((r[0] - 5000.0).abs() < 1.0);
    }

    #[test]
    fn an_unreachable_minimum_does_not_idle_the_node() {
        // The reserved host can do 500 IOPS at most (QD 1, 2 ms) but asks for 4000.
        let node = [
            SimNs {
                qd: 1.0,
                min: Some(4000),
                host_max: 500.0,
            },
            ns(16.0, None),
        ];
        let mut c = ContentionController::new();
        let mut worst_total: f64 = f64::MAX;
        let mut caps = vec![None; 2];
        let mut r = rates(10_000.0, &node, &caps);
        let mut totals = Vec::new();
        for _ in 0..200 {
            let plan = c.step(&samples(&node, &r));
            for (i, cap) in caps.iter_mut().enumerate() {
                *cap = plan
                    .get(&("s".to_string(), i as u32 + 1))
                    .and_then(|c| c[0]);
            }
            r = rates(10_000.0, &node, &caps);
            let t: f64 = r.iter().sum();
            worst_total = worst_total.min(t);
            totals.push(t);
        }
        // Dips happen while it probes, but most of the time the node runs near full.
        let mean = totals.iter().sum::<f64>() / totals.len() as f64;
        assert!(mean > 7_000.0, "mean total {mean}");
        assert!(
            worst_total >= 10_000.0 * WORK_LOSS * 0.5,
            "worst {worst_total}"
        );
    }

    #[test]
    fn a_reserved_donor_keeps_its_own_minimum() {
        // Two reserved namespaces, one short: the other gives only what it has above
        // its own minimum.
        let node = [ns(2.0, Some(5000)), ns(16.0, Some(3000)), ns(16.0, None)];
        let mut c = ContentionController::new();
        let (r, caps) = run(&mut c, 10_000.0, &node, 40);
        assert!(r[0] >= 5000.0 * 0.97, "{r:?}");
        assert!(r[1] >= 3000.0 * 0.97, "{r:?}");
        assert!(caps[1].is_none_or(|c| c >= 3000), "{caps:?}");
    }

    proptest! {
        /// Any node whose minimums fit in 80% of its capacity: every minimum is met within
        /// 50 periods, nobody is below the floor, and the node stays busy.
        #[test]
        fn minimums_that_fit_are_met(
            capacity in 2_000.0f64..200_000.0,
            spec in proptest::collection::vec((1u32..64, proptest::option::of(1u32..100)), 2..6),
        ) {
            let weights: Vec<f64> = spec.iter().map(|(q, _)| f64::from(*q)).collect();
            let share_sum: u32 = spec.iter().filter_map(|(_, m)| *m).sum();
            let node: Vec<SimNs> = spec
                .iter()
                .zip(&weights)
                .map(|((_, m), q)| {
                    // Minimums as shares of 80% of capacity.
                    let min = m.map(|m| {
                        (capacity * 0.8 * f64::from(m) / f64::from(share_sum.max(1))) as u64
                    });
                    ns(*q, min.filter(|v| *v as f64 > FLOOR[0] * 2.0))
                })
                .collect();
            let mut c = ContentionController::new();
            let (r, _) = run(&mut c, capacity, &node, 50);
            for (n, rate) in node.iter().zip(&r) {
                if let Some(m) = n.min {
                    prop_assert!(*rate >= m as f64 * (1.0 - SHORT_TOLERANCE) - 1.0,
                        "min {m} got {rate}: {r:?}");
                }
                prop_assert!(*rate >= FLOOR[0].min(capacity / 100.0) - 1.0, "starved: {r:?}");
            }
            let total: f64 = r.iter().sum();
            prop_assert!(total > capacity * 0.99, "idle node: {total} of {capacity}");
        }
    }
}
