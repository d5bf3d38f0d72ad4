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
async fn may_preempt(ctx: &Ctx, volume: &str, own: &Ownership) -> bool {
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
        loop {
            tokio::time::sleep(PERIOD).await;
            if latch.is_closed() {
                return;
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
    let ns = open_member(url, &ctx.host, &ctx.cfg.member_connect)
        .await
        .map_err(|e| e.to_string())?;
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
