//! `ferrobay up`: a whole cluster on this machine (control::devcluster), until Ctrl-C.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use control::devcluster::{self, DevCluster, DevClusterConfig};

use crate::cluster;

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Where the cluster keeps everything (metadata, storage node state, drive files).
    /// Run again with the same dir to get the same cluster and data back.
    #[arg(long, default_value = "./ferrobay-data")]
    pub data_dir: PathBuf,
    /// Address hosts connect to (the processor node's NVMe/TCP port and HTTP API); the
    /// storage nodes listen on loopback only.
    #[arg(long, default_value = "127.0.0.1")]
    pub addr: IpAddr,
    /// NVMe/TCP port hosts connect to.
    #[arg(long, default_value_t = 4420)]
    pub port: u16,
    /// Size of the sample volume vol0 when it is created.
    #[arg(long, default_value = "1G")]
    pub volume_size: String,
    /// Port of the central discovery controller on --addr (`nvme discover`,
    /// `nvme connect-all`). Default: 8009, or any free port when 8009 is taken; 0: any
    /// free port.
    #[arg(long)]
    pub cdc_port: Option<u16>,
    /// S3 port (on --addr) of the gateway on the storage nodes' KV namespaces.
    #[arg(long, default_value_t = 9000)]
    pub s3_port: u16,
    /// Size of each storage node's KV namespace for objects, when it is created.
    #[arg(long, default_value = "1G")]
    pub s3_size: String,
    /// Secure end to end: NVMe/TCP TLS 1.3 with PSKs (storage nodes towards the processor
    /// node, the processor node's --tls-port towards the host), HTTPS with the cluster's
    /// own CA on the API, dashboard and S3. Keys and certificates go to DATA_DIR/tls
    /// (0600); a data dir started with --tls keeps needing it.
    #[arg(long)]
    pub tls: bool,
    /// NVMe/TCP TLS port on --addr (with --tls).
    #[arg(long, default_value_t = devcluster::DEFAULT_TLS_PORT, requires = "tls")]
    pub tls_port: u16,
    /// The host NQN that must connect to the volume over TLS (with --tls). Default: the
    /// one of an earlier `up --tls` on this data dir, else /etc/nvme/hostnqn, else a new
    /// one.
    #[arg(long, requires = "tls")]
    pub host_nqn: Option<String>,
}

fn progress(line: &str) {
    eprintln!("ferrobay up: {line}");
}

/// The loopback address of `a`'s family.
fn loopback(a: std::net::SocketAddr) -> IpAddr {
    match a {
        std::net::SocketAddr::V4(_) => IpAddr::from([127, 0, 0, 1]),
        std::net::SocketAddr::V6(_) => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
    }
}

fn print_ready(c: &DevCluster) {
    let scheme = if c.tls().is_some() { "https" } else { "http" };
    // Listening on every address: show the one that works from this machine.
    let api = c.api_addr().map_or_else(
        || "-".to_string(),
        |mut a| {
            if a.ip().is_unspecified() {
                a.set_ip(loopback(a));
            }
            a.to_string()
        },
    );
    let mut out = std::io::stdout().lock();
    let what = if c.created_volume() {
        "created"
    } else {
        "reused"
    };
    // stdout: what a person (or a script) needs; flushed at once so a pipe sees it now.
    let _ = writeln!(
        out,
        "Ferrobay is up: volume {} ({what}) served on {}",
        c.volume(),
        c.nvme_addr()
    );
    if let (Some((files, tls_addr)), Some((insert, connect))) = (c.tls(), c.tls_connect_commands())
    {
        let _ = writeln!(
            out,
            "TLS: {tls_addr} requires TLS of host {} (key file {}, never shown)",
            files.host_nqn,
            files.host_psk.display()
        );
        let _ = writeln!(
            out,
            "Connect from a Linux host over TLS (tlshd running, /etc/tlshd.conf: keyrings=.nvme):"
        );
        let _ = writeln!(out, "  {insert}");
        let _ = writeln!(out, "  {connect}");
        let _ = writeln!(
            out,
            "Other hosts in plain TCP (the host above is refused there):"
        );
    } else {
        let _ = writeln!(out, "Connect from a Linux host:");
    }
    let _ = writeln!(out, "  {}", c.connect_command());
    if let (Some(cdc), Some((discover, connect_all))) = (c.cdc_addr(), c.discover_commands()) {
        let _ = writeln!(
            out,
            "Or find every volume through the central discovery controller on {cdc}:"
        );
        let _ = writeln!(out, "  {discover}");
        let _ = writeln!(out, "  {connect_all}");
    }
    if let Some(note) = c.cdc_note() {
        let _ = writeln!(out, "Note: {note}");
    }
    let _ = writeln!(out, "API: {scheme}://{api}/api/v1 (docs/api.md)");
    if let Some((files, _)) = c.tls() {
        let _ = writeln!(
            out,
            "CA certificate: {} (ferrobay --ca-cert FILE or FERROBAY_CA_CERT, curl --cacert, aws --ca-bundle)",
            files.ca_cert.display()
        );
    }
    let _ = writeln!(
        out,
        "API token: {} (send it as `Authorization: Bearer <token>`)",
        c.api_token_path().display()
    );
    // The token rides in the URL's fragment, which the browser never sends: the page
    // moves it into the tab's sessionStorage and drops it from the address bar.
    let _ = writeln!(
        out,
        "Dashboard: {scheme}://{api}{}#token={}",
        control::dashboard::UI_PATH,
        c.api_token().as_str()
    );
    // Plain: the line as it always was (scripts read it).
    let status_api = match c.tls() {
        Some((f, _)) => format!("https://{api} --ca-cert {}", f.ca_cert.display()),
        None => api.clone(),
    };
    let _ = writeln!(
        out,
        "Status: ferrobay volume status {} --api {status_api}",
        c.volume()
    );
    if let Some(s3) = c.s3() {
        let mut addr = s3.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(loopback(addr));
        }
        let what = if s3.created_pool { "created" } else { "reused" };
        let _ = writeln!(
            out,
            "S3: {scheme}://{addr} (object pool {} ({what}): {} KV namespaces, EC {})",
            s3.pool, s3.namespaces, s3.geometry
        );
        let _ = writeln!(
            out,
            "Credentials (kept in {}):",
            s3.credentials_file.display()
        );
        let _ = writeln!(
            out,
            "  export AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={} AWS_DEFAULT_REGION={}",
            s3.keys.access_key, s3.keys.secret_key, s3.region
        );
        let bundle = c
            .tls()
            .map(|(f, _)| format!(" --ca-bundle {}", f.ca_cert.display()))
            .unwrap_or_default();
        let _ = writeln!(out, "Try it:");
        let _ = writeln!(
            out,
            "  aws --endpoint-url {scheme}://{addr}{bundle} s3 mb s3://bucket"
        );
        let _ = writeln!(
            out,
            "  aws --endpoint-url {scheme}://{addr}{bundle} s3 cp ./file s3://bucket/file"
        );
    }
    let _ = writeln!(out, "Press Ctrl-C to stop.");
    let _ = out.flush();
}

pub async fn run(a: UpArgs) -> anyhow::Result<ExitCode> {
    if a.port == 0 {
        return Err(cluster::usage(
            "--port 0: hosts need a known port; pick one, e.g. --port 4420",
        ));
    }
    if a.s3_port == 0 {
        return Err(cluster::usage(
            "--s3-port 0: S3 clients need a known port; pick one, e.g. --s3-port 9000",
        ));
    }
    let volume_size_bytes = cluster::parse_size_arg("--volume-size", &a.volume_size)?;
    let s3_namespace_bytes = cluster::parse_size_arg("--s3-size", &a.s3_size)?;
    let mut cfg = DevClusterConfig::new(a.data_dir);
    cfg.addr = a.addr;
    cfg.port = a.port;
    cfg.volume_size_bytes = volume_size_bytes;
    cfg.cdc_port = a.cdc_port;
    cfg.s3_port = a.s3_port;
    cfg.s3_namespace_bytes = s3_namespace_bytes;
    if a.tls {
        cfg.tls = Some(devcluster::DevTlsConfig {
            port: a.tls_port,
            host_nqn: a.host_nqn,
        });
    }
    devcluster::run(cfg, &progress, print_ready, cluster::stop_signal()).await?;
    Ok(ExitCode::SUCCESS)
}
