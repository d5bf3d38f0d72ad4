//! Preempt-and-abort fencing: per namespace and host, the number of media-modifying
//! commands that passed the reservation check and have not finished on the device.
//!
//! After a Reservation Acquire with "preempt and abort" commits, the target aborts the
//! preempted hosts' commands that have not started (see the connection's request queue)
//! and waits here until their started commands are done, so that nothing those hosts sent
//! before the preempt can change the media after the Acquire completes (Linux nvmet waits
//! the same way on its per-controller namespace references; SPDK waits with a timeout).
//!
//! Ordering: the I/O path counts a command *before* its reservation check, with a
//! SeqCst fence in between; the fencer fences after the new reservation state is
//! committed and before it reads the counts. Either the fencer sees the count, or the
//! command's check sees the new state and refuses it.

use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::sync::{read, write};

/// Distinct hosts tracked per namespace; further hosts share one counter.
const MAX_TRACKED_HOSTS: usize = 4096;
/// How often the fencer re-reads the counts.
const POLL_INTERVAL: Duration = Duration::from_millis(1);

type HostId = [u8; 16];

/// In-flight counts of one namespace, per host.
#[derive(Debug, Default)]
pub(crate) struct InflightTable {
    hosts: RwLock<Vec<(HostId, Arc<AtomicU64>)>>,
    /// Shared by the hosts beyond [`MAX_TRACKED_HOSTS`] (waited on for any host).
    overflow: Arc<AtomicU64>,
}

impl InflightTable {
    /// The counter of `hostid` (created on first use; connections cache it).
    pub fn counter(&self, hostid: &HostId) -> Arc<AtomicU64> {
        if let Some(c) = self.find(hostid) {
            return c;
        }
        let mut g = write(&self.hosts);
        if let Some((_, c)) = g.iter().find(|(h, _)| h == hostid) {
            return c.clone();
        }
        if g.len() >= MAX_TRACKED_HOSTS {
            return self.overflow.clone();
        }
        let c = Arc::new(AtomicU64::new(0));
        g.push((*hostid, c.clone()));
        c
    }

    fn find(&self, hostid: &HostId) -> Option<Arc<AtomicU64>> {
        read(&self.hosts)
            .iter()
            .find(|(h, _)| h == hostid)
            .map(|(_, c)| c.clone())
    }

    /// Commands of `hostid` still in flight (an upper bound for untracked hosts).
    pub fn count(&self, hostid: &HostId) -> u64 {
        match self.find(hostid) {
            Some(c) => c.load(Ordering::SeqCst),
            None => self.overflow.load(Ordering::SeqCst),
        }
    }

    /// Waits until no command of `hosts` is in flight; false on timeout.
    pub async fn wait_drained(&self, hosts: &[HostId], timeout: Duration) -> bool {
        // Pairs with the fence in `InflightGuard::enter`.
        fence(Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if hosts.iter().all(|h| self.count(h) == 0) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

/// One counted command; the count drops when the guard does (after the device is done).
#[derive(Debug)]
pub(crate) struct InflightGuard(Arc<AtomicU64>);

impl InflightGuard {
    /// Counts a command. Call before the reservation check.
    pub fn enter(counter: &Arc<AtomicU64>) -> InflightGuard {
        counter.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence in `wait_drained`.
        fence(Ordering::SeqCst);
        InflightGuard(counter.clone())
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_and_waits() {
        let t = InflightTable::default();
        let (a, b) = ([1u8; 16], [2u8; 16]);
        let ca = t.counter(&a);
        assert!(Arc::ptr_eq(&ca, &t.counter(&a)));
        let g1 = InflightGuard::enter(&ca);
        let g2 = InflightGuard::enter(&ca);
        assert_eq!(t.count(&a), 2);
        assert_eq!(t.count(&b), 0);
        assert!(t.wait_drained(&[b], Duration::from_millis(10)).await);
        assert!(!t.wait_drained(&[a], Duration::from_millis(10)).await);
        drop(g1);
        let waiter = async { t.wait_drained(&[a, b], Duration::from_secs(5)).await };
        let release = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(g2);
        };
        let (drained, ()) = tokio::join!(waiter, release);
        assert!(drained);
        assert_eq!(t.count(&a), 0);
    }
}
