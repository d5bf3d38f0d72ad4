//! `nvme+tcp://ADDR:PORT[,ADDR:PORT...]/SUBNQN[/NSID][?OPTIONS]`: how tools name a remote
//! namespace. Several addresses name the paths of one subsystem (multipath). Options,
//! `&`-separated, after nvme-cli's connect options:
//!
//! | option | meaning |
//! |---|---|
//! | `digest=hd,dd` | header and/or data digest (`none`) |
//! | `queues=N` | I/O queues (`nr-io-queues`) |
//! | `queue_size=N` | I/O queue entries (`queue-size`) |
//! | `kato=S` | keep-alive timeout in seconds, 0 off (`keep-alive-tmo`) |
//! | `reconnect_delay=S` | first reconnect delay in seconds (`reconnect-delay`) |
//! | `ctrl_loss_tmo=S` | give up reconnecting after S seconds, -1 never (`ctrl-loss-tmo`) |
//! | `sqflow=off` | connect without SQ flow control (`disable-sqflow`) |

use std::net::SocketAddr;
use std::sync::Arc;

use blockdev::BlockDevice;
use nvme_proto::fabrics::validate_nqn;
use nvme_proto::tcp::Digests;

use crate::controller::{ConnectOptions, Controller};
use crate::error::{HostError, Result};
use crate::host_identity::HostIdentity;
use crate::kv::{AnyKvNamespace, KvNamespace};
use crate::multipath::{
    MultipathKvNamespace, MultipathNamespace, MultipathOptions, PathAddr, PathNs,
};
use crate::namespace::RemoteNamespace;

/// The IANA port of NVMe/TCP I/O controllers, used when the URL names none.
pub const DEFAULT_PORT: u16 = 4420;
pub const SCHEME: &str = "nvme+tcp://";

/// Connection settings a URL may carry; each overrides the caller's `ConnectOptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UrlOptions {
    pub queues: Option<u16>,
    pub queue_size: Option<u16>,
    pub kato_ms: Option<u32>,
    pub reconnect_delay_ms: Option<u64>,
    /// Some(None): never give up.
    pub ctrl_loss_tmo_ms: Option<Option<u64>>,
    /// `sqflow=off`: connect with SQ flow control disabled.
    pub disable_sqflow: Option<bool>,
}

/// A parsed `nvme+tcp://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmeTcpUrl {
    /// Host name or IP address as written (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// Further paths to the same subsystem (`ADDR:PORT,ADDR:PORT`).
    pub more_paths: Vec<(String, u16)>,
    pub subnqn: String,
    pub nsid: Option<u32>,
    pub digests: Digests,
    pub options: UrlOptions,
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
        let mut paths = Vec::new();
        for a in authority.split(',') {
            let (host, port) = split_host_port(a).ok_or_else(|| bad("bad ADDR:PORT"))?;
            if host.is_empty() {
                return Err(bad("the address is empty"));
            }
            paths.push((host.to_string(), port));
        }
        let (host, port) = paths.remove(0);
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
        let mut options = UrlOptions::default();
        for kv in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let num = |what: &str| -> Result<i64> {
                v.parse::<i64>()
                    .map_err(|_| bad(&format!("{what} {v:?} is not a number")))
            };
            let secs_ms = |what: &str| -> Result<u64> {
                let n = num(what)?;
                u64::try_from(n)
                    .ok()
                    .and_then(|n| n.checked_mul(1000))
                    .ok_or_else(|| bad(&format!("{what} {v:?} is out of range")))
            };
            match k {
                "digest" => {
                    for d in v.split(',').filter(|d| !d.is_empty()) {
                        match d {
                            "hd" => digests.header = true,
                            "dd" => digests.data = true,
                            "none" => {}
                            _ => return Err(bad(&format!("unknown digest {d:?} (hd, dd)"))),
                        }
                    }
                }
                "queues" | "queue_size" => {
                    let n = num(k)?;
                    let n = u16::try_from(n)
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| bad(&format!("{k} {v:?} is out of range")))?;
                    if k == "queues" {
                        options.queues = Some(n);
                    } else {
                        options.queue_size = Some(n);
                    }
                }
                "kato" => {
                    let ms = secs_ms(k)?;
                    options.kato_ms = Some(
                        u32::try_from(ms).map_err(|_| bad(&format!("kato {v:?} is too large")))?,
                    );
                }
                "reconnect_delay" => options.reconnect_delay_ms = Some(secs_ms(k)?),
                "ctrl_loss_tmo" => {
                    options.ctrl_loss_tmo_ms =
                        Some(if num(k)? < 0 { None } else { Some(secs_ms(k)?) });
                }
                "sqflow" => {
                    options.disable_sqflow = Some(match v {
                        "off" => true,
                        "on" => false,
                        _ => return Err(bad(&format!("sqflow {v:?} (expected on or off)"))),
                    });
                }
                _ => return Err(bad(&format!("unknown option {k:?}"))),
            }
        }
        Ok(NvmeTcpUrl {
            host,
            port,
            more_paths: paths,
            subnqn,
            nsid,
            digests,
            options,
        })
    }

    /// Resolves the first address (the first result of a DNS lookup for names).
    pub async fn socket_addr(&self) -> Result<SocketAddr> {
        resolve(&self.host, self.port).await
    }

    /// Resolves every path's address, the first one first.
    pub async fn socket_addrs(&self) -> Result<Vec<SocketAddr>> {
        let mut out = vec![self.socket_addr().await?];
        for (h, p) in &self.more_paths {
            out.push(resolve(h, *p).await?);
        }
        Ok(out)
    }

    /// `opts` with what the URL says (digests, queues, timeouts) on top.
    pub fn apply(&self, opts: &ConnectOptions) -> ConnectOptions {
        let o = &self.options;
        ConnectOptions {
            digests: self.digests,
            io_queues: o.queues.unwrap_or(opts.io_queues),
            queue_size: o.queue_size.unwrap_or(opts.queue_size),
            kato_ms: o.kato_ms.unwrap_or(opts.kato_ms),
            reconnect_delay_ms: o.reconnect_delay_ms.unwrap_or(opts.reconnect_delay_ms),
            ctrl_loss_tmo_ms: o.ctrl_loss_tmo_ms.unwrap_or(opts.ctrl_loss_tmo_ms),
            disable_sqflow: o.disable_sqflow.unwrap_or(opts.disable_sqflow),
            ..opts.clone()
        }
    }

    /// Connects a controller to the first address, the URL's settings overriding `opts`.
    pub async fn connect(&self, host: &HostIdentity, opts: &ConnectOptions) -> Result<Controller> {
        let addr = self.socket_addr().await?;
        Controller::connect(addr, &self.subnqn, host, &self.apply(opts)).await
    }

    /// Connects and opens the URL's namespace (or the first active one when it names none)
    /// through the first address.
    pub async fn open(
        &self,
        host: &HostIdentity,
        opts: &ConnectOptions,
    ) -> Result<RemoteNamespace> {
        let ctrl = self.connect(host, opts).await?;
        <RemoteNamespace as PathNs>::open(&ctrl, self.nsid).await
    }

    /// Opens the namespace as a block device: through one controller for one address, as
    /// a [`MultipathNamespace`] over all of them for several.
    pub async fn open_device(
        &self,
        host: &HostIdentity,
        opts: &ConnectOptions,
    ) -> Result<Arc<dyn BlockDevice>> {
        if self.more_paths.is_empty() {
            return Ok(Arc::new(self.open(host, opts).await?));
        }
        Ok(Arc::new(
            self.open_multipath(host, opts, MultipathOptions::default())
                .await?,
        ))
    }

    /// Opens the URL's Key Value namespace (or the first active one when it names none):
    /// through one controller for one address, as a [`MultipathKvNamespace`] over all of
    /// them for several. A namespace of another command set is refused, naming it.
    pub async fn open_kv(
        &self,
        host: &HostIdentity,
        opts: &ConnectOptions,
        mp: MultipathOptions,
    ) -> Result<AnyKvNamespace> {
        if self.more_paths.is_empty() {
            let ctrl = self.connect(host, opts).await?;
            return match <KvNamespace as PathNs>::open(&ctrl, self.nsid).await {
                Ok(ns) => Ok(AnyKvNamespace::Single(ns)),
                Err(e) => {
                    ctrl.disconnect().await;
                    Err(e)
                }
            };
        }
        Ok(AnyKvNamespace::Multipath(
            self.open_kv_multipath(host, opts, mp).await?,
        ))
    }

    /// Opens the URL's Key Value namespace through every address as a
    /// [`MultipathKvNamespace`] (also for one address: a path that gives up reconnecting
    /// is then connected again from scratch in the background).
    pub async fn open_kv_multipath(
        &self,
        host: &HostIdentity,
        opts: &ConnectOptions,
        mp: MultipathOptions,
    ) -> Result<MultipathKvNamespace> {
        MultipathKvNamespace::connect(
            self.path_addrs(),
            &self.subnqn,
            self.nsid,
            host,
            &self.apply(opts),
            mp,
        )
        .await
    }

    /// Every address of the URL, the first one first.
    pub fn path_addrs(&self) -> Vec<PathAddr> {
        std::iter::once((&self.host, self.port))
            .chain(self.more_paths.iter().map(|(h, p)| (h, *p)))
            .map(|(h, p)| PathAddr {
                host: h.clone(),
                port: p,
            })
            .collect()
    }

    /// Opens the namespace through every address of the URL: it opens when any path
    /// connects, and the others join in the background (see [`MultipathNamespace`]).
    pub async fn open_multipath(
        &self,
        host: &HostIdentity,
        opts: &ConnectOptions,
        mp: MultipathOptions,
    ) -> Result<MultipathNamespace> {
        let addrs = self.path_addrs();
        MultipathNamespace::connect_to(addrs, &self.subnqn, self.nsid, host, &self.apply(opts), mp)
            .await
    }
}

async fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    let fail = |why: String| HostError::Usage(format!("resolving {host}: {why}"));
    let mut it = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| fail(e.to_string()))?;
    it.next().ok_or_else(|| fail("no address".into()))
}

fn fmt_authority(f: &mut std::fmt::Formatter<'_>, host: &str, port: u16) -> std::fmt::Result {
    if host.contains(':') {
        write!(f, "[{host}]:{port}")
    } else {
        write!(f, "{host}:{port}")
    }
}

impl std::fmt::Display for NvmeTcpUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(SCHEME)?;
        fmt_authority(f, &self.host, self.port)?;
        for (h, p) in &self.more_paths {
            f.write_str(",")?;
            fmt_authority(f, h, *p)?;
        }
        write!(f, "/{}", self.subnqn)?;
        if let Some(n) = self.nsid {
            write!(f, "/{n}")?;
        }
        let mut q = Vec::new();
        match (self.digests.header, self.digests.data) {
            (true, true) => q.push("digest=hd,dd".to_string()),
            (true, false) => q.push("digest=hd".to_string()),
            (false, true) => q.push("digest=dd".to_string()),
            (false, false) => {}
        }
        let o = &self.options;
        if let Some(n) = o.queues {
            q.push(format!("queues={n}"));
        }
        if let Some(n) = o.queue_size {
            q.push(format!("queue_size={n}"));
        }
        if let Some(ms) = o.kato_ms {
            q.push(format!("kato={}", ms / 1000));
        }
        if let Some(ms) = o.reconnect_delay_ms {
            q.push(format!("reconnect_delay={}", ms / 1000));
        }
        match o.ctrl_loss_tmo_ms {
            Some(Some(ms)) => q.push(format!("ctrl_loss_tmo={}", ms / 1000)),
            Some(None) => q.push("ctrl_loss_tmo=-1".to_string()),
            None => {}
        }
        if let Some(off) = o.disable_sqflow {
            q.push(format!("sqflow={}", if off { "off" } else { "on" }));
        }
        if !q.is_empty() {
            write!(f, "?{}", q.join("&"))?;
        }
        Ok(())
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
    fn sqflow_option() {
        let u = NvmeTcpUrl::parse("nvme+tcp://127.0.0.1:4420/nqn.2026-01.io.x?sqflow=off")
            .expect("valid");
        assert!(u.apply(&ConnectOptions::default()).disable_sqflow);
        let u = NvmeTcpUrl::parse("nvme+tcp://127.0.0.1:4420/nqn.2026-01.io.x?sqflow=on")
            .expect("valid");
        assert!(!u.apply(&ConnectOptions::default()).disable_sqflow);
        assert!(
            NvmeTcpUrl::parse("nvme+tcp://127.0.0.1:4420/nqn.2026-01.io.x?sqflow=maybe").is_err()
        );
    }

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
        let mp = NvmeTcpUrl::parse(
            "nvme+tcp://10.0.0.1:4420,[::1]:4421/nqn.2026-01.io.ferrobay:n1/1?queues=4&queue_size=64&kato=10&reconnect_delay=2&ctrl_loss_tmo=-1",
        )
        .expect("multipath URL");
        assert_eq!(mp.more_paths, vec![("::1".to_string(), 4421)]);
        assert_eq!(
            mp.options,
            UrlOptions {
                queues: Some(4),
                queue_size: Some(64),
                kato_ms: Some(10_000),
                reconnect_delay_ms: Some(2_000),
                ctrl_loss_tmo_ms: Some(None),
                disable_sqflow: None,
            }
        );
        assert_eq!(NvmeTcpUrl::parse(&mp.to_string()).expect("round trip"), mp);
        let o = mp.apply(&ConnectOptions::default());
        assert_eq!((o.io_queues, o.queue_size, o.kato_ms), (4, 64, 10_000));
        assert_eq!((o.reconnect_delay_ms, o.ctrl_loss_tmo_ms), (2_000, None));
        let tmo = NvmeTcpUrl::parse("nvme+tcp://h/nqn.2026-01.io.x?ctrl_loss_tmo=30").expect("tmo");
        assert_eq!(tmo.options.ctrl_loss_tmo_ms, Some(Some(30_000)));
        for bad in [
            "nvme+tcp://1.2.3.4:4420,/nqn.2026-01.io.x",
            "nvme+tcp://1.2.3.4:4420/nqn.2026-01.io.x?queues=0",
            "nvme+tcp://1.2.3.4:4420/nqn.2026-01.io.x?queues=70000",
            "nvme+tcp://1.2.3.4:4420/nqn.2026-01.io.x?kato=x",
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
