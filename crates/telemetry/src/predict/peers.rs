//! Fail-slow: a drive whose latency stays far above its peers' at a similar load.
//!
//! Peers are the drives of the same group (the members of one volume), which see the same
//! workload: a stripe touches all of them. Samples are compared at the same instant (the
//! sampler reads every source in one round, so their `t_ms` are equal). Queue depth is not
//! a separate excuse: by Little's law a drive's mean depth is its throughput times its
//! latency, so at equal throughput a slow drive *has* the deeper queue. Throughput is what
//! tells busy from slow: a drive that serves more operations per second than its peers
//! (more than `load_ratio` times their median) has its latency explained by its load.

use std::collections::BTreeMap;

use super::{DriveSeries, Grade, PredictionConfig, Reason};
use crate::series::Sample;

#[derive(Clone, Debug, Default)]
pub(super) struct Judgement {
    pub reason: Option<Reason>,
    pub notes: Vec<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[derive(Default)]
struct Tally {
    judged: usize,
    slow: usize,
    busy: usize,
    /// The last slow sample: (mean, peers' mean, iops, peers' iops).
    last_slow: Option<(f64, f64, f64, f64)>,
    last_busy: Option<(f64, f64, f64, f64)>,
}

fn high(c: &PredictionConfig, own: f64, peers: f64) -> bool {
    own >= c.slow_ratio * peers && own - peers >= c.slow_min_excess_us as f64
}

pub(super) fn judge(c: &PredictionConfig, drives: &[DriveSeries]) -> BTreeMap<String, Judgement> {
    let mut groups: BTreeMap<&str, Vec<&DriveSeries>> = BTreeMap::new();
    for d in drives {
        if let Some(g) = &d.group {
            groups.entry(g.as_str()).or_default().push(d);
        }
    }
    let mut out = BTreeMap::new();
    for members in groups.values() {
        // Samples by instant, then by member.
        let mut at: BTreeMap<u64, Vec<(usize, &Sample)>> = BTreeMap::new();
        for (i, m) in members.iter().enumerate() {
            for s in &m.samples {
                if s.data_ops() >= c.min_ops_per_sample.max(1) {
                    at.entry(s.t_ms).or_default().push((i, s));
                }
            }
        }
        let mut tallies: Vec<Tally> = members.iter().map(|_| Tally::default()).collect();
        for row in at.values() {
            for &(i, s) in row {
                let peers: Vec<&Sample> = row
                    .iter()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, p)| *p)
                    .collect();
                if peers.len() < c.min_peers.max(1) {
                    continue;
                }
                let pm = median(peers.iter().map(|p| p.data_mean_us as f64).collect());
                let pp = median(peers.iter().map(|p| p.data_p99_us as f64).collect());
                let pi = median(peers.iter().map(|p| p.data_iops()).collect());
                let (om, op, oi) = (s.data_mean_us as f64, s.data_p99_us as f64, s.data_iops());
                let t = &mut tallies[i];
                t.judged += 1;
                if high(c, om, pm) || high(c, op, pp) {
                    if oi > c.load_ratio * pi {
                        t.busy += 1;
                        t.last_busy = Some((om, pm, oi, pi));
                    } else {
                        t.slow += 1;
                        t.last_slow = Some((om, pm, oi, pi));
                    }
                }
            }
        }
        for (m, t) in members.iter().zip(tallies) {
            let mut j = Judgement::default();
            if let Some((om, pm, oi, pi)) = t.last_busy {
                j.notes.push(format!(
                    "busy, not slow: latency up to {:.1} ms vs the peers' {:.1} ms in {} of {} samples, explained by its load ({oi:.0} vs {pi:.0} op/s)",
                    om / 1000.0,
                    pm / 1000.0,
                    t.busy,
                    t.judged
                ));
            }
            if t.judged >= c.min_judged_samples.max(1) && t.slow > 0 {
                let frac = t.slow as f64 / t.judged as f64;
                let grade = if frac >= c.slow_failing_fraction {
                    Some(Grade::Failing)
                } else if frac >= c.slow_suspect_fraction {
                    Some(Grade::Suspect)
                } else {
                    None
                };
                if let (Some(grade), Some((om, pm, oi, pi))) = (grade, t.last_slow) {
                    j.reason = Some(Reason {
                        rule: "fail_slow".into(),
                        grade,
                        detail: format!(
                            "slow in {} of {} samples: mean latency {:.2} ms vs the peers' median {:.2} ms ({:.1}x, threshold {}x) at a similar load ({oi:.0} vs {pi:.0} op/s)",
                            t.slow,
                            t.judged,
                            om / 1000.0,
                            pm / 1000.0,
                            om / pm.max(1.0),
                            c.slow_ratio
                        ),
                    });
                }
            }
            out.insert(m.source.clone(), j);
        }
    }
    out
}
