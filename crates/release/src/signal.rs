//! The upgrade signal: an API handler asks the daemon to become another binary; the
//! daemon's main loop waits for that next to its stop signal, shuts down cleanly and
//! re-executes itself (same pid, same arguments) as the new binary.

use std::path::PathBuf;

use tokio::sync::watch;

/// What the daemon is asked to become.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradeRequest {
    /// The binary to execute in place of this one (already probed).
    pub binary: PathBuf,
}

/// Shared between the API (which requests) and the daemon's main loop (which waits).
#[derive(Clone, Debug)]
pub struct UpgradeSignal {
    tx: watch::Sender<Option<UpgradeRequest>>,
}

impl Default for UpgradeSignal {
    fn default() -> Self {
        UpgradeSignal::new()
    }
}

impl UpgradeSignal {
    pub fn new() -> UpgradeSignal {
        UpgradeSignal {
            tx: watch::Sender::new(None),
        }
    }

    /// Asks for the upgrade; false when one was already asked for (the first one stands).
    pub fn request(&self, req: UpgradeRequest) -> bool {
        self.tx.send_if_modified(|slot| {
            if slot.is_some() {
                return false;
            }
            *slot = Some(req);
            true
        })
    }

    /// The request, once there is one.
    pub async fn requested(&self) -> UpgradeRequest {
        let mut rx = self.tx.subscribe();
        loop {
            if let Some(r) = rx.borrow_and_update().clone() {
                return r;
            }
            if rx.changed().await.is_err() {
                // Unreachable while `self` holds the sender; wait forever rather than spin.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Whether an upgrade was asked for.
    pub fn is_requested(&self) -> bool {
        self.tx.borrow().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_request_stands_and_wakes_the_waiter() {
        let s = UpgradeSignal::new();
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.requested().await }
        });
        assert!(!s.is_requested());
        assert!(s.request(UpgradeRequest {
            binary: "/a".into()
        }));
        assert!(!s.request(UpgradeRequest {
            binary: "/b".into()
        }));
        assert_eq!(waiter.await.unwrap().binary, PathBuf::from("/a"));
        assert_eq!(s.requested().await.binary, PathBuf::from("/a"));
    }
}
