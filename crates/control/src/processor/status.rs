//! The owner's view of a volume in the store: `/ferrobay/volume-status/<name>`, under the
//! owner's lease (it vanishes with the owner), rewritten every [`PERIOD`].

use std::time::Duration;

use meta::schema::{get_json, put_json};

use super::Ctx;
use super::error::ProcessorError;
use super::takeover::Owned;
use crate::events::now_unix_ms;
use crate::records::{VolumeStatusRecord, volume_status_key};

pub(crate) const PERIOD: Duration = Duration::from_secs(1);

pub(crate) async fn publish(ctx: &Ctx, name: &str, owned: &Owned) -> Result<(), ProcessorError> {
    let status = owned.volume.status();
    let takeover = {
        let mut owned_lock = ctx.owned_lock();
        let report = owned_lock.get_mut(name);
        // A resync that ran in the background after the takeover: its figures are final
        // now, so the report (and /metrics) carry them from here on.
        if let (Some(t), Some(r)) = (report, status.last_resync.as_ref())
            && t.resync_ms == 0
        {
            t.resync_regions = r.regions;
            t.resync_bytes = r.bytes_resynced;
            t.resync_member_bytes_read = r.member_bytes_read;
            t.resync_ms = (r.duration_secs * 1000.0).round() as u64;
        }
        owned_lock.get(name).cloned()
    };
    let rec = VolumeStatusRecord {
        owner: ctx.name.clone(),
        epoch: owned.owner.epoch,
        status,
        updated_unix_ms: now_unix_ms(),
        takeover,
    };
    put_json(
        ctx.store.as_ref(),
        &volume_status_key(name)?,
        &rec,
        Some(owned.lease.id),
    )
    .await?;
    Ok(())
}

/// Removes the status record if it is still this node's (after a handoff or a clean
/// stop; the new owner may have written its own already).
pub(crate) async fn clear(ctx: &Ctx, name: &str) {
    let Ok(key) = volume_status_key(name) else {
        return;
    };
    if let Ok(Some(cur)) = get_json::<VolumeStatusRecord, _>(ctx.store.as_ref(), &key).await
        && cur.value.owner == ctx.name
    {
        let _ = ctx.store.compare_and_delete(&key, cur.revision).await;
    }
}
