//! The owner's side of a member replacement (`provision::replace`): the new member's
//! namespace is opened, fenced and put into the slot (`Volume::replace_member`: the
//! volume rebuilds onto it), then the volume record names it (one transaction that also
//! removes the request) and the old namespace is deleted. A replacement that fails is
//! dropped with an error event, its new namespace deleted again.

use std::sync::Arc;

use meta::schema::{Severity, SubjectKind, encode_json, get_json, volume_key};
use meta::{Expect, Txn, TxnOutcome};
use nvmf_host::{NvmeTcpUrl, RemoteNamespace};
use volume::Volume;

use super::Ctx;
use super::fence::fence_member;
use super::members::{FenceLatch, MemberDevice, open_member};
use super::monitor::{Ownership, may_preempt};
use crate::events::kind::{MEMBER_REPLACE_FAILED, MEMBER_REPLACED};
use crate::events::{self, with_field};
use crate::provision::replace::{ReplaceRequest, member_replace_key};
use crate::records::{MemberRecord, VolumeRecord};

/// A replacement done: the slot's new record entry and its namespace.
pub(crate) struct Replaced {
    pub slot: usize,
    pub member: MemberRecord,
    pub ns: Arc<RemoteNamespace>,
}

/// Carries out the volume's pending replacement, if any. `None`: nothing pending (or
/// the request could not be read: tried again next time).
pub(crate) async fn run_pending(
    ctx: &Ctx,
    rec: &VolumeRecord,
    volume: &Volume,
    latch: &Arc<FenceLatch>,
    own: &Ownership,
) -> Option<Replaced> {
    let key = member_replace_key(&rec.name).ok()?;
    let pending = match get_json::<ReplaceRequest, _>(ctx.store.as_ref(), &key).await {
        Ok(Some(p)) => p,
        Ok(None) => return None,
        Err(e) => {
            tracing::debug!(volume = %rec.name, "processor: replacement request unreadable: {e}");
            return None;
        }
    };
    let req = pending.value;
    if !may_preempt(ctx, &rec.name, own).await {
        return None;
    }
    match replace(ctx, rec, volume, latch, &req).await {
        Ok(done) => match commit(ctx, &req, &done.member, &key).await {
            Ok(()) => {
                tracing::info!(volume = %rec.name, slot = req.slot, member = %req.member, "processor: member replaced; rebuilding onto it");
                let e = events::new_event(
                    MEMBER_REPLACED,
                    Severity::Info,
                    SubjectKind::Volume,
                    &rec.name,
                    format!(
                        "volume {}: member {} replaced by a new namespace on {}; rebuilding onto it",
                        rec.name, req.slot, req.storage_node
                    ),
                );
                let e = with_field(with_field(e, "member", req.slot), "url", req.member.clone());
                events::spawn_emit(
                    ctx.store.clone(),
                    with_field(e, "old_url", req.old_member.clone()),
                );
                delete_namespace(ctx, req.old_storage_node.as_deref(), &req.old_member);
                Some(done)
            }
            Err(e) => {
                // The volume uses the new member already; the record still names the old
                // one. Say so loudly: the next owner would assemble from the old one.
                tracing::error!(volume = %rec.name, slot = req.slot, "processor: member replaced but the record was not updated: {e}");
                failed(
                    ctx,
                    &key,
                    &req,
                    &format!("the volume record was not updated: {e}"),
                )
                .await;
                Some(done)
            }
        },
        Err(why) => {
            tracing::warn!(volume = %rec.name, slot = req.slot, "processor: member replacement failed: {why}");
            failed(ctx, &key, &req, &why).await;
            delete_namespace(ctx, Some(&req.storage_node), &req.member);
            None
        }
    }
}

async fn replace(
    ctx: &Ctx,
    rec: &VolumeRecord,
    volume: &Volume,
    latch: &Arc<FenceLatch>,
    req: &ReplaceRequest,
) -> Result<Replaced, String> {
    let old = rec
        .members
        .get(req.slot)
        .ok_or_else(|| format!("the volume has no member {}", req.slot))?;
    if old.url != req.old_member {
        return Err(format!(
            "member {} changed since the request (now {})",
            req.slot, old.url
        ));
    }
    let ns = open_member(ctx, &req.member)
        .await
        .map_err(|e| format!("open the new member {}: {e}", req.member))?;
    fence_member(&ns, ctx.key)
        .await
        .map_err(|e| format!("reserve the new member {}: {e}", req.member))?;
    let dev = Arc::new(MemberDevice::new(ns.clone(), &req.member, latch.clone()));
    volume
        .replace_member(req.slot, dev)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Replaced {
        slot: req.slot,
        member: MemberRecord {
            url: req.member.clone(),
            storage_node: Some(req.storage_node.clone()),
            failure_domain: req.storage_node.clone(),
        },
        ns,
    })
}

/// The record names the new member and the request is gone, in one transaction.
async fn commit(
    ctx: &Ctx,
    req: &ReplaceRequest,
    member: &MemberRecord,
    key: &str,
) -> Result<(), String> {
    let vkey = volume_key(&req.volume).map_err(|e| e.to_string())?;
    for _ in 0..8 {
        let cur = get_json::<VolumeRecord, _>(ctx.store.as_ref(), &vkey)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the volume record is gone")?;
        let mut rec = cur.value;
        let Some(slot) = rec.members.get_mut(req.slot) else {
            return Err(format!("the record has no member {}", req.slot));
        };
        *slot = member.clone();
        let txn = Txn::new()
            .when(vkey.as_str(), Expect::ModRevision(cur.revision))
            .put(
                vkey.as_str(),
                encode_json(&rec).map_err(|e| e.to_string())?,
                None,
            )
            .delete(key);
        match ctx.store.txn(txn).await.map_err(|e| e.to_string())? {
            TxnOutcome::Committed { .. } => return Ok(()),
            TxnOutcome::Failed { .. } => continue,
        }
    }
    Err("the volume record kept changing".into())
}

/// Drops the request with an error event.
async fn failed(ctx: &Ctx, key: &str, req: &ReplaceRequest, why: &str) {
    if let Err(e) = ctx.store.delete(key).await {
        tracing::warn!(volume = %req.volume, "processor: replacement request not removed: {e}");
    }
    let e = events::new_event(
        MEMBER_REPLACE_FAILED,
        Severity::Error,
        SubjectKind::Volume,
        &req.volume,
        format!(
            "volume {}: replacing member {} failed: {why}",
            req.volume, req.slot
        ),
    );
    events::spawn_emit(ctx.store.clone(), with_field(e, "member", req.slot));
}

/// Deletes a member namespace in the background (its node may be gone: that costs the
/// node's space, not data, and is logged).
fn delete_namespace(ctx: &Ctx, node: Option<&str>, url: &str) {
    let Some(node) = node.map(str::to_string) else {
        return;
    };
    let (store, host, url) = (ctx.store.clone(), ctx.host.clone(), url.to_string());
    tokio::spawn(async move {
        let parsed = match NvmeTcpUrl::parse(&url) {
            Ok(u) => u,
            Err(e) => return tracing::warn!(member = %url, "not deleted: {e}"),
        };
        let Some(nsid) = parsed.nsid else {
            return;
        };
        let live = crate::registration::get_node(store.as_ref(), &node)
            .await
            .ok()
            .flatten()
            .and_then(|n| n.nvme_addrs.first().copied());
        let addr = match live {
            Some(a) => a,
            None => match parsed.socket_addr().await {
                Ok(a) => a,
                Err(e) => return tracing::warn!(member = %url, "not deleted: {e}"),
            },
        };
        if let Err(e) =
            crate::provision::delete_namespace(&node, addr, &parsed.subnqn, nsid, &host).await
        {
            tracing::warn!(member = %url, "old member namespace left behind: {e}");
        }
    });
}
