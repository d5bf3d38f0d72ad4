//! A shard store on a remote NVMe Key Value namespace: the KV client of `nvmf-host` over
//! NVMe/TCP, one namespace (`nvme+tcp://ADDR:PORT[,ADDR:PORT...]/SUBNQN/NSID`) per store.
//!
//! The namespace is always opened as a [`MultipathKvNamespace`], also for one address:
//! a path whose controller gives up reconnecting is then connected again from scratch in
//! the background, so a storage node that comes back after any time serves again.
//!
//! # A node that is down
//!
//! The data path needs a store that is down to say so quickly, so that a GET or PUT with
//! up to m stores down goes on with the others. With [`NvmeKvShardStoreOptions::default`]:
//! - a command on a path that is lost fails over; with no usable path it waits at most
//!   `no_path_timeout_ms` (500 ms) for one, then fails with [`ShardError::Unavailable`];
//!   after that, commands fail at once until a path is usable again (so each degraded
//!   read does not pay the 500 ms);
//! - a lost connection is noticed at once (TCP reset) or by keep-alive (KATO 2 s); a
//!   command the target does not answer times out after `io_timeout_ms` (5 s), is aborted
//!   and its connection reset;
//! - the controller reconnects (first attempt at once, then 200 ms doubling to 2 s) for
//!   `ctrl_loss_tmo_ms` (5 s); after that its path is connected from scratch in the
//!   background with the same backoff, for as long as the store exists;
//! - every operation is bounded by `op_timeout_ms` (8 s) as a last resort.
//!
//! So an operation on a store whose node is down returns `Unavailable` within about
//! 0.5 s the first time (connection refused or reset) and at once after that; at worst
//! about `io_timeout_ms` + 0.5 s (a node that hangs without closing its connections).
//! Options in the URL (`kato`, `ctrl_loss_tmo`, `queues`, ...) override these connect
//! options.
//!
//! # Mapping
//!
//! | KV client | shard store |
//! |---|---|
//! | KV Key Does Not Exist | `KeyNotFound` |
//! | Key Exists (also a re-sent create-only Store that found the key) | `KeyExists` |
//! | Capacity Exceeded | `CapacityExceeded` |
//! | Unrecovered Error, media Unrecovered Read Error (a checksum caught it) | `Unrecovered` |
//! | transport, timeout, no path, ANA inaccessible, Namespace Not Ready, anything else | `Unavailable` |
//!
//! Delete of an absent key is `KeyNotFound` as the trait says: the namespace answers
//! Delete of an absent key with success (EDNEK clear, the default, which this store does
//! not change because it is namespace-wide), so Delete is Exist then Delete. A Delete
//! that races a Store of the same key may report success for a key the Store re-created;
//! the data path never does both at once.
//!
//! The data path's values travel without a copy in this process: [`ShardStore::store_buf`]
//! sends the caller's I/O buffer as it is, [`ShardStore::retrieve_value`] receives into a
//! pooled buffer and hands it out as [`Bytes`]. `store` and `retrieve` (borrowed slices)
//! copy once, into or out of a pooled buffer (through `store_buf` and `retrieve_value`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use blockdev::IoBuf;
use bytes::Bytes;
use nvmf_host::{
    ConnectOptions, HostError, HostIdentity, KvError, MultipathKvNamespace, MultipathOptions,
    NvmeTcpUrl, PathInfo, PathPolicy,
};

use super::{
    MAX_VALUE_BYTES, ShardError, ShardKey, ShardStore, StoreMode, buffers, check_value_size,
};

/// How a [`NvmeKvShardStore`] connects and how long it waits; see the module docs.
#[derive(Debug, Clone)]
pub struct NvmeKvShardStoreOptions {
    pub connect: ConnectOptions,
    pub multipath: MultipathOptions,
    /// Upper bound of one operation, whatever happens below.
    pub op_timeout_ms: u64,
}

impl Default for NvmeKvShardStoreOptions {
    fn default() -> Self {
        NvmeKvShardStoreOptions {
            connect: ConnectOptions {
                io_queues: 2,
                queue_size: 128,
                kato_ms: 2_000,
                io_timeout_ms: 5_000,
                admin_timeout_ms: 5_000,
                connect_timeout_ms: 2_000,
                reconnect_delay_ms: 200,
                reconnect_delay_max_ms: 2_000,
                ctrl_loss_tmo_ms: Some(5_000),
                ..ConnectOptions::default()
            },
            multipath: MultipathOptions {
                policy: PathPolicy::First,
                no_path_timeout_ms: 500,
            },
            op_timeout_ms: 8_000,
        }
    }
}

struct Inner {
    id: String,
    failure_domain: String,
    url: NvmeTcpUrl,
    options: NvmeKvShardStoreOptions,
    ns: Arc<MultipathKvNamespace>,
}

/// A shard store on one NVMe KV namespace; see the module docs. A store that must exist
/// before its node answers is wrapped in a [`LazyShardStore`](super::LazyShardStore).
#[derive(Clone)]
pub struct NvmeKvShardStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NvmeKvShardStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmeKvShardStore")
            .field("id", &self.inner.id)
            .field("url", &self.inner.url.to_string())
            .finish()
    }
}

/// Opens the namespace and checks that it can hold shards.
async fn open(
    url: &NvmeTcpUrl,
    host: &HostIdentity,
    options: &NvmeKvShardStoreOptions,
) -> Result<MultipathKvNamespace, HostError> {
    let ns = url
        .open_kv_multipath(host, &options.connect, options.multipath.clone())
        .await?;
    let info = ns.info();
    let problem = if (info.max_value_bytes as usize) < MAX_VALUE_BYTES {
        Some(format!(
            "it takes values up to {} bytes; a shard store needs {MAX_VALUE_BYTES}",
            info.max_value_bytes
        ))
    } else if info.max_key_bytes < ShardKey::MIN.0.len() {
        Some(format!(
            "it takes keys up to {} bytes; shard keys are 16",
            info.max_key_bytes
        ))
    } else {
        None
    };
    if let Some(why) = problem {
        ns.disconnect().await;
        return Err(HostError::Invalid {
            context: url.to_string(),
            reason: why,
        });
    }
    Ok(ns)
}

impl NvmeKvShardStore {
    /// Connects to the KV namespace `url` names (it must name the NSID) as `host` and
    /// checks that it holds 16-byte keys and values of [`MAX_VALUE_BYTES`]. Fails when
    /// no path connects, or the namespace is not a KV namespace or too small a one.
    pub async fn connect(
        url: &NvmeTcpUrl,
        id: impl Into<String>,
        failure_domain: impl Into<String>,
        host: &HostIdentity,
        options: NvmeKvShardStoreOptions,
    ) -> Result<NvmeKvShardStore, HostError> {
        check_url(url)?;
        let ns = open(url, host, &options).await?;
        Ok(NvmeKvShardStore {
            inner: Arc::new(Inner {
                id: id.into(),
                failure_domain: failure_domain.into(),
                url: url.clone(),
                options,
                ns: Arc::new(ns),
            }),
        })
    }

    /// The namespace's paths and their states.
    pub fn paths(&self) -> Vec<PathInfo> {
        self.inner.ns.paths()
    }

    pub fn url(&self) -> &NvmeTcpUrl {
        &self.inner.url
    }

    /// Disconnects every path; later operations are `Unavailable`.
    pub async fn disconnect(&self) {
        self.inner.ns.disconnect().await;
    }

    fn unavailable(&self, why: &str) -> ShardError {
        ShardError::Unavailable(format!("{} ({}): {why}", self.inner.id, self.inner.url))
    }

    /// The shard store's view of a KV client error.
    fn map(&self, e: KvError) -> ShardError {
        match e {
            KvError::KeyNotFound => ShardError::KeyNotFound,
            KvError::KeyExists | KvError::CreateOutcomeUnknown => ShardError::KeyExists,
            KvError::CapacityExceeded => ShardError::CapacityExceeded,
            KvError::Unrecovered { .. } => {
                ShardError::Unrecovered(format!("{} ({}): {e}", self.inner.id, self.inner.url))
            }
            KvError::InvalidValueSize { bytes, .. } => ShardError::ValueTooLarge {
                bytes: bytes as usize,
            },
            // Unreachable, or answering in a way no shard operation can use.
            other => self.unavailable(&other.to_string()),
        }
    }

    /// Runs `op` on the namespace within the operation timeout.
    async fn run<T, F, Fut>(&self, what: &str, op: F) -> Result<T, ShardError>
    where
        F: FnOnce(Arc<MultipathKvNamespace>) -> Fut,
        Fut: std::future::Future<Output = Result<T, KvError>>,
    {
        let ns = self.inner.ns.clone();
        let limit = Duration::from_millis(self.inner.options.op_timeout_ms);
        match tokio::time::timeout(limit, op(ns)).await {
            Ok(r) => r.map_err(|e| self.map(e)),
            Err(_) => Err(self.unavailable(&format!(
                "{what} did not finish within {} ms",
                limit.as_millis()
            ))),
        }
    }
}

fn check_url(url: &NvmeTcpUrl) -> Result<(), HostError> {
    if url.nsid.is_none() {
        return Err(HostError::Usage(format!(
            "{url}: a shard store's URL names its namespace (nvme+tcp://ADDR:PORT/SUBNQN/NSID)"
        )));
    }
    Ok(())
}

fn store_mode(m: StoreMode) -> nvmf_host::StoreMode {
    match m {
        StoreMode::Upsert => nvmf_host::StoreMode::Always,
        StoreMode::OnlyIfAbsent => nvmf_host::StoreMode::OnlyIfAbsent,
        StoreMode::OnlyIfExists => nvmf_host::StoreMode::OnlyIfExists,
    }
}

#[async_trait]
impl ShardStore for NvmeKvShardStore {
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn failure_domain(&self) -> &str {
        &self.inner.failure_domain
    }

    async fn store(&self, key: ShardKey, value: Bytes, mode: StoreMode) -> Result<(), ShardError> {
        check_value_size(&value)?;
        let mut buf = buffers::take(value.len());
        buf.copy_from_slice(&value);
        self.store_buf(key, buf, mode).await
    }

    async fn store_buf(
        &self,
        key: ShardKey,
        value: IoBuf,
        mode: StoreMode,
    ) -> Result<(), ShardError> {
        check_value_size(&value)?;
        let mut back = None;
        let r = self
            .run("store", |ns| {
                let back = &mut back;
                async move {
                    let (r, buf) = ns.store(&key.0, value, store_mode(mode)).await;
                    *back = Some(buf);
                    r
                }
            })
            .await;
        if let Some(buf) = back {
            buffers::give_back(buf);
        }
        r
    }

    async fn retrieve_value(
        &self,
        key: ShardKey,
        max: usize,
    ) -> Result<(Bytes, usize), ShardError> {
        let n = max.min(MAX_VALUE_BYTES);
        let buf = buffers::take(n);
        let (size, mut got) = self
            .run("retrieve", |ns| async move {
                let (r, b) = ns.retrieve(&key.0, buf).await;
                match r {
                    Ok(size) => Ok((size as usize, b)),
                    Err(e) => {
                        buffers::give_back(b);
                        Err(e)
                    }
                }
            })
            .await?;
        got.set_len(size.min(n));
        Ok((buffers::into_bytes(got), size))
    }

    async fn retrieve(&self, key: ShardKey, buf: &mut [u8]) -> Result<usize, ShardError> {
        let (value, size) = self.retrieve_value(key, buf.len()).await?;
        buf[..value.len()].copy_from_slice(&value);
        Ok(size)
    }

    async fn delete(&self, key: ShardKey) -> Result<(), ShardError> {
        self.run("delete", |ns| async move {
            if !ns.exist(&key.0).await? {
                return Err(KvError::KeyNotFound);
            }
            ns.delete(&key.0).await
        })
        .await
    }

    async fn exist(&self, key: ShardKey) -> Result<bool, ShardError> {
        self.run("exist", |ns| async move { ns.exist(&key.0).await })
            .await
    }

    async fn list(&self, from: ShardKey, max: usize) -> Result<Vec<ShardKey>, ShardError> {
        self.run("list", |ns| async move {
            let mut out = Vec::new();
            let mut start = Some(from.0.to_vec());
            while out.len() < max {
                let Some(s) = start.take() else { break };
                let page = ns.list(Some(&s), max - out.len()).await?;
                // A shard store's namespace holds 16-byte keys; others are not shards.
                out.extend(
                    page.keys
                        .iter()
                        .filter_map(|k| <[u8; 16]>::try_from(k.as_bytes()).ok())
                        .map(ShardKey),
                );
                start = page.next.map(|k| k.as_bytes().to_vec());
            }
            out.truncate(max);
            Ok(out)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::contract;
    use std::net::SocketAddr;
    use std::path::Path;
    use std::time::Instant;
    use storage_node::api::{CreateNamespaceRequest, KvCreateOptions};
    use storage_node::{NodeConfig, StorageNode, parse_node_drive};

    const MIB: u64 = 1 << 20;

    fn host() -> HostIdentity {
        HostIdentity::from_hostnqn(
            "nqn.2014-08.org.nvmexpress:uuid:4b560001-0000-4000-8000-0000000000a1",
        )
        .expect("host NQN")
    }

    fn config(dir: &Path, listen: SocketAddr, drives: &[String]) -> NodeConfig {
        let mut cfg = NodeConfig::new("n1", dir.join("data"));
        cfg.listen = vec![listen];
        cfg.discovery_listen = Some("127.0.0.1:0".parse().expect("addr"));
        cfg.default_namespace = false;
        cfg.drives = drives
            .iter()
            .map(|d| parse_node_drive(d).expect("drive"))
            .collect();
        cfg
    }

    async fn kv_namespace(node: &StorageNode, max_value_bytes: Option<u32>) -> NvmeTcpUrl {
        let v = node
            .create_namespace(CreateNamespaceRequest {
                drive: Some("d0".into()),
                size_bytes: 96 * MIB,
                kv: Some(KvCreateOptions {
                    max_value_bytes,
                    max_keys: None,
                }),
                ..Default::default()
            })
            .await
            .expect("create");
        let addr = node.nvme_addrs()[0];
        NvmeTcpUrl::parse(&format!("nvme+tcp://{addr}/{}/{}", v.subsystem_nqn, v.nsid))
            .expect("url")
    }

    fn listen_addr() -> SocketAddr {
        let port = testkit::net::free_port().expect("port");
        format!("127.0.0.1:{port}").parse().expect("addr")
    }

    fn any_port() -> SocketAddr {
        "127.0.0.1:0".parse().expect("addr")
    }

    /// A storage node on `drive`, a KV namespace on it and a store connected to it.
    async fn node_with_store(
        dir: &Path,
        listen: SocketAddr,
        drive: String,
    ) -> (StorageNode, NvmeKvShardStore) {
        let node = StorageNode::start(config(dir, listen, &[drive]))
            .await
            .expect("node");
        let url = kv_namespace(&node, None).await;
        let s = NvmeKvShardStore::connect(&url, "n1/kv1", "n1", &host(), Default::default())
            .await
            .expect("connect");
        (node, s)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn meets_the_contract_over_a_real_target() {
        let dir = tempfile::tempdir().expect("dir");
        let (node, s) = node_with_store(dir.path(), any_port(), "ram:128M".into()).await;
        assert_eq!((s.id(), s.failure_domain()), ("n1/kv1", "n1"));
        contract::check(&s).await;
        s.disconnect().await;
        node.shutdown().await.expect("shutdown");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_that_is_down_is_unavailable_quickly_and_serves_again_when_back() {
        let dir = tempfile::tempdir().expect("dir");
        let listen = listen_addr();
        let drive = format!("file:{}:128M", dir.path().join("d0.img").display());
        let (node, s) = node_with_store(dir.path(), listen, drive).await;
        let k = ShardKey([3; 16]);
        let v = Bytes::from(vec![0x5Au8; 70_000]);
        s.store(k, v.clone(), StoreMode::Upsert)
            .await
            .expect("store");

        node.shutdown().await.expect("shutdown");
        drop(node);
        // Down: each operation says so within about the no-path timeout.
        for _ in 0..3 {
            let t0 = Instant::now();
            let mut buf = vec![0u8; 16];
            let e = s.retrieve(k, &mut buf).await.expect_err("down");
            assert!(e.is_unavailable(), "{e:?}");
            assert!(e.to_string().contains("n1/kv1"), "{e}");
            assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
            let e = s
                .store(k, Bytes::from_static(b"x"), StoreMode::Upsert)
                .await
                .expect_err("down");
            assert!(e.is_unavailable(), "{e:?}");
        }
        // Past the controller-loss timeout, then the node comes back on the same port.
        tokio::time::sleep(Duration::from_millis(5_500)).await;
        let mut cfg = config(dir.path(), listen, &[]);
        cfg.drives.clear();
        let node = StorageNode::start(cfg).await.expect("restart");
        let mut buf = vec![0u8; v.len()];
        let mut served = None;
        for _ in 0..200 {
            match s.retrieve(k, &mut buf).await {
                Ok(n) => {
                    served = Some(n);
                    break;
                }
                Err(e) if e.is_unavailable() => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(served, Some(v.len()), "serves again");
        assert_eq!(&buf[..], &v[..], "the value survived the restart");
        s.disconnect().await;
        node.shutdown().await.expect("shutdown");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_damaged_value_is_unrecovered_and_the_others_still_read() {
        let dir = tempfile::tempdir().expect("dir");
        let img = dir.path().join("d0.img");
        let drive = format!("file:{}:128M", img.display());
        let (node, s) = node_with_store(dir.path(), any_port(), drive).await;
        // A value no other bytes on the drive look like.
        let v: Vec<u8> = (0..65_536u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let (bad, good) = (ShardKey([7; 16]), ShardKey([8; 16]));
        s.store(bad, Bytes::from(v.clone()), StoreMode::Upsert)
            .await
            .expect("store");
        s.store(good, Bytes::from_static(b"fine"), StoreMode::Upsert)
            .await
            .expect("store");
        // Flip one byte of it on the drive file.
        let image = std::fs::read(&img).expect("read image");
        let at = image
            .windows(4096)
            .position(|w| w == &v[..4096])
            .expect("the value is on the drive");
        {
            use std::io::{Seek, SeekFrom, Write};
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(&img)
                .expect("open image");
            f.seek(SeekFrom::Start((at + 1000) as u64)).expect("seek");
            f.write_all(&[image[at + 1000] ^ 0x01]).expect("write");
            f.sync_all().expect("sync");
        }
        let mut buf = vec![0u8; v.len()];
        let e = s.retrieve(bad, &mut buf).await.expect_err("damaged");
        assert!(matches!(e, ShardError::Unrecovered(_)), "{e:?}");
        assert_ne!(&buf[..], &v[..], "no damaged bytes handed out as the value");
        let mut small = [0u8; 4];
        assert_eq!(s.retrieve(good, &mut small).await, Ok(4));
        assert_eq!(&small, b"fine");
        s.disconnect().await;
        node.shutdown().await.expect("shutdown");
    }

    /// How a gateway starts while a node is down: the store wrapped in a
    /// [`LazyShardStore`](crate::shard::LazyShardStore) is Unavailable until it connects.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lazy_store_waits_for_its_node() {
        let dir = tempfile::tempdir().expect("dir");
        let listen = listen_addr();
        let url = NvmeTcpUrl::parse(&format!(
            "nvme+tcp://{listen}/nqn.2026-01.io.ferrobay:n1:d0/1"
        ))
        .expect("url");
        let connected = Arc::new(std::sync::OnceLock::new());
        let made = connected.clone();
        let s = crate::shard::LazyShardStore::connect(
            "n1/kv1",
            "n1",
            Box::new(move || {
                let (url, made) = (url.clone(), made.clone());
                Box::pin(async move {
                    let s = NvmeKvShardStore::connect(
                        &url,
                        "n1/kv1",
                        "n1",
                        &host(),
                        Default::default(),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                    let _ = made.set(s.clone());
                    Ok(Arc::new(s) as Arc<dyn ShardStore>)
                })
            }),
        );
        let k = ShardKey([1; 16]);
        let e = s.exist(k).await.expect_err("no node yet");
        assert!(e.is_unavailable(), "{e:?}");
        assert!(!s.is_connected());
        let node = StorageNode::start(config(dir.path(), listen, &["ram:128M".into()]))
            .await
            .expect("node");
        assert_eq!(kv_namespace(&node, None).await.nsid, Some(1));
        assert!(
            s.wait_connected(Duration::from_secs(15)).await,
            "connected once the node and its namespace exist"
        );
        assert_eq!(s.exist(k).await, Ok(false));
        s.store(k, Bytes::from_static(b"v"), StoreMode::OnlyIfAbsent)
            .await
            .expect("store");
        assert_eq!(s.exist(k).await, Ok(true));
        connected.get().expect("connected").disconnect().await;
        node.shutdown().await.expect("shutdown");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_namespace_that_cannot_hold_shards_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let node = StorageNode::start(config(dir.path(), any_port(), &["ram:256M".into()]))
            .await
            .expect("node");
        let small = kv_namespace(&node, Some(1 << 20)).await;
        let e = NvmeKvShardStore::connect(&small, "s", "n1", &host(), Default::default())
            .await
            .expect_err("values too small");
        assert!(e.to_string().contains("a shard store needs 2097152"), "{e}");
        let nvm = node
            .create_namespace(CreateNamespaceRequest {
                drive: Some("d0".into()),
                size_bytes: 16 * MIB,
                ..Default::default()
            })
            .await
            .expect("nvm");
        let addr = node.nvme_addrs()[0];
        let url = NvmeTcpUrl::parse(&format!(
            "nvme+tcp://{addr}/{}/{}",
            nvm.subsystem_nqn, nvm.nsid
        ))
        .expect("url");
        let e = NvmeKvShardStore::connect(&url, "s", "n1", &host(), Default::default())
            .await
            .expect_err("an NVM namespace");
        assert!(e.to_string().contains("not a Key Value namespace"), "{e}");
        let no_nsid =
            NvmeTcpUrl::parse(&format!("nvme+tcp://{addr}/{}", nvm.subsystem_nqn)).expect("url");
        let e = NvmeKvShardStore::connect(&no_nsid, "s", "n1", &host(), Default::default())
            .await
            .expect_err("no NSID");
        assert!(e.to_string().contains("names its namespace"), "{e}");
        node.shutdown().await.expect("shutdown");
    }
}
