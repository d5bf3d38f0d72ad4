//! The longest interval without a completed I/O, relative to the kill.

use std::time::Instant;

use serde::Serialize;

/// Where the host saw no completion for longest, relative to the kill.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Gap {
    /// Longest interval without a completed I/O.
    pub(crate) io_gap_ms: f64,
    /// When it started and ended, ms after the kill (negative: before it).
    pub(crate) io_gap_start_ms_after_kill: f64,
    pub(crate) io_gap_end_ms_after_kill: f64,
    pub(crate) completions: u64,
    pub(crate) completions_after_kill: u64,
    /// The longest interval without a completion away from the kill (before it): the
    /// background noise of this machine.
    pub(crate) longest_gap_before_kill_ms: f64,
}

pub(crate) fn gaps(mut t: Vec<Instant>, kill: Instant) -> Gap {
    t.sort();
    let ms_after = |i: Instant| {
        if i >= kill {
            i.duration_since(kill).as_secs_f64() * 1e3
        } else {
            -(kill.duration_since(i).as_secs_f64() * 1e3)
        }
    };
    let mut g = Gap {
        completions: t.len() as u64,
        completions_after_kill: t.iter().filter(|&&i| i >= kill).count() as u64,
        ..Gap::default()
    };
    for w in t.windows(2) {
        let d = w[1].duration_since(w[0]).as_secs_f64() * 1e3;
        if d > g.io_gap_ms {
            g.io_gap_ms = d;
            g.io_gap_start_ms_after_kill = ms_after(w[0]);
            g.io_gap_end_ms_after_kill = ms_after(w[1]);
        }
        if w[1] < kill && d > g.longest_gap_before_kill_ms {
            g.longest_gap_before_kill_ms = d;
        }
    }
    g
}
