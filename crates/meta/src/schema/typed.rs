//! Typed access: values are serde JSON, decoded into the caller's record type.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::SchemaError;
use crate::store::MetaStore;
use crate::types::{CasOutcome, Expect, KeyValue, LeaseId, Revision};

/// A decoded record and the revision to pass to a later compare-and-swap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned<T> {
    pub value: T,
    /// The key's `mod_revision`.
    pub revision: Revision,
    pub lease: Option<LeaseId>,
}

/// Decoded records under a prefix, read at `revision` (watch from `revision + 1`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypedListing<T> {
    pub items: Vec<(String, Versioned<T>)>,
    pub revision: Revision,
}

/// Result of [`cas_json`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TypedCas<T> {
    Swapped {
        revision: Revision,
    },
    /// The key was not as expected; its current record, if any.
    Conflict {
        current: Option<Versioned<T>>,
    },
}

pub fn encode_json<T: Serialize>(value: &T) -> Result<Vec<u8>, SchemaError> {
    serde_json::to_vec(value).map_err(SchemaError::Encode)
}

pub fn decode_json<T: DeserializeOwned>(kv: &KeyValue) -> Result<Versioned<T>, SchemaError> {
    let value = serde_json::from_slice(&kv.value).map_err(|source| SchemaError::Decode {
        key: kv.key.clone(),
        source,
    })?;
    Ok(Versioned {
        value,
        revision: kv.mod_revision,
        lease: kv.lease,
    })
}

pub async fn get_json<T: DeserializeOwned, S: MetaStore + ?Sized>(
    store: &S,
    key: &str,
) -> Result<Option<Versioned<T>>, SchemaError> {
    store.get(key).await?.as_ref().map(decode_json).transpose()
}

/// Every record under `prefix`; a record that does not decode fails the whole listing.
pub async fn list_json<T: DeserializeOwned, S: MetaStore + ?Sized>(
    store: &S,
    prefix: &str,
) -> Result<TypedListing<T>, SchemaError> {
    let listing = store.list(prefix).await?;
    let items = listing
        .kvs
        .iter()
        .map(|kv| Ok((kv.key.clone(), decode_json(kv)?)))
        .collect::<Result<Vec<_>, SchemaError>>()?;
    Ok(TypedListing {
        items,
        revision: listing.revision,
    })
}

pub async fn put_json<T: Serialize + Sync, S: MetaStore + ?Sized>(
    store: &S,
    key: &str,
    value: &T,
    lease: Option<LeaseId>,
) -> Result<Revision, SchemaError> {
    let bytes = encode_json(value)?;
    Ok(store.put_opt_lease(key, bytes, lease).await?)
}

/// Writes `value` only if `key` is as `expect`ed; on conflict returns the current record.
pub async fn cas_json<T: Serialize + DeserializeOwned + Sync, S: MetaStore + ?Sized>(
    store: &S,
    key: &str,
    expect: Expect,
    value: &T,
    lease: Option<LeaseId>,
) -> Result<TypedCas<T>, SchemaError> {
    let bytes = encode_json(value)?;
    match store.compare_and_swap(key, expect, bytes, lease).await? {
        CasOutcome::Swapped { revision } => Ok(TypedCas::Swapped { revision }),
        CasOutcome::Conflict { current } => Ok(TypedCas::Conflict {
            current: current.as_ref().map(decode_json).transpose()?,
        }),
    }
}
