//! What Ferrobay keeps in the store: the key layout, typed (serde JSON) access, and volume
//! ownership. The records themselves (nodes, drives, volumes) belong to the control plane;
//! this module only fixes where they live and how they are read and swapped.

mod events;
mod keys;
mod ownership;
mod typed;

pub use events::{
    EVENT_LOG, EVENTS, Event, EventPage, EventQuery, MAX_PAGE, NewEvent, Retention, Severity,
    Subject, SubjectKind, append_event, event_key, list_events,
};
pub use keys::{
    DRIVES, NODES, OWNER_EPOCHS, OWNERS, ROOT, VOLUME_AUTH, VOLUMES, drive_key, drives_of_node,
    name_in, node_key, owner_epoch_key, owner_key, validate_name, volume_auth_key, volume_key,
};
pub use ownership::{
    OwnerRecord, OwnerStream, OwnershipError, acquire_ownership, current_owner, last_epoch,
    release_ownership, seize_ownership, watch_owner,
};
pub use typed::{
    TypedCas, TypedListing, Versioned, cas_json, decode_json, encode_json, get_json, list_json,
    put_json,
};

use crate::error::MetaError;

/// Errors of the typed layer.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("value of {key:?} is not a valid record: {source}")]
    Decode {
        key: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("record does not encode: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("invalid name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
}
