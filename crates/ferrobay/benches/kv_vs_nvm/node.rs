//! The rig: a storage node with one drive holding an NVM and a KV namespace, and a host
//! connected to both through one controller (the same I/O queues).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use nvmf_host::{
    AnyKvNamespace, ConnectOptions, Controller, HostIdentity, KvNamespace, RemoteNamespace,
};
use storage_node::api::{CreateNamespaceRequest, KvCreateOptions};
use storage_node::{NodeConfig, StorageNode, parse_node_drive};

use crate::settings::Settings;

const MIB: u64 = 1 << 20;
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:4b560001-0000-4000-8000-00000000b0b0";

pub struct Rig {
    /// The node's runtime (its target and the kv engine run here).
    node_rt: tokio::runtime::Runtime,
    nqn: String,
    kv_bytes: u64,
    /// The host's runtime (nvmf-host's queues and the bench jobs).
    pub host_rt: tokio::runtime::Runtime,
    node: Option<StorageNode>,
    pub ctrl: Controller,
    pub nvm: Arc<RemoteNamespace>,
    /// The KV namespace, made anew by [`Rig::fresh_kv`].
    pub kv: std::sync::Mutex<Arc<AnyKvNamespace>>,
    kv_nsid: std::sync::atomic::AtomicU32,
    pub drive_name: String,
    pub nvm_bytes: u64,
    pub kv_capacity_bytes: u64,
    drive_file: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

fn runtime(name: &str) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .context("runtime")
}

/// Writes the whole drive file once, so that neither namespace pays for the file
/// system allocating its blocks on first write.
fn prefill(path: &std::path::Path, bytes: u64) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f =
        std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
    let chunk = vec![0u8; 8 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    f.sync_all()?;
    Ok(())
}

impl Rig {
    pub fn start(s: &Settings, medium: &str) -> anyhow::Result<Rig> {
        std::fs::create_dir_all(&s.dir)?;
        let dir = tempfile::Builder::new()
            .prefix("kv-vs-nvm-")
            .tempdir_in(&s.dir)?;
        let size_mib = s.drive_bytes / MIB;
        let (spec, drive_file) = match medium {
            "file" => {
                let path = dir.path().join("drive.img");
                prefill(&path, size_mib * MIB)?;
                (format!("file:{}:{size_mib}M", path.display()), Some(path))
            }
            "ram" => (format!("ram:{size_mib}M"), None),
            other => anyhow::bail!("unknown medium {other:?} (file, ram)"),
        };
        let node_rt = runtime("node")?;
        let host_rt = runtime("host")?;
        let mut cfg = NodeConfig::new("bench", dir.path().join("data"));
        cfg.listen = vec!["127.0.0.1:0".parse()?];
        cfg.discovery_listen = Some("127.0.0.1:0".parse()?);
        cfg.default_namespace = false;
        cfg.drives = vec![parse_node_drive(&spec)?];
        let nvm_bytes = size_mib * 3 / 8 * MIB;
        let kv_bytes = size_mib / 2 * MIB;
        let (node, nqn, nvm_nsid, kv_nsid) = node_rt.block_on(async {
            let node = StorageNode::start(cfg).await?;
            let nvm = node
                .create_namespace(CreateNamespaceRequest {
                    drive: Some("d0".into()),
                    size_bytes: nvm_bytes,
                    block_size_bytes: Some(4096),
                    ..Default::default()
                })
                .await?;
            let kv = node
                .create_namespace(CreateNamespaceRequest {
                    drive: Some("d0".into()),
                    size_bytes: kv_bytes,
                    kv: Some(KvCreateOptions::default()),
                    ..Default::default()
                })
                .await?;
            anyhow::Ok((node, nvm.subsystem_nqn, nvm.nsid, kv.nsid))
        })?;
        let addr = node.nvme_addrs()[0];
        let host = HostIdentity::from_hostnqn(HOSTNQN)?;
        let (ctrl, nvm, kv) = host_rt.block_on(async {
            let ctrl = Controller::connect(addr, &nqn, &host, &ConnectOptions::default()).await?;
            let nvm = ctrl.namespace(nvm_nsid).await?;
            let kv = KvNamespace::open(&ctrl, kv_nsid).await?;
            anyhow::Ok((ctrl, nvm, kv))
        })?;
        let kv_capacity_bytes = kv.info().capacity_bytes;
        Ok(Rig {
            node_rt,
            nqn,
            kv_bytes,
            kv_nsid: std::sync::atomic::AtomicU32::new(kv_nsid),
            host_rt,
            node: Some(node),
            ctrl,
            nvm: Arc::new(nvm),
            kv: std::sync::Mutex::new(Arc::new(AnyKvNamespace::Single(kv))),
            drive_name: spec,
            nvm_bytes,
            kv_capacity_bytes,
            drive_file,
            _dir: dir,
        })
    }

    /// The KV namespace now.
    pub fn kv(&self) -> Arc<AnyKvNamespace> {
        self.kv.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Deletes the KV namespace and makes a new one in its place (an empty store each
    /// round: rounds never fill it, so no compaction runs while measuring). Called from
    /// the host's runtime; the node's work runs on the node's.
    pub async fn fresh_kv(&self) -> anyhow::Result<()> {
        let node = self.node.clone().context("node stopped")?;
        let (nqn, bytes) = (self.nqn.clone(), self.kv_bytes);
        let old = self.kv_nsid.load(std::sync::atomic::Ordering::Relaxed);
        let nsid = self
            .node_rt
            .spawn(async move {
                node.delete_namespace(&nqn, old).await?;
                let v = node
                    .create_namespace(CreateNamespaceRequest {
                        drive: Some("d0".into()),
                        size_bytes: bytes,
                        kv: Some(KvCreateOptions::default()),
                        ..Default::default()
                    })
                    .await?;
                anyhow::Ok(v.nsid)
            })
            .await??;
        self.kv_nsid
            .store(nsid, std::sync::atomic::Ordering::Relaxed);
        let kv = KvNamespace::open(&self.ctrl, nsid).await?;
        *self.kv.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(AnyKvNamespace::Single(kv));
        Ok(())
    }

    pub fn stop(mut self) -> anyhow::Result<()> {
        let ctrl = self.ctrl.clone();
        self.host_rt
            .block_on(async move { ctrl.disconnect().await });
        if let Some(node) = self.node.take() {
            self.node_rt.block_on(node.shutdown())?;
        }
        if let Some(p) = &self.drive_file {
            let _ = std::fs::remove_file(p);
        }
        Ok(())
    }
}
