//! Taking a volume over once this node holds its owner record: connect the members,
//! fence them, assemble, attach, ANA optimized.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use blockdev::BlockDevice;
use meta::schema::OwnerRecord;
use nvmf_host::RemoteNamespace;
use nvmf_target::AnaState;
use tokio::task::JoinHandle;
use volume::Volume;

use super::error::ProcessorError;
use super::export_device::ExportDevice;
use super::fence::{FenceOutcome, fence_member};
use super::members::{FenceLatch, MemberDevice, open_member};
use super::{Ctx, LeaseInfo, monitor};
use crate::records::VolumeRecord;

pub use crate::records::TakeoverReport;

/// A volume this node owns.
pub(crate) struct Owned {
    pub volume: Arc<Volume>,
    pub owner: OwnerRecord,
    pub lease: LeaseInfo,
    pub latch: Arc<FenceLatch>,
    pub group: u32,
    pub monitor: JoinHandle<()>,
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.monitor.abort();
    }
}

/// Opens and fences member `i`; why not (logged) if it cannot be used now.
async fn reach(
    ctx: &Ctx,
    volume: &str,
    i: usize,
    url: &str,
) -> Result<(Arc<RemoteNamespace>, FenceOutcome), String> {
    let ns = match open_member(ctx, url).await {
        Ok(ns) => ns,
        Err(e) => {
            tracing::warn!(
                volume,
                member = i,
                url,
                "processor: member unreachable: {e}"
            );
            let why = match e {
                ProcessorError::Host(h) => h.to_string(),
                other => other.to_string(),
            };
            return Err(format!("unreachable: {why}"));
        }
    };
    match fence_member(&ns, ctx.key).await {
        Ok(FenceOutcome::Unsupported) => {
            tracing::warn!(
                volume,
                member = i,
                url,
                "processor: member target has no reservations; only superblock generations fence the old owner there"
            );
            Ok((ns, FenceOutcome::Unsupported))
        }
        Ok(o) => {
            if let FenceOutcome::Reserved {
                preempted: Some(key),
            } = o
            {
                tracing::info!(
                    volume,
                    member = i,
                    preempted_key = format_args!("{key:#x}"),
                    "processor: previous owner fenced"
                );
            }
            Ok((ns, o))
        }
        Err(e) => {
            tracing::warn!(
                volume,
                member = i,
                url,
                "processor: member not fenced, not used: {e}"
            );
            Err(format!("not fenced: {e}"))
        }
    }
}

/// Takes `rec` over under `owner`: returns the running volume, attached and optimized.
pub(crate) async fn take_over(
    ctx: &Arc<Ctx>,
    rec: &VolumeRecord,
    owner: OwnerRecord,
    lease: LeaseInfo,
    export: &ExportDevice,
) -> Result<Owned, ProcessorError> {
    let t0 = Instant::now();
    let name = rec.name.as_str();
    let fail = |reason: String| ProcessorError::Takeover {
        volume: name.to_string(),
        reason,
    };
    let latch = FenceLatch::new();
    let reached = futures::future::join_all(
        rec.members
            .iter()
            .enumerate()
            .map(|(i, m)| reach(ctx, name, i, &m.url)),
    )
    .await;
    let mut devices: Vec<Arc<dyn BlockDevice>> = Vec::new();
    let mut meters = std::collections::BTreeMap::new();
    let mut unfenceable = 0;
    for (m, r) in rec.members.iter().zip(&reached) {
        if let Ok((ns, outcome)) = r {
            if *outcome == FenceOutcome::Unsupported {
                unfenceable += 1;
            }
            devices.push(metered(
                &mut meters,
                Arc::new(MemberDevice::new(ns.clone(), &m.url, latch.clone())),
            ));
        }
    }
    let fenced = devices.len();
    for (j, s) in rec.spares.iter().enumerate() {
        if let Ok((ns, _)) = reach(ctx, name, rec.members.len() + j, &s.url).await {
            devices.push(metered(
                &mut meters,
                Arc::new(MemberDevice::new(ns, &s.url, latch.clone())),
            ));
        }
    }
    if !ctx.cfg.ignore_ownership_loss && !lease.is_alive() {
        return Err(fail("lease lost during takeover".into()));
    }
    // A new owner outranks the previous one's superblocks (its generation is higher).
    // Hosts wait only for assembly: the dirty-region resync runs in the background.
    let engine = volume::EngineOptions {
        bump_generation_on_assemble: true,
        background_resync: true,
        ..ctx.cfg.engine.clone()
    };
    // Up to m members away: the volume starts degraded (they are marked failed and come
    // back through the monitor); more: refused, with which members answer and which not.
    let volume = match Volume::assemble_with(devices, engine).await {
        Ok(v) => v,
        Err(volume::VolumeError::TooFewMembers(mut shortfall)) => {
            // Slot i of the volume is member i of the record (creation order).
            for slot in &mut shortfall.slots {
                let Some(m) = rec.members.get(slot.index) else {
                    continue;
                };
                if slot.device.is_none() {
                    slot.device = Some(m.url.clone());
                }
                if let Some(Err(why)) = reached.get(slot.index) {
                    slot.problem = Some(why.clone());
                }
            }
            return Err(fail(format!(
                "cannot assemble: {shortfall}; the takeover is retried until enough \
                 members answer"
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let status = volume.status();
    if status.uuid != rec.uuid {
        latch.close("assembled another volume than the record names");
        return Err(fail(format!(
            "members hold volume {}, the record says {}",
            status.uuid, rec.uuid
        )));
    }
    if latch.is_closed() {
        return Err(fail("fenced by another node during assembly".into()));
    }
    let volume = Arc::new(volume);
    ctx.health.watch(name, volume.clone(), meters);
    export.attach(volume.clone());
    ctx.set_ana(rec.ana_group, AnaState::Optimized);
    let report = TakeoverReport {
        epoch: owner.epoch,
        generation: status.generation,
        took_ms: t0.elapsed().as_millis() as u64,
        members_fenced: fenced,
        members_total: rec.members.len(),
        members_unfenceable: unfenceable,
        // A background resync may still run: then what it has to do (its read bytes and
        // duration are in the volume status once it is done).
        resync_regions: status
            .last_resync
            .as_ref()
            .map(|r| r.regions)
            .or(status.resync.as_ref().map(|r| r.regions))
            .unwrap_or(0),
        resync_bytes: status
            .last_resync
            .as_ref()
            .map(|r| r.bytes_resynced)
            .or(status.resync.as_ref().map(|r| r.bytes_total))
            .unwrap_or(0),
        resync_member_bytes_read: status
            .last_resync
            .as_ref()
            .map_or(0, |r| r.member_bytes_read),
        resync_ms: status
            .last_resync
            .as_ref()
            .map_or(0, |r| (r.duration_secs * 1000.0) as u64),
    };
    tracing::info!(
        node = %ctx.name,
        volume = name,
        epoch = owner.epoch,
        generation = report.generation,
        took_ms = report.took_ms,
        resync_regions = report.resync_regions,
        members = format_args!("{}/{}", fenced, rec.members.len()),
        "processor: volume taken over"
    );
    crate::events::spawn_emit(ctx.store.clone(), takeover_event(&ctx.name, name, &report));
    ctx.owned_lock().insert(name.to_string(), report);
    let slots = Arc::new(Mutex::new(
        reached
            .into_iter()
            .map(|r| r.ok().map(|(ns, _)| ns))
            .collect::<Vec<_>>(),
    ));
    let own = monitor::Ownership {
        owner: owner.clone(),
        lease: lease.clone(),
    };
    let monitor = monitor::spawn(
        ctx.clone(),
        rec.clone(),
        volume.clone(),
        latch.clone(),
        slots,
        own,
    );
    Ok(Owned {
        volume,
        owner,
        lease,
        latch,
        group: rec.ana_group,
        monitor,
    })
}

/// `dev` behind a telemetry meter (the member as this node sees it), its meter kept by
/// device name for the health monitor.
pub(crate) fn metered(
    meters: &mut std::collections::BTreeMap<String, Arc<telemetry::DeviceTelemetry>>,
    dev: Arc<dyn BlockDevice>,
) -> Arc<dyn BlockDevice> {
    let m = telemetry::MeteredDevice::new(dev);
    meters.insert(m.info().name.clone(), m.telemetry().clone());
    Arc::new(m)
}

fn takeover_event(node: &str, volume: &str, r: &TakeoverReport) -> meta::schema::NewEvent {
    use crate::events::{kind, new_event, with_field};
    let e = new_event(
        kind::TAKEOVER,
        meta::schema::Severity::Info,
        meta::schema::SubjectKind::Volume,
        volume,
        format!(
            "{node} took volume {volume} over (epoch {}, {} ms, {} of {} members fenced, {} bytes resynced)",
            r.epoch, r.took_ms, r.members_fenced, r.members_total, r.resync_bytes
        ),
    );
    let e = with_field(e, "node", node);
    let e = with_field(e, "epoch", r.epoch);
    let e = with_field(e, "took_ms", r.took_ms);
    let e = with_field(e, "members_fenced", r.members_fenced);
    with_field(e, "resync_bytes", r.resync_bytes)
}
