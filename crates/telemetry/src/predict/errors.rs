//! Error rules: media errors, and transport errors (timeouts, lost paths) that recur.

use super::{Grade, PredictionConfig, Reason};
use crate::counters::ErrorKind;
use crate::series::Sample;

/// Media errors seen on the I/O path plus those the drive's own SMART counter gained.
pub(super) fn media(c: &PredictionConfig, samples: &[Sample]) -> Option<Reason> {
    let io: u64 = samples.iter().map(|s| s.errors(ErrorKind::Media)).sum();
    let smart_first = samples.iter().find_map(|s| s.media.media_errors);
    let smart_last = samples.iter().rev().find_map(|s| s.media.media_errors);
    let smart = match (smart_first, smart_last) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => 0,
    };
    let total = io + smart;
    let with_errors = samples
        .iter()
        .filter(|s| s.errors(ErrorKind::Media) > 0)
        .count();
    if total == 0 {
        return None;
    }
    let failing = total >= c.media_failing_errors || with_errors >= c.media_failing_samples;
    Some(Reason {
        rule: "media_errors".into(),
        grade: if failing {
            Grade::Failing
        } else {
            Grade::Suspect
        },
        detail: format!(
            "{total} media errors in {} s ({io} on I/O in {with_errors} samples, {smart} by the drive's SMART count); failing from {} errors or {} samples",
            c.window_ms / 1000,
            c.media_failing_errors,
            c.media_failing_samples
        ),
    })
}

pub(super) fn transport(c: &PredictionConfig, samples: &[Sample]) -> Option<Reason> {
    let with_errors = samples
        .iter()
        .filter(|s| s.errors(ErrorKind::Transport) > 0)
        .count();
    let total: u64 = samples.iter().map(|s| s.errors(ErrorKind::Transport)).sum();
    let grade = if with_errors >= c.transport_failing_samples {
        Grade::Failing
    } else if with_errors >= c.transport_suspect_samples.max(1) {
        Grade::Suspect
    } else {
        return None;
    };
    Some(Reason {
        rule: "transport_errors".into(),
        grade,
        detail: format!(
            "{total} timeouts or path errors in {with_errors} samples of the last {} s; failing from {} samples",
            c.window_ms / 1000,
            c.transport_failing_samples
        ),
    })
}
