//! The `qos_throttling` event: once per interval (`ProcessorConfig::qos_event_interval_ms`,
//! default a minute), for each volume this node owns whose QoS limits made commands wait
//! since the last look, one event with how many and how long. Bounded: at most one event
//! per owned volume per interval, whatever the load.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use meta::schema::{Severity, SubjectKind};

use super::Ctx;
use crate::events::{self, new_event, with_field};
use crate::records::volume_nqn;

/// Throttled commands and nanoseconds so far, per volume.
type Seen = BTreeMap<String, (u64, u64)>;

/// Looks every interval until the node stops (the task is aborted).
pub(crate) async fn run(ctx: Arc<Ctx>) {
    let every = Duration::from_millis(ctx.cfg.qos_event_interval_ms.max(100));
    let mut seen = Seen::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        for e in throttling(&ctx, &mut seen, every) {
            events::emit(ctx.store.as_ref(), e).await;
        }
    }
}

/// Events for the owned volumes that were throttled since the last call.
fn throttling(ctx: &Ctx, seen: &mut Seen, every: Duration) -> Vec<meta::schema::NewEvent> {
    let owned: Vec<String> = ctx.owned_lock().keys().cloned().collect();
    let stats = ctx.target.qos_stats();
    let mut out = Vec::new();
    let mut next = Seen::new();
    for volume in owned {
        let nqn = volume_nqn(&volume);
        let (cmds, ns) = stats
            .limits
            .iter()
            .filter(|s| s.key.subsystem_nqn == nqn)
            .map(|s| (s.throttled_commands, s.throttled_ns))
            .chain(
                stats
                    .caps
                    .iter()
                    .filter(|c| c.subsystem_nqn == nqn)
                    .map(|c| (c.throttled_commands, c.throttled_ns)),
            )
            .fold((0u64, 0u64), |a, b| (a.0 + b.0, a.1 + b.1));
        let (c0, n0) = seen.get(&volume).copied().unwrap_or((0, 0));
        // Counters restart with the limits (cleared and set again): start over.
        let (dc, dn) = if cmds >= c0 && ns >= n0 {
            (cmds - c0, ns - n0)
        } else {
            (cmds, ns)
        };
        next.insert(volume.clone(), (cmds, ns));
        if dc == 0 {
            continue;
        }
        let secs = dn as f64 / 1e9;
        let e = new_event(
            events::kind::QOS_THROTTLING,
            Severity::Info,
            SubjectKind::Volume,
            &volume,
            format!(
                "volume {volume}: QoS limits made {dc} commands wait {secs:.3} s in all over the last {} s on {}",
                every.as_secs_f64(),
                ctx.name
            ),
        );
        let e = with_field(e, "node", ctx.name.clone());
        let e = with_field(e, "throttled_commands", dc);
        let e = with_field(e, "throttled_seconds", secs);
        out.push(with_field(e, "interval_seconds", every.as_secs_f64()));
    }
    *seen = next;
    out
}
