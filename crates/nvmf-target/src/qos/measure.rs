//! The cost of admitting one command through a gate, for the QoS benchmark
//! (`benches/qos.rs`): the engine's own per-command work, without the transport around
//! it, which a loopback benchmark on a shared machine cannot resolve.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::MonotonicClock;
use super::gate::{LimitState, NsCap, QosGate};
use super::limits::QosLimits;

/// What a command passes in one measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateKind {
    /// No limit applies: the connection has no gate, the command an `Option` test.
    None,
    /// Only a namespace's contention cap, not capping (a minimum is set elsewhere).
    CapOnly,
    /// One limit (IOPS and bandwidth) set far above the load.
    OneLimit,
    /// A namespace limit and a host limit, both far above the load, and a cap.
    TwoLimitsAndCap,
}

fn gate(kind: GateKind) -> Option<Arc<QosGate>> {
    let far = QosLimits {
        max_iops: Some(1 << 40),
        max_bytes_per_s: Some(1 << 40),
        ..QosLimits::default()
    };
    let limit = || Arc::new(LimitState::new(&far));
    let (limits, cap) = match kind {
        GateKind::None => return None,
        GateKind::CapOnly => (vec![], true),
        GateKind::OneLimit => (vec![limit()], false),
        GateKind::TwoLimitsAndCap => (vec![limit(), limit()], true),
    };
    Some(Arc::new(QosGate {
        limits,
        cap: cap.then(|| Arc::new(NsCap::new())),
        clock: Arc::new(MonotonicClock::new()),
    }))
}

/// Admits `commands` commands of 4 KiB on each of `threads` threads sharing one gate (as
/// the queues of one host share its limits); the time per command on one thread.
pub fn admission_cost(kind: GateKind, threads: usize, commands: u64) -> Duration {
    let g = gate(kind);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            let g = g.clone();
            s.spawn(move || {
                let mut waited = 0u64;
                for _ in 0..commands {
                    let g = std::hint::black_box(&g);
                    if let Some(g) = g
                        && g.admit(4096).waits()
                    {
                        waited += 1;
                    }
                }
                std::hint::black_box(waited);
            });
        }
    });
    t0.elapsed() / u32::try_from(commands.max(1)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_far_above_the_load_never_hold_a_command() {
        for kind in [
            GateKind::None,
            GateKind::CapOnly,
            GateKind::OneLimit,
            GateKind::TwoLimitsAndCap,
        ] {
            let g = gate(kind);
            for _ in 0..10_000 {
                assert!(
                    !g.as_ref().is_some_and(|g| g.admit(4096).waits()),
                    "{kind:?}"
                );
            }
            assert!(admission_cost(kind, 2, 1000) > Duration::ZERO || kind == GateKind::None);
        }
    }
}
