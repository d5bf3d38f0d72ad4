//! The ownership loop of one volume on this node: standby until the volume is free and
//! this node may claim it, take it over, serve it until it is lost, handed over or
//! retired, and again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use meta::schema::{
    OwnerRecord, OwnershipError, Versioned, acquire_ownership, current_owner, get_json, node_key,
    seize_ownership,
};
use meta::wait_lost;
use nvmf_target::AnaState;
use tokio::sync::watch;

use super::export_device::ExportDevice;
use super::heartbeat::{Heartbeats, Liveness};
use super::takeover::{Owned, take_over};
use super::{Ctx, LeaseInfo, handoff, status};
use crate::records::{
    HandoffRecord, NodeRecord, NodeRole, VolumeRecord, VolumeStatusRecord, handoff_key,
    volume_status_key,
};

/// Wait after a failed takeover before trying again (the owner record is released, so
/// another node may try meanwhile).
const TAKEOVER_RETRY: Duration = Duration::from_secs(2);

pub(crate) async fn run(
    ctx: Arc<Ctx>,
    name: String,
    record: watch::Receiver<VolumeRecord>,
    mut stop: watch::Receiver<bool>,
    export: Arc<ExportDevice>,
) {
    loop {
        let Some((owner, lease)) = standby(&ctx, &name, &record, &mut stop).await else {
            return;
        };
        let rec = record.borrow().clone();
        match take_over(&ctx, &rec, owner.clone(), lease, &export).await {
            Ok(owned) => {
                ctx.failures_lock().remove(&name);
                forget_handoff(&ctx, &name).await;
                if !serve(&ctx, &name, owned, &mut stop, &export).await {
                    return;
                }
            }
            Err(e) => {
                let reason = e.to_string();
                // Retried every TAKEOVER_RETRY: said loudly once per distinct reason.
                let again = ctx.failures_lock().insert(name.clone(), reason.clone());
                if again.as_deref() == Some(reason.as_str()) {
                    tracing::debug!(node = %ctx.name, volume = %name, "processor: takeover failed again: {reason}");
                } else {
                    tracing::warn!(node = %ctx.name, volume = %name, "processor: takeover failed: {reason}");
                }
                ctx.set_ana(rec.ana_group, AnaState::Inaccessible);
                export.detach();
                let _ = meta::schema::release_ownership(ctx.store.as_ref(), &name, &owner).await;
                tokio::select! {
                    () = tokio::time::sleep(TAKEOVER_RETRY) => {}
                    () = super::stopped(&mut stop) => return,
                }
            }
        }
    }
}

async fn node_live(ctx: &Ctx, node: &str) -> bool {
    let Ok(key) = node_key(node) else {
        return false;
    };
    matches!(
        get_json::<NodeRecord, _>(ctx.store.as_ref(), &key).await,
        Ok(Some(Versioned { value, .. })) if value.role == NodeRole::Processor
    )
}

async fn handoff_request(ctx: &Ctx, name: &str) -> Option<Versioned<HandoffRecord>> {
    let key = handoff_key(name).ok()?;
    get_json::<HandoffRecord, _>(ctx.store.as_ref(), &key)
        .await
        .ok()
        .flatten()
}

/// Deletes a handoff request addressed to this node (it owns the volume now).
async fn forget_handoff(ctx: &Ctx, name: &str) {
    if let Some(h) = handoff_request(ctx, name).await
        && h.value.to == ctx.name
        && let Ok(key) = handoff_key(name)
    {
        let _ = ctx.store.compare_and_delete(&key, h.revision).await;
    }
}

/// How long to let others claim a free volume first: nothing for the handoff target or
/// the preferred owner, the grace for the rest while those are live. `dead`: a node
/// declared dead by its heartbeat (its record stays until its lease ends), not live.
async fn claim_delay(ctx: &Ctx, rec: &VolumeRecord, dead: Option<&str>) -> Duration {
    let grace = Duration::from_millis(ctx.cfg.standby_grace_ms);
    if let Some(h) = handoff_request(ctx, &rec.name).await {
        if h.value.to == ctx.name {
            return Duration::ZERO;
        }
        if dead != Some(h.value.to.as_str()) && node_live(ctx, &h.value.to).await {
            return grace * 2;
        }
    }
    match &rec.preferred_owner {
        Some(p) if *p != ctx.name && dead != Some(p.as_str()) && node_live(ctx, p).await => grace,
        _ => Duration::ZERO,
    }
}

/// The current lease once there is a live one; `None` when told to stop.
async fn live_lease(ctx: &Ctx, stop: &mut watch::Receiver<bool>) -> Option<LeaseInfo> {
    let mut rx = ctx.lease.subscribe();
    loop {
        if *stop.borrow() {
            return None;
        }
        if let Some(l) = rx.borrow_and_update().clone()
            && (l.is_alive() || ctx.cfg.ignore_ownership_loss)
        {
            return Some(l);
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() { return None },
            _ = stop.changed() => {}
            () = tokio::time::sleep(ctx.poll()) => {}
        }
    }
}

/// Waits until this node owns the volume; `None` when told to stop. While another node
/// owns it, that node's heartbeat is followed: declared dead, its record is seized at
/// once (after the claim delay) instead of waiting for its lease to end.
async fn standby(
    ctx: &Arc<Ctx>,
    name: &str,
    record: &watch::Receiver<VolumeRecord>,
    stop: &mut watch::Receiver<bool>,
) -> Option<(OwnerRecord, LeaseInfo)> {
    // The current owner's heartbeat, while that is another node (`None` inside: it
    // cannot be probed, the lease decides).
    let mut beat: Option<(String, Option<watch::Receiver<Liveness>>)> = None;
    loop {
        let lease = live_lease(ctx, stop).await?;
        if *ctx.shutting_down.borrow() {
            // A node on its way out claims nothing.
            super::stopped(stop).await;
            return None;
        }
        match current_owner(ctx.store.as_ref(), name).await {
            Ok(None) => {
                beat = None;
                let rec = record.borrow().clone();
                let delay = claim_delay(ctx, &rec, None).await;
                if !delay.is_zero() {
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = super::stopped(stop) => return None,
                    }
                }
                if matches!(current_owner(ctx.store.as_ref(), name).await, Ok(None))
                    && !*stop.borrow()
                {
                    match acquire_ownership(ctx.store.as_ref(), name, &ctx.name, lease.id).await {
                        Ok(owner) => return Some((owner, lease)),
                        Err(OwnershipError::Conflict { current }) => {
                            tracing::debug!(volume = name, owner = %current.node, "processor: someone else claimed it first");
                        }
                        Err(e) => tracing::warn!(volume = name, "processor: claim failed: {e}"),
                    }
                }
            }
            Ok(Some(cur)) if cur.value.node != ctx.name => {
                if beat.as_ref().is_none_or(|(n, _)| *n != cur.value.node) {
                    let rx = Heartbeats::watch(ctx, &cur.value.node).await;
                    beat = Some((cur.value.node.clone(), rx));
                }
                if let Some((_, Some(rx))) = &beat
                    && matches!(*rx.borrow(), Liveness::Dead { .. })
                {
                    match seize(ctx, name, record, &cur, &lease, rx, stop).await {
                        Seized::Owner(owner) => return Some((owner, lease)),
                        Seized::Stop => return None,
                        Seized::No => {}
                    }
                }
            }
            Ok(Some(_)) => beat = None,
            Err(e) => tracing::warn!(volume = name, "processor: owner unreadable: {e}"),
        }
        tokio::select! {
            () = tokio::time::sleep(ctx.poll()) => {}
            () = super::stopped(stop) => return None,
            () = liveness_changed(&mut beat) => {}
        }
    }
}

/// Resolves when the followed heartbeat changes (never without one).
async fn liveness_changed(beat: &mut Option<(String, Option<watch::Receiver<Liveness>>)>) {
    if let Some((_, Some(rx))) = beat
        && rx.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

enum Seized {
    Owner(OwnerRecord),
    No,
    Stop,
}

/// Whether `owner` holds every member of `name` by a reservation (its status record says
/// so: no member without reservations at its takeover). Only then does fencing stop it
/// everywhere, and a seizure is as safe as waiting for its lease; otherwise the lease
/// decides (superblock generations alone protect such members).
async fn fenced_everywhere(ctx: &Ctx, name: &str, owner: &OwnerRecord) -> bool {
    let Ok(key) = volume_status_key(name) else {
        return false;
    };
    match get_json::<VolumeStatusRecord, _>(ctx.store.as_ref(), &key).await {
        Ok(Some(Versioned { value, .. })) => {
            value.owner == owner.node
                && value.epoch == owner.epoch
                && value
                    .takeover
                    .is_some_and(|t| t.members_unfenceable == 0 && t.members_total > 0)
        }
        _ => false,
    }
}

/// Seizes `name` from `dead`, whose heartbeat failed: after the claim delay (the dead
/// node counts as not live, so the preferred owner or handoff target goes first), if the
/// probe still says dead, by compare-and-swap of the record as read. The takeover that
/// follows fences the old owner on every member.
async fn seize(
    ctx: &Ctx,
    name: &str,
    record: &watch::Receiver<VolumeRecord>,
    dead: &Versioned<OwnerRecord>,
    lease: &LeaseInfo,
    beat: &watch::Receiver<Liveness>,
    stop: &mut watch::Receiver<bool>,
) -> Seized {
    if !fenced_everywhere(ctx, name, &dead.value).await {
        tracing::debug!(
            volume = name,
            owner = %dead.value.node,
            "processor: owner declared dead, but not every member has reservations to fence it: waiting for its lease"
        );
        return Seized::No;
    }
    let rec = record.borrow().clone();
    let delay = claim_delay(ctx, &rec, Some(&dead.value.node)).await;
    if !delay.is_zero() {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = super::stopped(stop) => return Seized::Stop,
        }
    }
    let Liveness::Dead { silent_ms, why } = beat.borrow().clone() else {
        return Seized::No;
    };
    if *stop.borrow() {
        return Seized::Stop;
    }
    match seize_ownership(ctx.store.as_ref(), name, &ctx.name, lease.id, dead).await {
        Ok(owner) => {
            let old = &dead.value;
            tracing::warn!(
                node = %ctx.name,
                volume = name,
                epoch = owner.epoch,
                "processor: owner {} declared dead after {silent_ms} ms: heartbeat: {why}; \
                 volume seized from epoch {} without waiting for its lease",
                old.node,
                old.epoch
            );
            let e = crate::events::new_event(
                crate::events::kind::OWNER_DEAD,
                meta::schema::Severity::Warning,
                meta::schema::SubjectKind::Volume,
                name,
                format!(
                    "{} declared owner {} of volume {name} dead after {silent_ms} ms ({why}) and seized it",
                    ctx.name, old.node
                ),
            );
            let e = crate::events::with_field(e, "node", ctx.name.as_str());
            let e = crate::events::with_field(e, "owner", old.node.as_str());
            let e = crate::events::with_field(e, "epoch", old.epoch);
            let e = crate::events::with_field(e, "silent_ms", silent_ms);
            let e = crate::events::with_field(e, "why", why.as_str());
            crate::events::spawn_emit(ctx.store.clone(), e);
            Seized::Owner(owner)
        }
        Err(OwnershipError::Conflict { current }) => {
            tracing::debug!(volume = name, owner = %current.node, "processor: someone else seized it first");
            Seized::No
        }
        Err(e) => {
            tracing::warn!(volume = name, "processor: seizure failed: {e}");
            Seized::No
        }
    }
}

/// A live processor node other than this one, for a handoff at shutdown.
async fn live_standby(ctx: &Ctx) -> Option<String> {
    let listing = meta::schema::list_json::<NodeRecord, _>(ctx.store.as_ref(), meta::schema::NODES)
        .await
        .ok()?;
    listing
        .items
        .into_iter()
        .map(|(_, v)| v.value)
        .find(|n| n.role == NodeRole::Processor && n.name != ctx.name)
        .map(|n| n.name)
}

/// What ends (or continues) serving a volume.
enum Event {
    Continue,
    Lose(String),
    HandOver(String),
    Stop,
}

/// One round of the owner's store work: status, owner record, handoff request. Runs
/// inside the select of [`serve`], so a slow store never delays reacting to a lost lease.
async fn periodic(
    ctx: &Ctx,
    name: &str,
    owned: &Owned,
    last_status: &mut Option<Instant>,
) -> Event {
    tokio::time::sleep(ctx.poll()).await;
    if last_status.is_none_or(|t| t.elapsed() >= status::PERIOD) {
        if let Err(e) = status::publish(ctx, name, owned).await {
            tracing::debug!(volume = name, "processor: status not published: {e}");
        }
        *last_status = Some(Instant::now());
    }
    if !ctx.cfg.ignore_ownership_loss {
        match current_owner(ctx.store.as_ref(), name).await {
            Ok(Some(cur)) if cur.value == owned.owner && cur.lease == Some(owned.lease.id) => {}
            Ok(_) => return Event::Lose("owner record gone or changed".into()),
            Err(e) => tracing::debug!(volume = name, "processor: owner unreadable: {e}"),
        }
    }
    if let Some(h) = handoff_request(ctx, name).await {
        if h.value.to == ctx.name {
            forget_handoff(ctx, name).await;
        } else if node_live(ctx, &h.value.to).await {
            return Event::HandOver(h.value.to);
        }
    }
    Event::Continue
}

/// Serves an owned volume until it is lost or given up. `true`: back to standby;
/// `false`: the task ends (stop).
async fn serve(
    ctx: &Ctx,
    name: &str,
    owned: Owned,
    stop: &mut watch::Receiver<bool>,
    export: &ExportDevice,
) -> bool {
    let ignore = ctx.cfg.ignore_ownership_loss;
    let lease_lost = wait_lost(owned.lease.state.clone());
    tokio::pin!(lease_lost);
    let latch = owned.latch.clone();
    let fenced = latch.closed();
    tokio::pin!(fenced);
    let mut volume_fenced = owned.volume.fenced();
    let mut last_status: Option<Instant> = None;
    loop {
        let event = tokio::select! {
            biased;
            reason = &mut lease_lost, if !ignore => Event::Lose(format!("lease lost: {reason:?}")),
            () = &mut fenced => Event::Lose("fenced by a member (Reservation Conflict)".into()),
            alive = async { volume_fenced.wait_for(|f| *f).await.is_ok() } => Event::Lose(if alive {
                owned.volume.fence_reason().unwrap_or_else(|| "volume fenced".into())
            } else {
                "volume engine gone".into()
            }),
            () = super::stopped(stop) => Event::Stop,
            e = periodic(ctx, name, &owned, &mut last_status) => e,
        };
        match event {
            Event::Continue => {}
            Event::Lose(why) => {
                handoff::lose(ctx, name, owned, export, &why);
                return true;
            }
            Event::HandOver(to) => {
                handoff::hand_over(ctx, name, owned, export, Some(&to)).await;
                return true;
            }
            Event::Stop => {
                let to = if *ctx.shutting_down.borrow() {
                    tokio::time::timeout(Duration::from_secs(2), live_standby(ctx))
                        .await
                        .ok()
                        .flatten()
                } else {
                    None
                };
                handoff::hand_over(ctx, name, owned, export, to.as_deref()).await;
                return false;
            }
        }
    }
}
