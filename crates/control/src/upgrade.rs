//! Rolling upgrade (docs/upgrade.md): every storage node and processor node re-executes
//! as a new `ferrobay` binary, one node at a time, while hosts keep doing I/O.
//!
//! - The new binary is probed first and must work beside every live node's build; every
//!   volume must be healthy before anything restarts.
//! - Storage nodes one by one: the node restarts from its data dir (its volumes' members
//!   on it drop out and return: degraded I/O, then a partial rebuild of what was written
//!   meanwhile); the next one starts only when the node is registered again and every
//!   volume is healthy again, so no stripe ever loses two members to the upgrade.
//! - Processor nodes one by one: the volumes it owns move to another processor node
//!   (clean handoff, ANA: hosts with multipath see no error), it restarts, then they move
//!   back.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use meta::MetaStore;
use meta::schema::get_json;
use release::BuildInfo;
use volume::VolumeState;

use crate::error::ControlError;
use crate::provision::{list_volumes, request_move};
use crate::records::{NodeRecord, NodeRole, VolumeStatusRecord, volume_status_key};
use crate::registration::{get_node, list_nodes};

/// How a rolling upgrade runs.
#[derive(Clone, Debug)]
pub struct UpgradeOptions {
    /// The new binary (absolute; the same path on every node's machine).
    pub binary: PathBuf,
    /// Bearer token of the nodes' APIs (the cluster's).
    pub token: Option<String>,
    /// How long a node may take from the request to being registered again.
    pub restart_timeout: Duration,
    /// How long the volumes may take to be healthy again after a node restarted
    /// (rebuilds of what was written while it was away).
    pub settle_timeout: Duration,
    /// How long a volume move may take.
    pub move_timeout: Duration,
    pub poll: Duration,
}

impl UpgradeOptions {
    pub fn new(binary: PathBuf) -> UpgradeOptions {
        UpgradeOptions {
            binary,
            token: None,
            restart_timeout: Duration::from_secs(120),
            settle_timeout: Duration::from_secs(600),
            move_timeout: Duration::from_secs(60),
            poll: Duration::from_millis(200),
        }
    }
}

/// What happened to one node.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NodeUpgrade {
    pub node: String,
    pub role: NodeRole,
    pub from_version: String,
    pub to_version: String,
    /// From the upgrade request to the node registered again.
    pub restart_ms: u64,
    /// From registered again to every volume healthy again.
    pub settle_ms: u64,
    /// Processor nodes: the volumes moved away and back.
    pub volumes_moved: Vec<String>,
}

/// What a rolling upgrade did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UpgradeReport {
    pub to: BuildInfo,
    pub nodes: Vec<NodeUpgrade>,
    pub total_ms: u64,
}

/// The volumes `node` owns now, sorted.
pub async fn owned_by(store: &dyn MetaStore, node: &str) -> Result<Vec<String>, ControlError> {
    let mut owned = Vec::new();
    for v in list_volumes(store).await? {
        if meta::schema::current_owner(store, &v.name)
            .await?
            .is_some_and(|o| o.value.node == node)
        {
            owned.push(v.name);
        }
    }
    Ok(owned)
}

/// Checks `candidate` against every live node: the first refusal, if any.
pub fn refusal(candidate: &BuildInfo, nodes: &[NodeRecord]) -> Option<String> {
    nodes
        .iter()
        .find_map(|n| candidate.refusal_beside(&n.name, &n.build()))
}

/// Upgrades every node of the cluster to `opts.binary`, one at a time; `progress` gets a
/// line per step. Stops at the first step that fails (the cluster stays as it is then:
/// upgraded nodes beside not yet upgraded ones, which the check allows).
pub async fn rolling_upgrade(
    store: Arc<dyn MetaStore>,
    opts: &UpgradeOptions,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<UpgradeReport, ControlError> {
    let started = Instant::now();
    let binary = opts.binary.clone();
    let candidate = tokio::task::spawn_blocking(move || release::probe(&binary))
        .await
        .map_err(|e| ControlError::Invalid(format!("probing the binary: {e}")))?
        .map_err(|e| ControlError::Invalid(e.to_string()))?;
    let nodes = list_nodes(store.as_ref()).await?;
    if nodes.is_empty() {
        return Err(ControlError::NotFound(
            "no node is registered in this metadata store: nothing to upgrade (is --meta the cluster's store?)".into(),
        ));
    }
    if let Some(why) = refusal(&candidate, &nodes) {
        return Err(ControlError::Incompatible(why));
    }
    progress(&format!(
        "upgrading {} nodes to {} ({})",
        nodes.len(),
        candidate.describe(),
        opts.binary.display()
    ));
    if let Some(why) = unhealthy(store.as_ref()).await? {
        return Err(ControlError::Conflict(format!(
            "{why}: a rolling upgrade restarts storage nodes one at a time and needs every volume healthy first"
        )));
    }
    let mut report = UpgradeReport {
        to: candidate.clone(),
        nodes: Vec::new(),
        total_ms: 0,
    };
    let (storage, processors): (Vec<_>, Vec<_>) =
        nodes.into_iter().partition(|n| n.role == NodeRole::Storage);
    for node in &storage {
        report
            .nodes
            .push(upgrade_storage_node(store.as_ref(), opts, node, &candidate, progress).await?);
    }
    for node in &processors {
        report.nodes.push(
            upgrade_processor_node(
                store.as_ref(),
                opts,
                node,
                &processors,
                &candidate,
                progress,
            )
            .await?,
        );
    }
    report.total_ms = ms(started.elapsed());
    progress(&format!(
        "upgraded {} nodes in {:.1} s",
        report.nodes.len(),
        started.elapsed().as_secs_f64()
    ));
    Ok(report)
}

async fn upgrade_storage_node(
    store: &dyn MetaStore,
    opts: &UpgradeOptions,
    node: &NodeRecord,
    candidate: &BuildInfo,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<NodeUpgrade, ControlError> {
    let connected = connected_hosts(node, opts).await?;
    let (back, restart_ms) = restart(store, opts, node, "storage", progress).await?;
    progress(&format!(
        "storage node {}: waiting for its {} hosts to reconnect and its volumes to be healthy",
        node.name,
        connected.len()
    ));
    let settled = Instant::now();
    wait_reconnected(&back, opts, &connected).await?;
    // Statuses published from now on reflect the reconnected members.
    let reconnected_unix_ms = crate::events::now_unix_ms();
    wait_healthy(store, opts, reconnected_unix_ms.max(back.started_unix_ms)).await?;
    progress(&format!(
        "storage node {}: volumes healthy after {:.1} s",
        node.name,
        settled.elapsed().as_secs_f64()
    ));
    Ok(NodeUpgrade {
        node: node.name.clone(),
        role: NodeRole::Storage,
        from_version: node.version.clone(),
        to_version: candidate.version.clone(),
        restart_ms,
        settle_ms: ms(settled.elapsed()),
        volumes_moved: Vec::new(),
    })
}

async fn upgrade_processor_node(
    store: &dyn MetaStore,
    opts: &UpgradeOptions,
    node: &NodeRecord,
    processors: &[NodeRecord],
    candidate: &BuildInfo,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<NodeUpgrade, ControlError> {
    let owned = owned_by(store, &node.name).await?;
    if !owned.is_empty() {
        let Some(carrier) = carrier_for(store, &node.name, processors).await? else {
            return Err(ControlError::Conflict(format!(
                "processor node {} owns {} and no other processor node is running to carry them during its restart",
                node.name,
                owned.join(", ")
            )));
        };
        for v in &owned {
            progress(&format!(
                "volume {v}: moving from {} to {carrier}",
                node.name
            ));
            move_and_wait(store, opts, v, &carrier).await?;
        }
    }
    let (back, restart_ms) = restart(store, opts, node, "processor", progress).await?;
    let settled = Instant::now();
    for v in &owned {
        progress(&format!("volume {v}: moving back to {}", node.name));
        move_and_wait(store, opts, v, &node.name).await?;
    }
    wait_healthy(store, opts, back.started_unix_ms).await?;
    Ok(NodeUpgrade {
        node: node.name.clone(),
        role: NodeRole::Processor,
        from_version: node.version.clone(),
        to_version: candidate.version.clone(),
        restart_ms,
        settle_ms: ms(settled.elapsed()),
        volumes_moved: owned,
    })
}

/// Asks `node` to upgrade and waits until it is registered again: its new record and
/// the milliseconds from the request to then.
async fn restart(
    store: &dyn MetaStore,
    opts: &UpgradeOptions,
    node: &NodeRecord,
    kind: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<(NodeRecord, u64), ControlError> {
    progress(&format!(
        "{kind} node {}: restarting as the new binary",
        node.name
    ));
    let asked = Instant::now();
    request_upgrade(node, opts).await?;
    let back = wait_restarted(store, node, opts).await?;
    progress(&format!(
        "{kind} node {}: back after {:.1} s ({})",
        node.name,
        asked.elapsed().as_secs_f64(),
        back.version
    ));
    Ok((back, ms(asked.elapsed())))
}

/// The live processor node other than `node` that owns the fewest volumes.
async fn carrier_for(
    store: &dyn MetaStore,
    node: &str,
    processors: &[NodeRecord],
) -> Result<Option<String>, ControlError> {
    let mut best: Option<(usize, String)> = None;
    for p in processors.iter().filter(|p| p.name != node) {
        if get_node(store, &p.name).await?.is_none() {
            continue;
        }
        let load = owned_by(store, &p.name).await?.len();
        if best.as_ref().is_none_or(|(l, _)| load < *l) {
            best = Some((load, p.name.clone()));
        }
    }
    Ok(best.map(|(_, n)| n))
}

/// `POST /api/v1/node/upgrade` on the node's API.
async fn request_upgrade(node: &NodeRecord, opts: &UpgradeOptions) -> Result<(), ControlError> {
    let Some(api) = node.api_addr else {
        return Err(ControlError::Invalid(format!(
            "node {} publishes no API address: it cannot be upgraded remotely",
            node.name
        )));
    };
    // Without force: a processor node refuses while it still owns volumes (they were
    // moved away first).
    let body = serde_json::json!({ "binary": opts.binary.display().to_string() });
    let client = httpapi::HttpClient::new(api.to_string())
        .with_token(opts.token.clone())
        .with_timeout(Duration::from_secs(30));
    let (status, answer) = client
        .request(
            "POST",
            "/api/v1/node/upgrade",
            Some(body.to_string().into_bytes()),
        )
        .await
        .map_err(|e| ControlError::ApiTransport {
            addr: api.to_string(),
            reason: e.to_string(),
        })?;
    if status != 202 {
        let message = serde_json::from_slice::<serde_json::Value>(&answer)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&answer).into_owned());
        return Err(ControlError::Api {
            status,
            message: format!("node {} refused the upgrade: {message}", node.name),
        });
    }
    Ok(())
}

/// The host NQNs connected to any subsystem of the storage node now.
async fn connected_hosts(
    node: &NodeRecord,
    opts: &UpgradeOptions,
) -> Result<std::collections::BTreeSet<String>, ControlError> {
    let Some(api) = node.api_addr else {
        return Ok(Default::default());
    };
    let subsystems = storage_node::http::NodeClient::new(api.to_string())
        .with_token(opts.token.clone())
        .with_timeout(Duration::from_secs(10))
        .subsystems()
        .await
        .map_err(|e| ControlError::storage(&node.name, e))?;
    Ok(subsystems
        .into_iter()
        .flat_map(|s| s.controllers.into_iter().map(|(_, host)| host))
        .collect())
}

/// Waits until every host in `before` is connected to the restarted node again (the
/// processor nodes' members reconnected), so that the volumes' next statuses tell.
async fn wait_reconnected(
    node: &NodeRecord,
    opts: &UpgradeOptions,
    before: &std::collections::BTreeSet<String>,
) -> Result<(), ControlError> {
    poll_until(opts.poll, opts.restart_timeout, || async {
        let now = connected_hosts(node, opts).await.unwrap_or_default();
        let missing: Vec<&String> = before.difference(&now).collect();
        Ok(match missing.is_empty() {
            true => Polled::Done(()),
            false => Polled::Waiting(format!(
                "hosts {missing:?} did not reconnect to storage node {} within {} s",
                node.name,
                opts.restart_timeout.as_secs()
            )),
        })
    })
    .await
}

/// Waits until `node` is registered again by a process started after `before`.
async fn wait_restarted(
    store: &dyn MetaStore,
    before: &NodeRecord,
    opts: &UpgradeOptions,
) -> Result<NodeRecord, ControlError> {
    poll_until(opts.poll, opts.restart_timeout, || async {
        Ok(match get_node(store, &before.name).await? {
            Some(now) if now.started_unix_ms > before.started_unix_ms => Polled::Done(now),
            _ => Polled::Waiting(format!(
                "node {} did not come back within {} s after the upgrade request (see its log)",
                before.name,
                opts.restart_timeout.as_secs()
            )),
        })
    })
    .await
}

/// Moves `volume` to `to` and waits until `to` owns it and serves it.
async fn move_and_wait(
    store: &dyn MetaStore,
    opts: &UpgradeOptions,
    volume: &str,
    to: &str,
) -> Result<(), ControlError> {
    request_move(store, volume, to).await?;
    poll_until(opts.poll, opts.move_timeout, || async {
        let owner = meta::schema::current_owner(store, volume).await?;
        let status = volume_status(store, volume).await?;
        Ok(
            match owner.is_some_and(|o| o.value.node == to) && status.is_some_and(|s| s.owner == to)
            {
                true => Polled::Done(()),
                false => Polled::Waiting(format!(
                    "volume {volume} did not move to {to} within {} s",
                    opts.move_timeout.as_secs()
                )),
            },
        )
    })
    .await
}

async fn volume_status(
    store: &dyn MetaStore,
    volume: &str,
) -> Result<Option<VolumeStatusRecord>, ControlError> {
    Ok(
        get_json::<VolumeStatusRecord, _>(store, &volume_status_key(volume)?)
            .await?
            .map(|v| v.value),
    )
}

/// Why the cluster is not ready for the next restart (a volume not healthy, or not
/// served), or None.
async fn unhealthy(store: &dyn MetaStore) -> Result<Option<String>, ControlError> {
    Ok(unhealthy_since(store, 0).await?.into_values().next())
}

/// Each volume not healthy in a status published at or after `since_unix_ms`, with why.
async fn unhealthy_since(
    store: &dyn MetaStore,
    since_unix_ms: u64,
) -> Result<BTreeMap<String, String>, ControlError> {
    let mut out = BTreeMap::new();
    for v in list_volumes(store).await? {
        let why = match volume_status(store, &v.name).await? {
            None => Some(format!("volume {} has no owner serving it", v.name)),
            Some(s) if s.updated_unix_ms < since_unix_ms => Some(format!(
                "volume {}: no status published since the restart",
                v.name
            )),
            Some(s) if s.status.state != VolumeState::Healthy => {
                Some(format!("volume {} is {:?}", v.name, s.status.state))
            }
            Some(_) => None,
        };
        if let Some(why) = why {
            out.insert(v.name, why);
        }
    }
    Ok(out)
}

/// Waits until every volume is healthy in a status published after `since_unix_ms`.
async fn wait_healthy(
    store: &dyn MetaStore,
    opts: &UpgradeOptions,
    since_unix_ms: u64,
) -> Result<(), ControlError> {
    poll_until(opts.poll, opts.settle_timeout, || async {
        let bad = unhealthy_since(store, since_unix_ms).await?;
        Ok(match bad.is_empty() {
            true => Polled::Done(()),
            false => Polled::Waiting(format!(
                "volumes not healthy {} s after the restart: {}",
                opts.settle_timeout.as_secs(),
                bad.into_values().collect::<Vec<_>>().join("; ")
            )),
        })
    })
    .await
}

/// What one look at the cluster found: the awaited value, or why it is not there yet
/// (the error once the time is up).
enum Polled<T> {
    Done(T),
    Waiting(String),
}

/// Looks every `poll` until `check` is done, for at most `timeout`.
async fn poll_until<T, F, Fut>(
    poll: Duration,
    timeout: Duration,
    mut check: F,
) -> Result<T, ControlError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Polled<T>, ControlError>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await? {
            Polled::Done(v) => return Ok(v),
            Polled::Waiting(why) if Instant::now() > deadline => {
                return Err(ControlError::Conflict(why));
            }
            Polled::Waiting(_) => tokio::time::sleep(poll).await,
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
