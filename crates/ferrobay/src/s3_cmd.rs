//! `ferrobay s3 run`: an S3 gateway (objstore::gateway) until Ctrl-C / SIGTERM, over
//! directory stores or the KV namespaces of a cluster's object pool
//! (control::pool_gateway); `ferrobay s3 key add|list|remove`: access keys kept in the
//! object index; `ferrobay s3 pool create|add|list`: object pools (control::provision).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use objstore::gateway::{Gateway, GatewayConfig};
use objstore::index::{Index, ops};
use objstore::layout::Geometry;
use objstore::s3::Credentials;
use objstore::shard::{DirShardStore, ShardStore};

use control::pool_gateway::{PoolGateway, PoolGatewayError};
use control::provision::objpool;
use control::records::ObjectPoolRecord;

use crate::cluster;

/// Environment variables holding the root user's key pair.
const ACCESS_KEY_ENV: &str = "FERROBAY_S3_ACCESS_KEY";
const SECRET_KEY_ENV: &str = "FERROBAY_S3_SECRET_KEY";

#[derive(Args, Debug)]
pub struct S3Args {
    #[command(subcommand)]
    pub command: S3Command,
}

#[derive(Subcommand, Debug)]
pub enum S3Command {
    /// Run an S3 gateway: objects erasure-coded over shard stores, indexed in SQLite or
    /// PostgreSQL, until Ctrl-C / SIGTERM. Gateways sharing an index and stores are
    /// interchangeable.
    Run(RunArgs),
    /// Access keys besides the root user's, kept in the object index.
    Key(KeyArgs),
    /// Object pools: the KV namespaces on storage nodes that gateways started with
    /// --meta keep object shards in.
    Pool(PoolArgs),
    /// Count the shards of every stored object: present, missing, on stores that cannot
    /// be reached (asks each store whether the shard exists; changes nothing). Exit code
    /// 1 when some piece is incomplete.
    Check(CheckArgs),
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Object index (as for `s3 run`).
    #[arg(long)]
    pub index: String,
    /// The cluster's metadata store (with --pool), as for `s3 run`.
    #[arg(long, conflicts_with = "stores")]
    pub meta: Option<String>,
    #[arg(long, default_value = control::provision::objpool::DEFAULT_POOL, requires = "meta")]
    pub pool: String,
    /// Directory shard stores (as for `s3 run`).
    #[arg(long = "store", required_unless_present = "meta")]
    pub stores: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// S3 (HTTP) listen address; port 0 picks a free port.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Object index: sqlite:PATH (embedded, one machine) or postgres://USER@HOST:PORT/DB
    /// (shared by several gateways).
    #[arg(long)]
    pub index: String,
    /// Shard stores from the cluster: the KV namespaces of object pool --pool, from the
    /// metadata store at this URL (etcd://HOST:PORT[,HOST:PORT] or embedded:DIR), followed
    /// while the gateway runs. Either this or --store.
    #[arg(long, conflicts_with = "stores")]
    pub meta: Option<String>,
    /// The object pool (with --meta).
    #[arg(long, default_value = control::provision::objpool::DEFAULT_POOL, requires = "meta")]
    pub pool: String,
    /// This gateway's name: its host NQN towards the storage nodes is
    /// nqn.2026-01.io.ferrobay:s3:NAME (with --meta).
    #[arg(long, default_value = "s3")]
    pub name: String,
    /// A directory shard store: ID=DIR or ID@DOMAIN=DIR to name its failure domain
    /// (default: the ID). Repeat for each store; shards of one stripe always land in
    /// distinct failure domains. Either this or --meta.
    #[arg(long = "store", required_unless_present = "meta")]
    pub stores: Vec<String>,
    /// Erasure code of new buckets, K+M (a bucket may choose its own with the
    /// x-ferrobay-erasure header at creation).
    #[arg(long, default_value = "2+1")]
    pub ec: String,
    /// Region reported to clients and expected in signatures.
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    /// Objects up to this size are kept in the index row instead of being erasure-coded.
    #[arg(long, default_value = "16K")]
    pub inline_max: String,
    /// Write `{"s3": "ADDR:PORT"}` here once serving.
    #[arg(long)]
    pub endpoints_file: Option<PathBuf>,
    /// HTTPS for S3 (clients: `aws --ca-bundle ca.pem`, boto3 `verify="ca.pem"`).
    #[command(flatten)]
    pub tls: cluster::ServerTlsArgs,
}

#[derive(Args, Debug)]
pub struct KeyArgs {
    #[command(subcommand)]
    pub command: KeyCommand,
}

#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// Create an access key; prints the key and its secret.
    Add {
        /// Object index (as for `s3 run`).
        #[arg(long)]
        index: String,
        /// The access key id (default: a random one).
        #[arg(long)]
        access_key: Option<String>,
    },
    /// List access keys (not their secrets).
    List {
        #[arg(long)]
        index: String,
    },
    /// Remove an access key.
    Remove {
        #[arg(long)]
        index: String,
        access_key: String,
    },
}

#[derive(Args, Debug)]
pub struct PoolArgs {
    #[command(subcommand)]
    pub command: PoolCommand,
}

#[derive(Subcommand, Debug)]
pub enum PoolCommand {
    /// Create an object pool: one new KV namespace of --size on each storage node
    /// (Namespace Management over NVMe/TCP); each node is one failure domain.
    Create(PoolChange),
    /// Grow an object pool: one more KV namespace on each storage node named. Running
    /// gateways start using them.
    Add(PoolChange),
    /// List object pools and their namespaces.
    List {
        /// Metadata store: etcd://HOST:PORT[,HOST:PORT] or embedded:DIR.
        #[arg(long)]
        meta: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct PoolChange {
    /// The pool's name.
    #[arg(default_value = control::provision::objpool::DEFAULT_POOL)]
    pub name: String,
    /// Registered storage nodes, one namespace each: n1,n2,n3.
    #[arg(long, value_delimiter = ',', required = true)]
    pub storage_nodes: Vec<String>,
    /// Size of each namespace (e.g. 10G; at least 64M).
    #[arg(long)]
    pub size: String,
    /// Metadata store: etcd://HOST:PORT[,HOST:PORT] or embedded:DIR.
    #[arg(long)]
    pub meta: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(serde::Serialize)]
struct Endpoints {
    s3: String,
}

/// `ID[@DOMAIN]=DIR`.
fn parse_store(spec: &str) -> anyhow::Result<(String, String, PathBuf)> {
    let (name, dir) = spec
        .split_once('=')
        .filter(|(n, d)| !n.is_empty() && !d.is_empty())
        .ok_or_else(|| {
            cluster::usage(format!("--store {spec}: expected ID=DIR or ID@DOMAIN=DIR"))
        })?;
    let (id, domain) = match name.split_once('@') {
        Some((id, domain)) if !id.is_empty() && !domain.is_empty() => (id, domain),
        Some(_) => {
            return Err(cluster::usage(format!(
                "--store {spec}: expected ID@DOMAIN=DIR"
            )));
        }
        None => (name, name),
    };
    Ok((id.to_string(), domain.to_string(), PathBuf::from(dir)))
}

fn root_credentials() -> anyhow::Result<Credentials> {
    match (std::env::var(ACCESS_KEY_ENV), std::env::var(SECRET_KEY_ENV)) {
        (Ok(access_key), Ok(secret_key)) if !access_key.is_empty() && secret_key.len() >= 8 => {
            Ok(Credentials {
                access_key,
                secret_key,
            })
        }
        (Ok(_), Ok(_)) => Err(cluster::usage(format!(
            "{SECRET_KEY_ENV} must be at least 8 characters and {ACCESS_KEY_ENV} not empty"
        ))),
        _ => Err(cluster::usage(format!(
            "set the root user's key pair in {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}"
        ))),
    }
}

async fn open_index(url: &str) -> anyhow::Result<Index> {
    if !(url.starts_with("sqlite:")
        || url.starts_with("postgres://")
        || url.starts_with("postgresql://"))
    {
        return Err(cluster::usage(format!(
            "--index {url}: expected sqlite:PATH or postgres://USER@HOST:PORT/DB"
        )));
    }
    Index::open(url)
        .await
        .with_context(|| format!("object index {url}"))
}

/// `--meta` names the cluster's metadata store; an index URL there is the old spelling.
fn check_meta_url(url: &str) -> anyhow::Result<()> {
    if url.starts_with("sqlite:") || url.starts_with("postgres") {
        return Err(cluster::usage(format!(
            "--meta {url}: --meta is the cluster's metadata store (etcd://... or \
             embedded:DIR); give the object index with --index {url}"
        )));
    }
    Ok(())
}

/// The gateway, on directory stores or on a cluster's object pool.
enum Running {
    Dirs(Gateway),
    Pool(PoolGateway),
}

impl Running {
    fn gateway(&self) -> &Gateway {
        match self {
            Running::Dirs(g) => g,
            Running::Pool(p) => p.gateway(),
        }
    }

    async fn shutdown(self) {
        match self {
            Running::Dirs(g) => g.shutdown().await,
            Running::Pool(p) => p.shutdown().await,
        }
    }
}

async fn run_gateway(a: RunArgs) -> anyhow::Result<ExitCode> {
    let root = root_credentials()?;
    let geometry: Geometry =
        a.ec.parse()
            .map_err(|e| cluster::usage(format!("--ec: {e}")))?;
    let inline_max = cluster::parse_size_arg("--inline-max", &a.inline_max)?;
    let stores = dir_stores(&a.stores)?;
    let meta = match &a.meta {
        Some(url) => {
            check_meta_url(url)?;
            Some(cluster::open_store(url).await?)
        }
        None => None,
    };
    let stop = cluster::stop_signal();
    let index = open_index(&a.index).await?;
    let mut config = GatewayConfig::new(a.listen, root);
    config.region = a.region;
    config.tls = a.tls.load()?;
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    config.objects.default_geometry = geometry;
    config.objects.inline_max_bytes = usize::try_from(inline_max).unwrap_or(usize::MAX);
    let (running, stores_text) = match meta {
        Some(meta) => {
            let host =
                nvmf_host::HostIdentity::from_hostnqn(&control::records::s3_hostnqn(&a.name))
                    .map_err(|e| cluster::usage(format!("--name {}: {e}", a.name)))?;
            let connector = control::pool_gateway::NvmeKvConnector::new(host);
            let gw = PoolGateway::start(meta, &a.pool, config, index.clone(), Arc::new(connector))
                .await
                .map_err(|e| match e {
                    PoolGatewayError::Control(c) => anyhow::Error::new(c),
                    other => cluster::usage(other.to_string()),
                })?;
            let n = *gw.store_count().borrow();
            (
                Running::Pool(gw),
                format!("object pool {} ({n} KV namespaces)", a.pool),
            )
        }
        None => {
            let n = stores.len();
            let gw = Gateway::start(config, index.clone(), stores)
                .await
                .map_err(|e| cluster::usage(e.to_string()))?;
            (Running::Dirs(gw), format!("{n} shard stores"))
        }
    };
    let addr = running.gateway().local_addr();
    println!(
        "S3 gateway on {scheme}://{addr} (index {}, {stores_text}, new buckets {geometry})",
        index.engine()
    );
    if let Some(path) = &a.endpoints_file {
        cluster::write_json_file(
            path,
            &Endpoints {
                s3: addr.to_string(),
            },
        )?;
    }
    stop.await;
    eprintln!("ferrobay s3: stopping");
    running.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

async fn run_key(k: KeyCommand) -> anyhow::Result<ExitCode> {
    match k {
        KeyCommand::Add { index, access_key } => {
            let index = open_index(&index).await?;
            let generated = Credentials::generate();
            let access_key = access_key.unwrap_or(generated.access_key);
            let secret = generated.secret_key;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let (ak, sk) = (access_key.clone(), secret.clone());
            index
                .write(move |tx| ops::add_access_key(tx, &ak, &sk, now))
                .await
                .with_context(|| format!("add access key {access_key}"))?;
            println!("AccessKeyId      {access_key}");
            println!("SecretAccessKey  {secret}");
        }
        KeyCommand::List { index } => {
            let index = open_index(&index).await?;
            let keys = index
                .read(ops::access_keys)
                .await
                .context("list access keys")?;
            println!("{:<24} CREATED", "ACCESS KEY");
            for (k, created_ms) in keys {
                let created =
                    storage_node::text::unix_ms_text(u64::try_from(created_ms).unwrap_or(0));
                println!("{k:<24} {created}");
            }
        }
        KeyCommand::Remove { index, access_key } => {
            let index = open_index(&index).await?;
            let ak = access_key.clone();
            let removed = index
                .write(move |tx| ops::delete_access_key(tx, &ak))
                .await
                .context("remove access key")?;
            if !removed {
                anyhow::bail!("no access key {access_key}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn run_pool(p: PoolCommand) -> anyhow::Result<ExitCode> {
    let (change, create) = match p {
        PoolCommand::List { meta, json } => {
            check_meta_url(&meta)?;
            let store = cluster::open_store(&meta).await?;
            let pools = objpool::list_pools(store.as_ref()).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&pools)?);
            } else {
                print!("{}", pools_text(&pools));
            }
            return Ok(ExitCode::SUCCESS);
        }
        PoolCommand::Create(c) => (c, true),
        PoolCommand::Add(c) => (c, false),
    };
    check_meta_url(&change.meta)?;
    let size_bytes = cluster::parse_size_arg("--size", &change.size)?;
    let store = cluster::open_store(&change.meta).await?;
    let req = objpool::PoolNamespaces {
        pool: change.name.clone(),
        storage_nodes: change.storage_nodes.clone(),
        size_bytes,
    };
    let host = nvmf_host::HostIdentity::system()?;
    let record = if create {
        objpool::create_pool(store.as_ref(), &req, &host).await?
    } else {
        objpool::add_to_pool(store.as_ref(), &req, &host).await?
    };
    if change.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        print!("{}", pools_text(std::slice::from_ref(&record)));
    }
    Ok(ExitCode::SUCCESS)
}

/// `ferrobay s3 pool list`: one block per pool, one line per namespace.
fn pools_text(pools: &[ObjectPoolRecord]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if pools.is_empty() {
        out.push_str("no object pools (create one with `ferrobay s3 pool create`)\n");
    }
    for p in pools {
        let total: u64 = p.namespaces.iter().map(|n| n.size_bytes).sum();
        let domains: std::collections::BTreeSet<&str> = p
            .namespaces
            .iter()
            .map(|n| n.failure_domain.as_str())
            .collect();
        let _ = writeln!(
            out,
            "pool {}: {} KV namespaces, {} failure domains, {}",
            p.name,
            p.namespaces.len(),
            domains.len(),
            cluster::human_bytes(total)
        );
        let _ = writeln!(
            out,
            "  {:<16} {:<10} {:>12}  URL",
            "STORE", "DOMAIN", "SIZE"
        );
        for n in &p.namespaces {
            let _ = writeln!(
                out,
                "  {:<16} {:<10} {:>12}  {}",
                n.id,
                n.failure_domain,
                cluster::human_bytes(n.size_bytes),
                n.url
            );
        }
    }
    out
}

/// The directory stores of `--store` specs.
fn dir_stores(specs: &[String]) -> anyhow::Result<Vec<Arc<dyn ShardStore>>> {
    let mut stores: Vec<Arc<dyn ShardStore>> = Vec::new();
    for spec in specs {
        let (id, domain, dir) = parse_store(spec)?;
        let store = DirShardStore::open(&dir, id.clone(), domain, None)
            .with_context(|| format!("shard store {id} in {}", dir.display()))?;
        stores.push(Arc::new(store));
    }
    Ok(stores)
}

async fn run_check(a: CheckArgs) -> anyhow::Result<ExitCode> {
    let stores = match &a.meta {
        Some(url) => {
            check_meta_url(url)?;
            let meta = cluster::open_store(url).await?;
            let host =
                nvmf_host::HostIdentity::from_hostnqn(&control::records::s3_hostnqn("check"))?;
            let connector = Arc::new(control::pool_gateway::NvmeKvConnector::new(host));
            control::pool_gateway::connect_pool_stores(meta, &a.pool, connector).await?
        }
        None => dir_stores(&a.stores)?,
    };
    let index = open_index(&a.index).await?;
    let set =
        objstore::placement::StoreSet::new(stores).map_err(|e| cluster::usage(e.to_string()))?;
    let layer = objstore::objects::ObjectLayer::new(
        index,
        set,
        objstore::objects::ObjectConfig::default(),
        Arc::new(objstore::clock::SystemClock),
    );
    let r = layer.check().await.context("check")?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "{} pieces, {} incomplete, {} invalid; shards: {} present, {} missing, {} unreachable",
            r.pieces,
            r.pieces_incomplete,
            r.pieces_invalid,
            r.shards.present,
            r.shards.missing,
            r.shards.unreachable
        );
    }
    Ok(if r.pieces_incomplete == 0 && r.pieces_invalid == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub async fn run(a: S3Args) -> anyhow::Result<ExitCode> {
    match a.command {
        S3Command::Check(c) => run_check(c).await,
        S3Command::Run(r) => run_gateway(r).await,
        S3Command::Key(k) => run_key(k.command).await,
        S3Command::Pool(p) => run_pool(p.command).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_specs() {
        let (id, domain, dir) = parse_store("n1@rack1=/data/s1").expect("valid");
        assert_eq!(
            (id.as_str(), domain.as_str(), dir),
            ("n1", "rack1", PathBuf::from("/data/s1"))
        );
        let (id, domain, _) = parse_store("n2=/d").expect("valid");
        assert_eq!((id.as_str(), domain.as_str()), ("n2", "n2"));
        assert!(parse_store("=/d").is_err());
        assert!(parse_store("n1").is_err());
        assert!(parse_store("@x=/d").is_err());
    }
}
