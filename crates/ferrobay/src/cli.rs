//! Command-line grammar.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::{
    bench_cmd, cdc_cmd, cluster_cmd, discover_cmd, events_cmd, node_cmd, predictions_cmd,
    processor_cmd, s3_cmd, up_cmd, volume_cmd,
};

#[derive(Parser, Debug)]
#[command(
    name = "ferrobay",
    version,
    about = "Disaggregated flash storage over NVMe/TCP"
)]
pub struct Cli {
    /// Log as JSON lines (structured logs for daemons under a supervisor).
    #[arg(long, global = true)]
    pub log_json: bool,
    /// Trust the CA certificates in FILE (PEM) for the https:// APIs this command calls;
    /// with it, API addresses without a scheme are reached over https too. Default:
    /// $FERROBAY_CA_CERT. No other CA is trusted (clusters use their own: `gen-cert`).
    #[arg(long, global = true, value_name = "FILE")]
    pub ca_cert: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Storage node: export drives over NVMe/TCP, manage its namespaces.
    Node(node_cmd::NodeArgs),
    /// Central discovery controller: every subsystem of the cluster in one NVMe/TCP
    /// discovery log, per host.
    Cdc(cdc_cmd::CdcArgs),
    /// Processor node: own erasure-coded volumes across storage nodes, export them to
    /// hosts over NVMe/TCP with ANA, take over when another processor node dies.
    Processor(processor_cmd::ProcessorArgs),
    /// Erasure-coded volumes: local over files and block devices (like mdadm), or across
    /// storage nodes in a cluster (--meta URL or --api ADDR).
    Volume(volume_cmd::VolumeArgs),
    /// S3 gateway: objects erasure-coded over shard stores (KV namespaces), indexed in
    /// SQLite or PostgreSQL.
    S3(s3_cmd::S3Args),
    /// A whole cluster on this machine: metadata store, three storage nodes on file
    /// drives, one processor node and a sample RAID-5 volume, until Ctrl-C.
    Up(up_cmd::UpArgs),
    /// The cluster's event log (member failed, rebuild, takeover, handoff...), newest last;
    /// --follow keeps printing new ones.
    Events(events_cmd::EventsArgs),
    /// Failure-prediction grades of every drive and volume member in the cluster, worst
    /// first (ok, suspect, failing) with the reasons.
    Predictions(predictions_cmd::PredictionsArgs),
    /// Read the discovery log of an NVMe/TCP target and print it like `nvme discover`.
    Discover(DiscoverArgs),
    /// Measure a device, a file or an NVMe/TCP namespace (fio-like, with verification).
    Bench(bench_cmd::BenchArgs),
    /// Whole-cluster operations: a rolling upgrade of every node.
    Cluster(cluster_cmd::ClusterArgs),
    /// This build: its version and the cluster protocols it speaks (--json for tools).
    Version(cluster_cmd::VersionArgs),
    /// Generate a DH-HMAC-CHAP secret (`DHHC-1:..`, like `nvme gen-dhchap-key`) for
    /// `ferrobay node host allow --dhchap-secret` and `nvme connect --dhchap-secret`.
    GenDhchapKey(GenDhchapKeyArgs),
    /// Generate a configured TLS PSK (`NVMeTLSkey-1:..`, like `nvme gen-tls-key`) for
    /// `ferrobay node host allow --tls-psk` and the host's `nvme connect --tls`.
    GenTlsKey(GenTlsKeyArgs),
    /// Generate a self-signed CA (ca.pem, ca-key.pem) and a server certificate it signs
    /// (cert.pem, key.pem) for the HTTPS of the APIs and S3 (`--tls-cert`, `--tls-key`;
    /// clients take `--ca-cert ca.pem`). A CA already in DIR is reused.
    GenCert(GenCertArgs),
}

/// `--busy-poll-us`, for the commands that own NVMe/TCP sockets (`node run`,
/// `processor run`, `bench`).
#[derive(Args, Debug, Clone, Copy)]
pub struct BusyPollArg {
    /// Busy polling: after any work, keep polling the NVMe/TCP sockets this many
    /// microseconds instead of sleeping, on one runtime thread (like SPDK's reactor, but
    /// only while I/O flows: at rest no CPU). Lower latency at low queue depth for a core
    /// spent while busy. 0: event-driven (the default).
    #[arg(long = "busy-poll-us", default_value_t = 0, value_name = "US",
          value_parser = clap::value_parser!(u32).range(0..=i64::from(blockdev::MAX_BUSY_POLL_US)))]
    pub us: u32,
}

impl Command {
    /// Busy polling asked for on the command line (microseconds, 0: none). The runtime
    /// then gets one worker thread: a polling task sees its sockets' readiness only when
    /// no other worker sleeps on the I/O driver.
    pub fn busy_poll_us(&self) -> u32 {
        match self {
            Command::Node(n) => match &n.command {
                node_cmd::NodeCommand::Run(r) => r.busy_poll.us,
                _ => 0,
            },
            Command::Processor(p) => match &p.command {
                processor_cmd::ProcessorCommand::Run(r) => r.busy_poll.us,
            },
            Command::Bench(b) => b.busy_poll.us,
            _ => 0,
        }
    }
}

#[derive(Args, Debug)]
pub struct GenCertArgs {
    /// Directory to write into (made if missing); key files are made 0600.
    #[arg(long, value_name = "DIR")]
    pub out_dir: std::path::PathBuf,
    /// A name clients reach the server by (repeatable): a DNS name, or an IP address (an
    /// IP SAN). The first is also the certificate's common name.
    #[arg(long = "name", value_name = "HOST", required = true)]
    pub names: Vec<String>,
    /// Days the server certificate is valid.
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub days: u32,
    /// Days a new CA is valid.
    #[arg(long, default_value_t = 3650, value_parser = clap::value_parser!(u32).range(1..=36500))]
    pub ca_days: u32,
    /// Replace cert.pem and key.pem if they exist.
    #[arg(long)]
    pub force: bool,
}

fn gen_cert(a: GenCertArgs) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    use httpapi::cert_dir::{CertDir, CertDirError};
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("create {}", a.out_dir.display()))?;
    let files = CertDir::new(&a.out_dir);
    for p in [&files.cert, &files.key] {
        if p.exists() && !a.force {
            return Err(crate::cluster::usage(format!(
                "{} exists (--force replaces it)",
                p.display()
            )));
        }
    }
    let reused = match files.issue(&a.names, a.days, a.ca_days, 0o644) {
        Ok(reused) => reused,
        Err(e @ CertDirError::HalfCa(_)) => return Err(crate::cluster::usage(e.to_string())),
        Err(e) => {
            return Err(e).with_context(|| format!("certificate for {}", a.names.join(", ")));
        }
    };
    let ca_note = if reused { " (existing CA)" } else { "" };
    println!("CA:          {}{ca_note}", files.ca_cert.display());
    println!(
        "certificate: {} for {}",
        files.cert.display(),
        a.names.join(", ")
    );
    println!("key:         {} (0600)", files.key.display());
    println!(
        "serve with --tls-cert {} --tls-key {}; clients take --ca-cert {}",
        files.cert.display(),
        files.key.display(),
        files.ca_cert.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct GenTlsKeyArgs {
    /// Hash that derives the retained PSK: 0 none (the key is used as it is), 1 SHA-256
    /// (32-byte key, TLS_AES_128_GCM_SHA256), 2 SHA-384 (48-byte key,
    /// TLS_AES_256_GCM_SHA384).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub hmac: u8,
    /// Key length for --hmac 0: 32 or 48 bytes.
    #[arg(long, value_parser = ["32", "48"])]
    pub key_length: Option<String>,
    /// Also print the PSK identity and TLS PSK a host would use (version 0 identity) for
    /// this host NQN (with --subsysnqn); the TLS PSK is printed in hex: keep it secret.
    #[arg(long, requires = "subsysnqn")]
    pub hostnqn: Option<String>,
    #[arg(long, requires = "hostnqn")]
    pub subsysnqn: Option<String>,
}

fn gen_tls_key(a: GenTlsKeyArgs) -> anyhow::Result<ExitCode> {
    use rand::RngCore as _;
    let len = match (a.hmac, a.key_length.as_deref()) {
        (2, _) => 48,
        (0, Some("48")) => 48,
        _ => 32,
    };
    let mut key = zeroize::Zeroizing::new(vec![0u8; len]);
    rand::rng().fill_bytes(&mut key);
    let psk = nvme_proto::tls_key::ConfiguredPsk::new(a.hmac, &key)?;
    println!("{}", &*psk.to_interchange());
    if let (Some(h), Some(s)) = (&a.hostnqn, &a.subsysnqn) {
        let (identity, tls) = psk.tls_psk(0, h, s)?;
        let hex: String = tls.iter().map(|b| format!("{b:02x}")).collect();
        println!("identity: {identity}");
        println!("tls-psk:  {hex}");
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct GenDhchapKeyArgs {
    /// Hash that transforms the secret: 0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub hmac: u8,
    /// Key length in bytes: 32, 48 or 64 (default: the hash's length, 32 for none).
    #[arg(long, value_parser = ["32", "48", "64"])]
    pub key_length: Option<String>,
}

fn gen_dhchap_key(a: GenDhchapKeyArgs) -> anyhow::Result<ExitCode> {
    use rand::RngCore as _;
    let len = match (a.key_length.as_deref(), a.hmac) {
        (Some(l), _) => l.parse::<usize>()?,
        (None, 2) => 48,
        (None, 3) => 64,
        (None, _) => 32,
    };
    let mut key = zeroize::Zeroizing::new(vec![0u8; len]);
    rand::rng().fill_bytes(&mut key);
    let s = nvme_proto::auth::DhchapSecret::new(a.hmac, &key)?;
    println!("{}", &*s.to_dhhc1());
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct DiscoverArgs {
    /// Target address, ADDR[:PORT] (port defaults to 8009, the discovery port).
    pub address: String,
    /// Host NQN to present (default: a stable NQN derived from this machine).
    #[arg(long)]
    pub hostnqn: Option<String>,
    /// Print the entries as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn dispatch(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Node(a) => node_cmd::run(a).await,
        Command::Cdc(a) => cdc_cmd::run(a).await,
        Command::Processor(a) => processor_cmd::run(a).await,
        Command::Volume(a) => volume_cmd::run(a).await,
        Command::S3(a) => s3_cmd::run(a).await,
        Command::Up(a) => up_cmd::run(a).await,
        Command::Events(a) => events_cmd::run(a).await,
        Command::Predictions(a) => predictions_cmd::run(a).await,
        Command::Discover(a) => discover_cmd::run(a).await,
        Command::Bench(a) => bench_cmd::run(a).await,
        Command::Cluster(a) => cluster_cmd::run(a).await,
        Command::Version(a) => cluster_cmd::version(&a),
        Command::GenDhchapKey(a) => gen_dhchap_key(a),
        Command::GenTlsKey(a) => gen_tls_key(a),
        Command::GenCert(a) => gen_cert(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("ferrobay").chain(args.iter().copied()))
    }

    #[test]
    fn cluster_volume_command_lines() {
        let meta = ["--meta", "etcd://127.0.0.1:2379"];
        let create = |extra: &[&str]| {
            let mut a = vec!["volume", "create", "v", "--level", "raid5"];
            a.extend_from_slice(extra);
            a.extend_from_slice(&meta);
            parse(&a)
        };
        assert!(create(&["--size", "1G", "--storage-nodes", "n1,n2,n3"]).is_ok());
        assert!(create(&["--size", "1G", "--members", "nvme+tcp://a:1/n/1"]).is_ok());
        // Neither or both placements: clap refuses (exit 2).
        let e = create(&["--size", "1G"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(create(&["--size", "1G", "--storage-nodes", "n1", "--members", "x"]).is_err());
        // --meta and --api exclude each other.
        assert!(parse(&["volume", "list", "--meta", "embedded:/x", "--api", "a:1"]).is_err());
        assert!(
            parse(&[
                "volume", "move", "v", "--to", "p2", "--wait", "--api", "a:1"
            ])
            .is_ok()
        );
        assert!(parse(&["volume", "move", "v", "--api", "a:1"]).is_err());
    }

    #[test]
    fn daemon_command_lines() {
        assert!(
            parse(&[
                "processor",
                "run",
                "--name",
                "p1",
                "--listen",
                "127.0.0.1:0",
                "--meta",
                "etcd://h:1"
            ])
            .is_ok()
        );
        // A processor node needs a listener and a store.
        assert!(parse(&["processor", "run", "--name", "p1", "--meta", "etcd://h:1"]).is_err());
        assert!(
            parse(&[
                "processor",
                "run",
                "--name",
                "p1",
                "--listen",
                "127.0.0.1:0"
            ])
            .is_err()
        );
        assert!(parse(&["up"]).is_ok());
        assert!(parse(&["cdc", "run", "--meta", "etcd://h:1"]).is_ok());
        assert!(
            parse(&[
                "cdc",
                "run",
                "--meta",
                "etcd://h:1",
                "--listen",
                "127.0.0.1:0",
                "--listen",
                "[::1]:8009"
            ])
            .is_ok()
        );
        // The CDC needs the cluster's store.
        assert!(parse(&["cdc", "run"]).is_err());
        // A KV namespace: --max-value-size only with --kv, never with --block-size.
        let ns = |extra: &[&str]| {
            let mut a = vec!["node", "ns", "create", "--drive", "d0", "--size", "1G"];
            a.extend_from_slice(extra);
            parse(&a)
        };
        assert!(ns(&["--kv", "--max-value-size", "1M", "--max-keys", "1000"]).is_ok());
        assert!(ns(&["--max-value-size", "1M"]).is_err());
        assert!(ns(&["--kv", "--block-size", "4096"]).is_err());
        assert!(parse(&["up", "--port", "99999"]).is_err());
        // --lease-ttl-ms only means something with --meta.
        assert!(
            parse(&[
                "node",
                "run",
                "--name",
                "n1",
                "--data-dir",
                "/x",
                "--lease-ttl-ms",
                "5000"
            ])
            .is_err()
        );
    }
}
