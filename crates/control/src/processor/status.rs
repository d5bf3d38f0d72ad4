//! The owner's view of a volume in the store: `/ferrobay/volume-status/<name>`, under the
//! owner's lease (it vanishes with the owner), rewritten every [`PERIOD`].

use std::time::Duration;

use meta::schema::{get_json, put_json};

use super::Ctx;
use super::error::ProcessorError;
use super::node::now_unix_ms;
use super::takeover::Owned;
use crate::records::{VolumeStatusRecord, volume_status_key};

pub(crate) const PERIOD: Duration = Duration::from_secs(1);

pub(crate) async fn publish(ctx: &Ctx, name: &str, owned: &Owned) -> Result<(), ProcessorError> {
    let rec = VolumeStatusRecord {
        owner: ctx.name.clone(),
        epoch: owned.owner.epoch,
        status: owned.volume.status(),
        updated_unix_ms: now_unix_ms(),
        takeover: ctx.owned_lock().get(name).cloned(),
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
