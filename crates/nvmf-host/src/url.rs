//! `nvme+tcp://ADDR:PORT/SUBNQN[/NSID][?digest=hd,dd]`: how tools name a remote namespace.

use std::net::SocketAddr;

use nvme_proto::fabrics::validate_nqn;
use nvme_proto::tcp::Digests;

use crate::controller::{ConnectOptions, Controller};
use crate::error::{HostError, Result};
use crate::host_identity::HostIdentity;
use crate::namespace::RemoteNamespace;

/// The IANA port of NVMe/TCP I/O controllers, used when the URL names none.
pub const DEFAULT_PORT: u16 = 4420;
pub const SCHEME: &str = "nvme+tcp://";

/// A parsed `nvme+tcp://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmeTcpUrl {
    /// Host name or IP address as written (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    pub subnqn: String,
    pub nsid: Option<u32>,
    pub digests: Digests,
}

impl NvmeTcpUrl {
    pub fn parse(s: &str) -> Result<NvmeTcpUrl> {
        let bad = |why: &str| HostError::Usage(format!("{s:?} is not an nvme+tcp URL: {why}"));
        let rest = s
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("it must start with nvme+tcp://"))?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("the subsystem NQN is missing (nvme+tcp://ADDR:PORT/SUBNQN)"))?;
        let (host, port) = split_host_port(authority).ok_or_else(|| bad("bad ADDR:PORT"))?;
        if host.is_empty() {
            return Err(bad("the address is empty"));
        }
        let mut parts = path.trim_end_matches('/').split('/');
        let subnqn = parts.next().unwrap_or("").to_string();
        validate_nqn(&subnqn).map_err(|e| bad(&format!("subsystem NQN {subnqn:?}: {e}")))?;
        let nsid = match parts.next() {
            None => None,
            Some(n) => Some(
                n.parse::<u32>()
                    .ok()
                    .filter(|&v| v != 0 && v != u32::MAX)
                    .ok_or_else(|| bad(&format!("NSID {n:?} is not a namespace ID")))?,
            ),
        };
        if parts.next().is_some() {
            return Err(bad("too many path segments"));
        }
        let mut digests = Digests::default();
        for kv in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            if k != "digest" {
                return Err(bad(&format!("unknown option {k:?}")));
            }
            for d in v.split(',').filter(|d| !d.is_empty()) {
                match d {
                    "hd" => digests.header = true,
                    "dd" => digests.data = true,
                    "none" => {}
                    _ => return Err(bad(&format!("unknown digest {d:?} (hd, dd)"))),
                }
            }
        }
        Ok(NvmeTcpUrl {
            host: host.to_string(),
            port,
            subnqn,
            nsid,
            digests,
        })
    }

    /// Resolves the address (the first result of a DNS lookup for names).
    pub async fn socket_addr(&self) -> Result<SocketAddr> {
        let fail = |why: String| HostError::Usage(format!("resolving {}: {why}", self.host));
        let mut it = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| fail(e.to_string()))?;
        it.next().ok_or_else(|| fail("no address".into()))
    }

    /// Connects a controller with `opts`, the URL's digests overriding theirs.
    pub async fn connect(&self, host: &HostIdentity, opts: &ConnectOptions) -> Result<Controller> {
        let addr = self.socket_addr().await?;
        let opts = ConnectOptions {
            digests: self.digests,
            ..opts.clone()
        };
        Controller::connect(addr, &self.subnqn, host, &opts).await
    }

    /// Connects and opens the URL's namespace (or the first active one when it names none).
    pub async fn open(
        &self,
        host: &HostIdentity,
        opts: &ConnectOptions,
    ) -> Result<RemoteNamespace> {
        let ctrl = self.connect(host, opts).await?;
        let nsid = match self.nsid {
            Some(n) => n,
            None => *ctrl.active_namespaces().await?.first().ok_or_else(|| {
                HostError::invalid(self.to_string(), "the subsystem has no active namespace")
            })?,
        };
        RemoteNamespace::open(&ctrl, nsid).await
    }
}

impl std::fmt::Display for NvmeTcpUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "{SCHEME}[{}]:{}/{}", self.host, self.port, self.subnqn)?;
        } else {
            write!(f, "{SCHEME}{}:{}/{}", self.host, self.port, self.subnqn)?;
        }
        if let Some(n) = self.nsid {
            write!(f, "/{n}")?;
        }
        match (self.digests.header, self.digests.data) {
            (true, true) => write!(f, "?digest=hd,dd"),
            (true, false) => write!(f, "?digest=hd"),
            (false, true) => write!(f, "?digest=dd"),
            (false, false) => Ok(()),
        }
    }
}

/// "host:port", "[v6]:port", "host" or "[v6]".
fn split_host_port(a: &str) -> Option<(&str, u16)> {
    if let Some(rest) = a.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(p) => Some((h, p.parse().ok()?)),
            None if after.is_empty() => Some((h, DEFAULT_PORT)),
            None => None,
        };
    }
    match a.rsplit_once(':') {
        // A bare IPv6 address needs brackets.
        Some((h, _)) if h.contains(':') => None,
        Some((h, p)) => Some((h, p.parse().ok()?)),
        None => Some((a, DEFAULT_PORT)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let u = NvmeTcpUrl::parse(
            "nvme+tcp://127.0.0.1:4421/nqn.2026-01.io.ferrobay:n1/3?digest=hd,dd",
        )
        .expect("valid");
        assert_eq!(u.host, "127.0.0.1");
        assert_eq!(u.port, 4421);
        assert_eq!(u.subnqn, "nqn.2026-01.io.ferrobay:n1");
        assert_eq!(u.nsid, Some(3));
        assert_eq!(u.digests.bits(), 3);
        assert_eq!(
            u.to_string(),
            "nvme+tcp://127.0.0.1:4421/nqn.2026-01.io.ferrobay:n1/3?digest=hd,dd"
        );
        let v6 = NvmeTcpUrl::parse("nvme+tcp://[::1]/nqn.2026-01.io.ferrobay:n1").expect("v6");
        assert_eq!((v6.host.as_str(), v6.port, v6.nsid), ("::1", 4420, None));
        assert_eq!(
            v6.to_string(),
            "nvme+tcp://[::1]:4420/nqn.2026-01.io.ferrobay:n1"
        );
        let dd = NvmeTcpUrl::parse("nvme+tcp://h:1/nqn.2026-01.io.x/?digest=dd").expect("dd");
        assert_eq!((dd.digests.header, dd.digests.data), (false, true));
        for bad in [
            "tcp://1.2.3.4:4420/nqn.2026-01.io.x",
            "nvme+tcp://1.2.3.4:4420",
            "nvme+tcp://1.2.3.4:99999/nqn.2026-01.io.x",
            "nvme+tcp://1.2.3.4:4420/not-an-nqn",
            "nvme+tcp://1.2.3.4:4420/nqn.2026-01.io.x/0",
            "nvme+tcp://1.2.3.4:4420/nqn.2026-01.io.x/1/2",
            "nvme+tcp://1.2.3.4:4420/nqn.2026-01.io.x?digest=xx",
            "nvme+tcp://1.2.3.4:4420/nqn.2026-01.io.x?foo=1",
            "nvme+tcp://::1:4420/nqn.2026-01.io.x",
            "nvme+tcp://:4420/nqn.2026-01.io.x",
        ] {
            assert!(NvmeTcpUrl::parse(bad).is_err(), "{bad} parsed");
        }
    }
}
