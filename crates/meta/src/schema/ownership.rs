//! Volume ownership. The owner record `/ferrobay/owners/<volume>` is attached to the
//! owner's lease, so it vanishes when the owner stops renewing. Every acquisition takes the
//! next epoch, kept in `/ferrobay/owner-epochs/<volume>` (no lease, so epochs only grow,
//! across lease expiries and restarts); the epoch is the fencing generation a new owner
//! stamps on the members. Acquisition is one transaction over both keys: two nodes racing
//! for a free volume cannot both win, nor take the same epoch. A standby that knows the
//! owner is dead (a failed heartbeat) may seize the record before the lease ends
//! ([`seize_ownership`]: a compare-and-swap on the record's revision).

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use super::typed::{Versioned, decode_json, encode_json, get_json};
use super::{SchemaError, owner_epoch_key, owner_key, validate_name};
use crate::error::MetaError;
use crate::store::{MetaStore, WatchStream};
use crate::types::{CasOutcome, Expect, KeyValue, LeaseId, Txn, TxnOutcome, WatchEvent};

/// Rounds of read-then-swap before [`OwnershipError::Contended`]; each lost round means
/// another writer changed the keys in between.
const ACQUIRE_ATTEMPTS: usize = 16;

/// Who owns a volume, and the epoch (fencing generation) of that ownership.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OwnerRecord {
    pub node: String,
    /// 1 for the first owner ever, +1 for each later acquisition.
    pub epoch: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum OwnershipError {
    /// Another owner (or this node under another lease) holds the volume.
    #[error("volume is owned by {} (epoch {})", current.node, current.epoch)]
    Conflict { current: OwnerRecord },
    /// The keys kept changing under us.
    #[error("ownership keys kept changing; gave up after {ACQUIRE_ATTEMPTS} attempts")]
    Contended,
    #[error(transparent)]
    Schema(#[from] SchemaError),
}

impl From<MetaError> for OwnershipError {
    fn from(e: MetaError) -> Self {
        OwnershipError::Schema(SchemaError::Meta(e))
    }
}

/// Makes `node` the owner of `volume` under `lease`, with the next epoch, if nobody owns
/// it. Idempotent for the same node and lease (returns the held record). Fails with
/// [`MetaError::LeaseNotFound`] (inside `Schema`) if the lease has ended.
pub async fn acquire_ownership<S: MetaStore + ?Sized>(
    store: &S,
    volume: &str,
    node: &str,
    lease: LeaseId,
) -> Result<OwnerRecord, OwnershipError> {
    validate_name(node)?;
    let owner_key = owner_key(volume)?;
    let epoch_key = owner_epoch_key(volume)?;
    let held = |current: Versioned<OwnerRecord>| {
        if current.value.node == node && current.lease == Some(lease) {
            Ok(current.value)
        } else {
            Err(OwnershipError::Conflict {
                current: current.value,
            })
        }
    };
    for _ in 0..ACQUIRE_ATTEMPTS {
        if let Some(current) = get_json::<OwnerRecord, _>(store, &owner_key).await? {
            return held(current);
        }
        let last = get_json::<OwnerRecord, _>(store, &epoch_key).await?;
        let record = OwnerRecord {
            node: node.to_owned(),
            epoch: last.as_ref().map_or(0, |l| l.value.epoch) + 1,
        };
        let bytes = encode_json(&record)?;
        let txn = Txn::new()
            .when(owner_key.as_str(), Expect::Absent)
            .when(
                epoch_key.as_str(),
                last.map_or(Expect::Absent, |l| Expect::ModRevision(l.revision)),
            )
            .put(epoch_key.as_str(), bytes.clone(), None)
            .put(owner_key.as_str(), bytes, Some(lease));
        match store.txn(txn).await? {
            TxnOutcome::Committed { .. } => {
                tracing::info!(
                    volume,
                    node,
                    epoch = record.epoch,
                    "meta: ownership acquired"
                );
                return Ok(record);
            }
            TxnOutcome::Failed { current } => {
                if let Some(Some(kv)) = current.first() {
                    return held(decode_json(kv)?);
                }
            }
        }
    }
    Err(OwnershipError::Contended)
}

/// Takes `volume` from an owner declared dead while its lease still runs: `node` becomes
/// the owner under `lease` with the next epoch, only if the owner record is still exactly
/// `dead` (same revision) — one transaction over both keys, so of several standbys
/// seizing at once one wins, and a record renewed or replaced meanwhile is left alone.
/// The caller must fence the old owner (reservations on the members) before writing:
/// unlike an expired lease, a seized record says nothing about whether the old owner has
/// stopped. If the record is gone meanwhile this is [`acquire_ownership`]; if it changed,
/// [`OwnershipError::Conflict`] with the current owner.
pub async fn seize_ownership<S: MetaStore + ?Sized>(
    store: &S,
    volume: &str,
    node: &str,
    lease: LeaseId,
    dead: &Versioned<OwnerRecord>,
) -> Result<OwnerRecord, OwnershipError> {
    validate_name(node)?;
    let owner_key = owner_key(volume)?;
    let epoch_key = owner_epoch_key(volume)?;
    for _ in 0..ACQUIRE_ATTEMPTS {
        match get_json::<OwnerRecord, _>(store, &owner_key).await? {
            None => return acquire_ownership(store, volume, node, lease).await,
            Some(current) if current.revision != dead.revision => {
                if current.value.node == node && current.lease == Some(lease) {
                    return Ok(current.value);
                }
                return Err(OwnershipError::Conflict {
                    current: current.value,
                });
            }
            Some(_) => {}
        }
        let last = get_json::<OwnerRecord, _>(store, &epoch_key).await?;
        let record = OwnerRecord {
            node: node.to_owned(),
            epoch: last
                .as_ref()
                .map_or(0, |l| l.value.epoch)
                .max(dead.value.epoch)
                + 1,
        };
        let bytes = encode_json(&record)?;
        let txn = Txn::new()
            .when(owner_key.as_str(), Expect::ModRevision(dead.revision))
            .when(
                epoch_key.as_str(),
                last.map_or(Expect::Absent, |l| Expect::ModRevision(l.revision)),
            )
            .put(epoch_key.as_str(), bytes.clone(), None)
            .put(owner_key.as_str(), bytes, Some(lease));
        if let TxnOutcome::Committed { .. } = store.txn(txn).await? {
            tracing::info!(
                volume,
                node,
                epoch = record.epoch,
                from = %dead.value.node,
                from_epoch = dead.value.epoch,
                "meta: ownership seized from a dead owner"
            );
            return Ok(record);
        }
    }
    Err(OwnershipError::Contended)
}

/// Gives up `owner`'s ownership of `volume`: deletes the owner record only if it is still
/// exactly `owner`. `false` if it was not (already expired, or someone else owns it now).
pub async fn release_ownership<S: MetaStore + ?Sized>(
    store: &S,
    volume: &str,
    owner: &OwnerRecord,
) -> Result<bool, OwnershipError> {
    let key = owner_key(volume)?;
    match get_json::<OwnerRecord, _>(store, &key).await? {
        Some(current) if current.value == *owner => {
            let outcome = store.compare_and_delete(&key, current.revision).await?;
            Ok(matches!(outcome, CasOutcome::Swapped { .. }))
        }
        _ => Ok(false),
    }
}

/// The current owner of `volume`, if any.
pub async fn current_owner<S: MetaStore + ?Sized>(
    store: &S,
    volume: &str,
) -> Result<Option<Versioned<OwnerRecord>>, SchemaError> {
    get_json(store, &owner_key(volume)?).await
}

/// The last ownership ever granted for `volume` (still there after its lease ended): the
/// node a new owner must fence, and the epoch it must exceed.
pub async fn last_epoch<S: MetaStore + ?Sized>(
    store: &S,
    volume: &str,
) -> Result<Option<OwnerRecord>, SchemaError> {
    Ok(get_json(store, &owner_epoch_key(volume)?)
        .await?
        .map(|v: Versioned<OwnerRecord>| v.value))
}

/// The owner of a volume now and after every change.
pub type OwnerStream = Pin<Box<dyn Stream<Item = Result<Option<OwnerRecord>, SchemaError>> + Send>>;

/// Follows the owner of `volume`: the first item is the current owner (or `None`), then
/// one item per change. A watch that falls behind the store's history re-reads the record
/// and goes on, so this stream never asks the caller to resync; it ends after an error
/// item only when the store fails or closes.
pub fn watch_owner(store: Arc<dyn MetaStore>, volume: &str) -> Result<OwnerStream, SchemaError> {
    struct State {
        store: Arc<dyn MetaStore>,
        key: String,
        last: Option<Option<OwnerRecord>>,
        watch: Option<WatchStream>,
        done: bool,
    }
    let state = State {
        store,
        key: owner_key(volume)?,
        last: None,
        watch: None,
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        loop {
            let Some(watch) = st.watch.as_mut() else {
                match resync(st.store.as_ref(), &st.key).await {
                    Ok((owner, watch)) => {
                        st.watch = Some(watch);
                        if st.last.as_ref() != Some(&owner) {
                            st.last = Some(owner.clone());
                            return Some((Ok(owner), st));
                        }
                    }
                    Err(e) => {
                        st.done = true;
                        return Some((Err(e), st));
                    }
                }
                continue;
            };
            match watch.next().await {
                Some(Ok(batch)) => {
                    let mut changed = None;
                    for event in batch.events.iter().filter(|e| e.key() == st.key) {
                        changed = Some(match event {
                            WatchEvent::Put(kv) => match decode_owner(kv) {
                                Ok(owner) => Some(owner),
                                Err(e) => return Some((Err(e), st)),
                            },
                            WatchEvent::Delete { .. } => None,
                        });
                    }
                    if let Some(owner) = changed
                        && st.last.as_ref() != Some(&owner)
                    {
                        st.last = Some(owner.clone());
                        return Some((Ok(owner), st));
                    }
                }
                Some(Err(MetaError::Compacted { .. })) => st.watch = None,
                Some(Err(e)) => {
                    st.done = true;
                    return Some((Err(e.into()), st));
                }
                None => {
                    st.done = true;
                    return Some((Err(MetaError::Closed.into()), st));
                }
            }
        }
    });
    Ok(stream.boxed())
}

fn decode_owner(kv: &KeyValue) -> Result<OwnerRecord, SchemaError> {
    Ok(decode_json::<OwnerRecord>(kv)?.value)
}

/// Reads the record and starts a watch right after the revision it was read at.
async fn resync(
    store: &dyn MetaStore,
    key: &str,
) -> Result<(Option<OwnerRecord>, WatchStream), SchemaError> {
    let listing = store.list(key).await?;
    let owner = listing
        .kvs
        .iter()
        .find(|kv| kv.key == key)
        .map(decode_owner)
        .transpose()?;
    let watch = store.watch(key, listing.revision + 1).await?;
    Ok((owner, watch))
}
