//! Keep Alive at KATO/2 in the background (Linux sends at KATO/2 too, so one lost or
//! slow Keep Alive does not expire the controller). A Keep Alive that fails or is not
//! answered within KATO resets the controller.

use std::sync::Weak;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::Inner;
use super::admin::keep_alive_within;
use crate::queue::QueuePair;

/// Starts the keep-alive task for `admin`; it ends when a Keep Alive fails (after asking
/// for a reset) or when aborted.
pub(crate) fn spawn(owner: Weak<Inner>, admin: QueuePair, kato_ms: u32) -> JoinHandle<()> {
    let period = Duration::from_millis(u64::from(kato_ms / 2).max(1));
    let kato = Duration::from_millis(u64::from(kato_ms).max(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let why =
                match tokio::time::timeout(kato, keep_alive_within(&admin, kato_ms.into())).await {
                    Ok(Ok(())) => continue,
                    Ok(Err(e)) => format!("Keep Alive failed: {e}"),
                    Err(_) => format!("Keep Alive not answered within KATO ({kato_ms} ms)"),
                };
            tracing::error!(addr = %admin.addr(), "{why}");
            if let Some(inner) = owner.upgrade() {
                inner.request_reset(why);
            }
            return;
        }
    })
}
