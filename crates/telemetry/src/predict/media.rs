//! Rules on what the drive says of itself: available spare and wear (NVMe SMART).

use super::{Grade, PredictionConfig, Reason};
use crate::series::Sample;

pub(super) fn spare(c: &PredictionConfig, samples: &[Sample]) -> Option<Reason> {
    let m = samples
        .iter()
        .rev()
        .find(|s| s.media.available_spare_pct.is_some())?
        .media;
    let pct = m.available_spare_pct?;
    let threshold = m.available_spare_threshold_pct.unwrap_or(0);
    let grade = if pct < threshold {
        Grade::Failing
    } else if u16::from(pct) <= u16::from(threshold) + u16::from(c.spare_margin_pct) {
        Grade::Suspect
    } else {
        return None;
    };
    Some(Reason {
        rule: "spare".into(),
        grade,
        detail: format!(
            "available spare {pct} % (the drive warns below {threshold} %; suspect within {} points)",
            c.spare_margin_pct
        ),
    })
}

pub(super) fn wear(c: &PredictionConfig, samples: &[Sample]) -> Option<Reason> {
    let used = samples.iter().rev().find_map(|s| s.media.percentage_used)?;
    let grade = if used >= c.wear_failing_pct {
        Grade::Failing
    } else if used >= c.wear_suspect_pct {
        Grade::Suspect
    } else {
        return None;
    };
    Some(Reason {
        rule: "wear".into(),
        grade,
        detail: format!(
            "{used} % of rated life used (suspect from {} %, failing from {} %)",
            c.wear_suspect_pct, c.wear_failing_pct
        ),
    })
}
