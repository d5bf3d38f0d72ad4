//! Bringing paths in: the open (every address at once; the namespace opens when any
//! path connects) and the background rejoin of a path that is not connected: one task
//! per such address retries with the controller's reconnect backoff (`reconnect_delay_ms`
//! doubling up to `reconnect_delay_max_ms`) until the path connects and shows the same
//! namespace, or the multipath namespace is dropped. A path rejoins when it did not
//! connect at open, when its controller gave up reconnecting (controller-loss timeout),
//! or when it came back with another namespace behind it. With a controller-loss timeout
//! of 0 ("never reconnect") nothing is retried.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::identity::NsIdentity;
use super::{PathNs, Shared, multipath_name};
use crate::controller::{ConnectOptions, Controller};
use crate::error::{HostError, Result};
use crate::host_identity::HostIdentity;

/// Where a path connects: a host name or IP address and a port, resolved on every
/// attempt (a name may move, or not resolve for a while).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathAddr {
    pub host: String,
    pub port: u16,
}

impl From<SocketAddr> for PathAddr {
    fn from(a: SocketAddr) -> Self {
        PathAddr {
            host: a.ip().to_string(),
            port: a.port(),
        }
    }
}

impl std::fmt::Display for PathAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl PathAddr {
    /// Whether it names `a` (without a DNS lookup: names never match).
    pub fn is(&self, a: SocketAddr) -> bool {
        self.port == a.port() && self.host.parse::<IpAddr>().is_ok_and(|ip| ip == a.ip())
    }

    async fn resolve(&self) -> Result<SocketAddr> {
        let fail = |why: String| HostError::Usage(format!("resolving {}: {why}", self.host));
        let mut it = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| fail(e.to_string()))?;
        it.next().ok_or_else(|| fail("no address".into()))
    }
}

/// What every path of one namespace connects with.
#[derive(Clone)]
pub(crate) struct JoinParams {
    pub subnqn: String,
    pub host: HostIdentity,
    pub opts: ConnectOptions,
}

/// The cause of a path's failure for a person: a refused connect says "connect to
/// ADDR: ..." and the address is already named.
pub(crate) fn cause_text(e: &HostError) -> String {
    match e {
        HostError::Connect { reason, .. } => reason.clone(),
        e => e.to_string(),
    }
}

/// Connects one path and opens namespace `nsid` (the first active one of its kind when
/// None) through it; returns it with its identity. A controller that connected is
/// disconnected again when the namespace cannot be opened.
pub(crate) async fn connect_path<N: PathNs>(
    addr: &PathAddr,
    nsid: Option<u32>,
    p: &JoinParams,
) -> Result<(N, NsIdentity)> {
    let sock = addr.resolve().await?;
    let ctrl = Controller::connect(sock, &p.subnqn, &p.host, &p.opts).await?;
    let opened = async {
        let ns = N::open(&ctrl, nsid).await?;
        let id = N::identity(&ctrl, ns.nsid()).await?;
        Ok((ns, id))
    }
    .await;
    if opened.is_err() {
        ctrl.disconnect().await;
    }
    opened
}

/// Opens the paths of a multipath namespace over `addrs` (see
/// [`super::MultipathNamespace::connect`]): returns what they share, with the first
/// opened path described by `describe`.
pub(crate) async fn open<N: PathNs, D>(
    addrs: Vec<PathAddr>,
    nsid: Option<u32>,
    params: JoinParams,
    describe: impl FnOnce(&N) -> D,
) -> Result<(Arc<Shared<N>>, D)> {
    if addrs.is_empty() {
        return Err(HostError::Usage(
            "multipath needs at least one address".into(),
        ));
    }
    // All at once: a path that does not answer costs its connect timeout once, not
    // once per path before it.
    let results =
        futures::future::join_all(addrs.iter().map(|a| connect_path::<N>(a, nsid, &params))).await;
    let mut reference: Option<NsIdentity> = None;
    let mut opened = Vec::new();
    let mut failed = Vec::new();
    for (rank, (addr, r)) in addrs.into_iter().zip(results).enumerate() {
        match r {
            Ok((ns, id)) => {
                let refid = reference.get_or_insert_with(|| id.clone());
                match refid.differs(&id) {
                    None => opened.push((rank, ns, id)),
                    Some(why) => {
                        ns.controller().disconnect().await;
                        failed.push((rank, addr, why));
                    }
                }
            }
            Err(e) => failed.push((rank, addr, cause_text(&e))),
        }
    }
    let (Some(reference), Some((_, first, _))) = (reference, opened.first()) else {
        let what = match nsid {
            Some(n) => format!("namespace {n} of {}", params.subnqn),
            None => params.subnqn.clone(),
        };
        return Err(HostError::NoPathConnects {
            what,
            causes: failed
                .into_iter()
                .map(|(_, a, why)| (a.to_string(), why))
                .collect(),
        });
    };
    if !reference.has_ids() {
        tracing::warn!(
            subnqn = %params.subnqn,
            nsid = reference.nsid,
            "the namespace reports no NGUID, EUI-64 or UUID: a returning path is only checked by NSID and size"
        );
    }
    let described = describe(first);
    let name = multipath_name(&params.subnqn, reference.nsid);
    let shared = Shared::new(name, reference, params);
    for (rank, ns, id) in opened {
        Shared::insert_verified(&shared, ns, rank, &id);
    }
    for (rank, addr, why) in failed {
        tracing::warn!(path = %addr, "path to {} not connected, retrying in the background: {why}", shared.name);
        Shared::rejoin(&shared, rank, addr, why);
    }
    Ok((shared, described))
}

/// The rejoin task of the path at `rank`: waits, connects, checks the namespace, and
/// either adds the path or waits longer. Ends when the path is in or the namespace is
/// gone (the namespace also aborts it when dropped).
pub(crate) async fn rejoin_task<N: PathNs>(shared: Weak<Shared<N>>, rank: usize, addr: PathAddr) {
    let (params, nsid) = match shared.upgrade() {
        Some(s) => (s.join.clone(), s.reference.nsid),
        None => return,
    };
    let first_ms = params.opts.reconnect_delay_ms.max(1);
    let max_ms = params.opts.reconnect_delay_max_ms.max(first_ms);
    let mut delay = Duration::from_millis(first_ms);
    loop {
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(max_ms));
        let outcome = match connect_path::<N>(&addr, Some(nsid), &params).await {
            Ok((ns, id)) => {
                let Some(s) = shared.upgrade() else {
                    ns.controller().disconnect().await;
                    return;
                };
                match s.reference.differs(&id) {
                    None => {
                        match Shared::rejoined(&s, rank, ns, &id) {
                            None => {
                                tracing::info!(path = %addr, "path to {} connected", s.name)
                            }
                            Some(removed) => {
                                drop(s);
                                removed.controller().disconnect().await;
                            }
                        }
                        return;
                    }
                    Some(why) => {
                        drop(s);
                        ns.controller().disconnect().await;
                        why
                    }
                }
            }
            Err(e) => cause_text(&e),
        };
        let Some(s) = shared.upgrade() else {
            return;
        };
        s.attempt_failed(rank, &addr, outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_addresses_print_and_match_as_written() {
        let v4 = PathAddr::from("127.0.0.1:4420".parse::<SocketAddr>().expect("v4"));
        assert_eq!(v4.to_string(), "127.0.0.1:4420");
        assert!(v4.is("127.0.0.1:4420".parse().expect("v4")));
        assert!(!v4.is("127.0.0.1:4421".parse().expect("v4")));
        let v6 = PathAddr::from("[::1]:4420".parse::<SocketAddr>().expect("v6"));
        assert_eq!(v6.to_string(), "[::1]:4420");
        let name = PathAddr {
            host: "storage-1".into(),
            port: 4420,
        };
        assert!(!name.is("127.0.0.1:4420".parse().expect("v4")));
    }
}
