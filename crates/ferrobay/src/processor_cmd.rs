//! `ferrobay processor run`: a processor node (control::processor) until Ctrl-C / SIGTERM.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use control::api::{ApiConfig, ApiServer};
use control::processor::{Processor, ProcessorConfig};

use crate::cluster;

#[derive(Args, Debug)]
pub struct ProcessorArgs {
    #[command(subcommand)]
    pub command: ProcessorCommand,
}

#[derive(Subcommand, Debug)]
pub enum ProcessorCommand {
    /// Run a processor node: own volumes by lease, export them over NVMe/TCP with ANA,
    /// take volumes over when their owner dies, until Ctrl-C / SIGTERM (then hand them over
    /// to another live processor node, or stop them clean).
    Run(RunArgs),
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Processor node name (unique in the cluster; fixes its controller ID range).
    #[arg(long)]
    pub name: String,
    /// NVMe/TCP listen address for hosts (repeatable); port 0 picks a free port.
    #[arg(long, required = true)]
    pub listen: Vec<SocketAddr>,
    /// NVMe/TCP listen address that requires TLS 1.3 with a PSK (repeatable), beside the
    /// plain ones: hosts given a TLS PSK for a volume (`ferrobay volume auth set ...
    /// --tls-psk FILE`) connect here; port 0 picks a free port.
    #[arg(long, value_name = "ADDR")]
    pub tls_listen: Vec<SocketAddr>,
    /// Metadata store: etcd://HOST:PORT[,HOST:PORT] or embedded:DIR.
    #[arg(long)]
    pub meta: String,
    /// HTTP API (volumes, nodes, /metrics); port 0 picks a free port. Default: none.
    #[arg(long)]
    pub api_listen: Option<SocketAddr>,
    /// Lease TTL of the node's registration and its volume ownerships: a dead processor
    /// node's volumes are taken over after about this long.
    #[arg(long, default_value_t = 4000)]
    pub lease_ttl_ms: u64,
    /// Keep Alive period of the heartbeat a standby keeps with each owner node of the
    /// volumes it stands by for (one NVMe/TCP connection to the owner's listener).
    #[arg(long, default_value_t = 100)]
    pub heartbeat_interval_ms: u64,
    /// Unanswered Keep Alives in a row before an owner is declared dead and its volumes
    /// are seized without waiting for its lease (a closed or refused connection declares
    /// it dead at once); the members' reservations fence it. 0: failover by lease only.
    #[arg(long, default_value_t = 3)]
    pub heartbeat_misses: u32,
    #[command(flatten)]
    pub busy_poll: crate::cli::BusyPollArg,
    /// File with the bearer token the HTTP API requires (made 0600 with a new token if
    /// missing). Default: $FERROBAY_API_TOKEN, else the cluster's token in the store.
    #[arg(long)]
    pub api_token_file: Option<PathBuf>,
    /// Write `{"name", "nvme": [ADDR:PORT..], "nvme_tls": [..] (with --tls-listen), "api":
    /// ADDR:PORT}` here once serving.
    #[arg(long)]
    pub endpoints_file: Option<PathBuf>,
    /// DH-HMAC-CHAP towards the members: FILE holding this node's host secret
    /// (`DHHC-1:..`, `ferrobay gen-dhchap-key > FILE`), answered when a storage node
    /// requires its host NQN (nqn.2026-01.io.ferrobay:processor:NAME) to authenticate
    /// (`ferrobay node host allow NQN HOSTNQN --dhchap-secret`). Read once, never logged.
    #[arg(long, value_name = "FILE")]
    pub dhchap_secret: Option<PathBuf>,
    /// FILE with the members' controller secret: the node then authenticates the
    /// storage nodes too (bidirectional), refusing one that cannot answer.
    #[arg(long, value_name = "FILE", requires = "dhchap_secret")]
    pub dhchap_ctrl_secret: Option<PathBuf>,
    /// TLS towards the members: FILE holding this node's configured PSK
    /// (`NVMeTLSkey-1:..`, `ferrobay gen-tls-key > FILE`), the one a storage node
    /// requires of its host NQN (`ferrobay node host allow NQN HOSTNQN --tls-psk`). Members
    /// on storage nodes with TLS listeners are then connected through those, over TLS;
    /// other members in plain TCP. Read once, never logged.
    #[arg(long, value_name = "FILE")]
    pub tls_psk: Option<PathBuf>,
    /// Secure channel concatenation towards the members: authenticate with
    /// --dhchap-secret on a storage node's plain listener, then reach the member over that
    /// node's TLS listener with the PSK the authentication generated (the storage node:
    /// `node host allow NQN HOSTNQN --dhchap-secret FILE --concat` and `--tls-listen`).
    /// No configured PSK is needed.
    #[arg(long, requires = "dhchap_secret", conflicts_with = "tls_psk")]
    pub concat: bool,
    /// HTTPS for the API (and the dashboard on it).
    #[command(flatten)]
    pub tls: cluster::ServerTlsArgs,
}

/// Reads a DH-HMAC-CHAP secret file; errors name the file and the option, never the
/// secret (a `DHHC-1:..` string where a file is expected is refused: it would show in
/// the process list).
pub(crate) fn read_secret_file(
    path: &Path,
    option: &str,
) -> anyhow::Result<nvme_proto::auth::DhchapSecret> {
    if path.to_string_lossy().starts_with("DHHC-1:") {
        return Err(cluster::usage(format!(
            "{option} takes a FILE holding the secret, not the secret itself \
             (it would show in the process list)"
        )));
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{option}: reading {}", path.display()))?;
    nvme_proto::auth::DhchapSecret::parse(text.trim())
        .with_context(|| format!("{option}: {} holds no valid DHHC-1 secret", path.display()))
}

/// Reads a configured TLS PSK file (`--tls-psk`); errors name the file, never the key (a
/// `NVMeTLSkey-1:..` string where a file is expected is refused: it would show in the
/// process list).
pub(crate) fn read_tls_psk_file(path: &Path) -> anyhow::Result<nvme_proto::tls_key::ConfiguredPsk> {
    if path.to_string_lossy().starts_with("NVMeTLSkey-1:") {
        return Err(cluster::usage(
            "--tls-psk takes a FILE holding the key, not the key itself \
             (it would show in the process list)",
        ));
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--tls-psk: reading {}", path.display()))?;
    nvme_proto::tls_key::ConfiguredPsk::parse(text.trim()).with_context(|| {
        format!(
            "--tls-psk: {} holds no valid NVMeTLSkey-1 key",
            path.display()
        )
    })
}

/// The member credentials `--dhchap-secret` / `--dhchap-ctrl-secret` give, if any.
fn member_credentials(a: &RunArgs) -> anyhow::Result<Option<nvmf_host::DhchapCredentials>> {
    let Some(p) = &a.dhchap_secret else {
        return Ok(None);
    };
    Ok(Some(nvmf_host::DhchapCredentials {
        secret: read_secret_file(p, "--dhchap-secret")?,
        ctrl_secret: a
            .dhchap_ctrl_secret
            .as_deref()
            .map(|c| read_secret_file(c, "--dhchap-ctrl-secret"))
            .transpose()?,
    }))
}

/// What `--endpoints-file` holds.
#[derive(Debug, serde::Serialize)]
struct Endpoints {
    name: String,
    nvme: Vec<String>,
    /// The `--tls-listen` listeners.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    nvme_tls: Vec<String>,
    api: Option<String>,
}

/// The address clients use: `https://ADDR` over TLS, else `ADDR` as before.
fn api_url(https: bool, addr: SocketAddr) -> String {
    if https {
        format!("https://{addr}")
    } else {
        addr.to_string()
    }
}

async fn run_processor(a: RunArgs) -> anyhow::Result<ExitCode> {
    crate::reexec::daemon_started();
    serve_processor(a).await.map_err(crate::reexec::fall_back)
}

async fn serve_processor(a: RunArgs) -> anyhow::Result<ExitCode> {
    if a.lease_ttl_ms < 1000 {
        return Err(cluster::usage(format!(
            "--lease-ttl-ms {}: at least 1000",
            a.lease_ttl_ms
        )));
    }
    if !(10..=60_000).contains(&a.heartbeat_interval_ms) {
        return Err(cluster::usage(format!(
            "--heartbeat-interval-ms {}: between 10 and 60000",
            a.heartbeat_interval_ms
        )));
    }
    meta::schema::validate_name(&a.name).map_err(|e| cluster::usage(format!("--name: {e}")))?;
    let stop = cluster::stop_signal();
    let store = cluster::open_store(&a.meta).await?;
    let mut cfg = ProcessorConfig::new(a.name.clone());
    cfg.listen = a.listen.clone();
    cfg.tls_listen = a.tls_listen.clone();
    cfg.api_listen = a.api_listen;
    cfg.api_token = cluster::daemon_token(a.api_token_file.as_deref())?;
    let api_tls = a.tls.load()?;
    cfg.api_tls = api_tls.clone();
    cfg.lease_ttl_ms = a.lease_ttl_ms;
    cfg.heartbeat_interval_ms = a.heartbeat_interval_ms;
    cfg.heartbeat_misses = a.heartbeat_misses;
    cfg.busy_poll_us = a.busy_poll.us;
    cfg.member_connect.dhchap = member_credentials(&a)?;
    if cfg.member_connect.dhchap.is_some() {
        tracing::info!(
            host = %control::records::processor_hostnqn(&a.name),
            bidirectional = a.dhchap_ctrl_secret.is_some(),
            "DH-HMAC-CHAP secret loaded for members that require this host to authenticate"
        );
    }
    cfg.member_concat = a.concat;
    if a.concat {
        tracing::info!(
            host = %control::records::processor_hostnqn(&a.name),
            "secure channel concatenation towards members on storage nodes with TLS listeners"
        );
    }
    if let Some(p) = &a.tls_psk {
        cfg.member_connect.tls = Some(nvmf_host::TlsCredentials::new(read_tls_psk_file(p)?));
        tracing::info!(
            host = %control::records::processor_hostnqn(&a.name),
            "TLS PSK loaded: members on storage nodes with TLS listeners are connected over TLS"
        );
    }
    let processor = Processor::start(store.clone(), cfg)
        .await
        .with_context(|| format!("start processor node {}", a.name))?;
    // The HTTP API, unless the processor node serves it itself.
    let mut api = None;
    if let (Some(addr), None) = (a.api_listen, processor.api_addr()) {
        match start_api(
            store,
            &a.name,
            addr,
            cluster::daemon_token(a.api_token_file.as_deref())?,
            processor.upgrade_signal().clone(),
            api_tls,
        )
        .await
        {
            Ok(s) => api = Some(s),
            Err(e) => {
                let _ = processor.shutdown().await;
                return Err(e);
            }
        }
    }
    let api_addr = processor
        .api_addr()
        .or_else(|| api.as_ref().map(ApiServer::local_addr));
    let endpoints = Endpoints {
        name: a.name.clone(),
        nvme: processor
            .nvme_addrs()
            .iter()
            .map(ToString::to_string)
            .collect(),
        nvme_tls: processor
            .tls_addrs()
            .iter()
            .map(ToString::to_string)
            .collect(),
        api: api_addr.map(|addr| api_url(a.tls.tls_cert.is_some(), addr)),
    };
    if let Some(path) = &a.endpoints_file
        && let Err(e) = cluster::write_json_file(path, &endpoints)
    {
        if let Some(s) = api {
            s.stop().await;
        }
        let _ = processor.shutdown().await;
        return Err(e);
    }
    tracing::info!(nvme_tcp = ?endpoints.nvme, nvme_tls = ?endpoints.nvme_tls, api = ?endpoints.api, "processor node {} ready", a.name);
    crate::reexec::mark_ready();

    let ended = crate::reexec::wait(stop, processor.upgrade_signal()).await;
    tracing::info!("stopping processor node {}", a.name);
    if let Some(path) = &a.endpoints_file {
        let _ = std::fs::remove_file(path);
    }
    if let Some(s) = api {
        s.stop().await;
    }
    processor
        .shutdown()
        .await
        .with_context(|| format!("stop processor node {}", a.name))?;
    tracing::info!("processor node {} stopped", a.name);
    match ended {
        crate::reexec::Ended::Stopped => Ok(ExitCode::SUCCESS),
        // Only returns if the new binary could not be executed at all.
        crate::reexec::Ended::Upgrade(req) => Err(crate::reexec::exec(&req.binary)),
    }
}

async fn start_api(
    store: std::sync::Arc<dyn meta::MetaStore>,
    name: &str,
    addr: SocketAddr,
    token: Option<httpapi::auth::Token>,
    upgrade: release::UpgradeSignal,
    tls: Option<httpapi::tls::ServerTls>,
) -> anyhow::Result<ApiServer> {
    let host = nvmf_host::HostIdentity::from_hostnqn(&control::records::processor_hostnqn(name))?;
    let token = match token {
        Some(t) => t,
        None => control::auth::cluster_token(store.as_ref()).await?,
    };
    let cfg = ApiConfig {
        store,
        host,
        token,
        node_name: name.to_string(),
        metrics: None,
        health: None,
        upgrade: Some(upgrade),
    };
    ApiServer::start_tls(addr, cfg, tls)
        .await
        .with_context(|| format!("HTTP API on {addr}"))
}

pub async fn run(a: ProcessorArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        ProcessorCommand::Run(r) => run_processor(r).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_come_from_files_and_errors_never_show_them() {
        let dir = tempfile::tempdir().unwrap();
        let key = nvme_proto::auth::DhchapSecret::new(1, &[7; 32])
            .unwrap()
            .to_dhhc1()
            .to_string();
        let good = dir.path().join("p1.key");
        std::fs::write(&good, format!("{key}\n")).unwrap();
        let s = read_secret_file(&good, "--dhchap-secret").unwrap();
        assert_eq!(*s.to_dhhc1(), key);
        // The secret itself where a file is expected: refused without echoing it.
        let e = read_secret_file(Path::new(&key), "--dhchap-secret").unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("takes a FILE") && !msg.contains(&key[10..]),
            "{msg}"
        );
        // A file holding something else: the file is named, its content is not.
        let bad = dir.path().join("bad.key");
        std::fs::write(&bad, "DHHC-1:01:c2VjcmV0LXRleHQ=:\n").unwrap();
        let msg = format!(
            "{:#}",
            read_secret_file(&bad, "--dhchap-secret").unwrap_err()
        );
        assert!(
            msg.contains("bad.key") && !msg.contains("c2VjcmV0"),
            "{msg}"
        );
        let missing = dir.path().join("none.key");
        assert!(read_secret_file(&missing, "--dhchap-ctrl-secret").is_err());
    }

    #[test]
    fn the_tls_psk_comes_from_a_file_and_errors_never_show_it() {
        let dir = tempfile::tempdir().unwrap();
        let key = nvme_proto::tls_key::ConfiguredPsk::new(1, &[9; 32])
            .unwrap()
            .to_interchange()
            .to_string();
        let good = dir.path().join("p1.psk");
        std::fs::write(&good, format!("{key}\n")).unwrap();
        let psk = read_tls_psk_file(&good).unwrap();
        assert_eq!(*psk.to_interchange(), key);
        let msg = format!("{:#}", read_tls_psk_file(Path::new(&key)).unwrap_err());
        assert!(
            msg.contains("takes a FILE") && !msg.contains(&key[16..]),
            "{msg}"
        );
        // A wrong CRC: the file is named, its content is not.
        let bad = dir.path().join("bad.psk");
        let mut broken = key.clone();
        broken.replace_range(20..22, if &key[20..22] == "AA" { "BB" } else { "AA" });
        std::fs::write(&bad, &broken).unwrap();
        let msg = format!("{:#}", read_tls_psk_file(&bad).unwrap_err());
        assert!(
            msg.contains("bad.psk") && !msg.contains(&broken[16..]),
            "{msg}"
        );
    }
}
