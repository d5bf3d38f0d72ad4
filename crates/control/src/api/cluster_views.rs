//! Read-only views the dashboard needs that no other route gives: the drives of every
//! live storage node (asked over each node's HTTP API) and pages of the event log.

use std::time::Duration;

use meta::MetaStore;
use meta::schema::{EventPage, EventQuery, list_events};
use serde::{Deserialize, Serialize};
use storage_node::NodeClient;
use storage_node::api::DriveHealth;

use crate::error::ControlError;
use crate::records::NodeRole;
use crate::registration::list_nodes;

/// How long a storage node gets to report its drives.
const NODE_TIMEOUT: Duration = Duration::from_secs(3);

/// `GET /v1/drives`: one drive of one storage node, or (with `name` empty and `error`
/// set) a live storage node that did not answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriveView {
    pub node: String,
    #[serde(flatten)]
    pub health: DriveHealth,
    /// Why the node's drives could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The drives of every live storage node, asked in parallel.
pub async fn drives(store: &dyn MetaStore) -> Result<Vec<DriveView>, ControlError> {
    let nodes = list_nodes(store).await?;
    let asks = nodes
        .into_iter()
        .filter(|n| n.role == NodeRole::Storage)
        .map(|n| async move {
            let Some(addr) = n.api_addr else {
                return vec![unreachable(&n.name, "registered no HTTP API")];
            };
            match NodeClient::new(addr.to_string())
                .with_timeout(NODE_TIMEOUT)
                .health()
                .await
            {
                Ok(report) => report
                    .drives
                    .into_iter()
                    .map(|health| DriveView {
                        node: n.name.clone(),
                        health,
                        error: None,
                    })
                    .collect(),
                Err(e) => vec![unreachable(&n.name, &e.to_string())],
            }
        });
    Ok(futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect())
}

fn unreachable(node: &str, why: &str) -> DriveView {
    DriveView {
        node: node.to_string(),
        health: DriveHealth {
            status: format!("unreachable: {why}"),
            ..DriveHealth::default()
        },
        error: Some(why.to_string()),
    }
}

/// `GET /v1/events?since=&before=&limit=`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    #[serde(default)]
    pub since: u64,
    #[serde(default)]
    pub before: Option<u64>,
    #[serde(default)]
    pub limit: usize,
}

/// A page of the event log, newest first.
pub async fn events(store: &dyn MetaStore, q: &EventsQuery) -> Result<EventPage, ControlError> {
    Ok(list_events(
        store,
        EventQuery {
            since: q.since,
            before: q.before,
            limit: q.limit,
        },
    )
    .await?)
}
