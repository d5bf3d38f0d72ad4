//! Replacing a member of a cluster volume (`POST /api/v1/volumes/NAME/members/SLOT/replace`):
//! the API allocates the new namespace on the storage node asked for and records the
//! request; the owner puts it into the slot (the volume rebuilds onto it), rewrites the
//! volume record and deletes the old namespace (`processor::member_ops`).
//!
//! `/ferrobay/member-replace/<volume>` holds at most one request per volume.

use meta::schema::{current_owner, encode_json, get_json, validate_name, volume_key};
use meta::{Expect, MetaStore, Txn, TxnOutcome};
use nvmf_host::HostIdentity;
use serde::{Deserialize, Serialize};
use volume::LevelSpec;

use super::{now_unix_ms, nsmgmt, sizing, storage_nodes};
use crate::error::ControlError;
use crate::records::VolumeRecord;

/// Key prefix of pending member replacements.
pub const MEMBER_REPLACE: &str = "/ferrobay/member-replace/";

pub fn member_replace_key(volume: &str) -> Result<String, ControlError> {
    validate_name(volume)?;
    Ok(format!("{MEMBER_REPLACE}{volume}"))
}

/// The request body: where the new member goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaceMember {
    /// A storage node with room for one member; it must not hold another member of the
    /// volume (one failure domain per member).
    pub storage_node: String,
}

/// A pending replacement (the record), also the API's `202` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReplaceRequest {
    pub volume: String,
    pub slot: usize,
    pub storage_node: String,
    /// The new member's namespace, allocated already.
    pub member: String,
    /// The member it replaces (its namespace is deleted once replaced).
    pub old_member: String,
    pub old_storage_node: Option<String>,
    pub requested_unix_ms: u64,
}

/// Checks the request, allocates the new member's namespace and records the request
/// for the owner. Nothing is left behind when it fails.
pub async fn request_replace(
    store: &dyn MetaStore,
    name: &str,
    slot: usize,
    req: &ReplaceMember,
    host: &HostIdentity,
) -> Result<ReplaceRequest, ControlError> {
    let key = member_replace_key(name)?;
    let Some(rec) = get_json::<VolumeRecord, _>(store, &volume_key(name)?).await? else {
        return Err(ControlError::NotFound(format!("no volume named {name:?}")));
    };
    let rec = rec.value;
    let Some(old) = rec.members.get(slot) else {
        return Err(ControlError::Invalid(format!(
            "volume {name} has no member {slot} (its members are 0..{})",
            rec.members.len().saturating_sub(1)
        )));
    };
    if current_owner(store, name).await?.is_none() {
        return Err(ControlError::Conflict(format!(
            "volume {name} has no owner to rebuild it: start a processor node first"
        )));
    }
    if store.get(&key).await?.is_some() {
        return Err(ControlError::Conflict(format!(
            "a member of volume {name} is being replaced already: wait for it to finish"
        )));
    }
    let node = storage_nodes(store, std::slice::from_ref(&req.storage_node))
        .await?
        .remove(0);
    if let Some((i, _)) = rec
        .members
        .iter()
        .enumerate()
        .find(|(i, m)| *i != slot && m.failure_domain == node.name)
    {
        return Err(ControlError::Invalid(format!(
            "{} holds member {i} of volume {name} already: each member needs its own \
             storage node (failure domain)",
            node.name
        )));
    }
    let level: LevelSpec = rec
        .level
        .parse()
        .map_err(|e| ControlError::Invalid(format!("volume {name}: level {}: {e}", rec.level)))?;
    let params = level
        .params(rec.members.len(), rec.stripe_unit_bytes)
        .map_err(|e| ControlError::Invalid(format!("volume {name}: {e}")))?;
    let log = rec.log.map(|l| l.config());
    let member_bytes = sizing::member_bytes_for(&params, rec.size_bytes, log.as_ref())?;
    let ns = nsmgmt::allocate(store, &node, nsmgmt::NamespaceKind::Nvm, member_bytes, host).await?;
    let out = ReplaceRequest {
        volume: name.to_string(),
        slot,
        storage_node: node.name.clone(),
        member: ns.url(),
        old_member: old.url.clone(),
        old_storage_node: old.storage_node.clone(),
        requested_unix_ms: now_unix_ms(),
    };
    let committed = async {
        let txn = Txn::new().when(key.as_str(), Expect::Absent).put(
            key.as_str(),
            encode_json(&out)?,
            None,
        );
        Ok::<_, ControlError>(matches!(
            store.txn(txn).await?,
            TxnOutcome::Committed { .. }
        ))
    }
    .await;
    match committed {
        Ok(true) => {
            tracing::info!(volume = name, slot, member = %out.member, "member replacement requested");
            Ok(out)
        }
        Ok(false) => {
            nsmgmt::release(&node, &ns, host).await;
            Err(ControlError::Conflict(format!(
                "a member of volume {name} is being replaced already: wait for it to finish"
            )))
        }
        Err(e) => {
            nsmgmt::release(&node, &ns, host).await;
            Err(e)
        }
    }
}
