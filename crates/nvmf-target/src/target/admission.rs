//! Guards against connections that only take resources: limits at accept (per listener,
//! and per host address on a listener) and the handshake timeout's bookkeeping.
//!
//! A connection over a limit is closed at accept: before ICReq there is no PDU to answer
//! with, and nothing is read or allocated for it. Each refusal and each handshake timeout
//! is counted ([`crate::AdmissionStats`]) and logged as a warning naming the peer and the
//! limit, at most once per [`WARNING_INTERVAL`] per kind (with the count held back).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::TargetConfig;
use crate::log_throttle::LogThrottle;
use crate::stats::AdmissionCounters;
use crate::sync::lock;
use crate::target::{ListenerInfo, TargetInner};

/// At most one warning of each kind per interval.
const WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// Connections a listener holds, in total and per host address.
#[derive(Default)]
pub(crate) struct ListenerConns {
    counts: Mutex<ConnCounts>,
}

#[derive(Default)]
struct ConnCounts {
    total: u32,
    /// Only addresses with at least one connection (the map stays as small as the set of
    /// connected hosts).
    per_host: HashMap<IpAddr, u32>,
}

/// Which limit turned a connection away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Limit {
    Listener,
    Host,
}

impl ListenerConns {
    fn try_take(&self, host: IpAddr, cfg: &TargetConfig) -> Result<(), Limit> {
        let mut c = lock(&self.counts);
        if c.total >= cfg.max_connections_per_listener {
            return Err(Limit::Listener);
        }
        let n = c.per_host.entry(host).or_insert(0);
        if *n >= cfg.max_connections_per_host {
            return Err(Limit::Host);
        }
        *n += 1;
        c.total += 1;
        Ok(())
    }

    fn give_back(&self, host: IpAddr) {
        let mut c = lock(&self.counts);
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_host.get_mut(&host) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_host.remove(&host);
            }
        }
    }

    /// (total, connections of `host`).
    #[cfg(test)]
    fn counts(&self, host: IpAddr) -> (u32, u32) {
        let c = lock(&self.counts);
        (c.total, c.per_host.get(&host).copied().unwrap_or(0))
    }
}

/// A connection's place on its listener, given back when dropped (when the connection
/// task ends).
pub(crate) struct AdmissionTicket {
    listener: Arc<ListenerInfo>,
    host: IpAddr,
}

impl Drop for AdmissionTicket {
    fn drop(&mut self) {
        self.listener.conns.give_back(self.host);
    }
}

/// The target's admission counters and warning throttles.
pub(crate) struct Admission {
    pub counters: AdmissionCounters,
    refusal_warnings: LogThrottle,
    timeout_warnings: LogThrottle,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            counters: AdmissionCounters::default(),
            refusal_warnings: LogThrottle::new(WARNING_INTERVAL),
            timeout_warnings: LogThrottle::new(WARNING_INTERVAL),
        }
    }
}

/// The host part of a peer address (IPv4-mapped IPv6 addresses count as IPv4).
fn host_of(peer: SocketAddr) -> IpAddr {
    peer.ip().to_canonical()
}

impl TargetInner {
    /// Takes a place for a connection from `peer` on `listener`, or counts and reports
    /// the refusal (the caller closes the socket).
    pub(crate) fn admit(
        &self,
        listener: &Arc<ListenerInfo>,
        peer: SocketAddr,
    ) -> Option<AdmissionTicket> {
        let host = host_of(peer);
        let cfg = &self.config;
        let limit = match listener.conns.try_take(host, cfg) {
            Ok(()) => {
                return Some(AdmissionTicket {
                    listener: listener.clone(),
                    host,
                });
            }
            Err(l) => l,
        };
        let a = &self.admission;
        let (counter, name, value) = match limit {
            Limit::Listener => (
                &a.counters.refused_listener_limit,
                "max_connections_per_listener",
                cfg.max_connections_per_listener,
            ),
            Limit::Host => (
                &a.counters.refused_host_limit,
                "max_connections_per_host",
                cfg.max_connections_per_host,
            ),
        };
        counter.fetch_add(1, Relaxed);
        if let Some(held_back) = a.refusal_warnings.admit() {
            tracing::warn!(%peer, listener = %listener.addr, limit = name, value,
                refusals_not_logged = held_back,
                "connection refused: {name} ({value}) reached");
        }
        None
    }

    /// Counts and reports a connection closed by the handshake timeout.
    pub(crate) fn count_handshake_timeout(&self, peer: &str, icreq_received: bool) {
        let a = &self.admission;
        a.counters.handshake_timeouts.fetch_add(1, Relaxed);
        if let Some(held_back) = a.timeout_warnings.admit() {
            let missing = if icreq_received { "Connect" } else { "ICReq" };
            tracing::warn!(
                peer,
                timeout_ms = self.config.handshake_timeout_ms,
                timeouts_not_logged = held_back,
                "connection closed: no {missing} within handshake_timeout_ms"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_per_listener_and_per_host() {
        let cfg = TargetConfig {
            max_connections_per_listener: 3,
            max_connections_per_host: 2,
            ..TargetConfig::default()
        };
        let l = ListenerConns::default();
        let a = IpAddr::from([10, 0, 0, 1]);
        let b = IpAddr::from([10, 0, 0, 2]);
        assert_eq!(l.try_take(a, &cfg), Ok(()));
        assert_eq!(l.try_take(a, &cfg), Ok(()));
        assert_eq!(l.try_take(a, &cfg), Err(Limit::Host));
        assert_eq!(l.try_take(b, &cfg), Ok(()));
        assert_eq!(l.try_take(b, &cfg), Err(Limit::Listener));
        l.give_back(a);
        assert_eq!(l.counts(a), (2, 1));
        assert_eq!(l.try_take(b, &cfg), Ok(()));
        l.give_back(a);
        assert_eq!(l.counts(a), (2, 0));
        assert!(
            !lock(&l.counts).per_host.contains_key(&a),
            "a host without connections leaves the map"
        );
    }

    #[test]
    fn ipv4_mapped_addresses_count_as_their_ipv4_host() {
        let v4: SocketAddr = SocketAddr::from(([192, 0, 2, 7], 4000));
        let mapped: SocketAddr =
            SocketAddr::from((std::net::Ipv4Addr::new(192, 0, 2, 7).to_ipv6_mapped(), 4001));
        assert_eq!(host_of(v4), host_of(mapped));
    }
}
