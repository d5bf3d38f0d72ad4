//! Member monitor of an owned volume, once a second:
//!
//! - a member that failed (its storage node was down, its connection gave up) and
//!   answers again is fenced and put back into its slot with `Volume::replace_member`,
//!   which recognises it (same member UUID) and rebuilds only the regions dirtied while
//!   it was away; a member failed by the operator is left out;
//! - a member whose connection came back by itself (its storage node restarted within
//!   the controller-loss timeout) is fenced again: the restarted target may have lost
//!   the reservation.
//!
//! Taking a reservation over from another holder is only done after checking, in the
//! store, that this node still owns the volume under a live lease: another holder is
//! then a stale owner. Otherwise a newer owner would be preempted back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meta::schema::{OwnerRecord, current_owner};
use nvmf_host::RemoteNamespace;
use volume::{MemberState, Volume};

use super::fence::fence_member;
use super::members::{FenceLatch, MemberDevice, open_member};
use super::{Ctx, LeaseInfo};
use crate::records::VolumeRecord;

/// How often failed slots are looked at.
const PERIOD: Duration = Duration::from_secs(1);
/// After a failed attempt, leave the slot alone this long.
const RETRY_AFTER: Duration = Duration::from_secs(3);

/// The member namespaces in use, by record slot.
pub(crate) type Slots = Arc<Mutex<Vec<Option<Arc<RemoteNamespace>>>>>;

/// What the monitor needs to know about the ownership it works under.
pub(crate) struct Ownership {
    pub owner: OwnerRecord,
    pub lease: LeaseInfo,
}

fn lock(slots: &Slots) -> std::sync::MutexGuard<'_, Vec<Option<Arc<RemoteNamespace>>>> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether this node may take a member's reservation from another holder now.
pub(super) async fn may_preempt(ctx: &Ctx, volume: &str, own: &Ownership) -> bool {
    own.lease.is_alive()
        && matches!(
            current_owner(ctx.store.as_ref(), volume).await,
            Ok(Some(cur)) if cur.value == own.owner && cur.lease == Some(own.lease.id)
        )
}

pub(crate) fn spawn(
    ctx: Arc<Ctx>,
    rec: VolumeRecord,
    volume: Arc<Volume>,
    latch: Arc<FenceLatch>,
    slots: Slots,
    own: Ownership,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut next_try: HashMap<usize, Instant> = HashMap::new();
        let generation = |ns: &Option<Arc<RemoteNamespace>>| {
            ns.as_ref().map(|n| n.controller().status().generation)
        };
        let mut seen: Vec<Option<u64>> = lock(&slots).iter().map(generation).collect();
        let mut watch = EventWatch::new(&ctx, &rec.name, &volume.status());
        let mut rec = rec;
        loop {
            tokio::time::sleep(PERIOD).await;
            if latch.is_closed() {
                return;
            }
            // A member replacement asked through the API.
            if let Some(done) =
                super::member_ops::run_pending(&ctx, &rec, &volume, &latch, &own).await
            {
                let g = done.ns.controller().status().generation;
                if let Some(m) = rec.members.get_mut(done.slot) {
                    *m = done.member;
                }
                if let Some(s) = lock(&slots).get_mut(done.slot) {
                    *s = Some(done.ns);
                }
                if let Some(s) = seen.get_mut(done.slot) {
                    *s = Some(g);
                }
            }
            // Reconnected members: fence again (no preemption unless surely still owner).
            let now: Vec<(usize, Arc<RemoteNamespace>, u64)> = lock(&slots)
                .iter()
                .enumerate()
                .filter_map(|(i, ns)| {
                    let ns = ns.as_ref()?;
                    let st = ns.controller().status();
                    st.is_live().then(|| (i, ns.clone(), st.generation))
                })
                .collect();
            for (i, ns, g) in now {
                if seen.get(i).copied().flatten().is_some_and(|s| s >= g) {
                    continue;
                }
                if !may_preempt(&ctx, &rec.name, &own).await {
                    continue;
                }
                match fence_member(&ns, ctx.key).await {
                    Ok(_) => {
                        tracing::info!(volume = %rec.name, member = i, "processor: member reconnected; fenced again");
                        if let Some(s) = seen.get_mut(i) {
                            *s = Some(g);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(volume = %rec.name, member = i, "processor: re-fencing failed: {e}")
                    }
                }
            }
            let status = volume.status();
            watch.observe(&rec, &status);
            // Slot i of the volume is member i of the record (creation order).
            let failed: Vec<usize> = status
                .members
                .iter()
                .filter(|m| m.state == MemberState::Failed && !m.failed_by_operator)
                .map(|m| m.index)
                .collect();
            for i in failed {
                if next_try.get(&i).is_some_and(|t| Instant::now() < *t) {
                    continue;
                }
                let Some(m) = rec.members.get(i) else {
                    continue;
                };
                if !may_preempt(&ctx, &rec.name, &own).await {
                    continue;
                }
                match bring_back(&ctx, &volume, &latch, i, &m.url).await {
                    Ok(ns) => {
                        tracing::info!(volume = %rec.name, member = i, url = %m.url, "processor: member back; partial rebuild");
                        watch.returned(i, &m.url, &volume.status());
                        let g = ns.controller().status().generation;
                        if let Some(s) = lock(&slots).get_mut(i) {
                            *s = Some(ns);
                        }
                        if let Some(s) = seen.get_mut(i) {
                            *s = Some(g);
                        }
                        next_try.remove(&i);
                    }
                    Err(e) => {
                        tracing::debug!(volume = %rec.name, member = i, "processor: member still away: {e}");
                        next_try.insert(i, Instant::now() + RETRY_AFTER);
                    }
                }
            }
        }
    })
}

async fn bring_back(
    ctx: &Ctx,
    volume: &Volume,
    latch: &Arc<FenceLatch>,
    i: usize,
    url: &str,
) -> Result<Arc<RemoteNamespace>, String> {
    let ns = open_member(ctx, url).await.map_err(|e| e.to_string())?;
    fence_member(&ns, ctx.key)
        .await
        .map_err(|e| format!("not fenced: {e}"))?;
    let mut meters = std::collections::BTreeMap::new();
    let dev = super::takeover::metered(
        &mut meters,
        Arc::new(MemberDevice::new(ns.clone(), url, latch.clone())),
    );
    let name = volume.status().name;
    for (device, meter) in meters {
        ctx.health.add_meter(&name, &device, meter);
    }
    volume
        .replace_member(i, dev)
        .await
        .map_err(|e| e.to_string())?;
    Ok(ns)
}

/// Turns changes of the volume's status into events: a member that went failed, a
/// rebuild that started or ended. Seen once a [`PERIOD`]; a member that comes back is
/// reported by the monitor itself (with the rebuild it starts), so even a rebuild shorter
/// than a period has its start and its end.
struct EventWatch {
    volume: String,
    /// To the task that writes them, in order (bounded: a store that hangs costs events,
    /// not memory).
    tx: tokio::sync::mpsc::Sender<meta::schema::NewEvent>,
    failed: Vec<bool>,
    /// The rebuild last seen: (member, still running).
    rebuild: Option<(usize, bool)>,
}

impl EventWatch {
    fn new(ctx: &Arc<Ctx>, volume: &str, st: &volume::VolumeStatus) -> EventWatch {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<meta::schema::NewEvent>(64);
        let store = ctx.store.clone();
        // Ends once the watch is dropped and what it queued is written.
        tokio::spawn(async move {
            while let Some(e) = rx.recv().await {
                crate::events::emit(store.as_ref(), e).await;
            }
        });
        EventWatch {
            volume: volume.to_string(),
            tx,
            failed: st
                .members
                .iter()
                .map(|m| m.state == MemberState::Failed)
                .collect(),
            rebuild: st
                .rebuild
                .as_ref()
                .map(|r| (r.member, r.phase == volume::TaskPhase::Running)),
        }
    }

    fn emit(&self, e: meta::schema::NewEvent) {
        if let Err(e) = self.tx.try_send(e) {
            tracing::warn!(volume = %self.volume, "event dropped (the store is not keeping up): {e}");
        }
    }

    fn event(
        &self,
        kind: &str,
        severity: meta::schema::Severity,
        message: String,
        member: usize,
    ) -> meta::schema::NewEvent {
        let e = crate::events::new_event(
            kind,
            severity,
            meta::schema::SubjectKind::Volume,
            &self.volume,
            message,
        );
        crate::events::with_field(e, "member", member)
    }

    fn observe(&mut self, rec: &VolumeRecord, st: &volume::VolumeStatus) {
        use crate::events::{kind, with_field};
        use meta::schema::Severity;
        for m in &st.members {
            let failed = m.state == MemberState::Failed;
            let was = self.failed.get(m.index).copied().unwrap_or(false);
            if failed && !was {
                let url = rec.members.get(m.index).map_or("", |r| r.url.as_str());
                let why = if m.failed_by_operator {
                    "by the operator"
                } else {
                    "by I/O errors or its target going away"
                };
                let e = self.event(
                    kind::MEMBER_FAILED,
                    Severity::Error,
                    format!(
                        "volume {}: member {} ({url}) failed {why}; the volume is {}",
                        self.volume,
                        m.index,
                        format!("{:?}", st.state).to_lowercase()
                    ),
                    m.index,
                );
                let e = with_field(e, "url", url);
                let e = with_field(e, "failed_by_operator", m.failed_by_operator);
                self.emit(e);
            }
            if let Some(f) = self.failed.get_mut(m.index) {
                *f = failed;
            }
        }
        let now = st
            .rebuild
            .as_ref()
            .map(|r| (r.member, r.phase == volume::TaskPhase::Running));
        if let Some(r) = &st.rebuild {
            let running = r.phase == volume::TaskPhase::Running;
            if running && self.rebuild != Some((r.member, true)) {
                self.emit(self.rebuild_started(r));
            }
            if !running && self.rebuild == Some((r.member, true)) {
                let outcome = match &r.phase {
                    volume::TaskPhase::Done => "done",
                    volume::TaskPhase::Stopped => "stopped",
                    _ => "failed",
                };
                let severity = if outcome == "done" {
                    Severity::Info
                } else {
                    Severity::Warning
                };
                let e = self.event(
                    kind::REBUILD_DONE,
                    severity,
                    format!(
                        "volume {}: rebuild of member {} {outcome} ({} bytes)",
                        self.volume, r.member, r.bytes_done
                    ),
                    r.member,
                );
                let e = with_field(e, "outcome", outcome);
                self.emit(with_field(e, "bytes_done", r.bytes_done));
            }
        }
        self.rebuild = now;
    }

    fn rebuild_started(&self, r: &volume::RebuildProgress) -> meta::schema::NewEvent {
        let e = self.event(
            crate::events::kind::REBUILD_STARTED,
            meta::schema::Severity::Info,
            format!(
                "volume {}: {} rebuild of member {} started{}",
                self.volume,
                if r.partial { "partial" } else { "full" },
                r.member,
                // Not known yet at the first progress report of a full rebuild.
                if r.bytes_total > 0 {
                    format!(" ({} bytes)", r.bytes_total)
                } else {
                    String::new()
                }
            ),
            r.member,
        );
        let e = crate::events::with_field(e, "partial", r.partial);
        crate::events::with_field(e, "bytes_total", r.bytes_total)
    }

    /// Member `i` is back in its slot: report it, and the rebuild it started.
    fn returned(&mut self, i: usize, url: &str, st: &volume::VolumeStatus) {
        let e = self.event(
            crate::events::kind::MEMBER_RETURNED,
            meta::schema::Severity::Info,
            format!("volume {}: member {i} ({url}) is back", self.volume),
            i,
        );
        self.emit(crate::events::with_field(e, "url", url));
        if let Some(r) = st.rebuild.as_ref().filter(|r| r.member == i) {
            self.emit(self.rebuild_started(r));
            // Its end is reported by `observe` (even if it is already over).
            self.rebuild = Some((i, true));
        }
        if let Some(f) = self.failed.get_mut(i) {
            *f = false;
        }
    }
}
