//! [`LeaseKeeper`]: keeps a lease alive in the background and reports, on a watch
//! channel, the moment the lease may be lost.
//!
//! Safety rule: the owner of a lease must stop acting on it before any other node can
//! obtain what the lease protects. The store ends a lease no earlier than TTL after the
//! last renewal it received, and that renewal was received after the keeper sent it; so
//! after a renewal *sent* at `t` the lease surely lives until `t + TTL`. The keeper
//! declares the lease lost at `t + TTL - safety_margin` (the margin absorbs clock-rate
//! differences and the time the owner needs to stop), measured on a monotonic [`Clock`].
//! It does so whether renewals fail, hang or the store is unreachable.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::error::MetaError;
use crate::store::MetaStore;
use crate::types::{Lease, LeaseId};

/// Tuning of a [`LeaseKeeper`]; `None` fields take defaults derived from the TTL.
#[derive(Clone, Debug, Default)]
pub struct KeeperConfig {
    /// Time between renewals; default TTL / 3.
    pub refresh_interval: Option<Duration>,
    /// Declare the lease lost this long before the earliest moment the store may end it;
    /// default max(TTL / 10, 100 ms), capped at TTL / 3.
    pub safety_margin: Option<Duration>,
    /// Wait after a failed renewal before trying again; default refresh interval / 4.
    pub retry_interval: Option<Duration>,
}

/// What the keeper knows about its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Held at least until `valid_until` (a [`Clock`] time).
    Alive { valid_until: Duration },
    /// Possibly held by nobody any more: stop acting on it.
    Lost(LossReason),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// No renewal could be confirmed in time (store unreachable, slow or failing).
    Expired,
    /// The store says the lease does not exist.
    NotFound,
    /// [`LeaseKeeper::revoke`] was called.
    Revoked,
    /// The keeper was dropped.
    Stopped,
}

#[derive(Clone, Copy, Debug)]
struct Timing {
    refresh: Duration,
    margin: Duration,
    retry: Duration,
}

impl Timing {
    fn new(ttl_ms: u64, config: &KeeperConfig) -> Result<Self, MetaError> {
        let ttl = Duration::from_millis(ttl_ms);
        let margin = config
            .safety_margin
            .unwrap_or_else(|| (ttl / 10).max(Duration::from_millis(100)).min(ttl / 3));
        let refresh = config.refresh_interval.unwrap_or(ttl / 3);
        let retry = config.retry_interval.unwrap_or(refresh / 4);
        if margin >= ttl || refresh.is_zero() || refresh >= ttl - margin || retry.is_zero() {
            return Err(MetaError::Invalid(format!(
                "lease keeper: TTL {ttl:?} too short for refresh {refresh:?}, margin {margin:?}, retry {retry:?}"
            )));
        }
        Ok(Self {
            refresh,
            margin,
            retry,
        })
    }

    /// How long the lease surely lives, given a renewal sent at `sent_at` that the store
    /// confirmed with `ttl_ms`.
    fn valid_until(&self, sent_at: Duration, ttl_ms: u64) -> Duration {
        (sent_at + Duration::from_millis(ttl_ms)).saturating_sub(self.margin)
    }
}

/// Keeps one lease alive until it is dropped or revoked.
pub struct LeaseKeeper {
    lease: Lease,
    store: Arc<dyn MetaStore>,
    clock: Arc<dyn Clock>,
    state: Arc<watch::Sender<LeaseState>>,
    task: JoinHandle<()>,
}

impl LeaseKeeper {
    /// Grants a lease of `ttl_ms` and keeps it alive.
    pub async fn grant(
        store: Arc<dyn MetaStore>,
        ttl_ms: u64,
        clock: Arc<dyn Clock>,
        config: KeeperConfig,
    ) -> Result<Self, MetaError> {
        let sent_at = clock.now();
        let lease = store.grant_lease(ttl_ms).await?;
        Self::spawn(store, lease, sent_at, clock, &config)
    }

    /// Takes over an existing lease: renews it once now (failing if it is gone), then
    /// keeps it alive.
    pub async fn adopt(
        store: Arc<dyn MetaStore>,
        lease: LeaseId,
        clock: Arc<dyn Clock>,
        config: KeeperConfig,
    ) -> Result<Self, MetaError> {
        let sent_at = clock.now();
        let ttl_ms = store.keep_alive(lease).await?;
        Self::spawn(store, Lease { id: lease, ttl_ms }, sent_at, clock, &config)
    }

    fn spawn(
        store: Arc<dyn MetaStore>,
        lease: Lease,
        sent_at: Duration,
        clock: Arc<dyn Clock>,
        config: &KeeperConfig,
    ) -> Result<Self, MetaError> {
        let timing = Timing::new(lease.ttl_ms, config)?;
        let valid_until = timing.valid_until(sent_at, lease.ttl_ms);
        let state = Arc::new(watch::Sender::new(LeaseState::Alive { valid_until }));
        let task = tokio::spawn(keep(
            store.clone(),
            lease.id,
            clock.clone(),
            timing,
            state.clone(),
            sent_at,
            valid_until,
        ));
        Ok(Self {
            lease,
            store,
            clock,
            state,
            task,
        })
    }

    pub fn lease_id(&self) -> LeaseId {
        self.lease.id
    }

    /// The TTL the store granted.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.lease.ttl_ms)
    }

    /// The state now and every change (each renewal and the loss).
    pub fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.state.subscribe()
    }

    pub fn state(&self) -> LeaseState {
        *self.state.borrow()
    }

    /// Whether the lease is held right now: checks the deadline against the clock itself,
    /// so it is exact even if the keeper task has not run yet. Check it before every
    /// action that needs the lease.
    pub fn is_valid(&self) -> bool {
        match *self.state.borrow() {
            LeaseState::Alive { valid_until } => self.clock.now() < valid_until,
            LeaseState::Lost(_) => false,
        }
    }

    /// Resolves when the lease is lost.
    pub async fn lost(&self) -> LossReason {
        wait_lost(self.subscribe()).await
    }

    /// Stops renewing, reports `Lost(Revoked)`, then revokes the lease (deleting its keys).
    pub async fn revoke(self) -> Result<bool, MetaError> {
        self.task.abort();
        self.state
            .send_replace(LeaseState::Lost(LossReason::Revoked));
        self.store.revoke_lease(self.lease.id).await
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.task.abort();
        self.state.send_if_modified(|state| {
            if matches!(state, LeaseState::Alive { .. }) {
                *state = LeaseState::Lost(LossReason::Stopped);
                true
            } else {
                false
            }
        });
    }
}

/// Resolves when `rx` reports the lease lost (or its keeper is gone).
pub async fn wait_lost(mut rx: watch::Receiver<LeaseState>) -> LossReason {
    match rx.wait_for(|s| matches!(s, LeaseState::Lost(_))).await {
        Ok(state) => match *state {
            LeaseState::Lost(reason) => reason,
            LeaseState::Alive { .. } => LossReason::Stopped,
        },
        Err(_) => LossReason::Stopped,
    }
}

async fn keep(
    store: Arc<dyn MetaStore>,
    lease: LeaseId,
    clock: Arc<dyn Clock>,
    timing: Timing,
    state: Arc<watch::Sender<LeaseState>>,
    mut last_sent: Duration,
    mut valid_until: Duration,
) {
    let lose = |reason: LossReason| {
        tracing::warn!(%lease, ?reason, "meta: lease lost");
        state.send_replace(LeaseState::Lost(reason));
    };
    let mut next_refresh = last_sent + timing.refresh;
    loop {
        // `biased`: when the deadline and the refresh time have both passed, the lease is
        // lost; a late renewal cannot revive what another node may already hold.
        tokio::select! {
            biased;
            () = clock.sleep_until(valid_until) => return lose(LossReason::Expired),
            () = clock.sleep_until(next_refresh) => {}
        }
        let sent_at = clock.now();
        let result = tokio::select! {
            biased;
            () = clock.sleep_until(valid_until) => return lose(LossReason::Expired),
            result = store.keep_alive(lease) => result,
        };
        match result {
            Ok(ttl_ms) => {
                last_sent = sent_at;
                // A renewal replaces the store's deadline (even with a shorter TTL).
                valid_until = timing.valid_until(sent_at, ttl_ms);
                next_refresh = last_sent + timing.refresh;
                if clock.now() >= valid_until {
                    return lose(LossReason::Expired);
                }
                state.send_replace(LeaseState::Alive { valid_until });
            }
            Err(MetaError::LeaseNotFound(_)) => return lose(LossReason::NotFound),
            Err(e) => {
                tracing::debug!(%lease, "meta: lease renewal failed: {e}");
                next_refresh = clock.now() + timing.retry;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_defaults_and_limits() {
        let t = Timing::new(3000, &KeeperConfig::default()).expect("valid");
        assert_eq!(t.refresh, Duration::from_millis(1000));
        assert_eq!(t.margin, Duration::from_millis(300));
        assert_eq!(t.retry, Duration::from_millis(250));
        assert_eq!(
            t.valid_until(Duration::from_secs(10), 3000),
            Duration::from_millis(12_700)
        );
        let tiny = KeeperConfig {
            safety_margin: Some(Duration::from_millis(900)),
            ..KeeperConfig::default()
        };
        assert!(Timing::new(1000, &tiny).is_err());
        assert!(Timing::new(0, &KeeperConfig::default()).is_err());
    }
}
