//! Keep Alive at KATO/2 in the background (Linux sends at KATO/2 too, so one lost or
//! slow Keep Alive does not expire the controller).

use std::time::Duration;

use tokio::task::JoinHandle;

use super::admin::keep_alive_within;
use crate::queue::QueuePair;

/// Starts the keep-alive task for `admin`. It ends when a Keep Alive fails (the
/// controller is then lost; reconnect is the caller's business) or when aborted.
pub(crate) fn spawn(admin: QueuePair, kato_ms: u32) -> JoinHandle<()> {
    let period = Duration::from_millis(u64::from(kato_ms / 2).max(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = keep_alive_within(&admin, u64::from(kato_ms)).await {
                tracing::error!(addr = %admin.addr(), "keep-alive failed, controller lost: {e}");
                return;
            }
        }
    })
}
