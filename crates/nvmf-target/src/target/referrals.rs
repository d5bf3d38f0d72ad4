//! Discovery referrals (other discovery services this one points hosts to) and the
//! discovery log generation.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use crate::sync::lock;
use crate::target::Target;

impl Target {
    /// Refers hosts to another discovery service (`nvme discover` and our initiator follow
    /// referral entries), like nvmet's `ports/N/referrals`. `false` if it was already
    /// there. Hosts connected to a discovery controller get a discovery log change event.
    pub fn add_referral(&self, addr: SocketAddr) -> bool {
        let added = {
            let mut r = lock(&self.inner.referrals);
            if r.contains(&addr) {
                false
            } else {
                r.push(addr);
                true
            }
        };
        if added {
            self.inner.discovery_log_changed();
        }
        added
    }

    /// Stops referring hosts to `addr`; `false` if it was not a referral.
    pub fn remove_referral(&self, addr: SocketAddr) -> bool {
        let removed = {
            let mut r = lock(&self.inner.referrals);
            let before = r.len();
            r.retain(|a| *a != addr);
            r.len() != before
        };
        if removed {
            self.inner.discovery_log_changed();
        }
        removed
    }

    /// The discovery services this target refers hosts to.
    pub fn referrals(&self) -> Vec<SocketAddr> {
        lock(&self.inner.referrals).clone()
    }

    /// The current discovery log generation counter.
    pub fn discovery_generation(&self) -> u64 {
        self.inner.discovery_genctr.load(Ordering::Relaxed)
    }
}
