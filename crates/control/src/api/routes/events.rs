//! `GET /api/v1/events`: the event log, newest first, paginated.

use axum::extract::State;
use axum::response::Response;
use httpapi::error::ok;
use httpapi::extract::Query;
use httpapi::{ApiError, ErrorBody};
use meta::schema::{EventPage, EventQuery, MAX_PAGE};

use super::err;
use crate::api::EventsQuery;
use crate::api::server::ApiState;

/// Default page size.
const DEFAULT_LIMIT: usize = 100;

/// Events newest first: ids in `(since, before)`, at most `limit`; follow `next_before` for
/// older pages, poll with `since=last_id` for newer ones.
#[utoipa::path(get, path = "/api/v1/events", tag = "events", params(EventsQuery),
    responses((status = 200, body = EventPage), (status = "default", body = ErrorBody)))]
pub(crate) async fn list_events(
    State(cfg): State<ApiState>,
    Query(q): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit {limit}: give 1 to {MAX_PAGE}"
        )));
    }
    let page = crate::events::list(
        cfg.store.as_ref(),
        EventQuery {
            since: q.since,
            before: q.before,
            limit,
        },
    )
    .await
    .map_err(err)?;
    Ok(ok(&page))
}
