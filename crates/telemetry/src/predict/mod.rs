//! The failure-prediction and fail-slow model (`docs/prediction.md`).
//!
//! Pure and deterministic: [`assess`] takes each drive's recent samples (from the
//! [`crate::SeriesStore`]), the peer group it belongs to (the volume whose members it
//! serves) and the time, and grades every drive ok / suspect / failing with its reasons.
//! No clock, no I/O, no randomness: the same input gives the same grades.

mod errors;
mod media;
mod peers;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::series::{Sample, SeriesStore};

/// How bad a drive looks. Ordered: `Ok < Suspect < Failing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grade {
    Ok,
    /// Worth watching; no action by default.
    Suspect,
    /// Expected to fail: replace it (a proactive copy, if it is a volume member).
    Failing,
}

impl Grade {
    pub fn name(self) -> &'static str {
        match self {
            Grade::Ok => "ok",
            Grade::Suspect => "suspect",
            Grade::Failing => "failing",
        }
    }

    pub fn parse(s: &str) -> Option<Grade> {
        match s {
            "ok" => Some(Grade::Ok),
            "suspect" => Some(Grade::Suspect),
            "failing" => Some(Grade::Failing),
            _ => None,
        }
    }
}

impl std::fmt::Display for Grade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One rule's finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    /// `media_errors`, `transport_errors`, `spare`, `wear`, `fail_slow`.
    pub rule: String,
    pub grade: Grade,
    /// For a person: what was seen, against which threshold.
    pub detail: String,
}

/// A drive's grade and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assessment {
    pub source: String,
    pub grade: Grade,
    /// The findings of the rules that did not say ok, worst first.
    pub reasons: Vec<Reason>,
    /// Things seen and explained away (e.g. high latency explained by a higher load).
    pub notes: Vec<String>,
}

impl Assessment {
    /// One line: `failing: fail_slow: ...; media_errors: ...`.
    pub fn summary(&self) -> String {
        if self.reasons.is_empty() {
            return self.grade.to_string();
        }
        format!("{}: {}", self.grade, self.reasons_line())
    }

    /// The findings on one line, without the grade: `fail_slow: ...; media_errors: ...`
    /// (empty when there is none).
    pub fn reasons_line(&self) -> String {
        let r: Vec<String> = self
            .reasons
            .iter()
            .map(|r| format!("{}: {}", r.rule, r.detail))
            .collect();
        r.join("; ")
    }
}

/// The model's thresholds and windows (`docs/prediction.md` says why each default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PredictionConfig {
    /// Samples newer than `now - window_ms` are looked at.
    pub window_ms: u64,
    /// Media errors in the window that make a drive failing (one makes it suspect).
    pub media_failing_errors: u64,
    /// Samples with media errors in the window that make it failing (errors that recur).
    pub media_failing_samples: usize,
    /// Samples with transport errors (timeouts, lost paths) that make it suspect / failing.
    pub transport_suspect_samples: usize,
    pub transport_failing_samples: usize,
    /// Available spare within this many points above the drive's threshold: suspect;
    /// below the threshold: failing.
    pub spare_margin_pct: u8,
    /// Percentage Used at which a drive is suspect / failing.
    pub wear_suspect_pct: u8,
    pub wear_failing_pct: u8,
    /// Fail-slow: a sample is slow when the drive's mean or p99 data latency is at least
    /// `slow_ratio` times the median of its peers' and at least `slow_min_excess_us` more...
    pub slow_ratio: f64,
    pub slow_min_excess_us: u64,
    /// ... unless its load explains it: more than `load_ratio` times the peers' median
    /// operations per second (then it is busy, not slow).
    pub load_ratio: f64,
    /// Samples with fewer data operations than this (on the drive or a peer) say nothing.
    pub min_ops_per_sample: u64,
    /// Peers with data a sample needs to be judged.
    pub min_peers: usize,
    /// Judged samples needed before fail-slow may grade at all.
    pub min_judged_samples: usize,
    /// Fraction of judged samples that must be slow for suspect / failing.
    pub slow_suspect_fraction: f64,
    pub slow_failing_fraction: f64,
}

impl Default for PredictionConfig {
    fn default() -> Self {
        PredictionConfig {
            window_ms: 60_000,
            media_failing_errors: 8,
            media_failing_samples: 3,
            transport_suspect_samples: 1,
            transport_failing_samples: 5,
            spare_margin_pct: 10,
            wear_suspect_pct: 90,
            wear_failing_pct: 100,
            slow_ratio: 3.0,
            slow_min_excess_us: 1_000,
            load_ratio: 1.5,
            min_ops_per_sample: 20,
            min_peers: 2,
            min_judged_samples: 10,
            slow_suspect_fraction: 0.5,
            slow_failing_fraction: 0.8,
        }
    }
}

/// One drive's input: its samples in the window and its peer group (e.g. the volume it
/// is a member of; `None`: no peers, no fail-slow rule).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriveSeries {
    pub source: String,
    pub group: Option<String>,
    pub samples: Vec<Sample>,
}

/// Grades every drive, in the order given by source name.
pub fn assess(config: &PredictionConfig, now_ms: u64, drives: &[DriveSeries]) -> Vec<Assessment> {
    let since = now_ms.saturating_sub(config.window_ms);
    let windowed: Vec<DriveSeries> = drives
        .iter()
        .map(|d| DriveSeries {
            source: d.source.clone(),
            group: d.group.clone(),
            samples: d
                .samples
                .iter()
                .filter(|s| s.t_ms > since && s.t_ms <= now_ms)
                .copied()
                .collect(),
        })
        .collect();
    let slow = peers::judge(config, &windowed);
    let mut out: Vec<Assessment> = windowed
        .iter()
        .map(|d| {
            let mut reasons = Vec::new();
            let mut notes = Vec::new();
            reasons.extend(errors::media(config, &d.samples));
            reasons.extend(errors::transport(config, &d.samples));
            reasons.extend(media::spare(config, &d.samples));
            reasons.extend(media::wear(config, &d.samples));
            if let Some(j) = slow.get(&d.source) {
                reasons.extend(j.reason.clone());
                notes.extend(j.notes.iter().cloned());
            }
            reasons.sort_by(|a, b| b.grade.cmp(&a.grade).then(a.rule.cmp(&b.rule)));
            Assessment {
                source: d.source.clone(),
                grade: reasons.iter().map(|r| r.grade).max().unwrap_or(Grade::Ok),
                reasons,
                notes,
            }
        })
        .collect();
    out.sort_by(|a, b| a.source.cmp(&b.source));
    out
}

/// [`assess`] over every source of `store`, grouped by its `group_label` label.
pub fn assess_store(
    config: &PredictionConfig,
    now_ms: u64,
    store: &SeriesStore,
    group_label: &str,
) -> Vec<Assessment> {
    let since = now_ms.saturating_sub(config.window_ms);
    let drives: Vec<DriveSeries> = store
        .sources()
        .map(|k| DriveSeries {
            source: k.to_string(),
            group: store
                .labels(k)
                .and_then(|l: &BTreeMap<String, String>| l.get(group_label).cloned()),
            samples: store.fine_since(k, since),
        })
        .collect();
    assess(config, now_ms, &drives)
}

#[cfg(test)]
mod tests;
