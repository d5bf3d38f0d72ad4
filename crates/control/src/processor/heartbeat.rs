//! Heartbeats: how a standby learns, faster than a lease TTL, that the owner of a volume
//! died. One probe per watched owner node (shared by every volume it owns): a persistent
//! NVMe/TCP connection (admin queue only) to the discovery controller at the owner's
//! first NVMe listener, the path hosts depend on, with a Keep Alive every
//! `heartbeat_interval_ms`. The owner is declared dead when that connection is closed or
//! refused (a killed process: EOF, then ECONNREFUSED) or `heartbeat_misses` Keep Alives
//! in a row go unanswered (a paused process: its kernel still accepts TCP, nobody
//! answers).
//!
//! A probe only ever declares dead a node it has seen alive: an owner it cannot reach
//! from the start (another network, a listener on a wildcard address) stays `Unknown`,
//! and its volumes fail over by lease expiry as before. Dead is a hint for seizing the
//! owner record early (`meta::schema::seize_ownership`); safety comes from fencing the
//! members (preempt-and-abort), never from the heartbeat.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meta::schema::{Versioned, get_json, node_key};
use nvme_proto::fabrics::DISCOVERY_NQN;
use nvmf_host::{ConnectOptions, Controller};
use tokio::sync::watch;

use super::Ctx;
use crate::records::NodeRecord;

/// What a probe knows about a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Not reached yet (or never): nothing to conclude.
    Unknown,
    /// Its discovery controller answers Keep Alive.
    Alive,
    /// Seen alive, then its connection ended or it stopped answering.
    Dead {
        /// The last Keep Alive answer (or the connection), ms before it was declared dead.
        silent_ms: u64,
        why: String,
    },
}

/// The probes of this node, by watched node name.
#[derive(Default)]
pub(crate) struct Heartbeats {
    probes: Mutex<HashMap<String, Arc<watch::Sender<Liveness>>>>,
}

impl Heartbeats {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<watch::Sender<Liveness>>>> {
        self.probes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows `node`'s liveness; `None` when heartbeats are off or the node cannot be
    /// probed (no record, no routable NVMe address). The probe runs while anyone holds a
    /// receiver.
    pub(crate) async fn watch(ctx: &Arc<Ctx>, node: &str) -> Option<watch::Receiver<Liveness>> {
        if ctx.cfg.heartbeat_misses == 0 || node == ctx.name {
            return None;
        }
        if let Some(tx) = ctx.heartbeats.lock().get(node) {
            return Some(tx.subscribe());
        }
        let key = node_key(node).ok()?;
        let rec = match get_json::<NodeRecord, _>(ctx.store.as_ref(), &key).await {
            Ok(Some(Versioned { value, .. })) => value,
            _ => return None,
        };
        let addr = *rec
            .nvme_addrs
            .iter()
            .find(|a| !a.ip().is_unspecified() && a.port() != 0)?;
        let mut probes = ctx.heartbeats.lock();
        if let Some(tx) = probes.get(node) {
            return Some(tx.subscribe());
        }
        let tx = Arc::new(watch::Sender::new(Liveness::Unknown));
        let rx = tx.subscribe();
        probes.insert(node.to_string(), tx.clone());
        drop(probes);
        tokio::spawn(probe(ctx.clone(), node.to_string(), addr, tx));
        Some(rx)
    }
}

/// Pause between connection attempts to a node never reached.
const NEVER_SEEN_RETRY: Duration = Duration::from_secs(1);

fn settings(ctx: &Ctx) -> (Duration, u32) {
    (
        Duration::from_millis(ctx.cfg.heartbeat_interval_ms.max(10)),
        ctx.cfg.heartbeat_misses.max(1),
    )
}

/// Ends the probe (and forgets it) once nobody watches; `true` if it must end.
fn unwatched(ctx: &Ctx, node: &str, tx: &Arc<watch::Sender<Liveness>>) -> bool {
    let mut probes = ctx.heartbeats.lock();
    if tx.receiver_count() > 0 {
        return false;
    }
    if probes.get(node).is_some_and(|t| Arc::ptr_eq(t, tx)) {
        probes.remove(node);
    }
    true
}

/// The probe of `node` at `addr` until nobody watches it.
async fn probe(ctx: Arc<Ctx>, node: String, addr: SocketAddr, tx: Arc<watch::Sender<Liveness>>) {
    let (interval, misses) = settings(&ctx);
    let patience = interval * misses;
    let opts = ConnectOptions {
        io_queues: 0,
        // Keep Alive is sent by this probe at its own pace; the target's timer stays off.
        kato_ms: 0,
        admin_timeout_ms: patience.as_millis() as u64,
        connect_timeout_ms: patience.as_millis().max(500) as u64,
        shutdown_timeout_ms: 200,
        // No reconnect inside the controller: a lost connection is the news.
        ctrl_loss_tmo_ms: Some(0),
        ..ConnectOptions::default()
    };
    let mut last_answer: Option<Instant> = None;
    loop {
        if unwatched(&ctx, &node, &tx) {
            return;
        }
        let connected = tokio::time::timeout(
            patience.max(Duration::from_millis(500)),
            Controller::connect(addr, DISCOVERY_NQN, &ctx.host, &opts),
        )
        .await;
        let why = match connected {
            Ok(Ok(ctrl)) => {
                if last_answer.is_some() {
                    tracing::info!(node = %ctx.name, watched = %node, %addr, "processor: heartbeat: node answers again");
                } else {
                    tracing::info!(node = %ctx.name, watched = %node, %addr, "processor: heartbeat: following the owner");
                }
                tx.send_replace(Liveness::Alive);
                let why = beat(&ctx, &node, &tx, &ctrl, &mut last_answer).await;
                ctrl.disconnect().await;
                match why {
                    Some(why) => why,
                    None => return,
                }
            }
            Ok(Err(e)) => format!("connect to {addr} failed: {e}"),
            Err(_) => format!("connect to {addr} not answered within {patience:?}"),
        };
        // Only a node seen alive is declared dead.
        if let Some(t) = last_answer {
            let dead = Liveness::Dead {
                silent_ms: t.elapsed().as_millis() as u64,
                why: why.clone(),
            };
            if !matches!(*tx.borrow(), Liveness::Dead { .. }) {
                tracing::warn!(node = %ctx.name, watched = %node, %addr, "processor: heartbeat: {why}");
                tx.send_replace(dead);
            }
        } else {
            tracing::debug!(node = %ctx.name, watched = %node, "processor: heartbeat not possible yet: {why}");
        }
        // A node never reached is tried again calmly; a dead one at the heartbeat's pace
        // (it answers again when it comes back).
        let pause = if last_answer.is_some() {
            interval
        } else {
            interval.max(NEVER_SEEN_RETRY)
        };
        tokio::time::sleep(pause).await;
    }
}

/// Keep Alive every interval on `ctrl`; why the node counts as dead, or `None` once
/// nobody watches.
async fn beat(
    ctx: &Ctx,
    node: &str,
    tx: &Arc<watch::Sender<Liveness>>,
    ctrl: &Controller,
    last_answer: &mut Option<Instant>,
) -> Option<String> {
    let (interval, misses) = settings(ctx);
    *last_answer = Some(Instant::now());
    let mut status = ctrl.watch();
    let mut missed = 0u32;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let lost = async {
            let _ = status.wait_for(|s| !s.is_live()).await;
        };
        tokio::select! {
            biased;
            () = lost => {
                let st = ctrl.status();
                return Some(format!(
                    "connection to {} lost: {}",
                    ctrl.addr(),
                    st.last_error.unwrap_or_else(|| "closed".into())
                ));
            }
            _ = tick.tick() => {}
        }
        if unwatched(ctx, node, tx) {
            return None;
        }
        match tokio::time::timeout(interval, ctrl.keep_alive()).await {
            Ok(Ok(())) => {
                missed = 0;
                *last_answer = Some(Instant::now());
            }
            // Answered with a status: the process runs.
            Ok(Err(e)) if e.nvme_status().is_some() => {
                missed = 0;
                *last_answer = Some(Instant::now());
            }
            Ok(Err(e)) => return Some(format!("Keep Alive to {} failed: {e}", ctrl.addr())),
            Err(_) => {
                missed += 1;
                if missed >= misses {
                    return Some(format!(
                        "{missed} Keep Alives to {} unanswered ({} ms apart)",
                        ctrl.addr(),
                        interval.as_millis()
                    ));
                }
            }
        }
    }
}
