//! Key Value namespaces on a real node (file and RAM drives, loopback NVMe/TCP through
//! nvmf-host's pass-through): create through the control API and from a host
//! (Namespace Management, CSI 01h), store and read back through the engine, restart
//! (recovery), usage in `ns list`, health and /metrics, a store that cannot be opened
//! exported as not ready, delete.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;

use blockdev::IoBuf;
use nvme_proto::identify::{IdentifyNsIndependent, NsMgmtCommand, cns, csi};
use nvme_proto::kv::{KvCommand, KvIdentifyNamespace, KvKey, KvListData, KvNsCreate, StoreMode};
use nvme_proto::opcode::admin;
use nvme_proto::{Command, Status};
use nvmf_host::queue::Payload;
use nvmf_host::{ConnectOptions, Controller, HostIdentity};
use storage_node::api::{CreateNamespaceRequest, KvCreateOptions};
use storage_node::{ClientError, NodeClient, NodeConfig, StorageNode, parse_node_drive};

const MIB: u64 = 1 << 20;
const D1: &str = "nqn.2026-01.io.ferrobay:n1:d1";

fn local0() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A node with a RAM drive (d0) and an empty 256 MiB file drive (d1, O_DIRECT).
fn config(dir: &Path) -> NodeConfig {
    let mut cfg = NodeConfig::new("n1", dir.join("data"));
    cfg.listen = vec![local0()];
    cfg.discovery_listen = Some(local0());
    cfg.http_listen = Some(local0());
    cfg.default_namespace = false;
    cfg.drives = [
        "ram:64M".to_string(),
        format!("file:{}:256M", dir.join("d1.img").display()),
    ]
    .iter()
    .map(|d| parse_node_drive(d).unwrap())
    .collect();
    cfg
}

fn client(node: &StorageNode) -> NodeClient {
    NodeClient::new(node.http_addr().unwrap().to_string())
        .with_token(Some(node.api_token().as_str().to_string()))
}

fn key(k: &[u8]) -> KvKey {
    KvKey::new(k).unwrap()
}

/// A host's view of one KV namespace through nvmf-host pass-through.
struct KvHost {
    ctrl: Controller,
    nsid: u32,
}

impl KvHost {
    async fn connect(node: &StorageNode, nqn: &str, nsid: u32) -> KvHost {
        let host = HostIdentity::from_hostnqn(
            "nqn.2014-08.org.nvmexpress:uuid:4b560001-0000-4000-8000-000000000001",
        )
        .unwrap();
        let opts = ConnectOptions {
            io_queues: 1,
            ..ConnectOptions::default()
        };
        let ctrl = Controller::connect(node.nvme_addrs()[0], nqn, &host, &opts)
            .await
            .unwrap();
        KvHost { ctrl, nsid }
    }

    async fn run(&self, c: KvCommand, data: Payload) -> (Status, u32, Option<IoBuf>) {
        let done = self
            .ctrl
            .submit_io(c.to_command(0, self.nsid), data)
            .await
            .unwrap();
        (done.cqe.status, done.cqe.dw0, done.buf)
    }

    async fn store(&self, k: &[u8], v: &[u8], mode: StoreMode) -> Status {
        let c = KvCommand::Store {
            key: key(k),
            value_size_bytes: v.len() as u32,
            mode,
            no_compression: false,
        };
        self.run(c, Payload::write(IoBuf::from_slice(v))).await.0
    }

    /// The status, DW0 (the value's size) and the bytes that came back.
    async fn retrieve(&self, k: &[u8], hbs: usize) -> (Status, u32, Vec<u8>) {
        let c = KvCommand::Retrieve {
            key: key(k),
            host_buffer_bytes: hbs as u32,
            raw: false,
        };
        let (st, dw0, buf) = self.run(c, Payload::read(IoBuf::new_zeroed(hbs))).await;
        let n = (dw0 as usize).min(hbs);
        (st, dw0, buf.map(|b| b[..n].to_vec()).unwrap_or_default())
    }

    async fn get(&self, k: &[u8]) -> Option<Vec<u8>> {
        let (st, dw0, _) = self.retrieve(k, 0).await;
        if st != Status::SUCCESS {
            assert_eq!(st, Status::KV_KEY_DOES_NOT_EXIST.dnr());
            return None;
        }
        let (st, _, v) = self.retrieve(k, dw0 as usize).await;
        assert_eq!(st, Status::SUCCESS);
        Some(v)
    }

    async fn delete(&self, k: &[u8]) -> Status {
        self.run(KvCommand::Delete { key: key(k) }, Payload::None)
            .await
            .0
    }

    async fn list(&self, hbs: usize) -> Vec<Vec<u8>> {
        let c = KvCommand::List {
            start: None,
            host_buffer_bytes: hbs as u32,
        };
        let (st, _, buf) = self.run(c, Payload::read(IoBuf::new_zeroed(hbs))).await;
        assert_eq!(st, Status::SUCCESS);
        KvListData::parse(&buf.unwrap())
            .unwrap()
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect()
    }

    async fn identify(&self, cns_: u8, csi_: u8) -> (Status, Vec<u8>) {
        let mut c = Command::new(admin::IDENTIFY, 0, self.nsid);
        c.set_cdw10(u32::from(cns_))
            .set_cdw11(u32::from(csi_) << 24);
        let done = self
            .ctrl
            .admin()
            .submit(c, Payload::read(IoBuf::new_zeroed(4096)))
            .await
            .unwrap();
        (
            done.cqe.status,
            done.buf.map(|b| b.to_vec()).unwrap_or_default(),
        )
    }
}

fn value(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (i.wrapping_mul(131) ^ j.wrapping_mul(7)) as u8)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_namespace_stores_survive_restart_and_show_in_list_health_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let node = StorageNode::start(config(dir.path())).await.unwrap();
    let c = client(&node);
    let created = c
        .create_namespace(&CreateNamespaceRequest {
            drive: Some("d1".into()),
            size_bytes: 96 * MIB - 4096,
            kv: Some(KvCreateOptions {
                max_value_bytes: Some(1 << 20),
                max_keys: Some(5000),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(created.kind, "kv");
    assert_eq!(created.size_bytes, 96 * MIB, "rounded up to whole MiB");
    let kv = created.kv.clone().unwrap();
    assert_eq!((kv.max_value_bytes, kv.max_keys), (1 << 20, 5000));
    assert_eq!((kv.status.as_str(), kv.key_count), ("ok", 0));
    let nsid = created.nsid;
    assert!(node.state().namespace(D1, nsid).unwrap().kind.is_kv());

    let h = KvHost::connect(&node, D1, nsid).await;
    // The host sees a KV namespace with the format asked for.
    let (st, d) = h.identify(cns::CS_NAMESPACE, csi::KEY_VALUE).await;
    assert_eq!(st, Status::SUCCESS);
    let id = KvIdentifyNamespace::decode(&d).unwrap();
    assert_eq!(id.formats()[0].max_value_bytes, 1 << 20);
    assert_eq!(id.formats()[0].max_keys, 5000);
    assert!(id.nsze_bytes > 64 * MIB && id.nsze_bytes < 96 * MIB);
    // Values of many sizes, the largest included; an overwrite; a delete.
    let sizes = [1usize, 100, 4095, 4096, 4097, 65_536, 300_000, 1 << 20];
    for (i, &n) in sizes.iter().enumerate() {
        let k = format!("obj/{i:03}");
        assert_eq!(
            h.store(k.as_bytes(), &value(i, n), StoreMode::Always).await,
            Status::SUCCESS,
            "{k}"
        );
    }
    assert_eq!(
        h.store(b"obj/003", &value(99, 10), StoreMode::OnlyIfExists)
            .await,
        Status::SUCCESS
    );
    assert_eq!(h.delete(b"obj/005").await, Status::SUCCESS);
    assert_eq!(
        h.store(b"x", &vec![1u8; (1 << 20) + 1], StoreMode::Always)
            .await,
        Status::KV_INVALID_VALUE_SIZE.dnr(),
        "above the namespace's largest value"
    );
    let expect = |i: usize| -> Option<Vec<u8>> {
        match i {
            3 => Some(value(99, 10)),
            5 => None,
            _ => Some(value(i, sizes[i])),
        }
    };
    for i in 0..sizes.len() {
        let k = format!("obj/{i:03}");
        assert_eq!(h.get(k.as_bytes()).await, expect(i), "{k}");
    }
    // A short buffer: the value's first bytes, DW0 its whole size.
    let (st, dw0, head) = h.retrieve(b"obj/007", 512).await;
    assert_eq!((st, dw0), (Status::SUCCESS, 1 << 20));
    assert_eq!(head, value(7, 1 << 20)[..512]);
    assert_eq!(h.list(4096).await.len(), sizes.len() - 1);

    // Usage in ns list, health and /metrics.
    let listed = c.namespace(D1, nsid).await.unwrap();
    let kv = listed.kv.unwrap();
    assert_eq!(kv.key_count, sizes.len() as u64 - 1);
    assert!(kv.used_bytes >= (1 << 20) + 300_000);
    let table = storage_node::text::namespaces_table(&c.list_namespaces().await.unwrap());
    assert!(table.contains(" kv "), "{table}");
    let health = c.health().await.unwrap();
    let d1 = health.drives.iter().find(|d| d.name == "d1").unwrap();
    assert_eq!((d1.kv_namespaces, d1.kv_keys), (1, sizes.len() as u64 - 1));
    assert!(d1.host_write_commands >= sizes.len() as u64);
    let metrics = c.metrics().await.unwrap();
    let labels = format!("node=\"n1\",subsystem=\"{D1}\",nsid=\"{nsid}\"");
    assert!(
        metrics.contains(&format!("ferrobay_kv_keys{{{labels}}} {}", sizes.len() - 1)),
        "{metrics}"
    );
    assert!(metrics.contains(&format!("ferrobay_kv_stores_total{{{labels}}} 9")));
    h.ctrl.disconnect().await;

    // A clean restart: the store is recovered from the file drive.
    node.shutdown().await.unwrap();
    let mut cfg = config(dir.path());
    cfg.drives.clear();
    let node = StorageNode::start(cfg).await.unwrap();
    let h = KvHost::connect(&node, D1, nsid).await;
    for i in 0..sizes.len() {
        let k = format!("obj/{i:03}");
        assert_eq!(h.get(k.as_bytes()).await, expect(i), "{k} after restart");
    }
    h.ctrl.disconnect().await;

    // Delete: the store is closed and its extents are free again.
    let c = client(&node);
    c.delete_namespace(D1, nsid).await.unwrap();
    assert!(node.target().namespaces(D1).unwrap().is_empty());
    let health = c.health().await.unwrap();
    let d1 = health.drives.iter().find(|d| d.name == "d1").unwrap();
    assert_eq!((d1.allocated_bytes, d1.kv_namespaces), (0, 0));
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_create_requests_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let node = StorageNode::start(config(dir.path())).await.unwrap();
    let c = client(&node);
    let kv = |size_bytes, max_value_bytes| CreateNamespaceRequest {
        drive: Some("d1".into()),
        size_bytes,
        kv: Some(KvCreateOptions {
            max_value_bytes,
            max_keys: None,
        }),
        ..Default::default()
    };
    let err = |r: Result<_, ClientError>| match r {
        Err(ClientError::Api { status, message }) => (status, message),
        other => panic!("expected an API error, got {other:?}"),
    };
    let (status, msg) = err(c.create_namespace(&kv(64 * MIB, Some(8 << 20))).await);
    assert_eq!(status, 400);
    assert!(msg.contains("MDTS"), "{msg}");
    let (status, msg) = err(c.create_namespace(&kv(8 * MIB, None)).await);
    assert_eq!(status, 400);
    assert!(msg.contains("cannot be formatted"), "{msg}");
    let (status, msg) = err(c
        .create_namespace(&CreateNamespaceRequest {
            block_size_bytes: Some(4096),
            ..kv(64 * MIB, None)
        })
        .await);
    assert_eq!(status, 400);
    assert!(msg.contains("no block size"), "{msg}");
    // Nothing was left allocated by the failures.
    assert!(c.list_namespaces().await.unwrap().is_empty());
    assert_eq!(
        node.health()
            .drives
            .iter()
            .map(|d| d.allocated_bytes)
            .sum::<u64>(),
        0
    );
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_creates_a_kv_namespace_with_namespace_management() {
    let dir = tempfile::tempdir().unwrap();
    let node = StorageNode::start(config(dir.path())).await.unwrap();
    let h = KvHost::connect(&node, D1, 0).await;
    let cmd = NsMgmtCommand {
        nsid: 0,
        sel: NsMgmtCommand::SEL_CREATE,
        csi: csi::KEY_VALUE,
    }
    .to_command(0);
    let data = KvNsCreate {
        size_bytes: 64 * MIB,
        capacity_bytes: 64 * MIB,
        ..KvNsCreate::default()
    }
    .to_create()
    .to_bytes();
    let done = h
        .ctrl
        .admin()
        .submit(cmd, Payload::write(IoBuf::from_slice(&data[..])))
        .await
        .unwrap();
    assert_eq!(done.cqe.status, Status::SUCCESS);
    let nsid = done.cqe.dw0;
    let rec = node.state().namespace(D1, nsid).cloned().unwrap();
    assert!(rec.kind.is_kv());
    assert_eq!(rec.size_bytes, 64 * MIB);
    assert_eq!(
        rec.attachment,
        storage_node::state::Attachment::Hosts(vec![]),
        "created detached"
    );
    let view = node.namespace(D1, nsid).unwrap();
    assert_eq!(view.kv.unwrap().max_value_bytes, 2 << 20);
    // An NVM create still works beside it; a zoned one is not supported.
    let zoned = NsMgmtCommand {
        csi: csi::ZONED,
        ..NsMgmtCommand {
            nsid: 0,
            sel: NsMgmtCommand::SEL_CREATE,
            csi: 0,
        }
    }
    .to_command(0);
    let done = h
        .ctrl
        .admin()
        .submit(zoned, Payload::write(IoBuf::from_slice(&data[..])))
        .await
        .unwrap();
    assert_eq!(done.cqe.status, Status::IO_COMMAND_SET_NOT_SUPPORTED.dnr());
    h.ctrl.disconnect().await;
    node.delete_namespace(D1, nsid).await.unwrap();
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_be_opened_is_exported_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let node = StorageNode::start(config(dir.path())).await.unwrap();
    let c = client(&node);
    let kvns = c
        .create_namespace(&CreateNamespaceRequest {
            drive: Some("d1".into()),
            size_bytes: 64 * MIB,
            kv: Some(KvCreateOptions::default()),
            ..Default::default()
        })
        .await
        .unwrap();
    let nvm = c
        .create_namespace(&CreateNamespaceRequest {
            drive: Some("d1".into()),
            size_bytes: 16 * MIB,
            ..Default::default()
        })
        .await
        .unwrap();
    let h = KvHost::connect(&node, D1, kvns.nsid).await;
    assert_eq!(
        h.store(b"k", b"v", StoreMode::Always).await,
        Status::SUCCESS
    );
    h.ctrl.disconnect().await;
    node.shutdown().await.unwrap();

    // Garbage over the store's superblock (the first block of its extent).
    let offset = kvns.extents[0].offset_bytes;
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("d1.img"))
            .unwrap();
        f.seek(SeekFrom::Start(offset)).unwrap();
        f.write_all(&[0xEE; 4096]).unwrap();
        f.sync_all().unwrap();
    }
    let mut cfg = config(dir.path());
    cfg.drives.clear();
    let node = StorageNode::start(cfg).await.unwrap();
    let view = node.namespace(D1, kvns.nsid).unwrap();
    let status = view.kv.unwrap().status;
    assert!(status.contains("not a KV store"), "{status}");
    // Exported, not ready; its commands say so; the NVM namespace beside it serves.
    let h = KvHost::connect(&node, D1, kvns.nsid).await;
    let (st, d) = h.identify(cns::CS_INDEPENDENT_NAMESPACE, 0).await;
    assert_eq!(st, Status::SUCCESS);
    assert_eq!(IdentifyNsIndependent::decode(&d).unwrap().nstat & 1, 0);
    let (st, _, _) = h.retrieve(b"k", 16).await;
    assert_eq!(st, Status::NAMESPACE_NOT_READY);
    let dev = h.ctrl.namespace(nvm.nsid).await.unwrap();
    use blockdev::BlockDevice;
    let w = IoBuf::from_slice(&[0x42; 4096]);
    dev.write(0, w, Default::default()).await.unwrap();
    let r = dev.read(0, IoBuf::new_zeroed(4096)).await.unwrap();
    assert!(r.iter().all(|&b| b == 0x42));
    h.ctrl.disconnect().await;
    node.shutdown().await.unwrap();
}
