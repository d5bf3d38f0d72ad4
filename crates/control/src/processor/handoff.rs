//! Giving a volume up cleanly (`volume move`, shutdown, record deleted): ANA change so
//! hosts hold their I/O, drain what is in the volume, stop it clean (the next owner
//! assembles without resync), release the owner record so the next owner can take it
//! at once, then ANA inaccessible. And losing it (lease lost, fenced): inaccessible at
//! once, no member I/O, no write.

use std::time::Duration;

use meta::schema::{Severity, SubjectKind, put_json, release_ownership};
use nvmf_target::AnaState;

use super::export_device::ExportDevice;
use super::takeover::Owned;
use super::{Ctx, status};
use crate::events::now_unix_ms;
use crate::events::{self, kind};
use crate::records::{HandoffRecord, handoff_key};

/// Longest wait for one store call while giving a volume up: the handoff goes on (the
/// owner record then expires with the lease) rather than hang on an unreachable store.
const STORE_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Hands `owned` over (to `to`, recorded as a handoff request first so that node claims
/// it without the standby grace) or just stops it clean when `to` is `None`.
pub(crate) async fn hand_over(
    ctx: &Ctx,
    name: &str,
    owned: Owned,
    export: &ExportDevice,
    to: Option<&str>,
) {
    ctx.set_ana(owned.group, AnaState::Change);
    if let Some(to) = to
        && let Ok(key) = handoff_key(name)
    {
        let rec = HandoffRecord {
            to: to.to_string(),
            requested_unix_ms: now_unix_ms(),
        };
        match tokio::time::timeout(
            STORE_CALL_TIMEOUT,
            put_json(ctx.store.as_ref(), &key, &rec, None),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(volume = name, "processor: handoff request not written: {e}")
            }
            Err(_) => tracing::warn!(volume = name, "processor: handoff request timed out"),
        }
    }
    export.detach();
    if !export
        .drain(Duration::from_millis(ctx.cfg.drain_timeout_ms))
        .await
    {
        tracing::warn!(
            volume = name,
            inflight = export.inflight(),
            "processor: I/O still in flight after the drain timeout; stopping anyway"
        );
    }
    owned.monitor.abort();
    if let Err(e) = owned.volume.stop().await {
        tracing::warn!(
            volume = name,
            "processor: clean stop failed (the next owner resyncs): {e}"
        );
    }
    let _ = tokio::time::timeout(STORE_CALL_TIMEOUT, status::clear(ctx, name)).await;
    let released = tokio::time::timeout(
        STORE_CALL_TIMEOUT,
        release_ownership(ctx.store.as_ref(), name, &owned.owner),
    )
    .await;
    match released {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => {
            tracing::warn!(volume = name, "processor: owner record was no longer ours")
        }
        Ok(Err(e)) => tracing::warn!(
            volume = name,
            "processor: ownership not released (it expires with the lease): {e}"
        ),
        Err(_) => tracing::warn!(
            volume = name,
            "processor: ownership release timed out (it expires with the lease)"
        ),
    }
    ctx.set_ana(owned.group, AnaState::Inaccessible);
    ctx.owned_lock().remove(name);
    ctx.health.unwatch(name);
    tracing::info!(node = %ctx.name, volume = name, to = to.unwrap_or("-"), "processor: volume handed over");
    let message = match to {
        Some(to) => format!("{} handed volume {name} over to {to}", ctx.name),
        None => format!("{} stopped volume {name} clean (no live standby)", ctx.name),
    };
    let e = events::new_event(
        kind::HANDOFF,
        Severity::Info,
        SubjectKind::Volume,
        name,
        message,
    );
    let e = events::with_field(events::with_field(e, "from", ctx.name.as_str()), "to", to);
    let _ = tokio::time::timeout(STORE_CALL_TIMEOUT, events::emit(ctx.store.as_ref(), e)).await;
    drop(owned);
}

/// Drops `owned` at once: ANA inaccessible, member I/O refused, volume dropped without a
/// write. `why` goes to the log.
pub(crate) fn lose(ctx: &Ctx, name: &str, owned: Owned, export: &ExportDevice, why: &str) {
    ctx.set_ana(owned.group, AnaState::Inaccessible);
    owned.latch.close(why);
    owned.volume.detach();
    export.detach();
    ctx.owned_lock().remove(name);
    ctx.health.unwatch(name);
    tracing::warn!(node = %ctx.name, volume = name, "processor: volume lost ({why}); standby");
    let e = events::new_event(
        kind::VOLUME_LOST,
        Severity::Warning,
        SubjectKind::Volume,
        name,
        format!("{} lost volume {name}: {why}", ctx.name),
    );
    events::spawn_emit(
        ctx.store.clone(),
        events::with_field(e, "node", ctx.name.as_str()),
    );
    drop(owned);
}
