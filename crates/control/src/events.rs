//! Cluster events: what happened to nodes, drives, volumes and hosts, for operators (the
//! API's `GET /api/v1/events`, `ferrobay events`). Stored in the metadata store's event
//! log ([`meta::schema::append_event`]) with [`RETENTION`]; every writer goes through
//! [`emit`] (or [`spawn_emit`] where it must not wait for the store).
//!
//! Kinds (`Event::kind`) written today are the constants of [`kind`]; readers must accept
//! kinds they do not know (prediction and QoS events come later through the same calls).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use meta::MetaStore;
use meta::schema::{
    Event, EventPage, EventQuery, NewEvent, Retention, Severity, Subject, SubjectKind,
    append_event, list_events,
};

use crate::error::ControlError;

/// How much of the log is kept: 10 000 events, 30 days.
pub const RETENTION: Retention = Retention {
    max_events: 10_000,
    max_age_ms: 30 * 24 * 3600 * 1000,
};

/// The kinds of event Ferrobay writes.
pub mod kind {
    /// A volume member failed (I/O error, timeout, its node gone, or the operator).
    pub const MEMBER_FAILED: &str = "member_failed";
    /// A failed member answers again and is back in its slot (partial rebuild follows).
    pub const MEMBER_RETURNED: &str = "member_returned";
    /// A rebuild onto a member started.
    pub const REBUILD_STARTED: &str = "rebuild_started";
    /// A rebuild finished (`fields.outcome`: `done`, `stopped` or `failed`).
    pub const REBUILD_DONE: &str = "rebuild_done";
    /// A processor node took a volume over (first start or after its owner died).
    pub const TAKEOVER: &str = "takeover";
    /// A processor node handed a volume over cleanly (`volume move`, shutdown).
    pub const HANDOFF: &str = "handoff";
    /// A processor node lost a volume (lease lost, fenced by a member).
    pub const VOLUME_LOST: &str = "volume_lost";
    /// A standby declared a volume's owner dead by its heartbeat and seized the volume
    /// before the owner's lease ran out (the takeover event follows).
    pub const OWNER_DEAD: &str = "owner_dead";
    /// A member's failure prediction grade changed (`fields.grade`: ok, suspect,
    /// failing; the message says why).
    pub const PREDICTION: &str = "prediction";
    /// A proactive copy of a failing member onto a spare started.
    pub const PROACTIVE_COPY_STARTED: &str = "proactive_copy_started";
    /// A proactive copy completed: the spare took the member's place.
    pub const PROACTIVE_COPY_DONE: &str = "proactive_copy_done";
    /// A proactive copy ended without completing (stopped, the replacement failed).
    pub const PROACTIVE_COPY_FAILED: &str = "proactive_copy_failed";
    /// QoS limits of a volume made commands wait (at most one per volume per interval).
    pub const QOS_THROTTLING: &str = "qos_throttling";
    /// A member was replaced by a new namespace (`POST .../members/{slot}/replace`).
    pub const MEMBER_REPLACED: &str = "member_replaced";
    /// A requested member replacement could not be carried out.
    pub const MEMBER_REPLACE_FAILED: &str = "member_replace_failed";
}

/// Milliseconds since the Unix epoch, now.
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An event about `subject`, now, without fields.
pub fn new_event(
    kind: &str,
    severity: Severity,
    subject_kind: SubjectKind,
    subject: &str,
    message: impl Into<String>,
) -> NewEvent {
    NewEvent {
        kind: kind.to_string(),
        time_unix_ms: now_unix_ms(),
        severity,
        subject: Subject {
            kind: subject_kind,
            name: subject.to_string(),
        },
        message: message.into(),
        fields: Default::default(),
    }
}

/// Adds a field to an event.
pub fn with_field(mut event: NewEvent, key: &str, value: impl Into<serde_json::Value>) -> NewEvent {
    event.fields.insert(key.to_string(), value.into());
    event
}

/// Appends `event` to the log (and to this process's log output). A store that cannot
/// take it costs the event, not the caller: the failure is logged.
pub async fn emit(store: &dyn MetaStore, event: NewEvent) -> Option<Event> {
    tracing::info!(
        kind = %event.kind,
        subject = %event.subject.name,
        "event: {}",
        event.message
    );
    let now = event.time_unix_ms;
    match append_event(store, event, RETENTION, now).await {
        Ok(e) => Some(e),
        Err(e) => {
            tracing::warn!("event not recorded in the metadata store: {e}");
            None
        }
    }
}

/// [`emit`] in the background, for callers on a path that must not wait for the store.
pub fn spawn_emit(store: Arc<dyn MetaStore>, event: NewEvent) {
    tokio::spawn(async move {
        emit(store.as_ref(), event).await;
    });
}

/// A page of the log, newest first (see [`EventQuery`]).
pub async fn list(store: &dyn MetaStore, q: EventQuery) -> Result<EventPage, ControlError> {
    Ok(list_events(store, q).await?)
}
