//! `ferrobay discover` and opening `nvme+tcp://` bench targets.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use blockdev::BlockDevice;
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl};

use crate::cli::DiscoverArgs;

use storage_node::node::DISCOVERY_PORT;

/// The host identity: `--hostnqn` if given, else /etc/nvme (as nvme-cli), else one derived
/// from this machine.
pub fn host_identity(hostnqn: Option<&str>) -> anyhow::Result<HostIdentity> {
    Ok(match hostnqn {
        Some(n) => HostIdentity::from_hostnqn(n)?,
        None => HostIdentity::system()?,
    })
}

/// Resolves `ADDR[:PORT]` (IPv6 as `[::1]:PORT`), defaulting the port.
pub async fn resolve(address: &str, default_port: u16) -> anyhow::Result<SocketAddr> {
    if let Ok(sa) = address.parse::<SocketAddr>() {
        return Ok(sa);
    }
    if let Ok(ip) = address.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, default_port));
    }
    let (host, port) = match address.rsplit_once(':') {
        Some((h, p)) => {
            let port = p
                .parse::<u16>()
                .map_err(|_| anyhow::anyhow!("invalid port {p:?} in {address:?}"))?;
            (h, port)
        }
        None => (address, default_port),
    };
    tokio::net::lookup_host((host, port))
        .await
        .with_context(|| format!("resolve {address:?}"))?
        .next()
        .with_context(|| format!("{address:?} resolves to no address"))
}

pub async fn run(a: DiscoverArgs) -> anyhow::Result<ExitCode> {
    let addr = resolve(&a.address, DISCOVERY_PORT).await?;
    let host = host_identity(a.hostnqn.as_deref())?;
    let read = nvmf_host::discovery::discover_with(
        addr,
        &host,
        &nvmf_host::discovery::discovery_options(),
    )
    .await
    .with_context(|| format!("discover {addr}"))?;
    if a.json {
        let entries: Vec<serde_json::Value> = read
            .entries
            .iter()
            .map(|e| {
                serde_json::json!({
                    "trtype": e.trtype, "adrfam": e.adrfam, "subtype": e.subtype, "treq": e.treq,
                    "portid": e.portid, "cntlid": e.cntlid, "asqsz": e.asqsz, "eflags": e.eflags,
                    "trsvcid": e.trsvcid, "subnqn": e.subnqn, "traddr": e.traddr, "sectype": e.sectype,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "genctr": read.genctr, "records": entries })
            )?
        );
    } else {
        print!(
            "{}",
            nvmf_host::format_discovery_log(read.genctr, &read.entries)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens `nvme+tcp://ADDR:PORT[,ADDR:PORT...]/SUBNQN[/NSID][?digest=hd,dd&queues=N...]` as
/// a block device: several addresses make a multipath namespace.
pub async fn open_remote(
    url: &str,
    hostnqn: Option<&str>,
    opts: &ConnectOptions,
) -> anyhow::Result<Arc<dyn BlockDevice>> {
    let u = NvmeTcpUrl::parse(url)?;
    let host = host_identity(hostnqn)?;
    u.open_device(&host, opts)
        .await
        .with_context(|| format!("open {url}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn addresses() {
        assert_eq!(
            resolve("127.0.0.1", 8009).await.unwrap().to_string(),
            "127.0.0.1:8009"
        );
        assert_eq!(
            resolve("127.0.0.1:4420", 8009).await.unwrap().to_string(),
            "127.0.0.1:4420"
        );
        assert_eq!(
            resolve("::1", 8009).await.unwrap().to_string(),
            "[::1]:8009"
        );
        assert_eq!(
            resolve("[::1]:4420", 8009).await.unwrap().to_string(),
            "[::1]:4420"
        );
        assert!(resolve("127.0.0.1:notaport", 8009).await.is_err());
    }
}
