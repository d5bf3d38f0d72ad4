//! The cluster's event log: structured events (kind, time, severity, subject, message,
//! fields) kept in the store under dense ids, newest first on read, trimmed by count and
//! age. Any writer (processor nodes, and later prediction and QoS) appends through
//! [`append_event`]; readers page with [`list_events`].
//!
//! Keys: `/ferrobay/event-log` holds `{"next": N, "first": F}` (ids `F..N` may exist);
//! event `id` lives at `/ferrobay/events/<id >> 8 as 16 hex>/<id as 16 hex>`, so a page
//! reads one or two buckets of at most 256 events, never the whole log. An append is one
//! transaction conditioned on the cursor: it takes id `N`, writes the event, and deletes
//! what the retention drops (a bounded number per append), so ids stay dense and unique
//! across writers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::SchemaError;
use super::typed::{decode_json, encode_json, get_json};
use crate::error::MetaError;
use crate::store::MetaStore;
use crate::types::{Expect, Txn, TxnOutcome};

/// `/ferrobay/event-log`: the cursor of the event log.
pub const EVENT_LOG: &str = "/ferrobay/event-log";
/// `/ferrobay/events/<bucket>/<id>`: one event.
pub const EVENTS: &str = "/ferrobay/events/";
/// Events per key bucket.
const BUCKET_SHIFT: u32 = 8;
/// Most old events one append deletes (keeps each transaction small).
const MAX_TRIM_PER_APPEND: u64 = 32;
/// Rounds of "read cursor, commit" before an append gives up (other writers won).
const APPEND_ATTEMPTS: usize = 32;
/// Largest page [`list_events`] returns.
pub const MAX_PAGE: usize = 1000;

/// How bad an event is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

/// What an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SubjectKind {
    Node,
    Drive,
    Namespace,
    Volume,
    Host,
}

/// The thing an event is about: its kind and name (`n1/d0` for a drive of node `n1`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Subject {
    pub kind: SubjectKind,
    pub name: String,
}

/// An event to append (the log gives it its id).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewEvent {
    /// What happened, `snake_case` (`member_failed`, `takeover`, ...): the list of kinds
    /// is in `docs/api.md`; readers must accept kinds they do not know.
    pub kind: String,
    pub time_unix_ms: u64,
    pub severity: Severity,
    pub subject: Subject,
    /// One line for people.
    pub message: String,
    /// Details for programs (member index, epoch, bytes...).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub fields: BTreeMap<String, serde_json::Value>,
}

/// A stored event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    /// Dense, increasing, never reused: the cursor for `since`/`before`.
    pub id: u64,
    #[serde(flatten)]
    pub event: NewEvent,
}

/// How much of the log is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Most events kept.
    pub max_events: u64,
    /// Events older than this (by `time_unix_ms`) are dropped.
    pub max_age_ms: u64,
}

impl Default for Retention {
    /// 10 000 events, 30 days.
    fn default() -> Self {
        Retention {
            max_events: 10_000,
            max_age_ms: 30 * 24 * 3600 * 1000,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Cursor {
    /// The id the next event gets.
    next: u64,
    /// The lowest id that may still exist.
    first: u64,
}

/// The key of event `id`.
pub fn event_key(id: u64) -> String {
    format!("{EVENTS}{:016x}/{id:016x}", id >> BUCKET_SHIFT)
}

fn bucket_prefix(id: u64) -> String {
    format!("{EVENTS}{:016x}/", id >> BUCKET_SHIFT)
}

async fn cursor<S: MetaStore + ?Sized>(store: &S) -> Result<(Cursor, Expect), SchemaError> {
    Ok(match get_json::<Cursor, S>(store, EVENT_LOG).await? {
        Some(v) => (v.value, Expect::ModRevision(v.revision)),
        None => (Cursor { next: 1, first: 1 }, Expect::Absent),
    })
}

/// Appends `event` and applies `retention`; returns the stored event.
pub async fn append_event<S: MetaStore + ?Sized>(
    store: &S,
    event: NewEvent,
    retention: Retention,
    now_unix_ms: u64,
) -> Result<Event, SchemaError> {
    for _ in 0..APPEND_ATTEMPTS {
        let (cur, expect) = cursor(store).await?;
        let id = cur.next;
        let stored = Event {
            id,
            event: event.clone(),
        };
        // Count bound: keep at most max_events - 1 old ones besides the new one.
        let keep_from_count = (id + 1).saturating_sub(retention.max_events.max(1));
        let mut first = cur.first.max(1);
        let mut drop = Vec::new();
        while first < keep_from_count && (drop.len() as u64) < MAX_TRIM_PER_APPEND {
            drop.push(first);
            first += 1;
        }
        // Age bound: look at the oldest ones left.
        let cutoff = now_unix_ms.saturating_sub(retention.max_age_ms);
        while first < id && (drop.len() as u64) < MAX_TRIM_PER_APPEND {
            // Already gone (an earlier trim): nothing to delete.
            if let Some(kv) = store.get(&event_key(first)).await? {
                let old: Event = decode_json(&kv)?.value;
                if old.event.time_unix_ms >= cutoff {
                    break;
                }
                drop.push(first);
            }
            first += 1;
        }
        let mut txn = Txn::new()
            .when(EVENT_LOG, expect)
            .put(
                EVENT_LOG,
                encode_json(&Cursor {
                    next: id + 1,
                    first,
                })?,
                None,
            )
            .put(event_key(id), encode_json(&stored)?, None);
        for old in drop {
            txn = txn.delete(event_key(old));
        }
        match store.txn(txn).await? {
            TxnOutcome::Committed { .. } => return Ok(stored),
            TxnOutcome::Failed { .. } => continue,
        }
    }
    Err(SchemaError::Meta(MetaError::Backend(format!(
        "event log: the cursor kept changing; gave up after {APPEND_ATTEMPTS} attempts"
    ))))
}

/// Which events to read: ids in `(since, before)`, newest first, at most `limit`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// Only events with a greater id (0: from the oldest kept).
    pub since: u64,
    /// Only events with a smaller id (`None`: up to the newest); the next page of a
    /// newest-first listing passes the smallest id it got.
    pub before: Option<u64>,
    /// At most this many (capped at [`MAX_PAGE`]; 0 means [`MAX_PAGE`]).
    pub limit: usize,
}

/// A page of events, newest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventPage {
    pub events: Vec<Event>,
    /// Pass as `before` for the next (older) page; `None` when this page reached `since`
    /// or the oldest kept event.
    pub next_before: Option<u64>,
    /// The newest id in the log now (0: none yet): a follower passes it as `since`.
    pub last_id: u64,
}

/// Reads a page of the log (see [`EventQuery`]).
pub async fn list_events<S: MetaStore + ?Sized>(
    store: &S,
    q: EventQuery,
) -> Result<EventPage, SchemaError> {
    let (cur, _) = cursor(store).await?;
    let last_id = cur.next.saturating_sub(1);
    let limit = if q.limit == 0 {
        MAX_PAGE
    } else {
        q.limit.min(MAX_PAGE)
    };
    let low = q.since.saturating_add(1).max(cur.first.max(1));
    let mut high = q.before.unwrap_or(cur.next).min(cur.next); // exclusive
    let mut events = Vec::new();
    while high > low && events.len() < limit {
        let top = high - 1;
        let listing = store.list(&bucket_prefix(top)).await?;
        let mut bucket: Vec<Event> = listing
            .kvs
            .iter()
            .map(|kv| decode_json::<Event>(kv).map(|v| v.value))
            .collect::<Result<_, _>>()?;
        bucket.retain(|e| e.id >= low && e.id <= top);
        bucket.sort_by_key(|e| std::cmp::Reverse(e.id));
        for e in bucket {
            if events.len() == limit {
                break;
            }
            events.push(e);
        }
        // Next: the bucket below this one.
        high = (top >> BUCKET_SHIFT) << BUCKET_SHIFT;
    }
    let next_before = match events.last() {
        Some(e) if events.len() == limit && e.id > low => Some(e.id),
        _ => None,
    };
    Ok(EventPage {
        events,
        next_before,
        last_id,
    })
}
