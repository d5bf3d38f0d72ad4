//! The KV client against a real storage node (crates/storage-node: the log-structured
//! `kv` engine on a RAM or O_DIRECT file drive, served by nvmf-target) over real TCP:
//! every command and option, values from 1 byte to the largest, bad input refused with
//! the right error on a connection that keeps working, a short Retrieve buffer, List
//! pagination, a target restart ridden out with the data kept, and multipath failover
//! and ANA between two listeners.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use blockdev::IoBuf;
use common::{host, pattern};
use nvme_proto::kv::{KvCommand, KvKey, KvListData};
use nvme_proto::{Command, Status};
use nvmf_host::kv::SizeLimit;
use nvmf_host::queue::Payload;
use nvmf_host::{
    AnyKvNamespace, ConnectOptions, ControllerState, HostError, KvError, KvNamespace,
    MultipathKvNamespace, MultipathOptions, NvmeTcpUrl, PathInfo, StoreMode,
};
use nvmf_target::AnaState;
use storage_node::api::{CreateNamespaceRequest, KvCreateOptions};
use storage_node::{NodeConfig, StorageNode, parse_node_drive};
use testkit::proxy::Proxy;

const LIMIT: Duration = Duration::from_secs(90);
const MIB: u64 = 1 << 20;

fn local0() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A node named n1 with `drives`, listening on `listen` (port 0: any), no namespace
/// made for new drives, no HTTP port.
fn config(dir: &Path, listen: SocketAddr, drives: &[String]) -> NodeConfig {
    let mut cfg = NodeConfig::new("n1", dir.join("data"));
    cfg.listen = vec![listen];
    cfg.discovery_listen = Some(local0());
    cfg.default_namespace = false;
    cfg.drives = drives
        .iter()
        .map(|d| parse_node_drive(d).unwrap())
        .collect();
    cfg
}

/// Creates a KV namespace of `size_bytes` on drive `drive`; returns (NQN, NSID).
async fn kv_namespace(node: &StorageNode, drive: &str, size_bytes: u64) -> (String, u32) {
    let v = node
        .create_namespace(CreateNamespaceRequest {
            drive: Some(drive.into()),
            size_bytes,
            kv: Some(KvCreateOptions::default()),
            ..Default::default()
        })
        .await
        .unwrap();
    (v.subsystem_nqn, v.nsid)
}

fn opts() -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 64,
        kato_ms: 1000,
        io_timeout_ms: 10_000,
        admin_timeout_ms: 5_000,
        connect_timeout_ms: 2_000,
        reconnect_delay_ms: 50,
        reconnect_delay_max_ms: 200,
        ctrl_loss_tmo_ms: None,
        ..ConnectOptions::default()
    }
}

fn url(addrs: &[SocketAddr], nqn: &str, nsid: u32) -> NvmeTcpUrl {
    let a: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    NvmeTcpUrl::parse(&format!("nvme+tcp://{}/{nqn}/{nsid}", a.join(","))).unwrap()
}

fn buf(data: &[u8]) -> IoBuf {
    IoBuf::from_slice(data)
}

async fn store(
    ns: &AnyKvNamespace,
    key: &[u8],
    value: &[u8],
    mode: StoreMode,
) -> Result<(), KvError> {
    ns.store(key, buf(value), mode).await.0
}

/// The whole value of `key`: asks its size with an empty buffer, then reads it.
async fn get(ns: &AnyKvNamespace, key: &[u8]) -> Result<Vec<u8>, KvError> {
    let (r, _) = ns.retrieve(key, IoBuf::new_zeroed(0)).await;
    let size = r? as usize;
    let (r, b) = ns.retrieve(key, IoBuf::new_zeroed(size)).await;
    assert_eq!(r?, size as u32, "the value's size in DW0");
    Ok(b.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_and_option_round_trips_and_bad_input_keeps_the_connection() {
    tokio::time::timeout(LIMIT, async {
        let dir = tempfile::tempdir().unwrap();
        let node = StorageNode::start(config(dir.path(), local0(), &["ram:160M".into()]))
            .await
            .unwrap();
        let (nqn, nsid) = kv_namespace(&node, "d0", 96 * MIB).await;
        let addr = node.nvme_addrs()[0];
        let ns = url(&[addr], &nqn, nsid)
            .open_kv(&host(), &opts(), MultipathOptions::default())
            .await
            .unwrap();
        let info = ns.info().clone();
        assert!(matches!(ns, AnyKvNamespace::Single(_)));
        assert_eq!(info.max_key_bytes, 16);
        assert_eq!(info.max_value_bytes, 2 << 20, "the node's default KVVML");
        assert!(info.capacity_bytes > 32 * MIB && info.capacity_bytes < 96 * MIB, "{info:?}");
        let max = info.max_value_bytes as usize;

        // Values from 1 byte to the largest, keys of 1 to 16 bytes.
        let sizes = [1usize, 2, 511, 4095, 4096, 4097, 8192, 65_537, 1 << 20, max - 1, max];
        for (i, &n) in sizes.iter().enumerate() {
            let key = format!("v{i:0w$}", w = i % 15 + 1);
            let v = pattern(n, i as u64);
            store(&ns, key.as_bytes(), &v, StoreMode::Always).await.unwrap();
            assert_eq!(get(&ns, key.as_bytes()).await.unwrap(), v, "{n} bytes");
        }

        // Store options.
        let v1 = pattern(100, 1);
        let v2 = pattern(200, 2);
        assert!(matches!(
            store(&ns, b"opt", &v1, StoreMode::OnlyIfExists).await,
            Err(KvError::KeyNotFound)
        ));
        assert!(!ns.exist(b"opt").await.unwrap(), "a refused store stores nothing");
        store(&ns, b"opt", &v1, StoreMode::OnlyIfAbsent).await.unwrap();
        assert!(matches!(
            store(&ns, b"opt", &v2, StoreMode::OnlyIfAbsent).await,
            Err(KvError::KeyExists)
        ));
        assert_eq!(get(&ns, b"opt").await.unwrap(), v1, "create-only kept the old value");
        store(&ns, b"opt", &v2, StoreMode::OnlyIfExists).await.unwrap();
        assert_eq!(get(&ns, b"opt").await.unwrap(), v2);
        store(&ns, b"opt", &v1, StoreMode::Always).await.unwrap();
        assert_eq!(get(&ns, b"opt").await.unwrap(), v1);

        // Exist, Delete; Delete of an absent key succeeds (EDNEK clear).
        assert!(ns.exist(b"opt").await.unwrap());
        ns.delete(b"opt").await.unwrap();
        assert!(!ns.exist(b"opt").await.unwrap());
        assert!(matches!(get(&ns, b"opt").await, Err(KvError::KeyNotFound)));
        ns.delete(b"opt").await.unwrap();

        // A short buffer: the value's first bytes, its whole size, the rest zero.
        let big = pattern(300_000, 9);
        store(&ns, b"big", &big, StoreMode::Always).await.unwrap();
        let mut short = IoBuf::new_zeroed(4096);
        short.fill(0xEE);
        let (r, short) = ns.retrieve(b"big", short).await;
        assert_eq!(r.unwrap(), 300_000);
        assert_eq!(&short[..], &big[..4096]);
        let (r, long) = ns.retrieve(b"big", IoBuf::from_slice(&[0xEE; 400_000])).await;
        assert_eq!(r.unwrap(), 300_000);
        assert_eq!(&long[..300_000], &big[..]);
        assert!(long[300_000..].iter().all(|&b| b == 0), "zero past the value");

        // Bad input, refused here before anything is sent, with the buffer back.
        let gen0 = ns_generation(&ns);
        for bad in [&b""[..], &[7u8; 17][..]] {
            let (r, back) = ns.store(bad, buf(b"x"), StoreMode::Always).await;
            assert!(
                matches!(r, Err(KvError::InvalidKeySize { len_bytes, max_bytes: 16 }) if len_bytes == bad.len()),
                "{r:?}"
            );
            assert_eq!(&back[..], b"x");
            assert!(matches!(ns.exist(bad).await, Err(KvError::InvalidKeySize { .. })));
            assert!(matches!(ns.delete(bad).await, Err(KvError::InvalidKeySize { .. })));
            let (r, _) = ns.retrieve(bad, IoBuf::new_zeroed(8)).await;
            assert!(matches!(r, Err(KvError::InvalidKeySize { .. })));
        }
        let (r, _) = ns.store(b"k", IoBuf::new_zeroed(0), StoreMode::Always).await;
        assert!(
            matches!(r, Err(KvError::InvalidValueSize { bytes: 0, limit: SizeLimit::Empty, .. })),
            "{r:?}"
        );
        let (r, back) = ns.store(b"k", IoBuf::new_zeroed(max + 1), StoreMode::Always).await;
        let e = r.unwrap_err();
        assert!(
            matches!(e, KvError::InvalidValueSize { limit: SizeLimit::Kvvml, .. }),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "invalid value size: {} bytes is outside the namespace's largest value (KVVML) ({max} bytes)",
                max + 1
            )
        );
        assert_eq!(back.len(), max + 1, "the buffer comes back");
        let mdts = info.max_transfer_bytes as usize;
        let (r, _) = ns.retrieve(b"big", IoBuf::new_zeroed(mdts + 1)).await;
        assert!(matches!(r, Err(KvError::InvalidBufferSize { .. })), "{r:?}");
        let (r, _) = ns.list_into(None, IoBuf::new_zeroed(3)).await;
        assert!(matches!(r, Err(KvError::InvalidBufferSize { .. })), "{r:?}");

        // The same bad input sent raw reaches the target, which answers with the
        // specification's status on a connection that stays up.
        let AnyKvNamespace::Single(single) = &ns else {
            unreachable!()
        };
        let ctrl = single.controller();
        let mut kl0 = KvCommand::Exist {
            key: KvKey::new(b"a").unwrap(),
        }
        .to_command(0, nsid);
        kl0.set_cdw11(0);
        let mut kl17 = kl0;
        kl17.set_cdw11(17);
        let too_big = KvCommand::Store {
            key: KvKey::new(b"a").unwrap(),
            value_size_bytes: max as u32 + 1,
            mode: StoreMode::Always,
            no_compression: false,
        }
        .to_command(0, nsid);
        let raw: [(Command, Payload, Status); 3] = [
            (kl0, Payload::None, Status::KV_INVALID_KEY_SIZE.dnr()),
            (kl17, Payload::None, Status::INVALID_FIELD.dnr()),
            (
                too_big,
                Payload::write(IoBuf::new_zeroed(max + 1)),
                Status::KV_INVALID_VALUE_SIZE.dnr(),
            ),
        ];
        for (cmd, data, want) in raw {
            let done = ctrl.submit_io(cmd, data).await.unwrap();
            assert_eq!(done.cqe.status, want);
        }
        // Still the first connection, and it serves.
        assert_eq!(ns_generation(&ns), gen0, "no reconnect");
        assert_eq!(get(&ns, b"big").await.unwrap(), big);

        // A KV client on an NVM namespace, and a block client on a KV namespace, are
        // refused with a message that says why.
        let nvm = node
            .create_namespace(CreateNamespaceRequest {
                drive: Some("d0".into()),
                size_bytes: 16 * MIB,
                ..Default::default()
            })
            .await
            .unwrap();
        let e = KvNamespace::open(ctrl, nvm.nsid).await.unwrap_err();
        assert!(
            e.to_string()
                .contains("not a Key Value namespace: it is an NVM (block) namespace"),
            "{e}"
        );
        let e = url(&[addr], &nqn, nvm.nsid)
            .open_kv(&host(), &opts(), MultipathOptions::default())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("not a Key Value namespace"), "{e}");
        let e = ctrl.namespace(nsid).await.unwrap_err();
        assert!(
            e.to_string().contains("it is a Key Value namespace (CSI 01h)"),
            "{e}"
        );
        // A URL that names no namespace opens the first of the kind asked for: the block
        // namespace behind the KV one for a block client, the KV one for a KV client.
        assert_eq!(nvm.subsystem_nqn, nqn, "both namespaces in the drive's subsystem");
        let no_nsid = NvmeTcpUrl::parse(&format!("nvme+tcp://{addr}/{nqn}")).unwrap();
        let block = no_nsid.open(&host(), &opts()).await.unwrap();
        assert_eq!(block.nsid(), nvm.nsid);
        block.controller().disconnect().await;
        let AnyKvNamespace::Single(kv) = no_nsid
            .open_kv(&host(), &opts(), MultipathOptions::default())
            .await
            .unwrap()
        else {
            panic!("one address opens a single-path namespace");
        };
        assert_eq!(kv.nsid(), nsid);
        kv.controller().disconnect().await;
        ns.disconnect().await;
        node.shutdown().await.unwrap();
    })
    .await
    .unwrap();
}

/// The connect count of a single-path namespace's controller.
fn ns_generation(ns: &AnyKvNamespace) -> u64 {
    match ns {
        AnyKvNamespace::Single(n) => n.controller().status().generation,
        AnyKvNamespace::Multipath(_) => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_through_every_key_in_order_and_commands_pipeline() {
    tokio::time::timeout(LIMIT, async {
        let dir = tempfile::tempdir().unwrap();
        let node = StorageNode::start(config(dir.path(), local0(), &["ram:96M".into()]))
            .await
            .unwrap();
        let (nqn, nsid) = kv_namespace(&node, "d0", 64 * MIB).await;
        let ns = Arc::new(
            url(&node.nvme_addrs(), &nqn, nsid)
                .open_kv(&host(), &opts(), MultipathOptions::default())
                .await
                .unwrap(),
        );
        // 400 keys of 1 to 16 bytes, stored by 32 tasks at once (pipelined: each task
        // has one command in flight, the queues hold them all).
        let keys: Vec<Vec<u8>> = (0..400u32)
            .map(|i| {
                let k = pattern(16, u64::from(i) + 1000);
                k[..(i as usize % 16) + 1].to_vec()
            })
            .collect();
        let model: BTreeMap<Vec<u8>, Vec<u8>> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), pattern(64 + i, i as u64)))
            .collect();
        let items: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
        let chunks: Vec<Vec<(Vec<u8>, Vec<u8>)>> = items
            .chunks(items.len().div_ceil(32))
            .map(|c| c.to_vec())
            .collect();
        let tasks: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let ns = ns.clone();
                tokio::spawn(async move {
                    for (k, v) in chunk {
                        ns.store(&k, IoBuf::from_slice(&v), StoreMode::Always)
                            .await
                            .0
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        // Read back concurrently too.
        let reads = model.iter().map(|(k, v)| {
            let ns = ns.clone();
            async move {
                let (r, b) = ns.retrieve(k, IoBuf::new_zeroed(v.len())).await;
                assert_eq!(r.unwrap() as usize, v.len());
                assert_eq!(&b[..], &v[..]);
            }
        });
        futures::future::join_all(reads).await;

        // Page through all keys, 7 at a time: every key once, in order.
        let want: Vec<Vec<u8>> = model.keys().cloned().collect();
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut from: Option<Vec<u8>> = None;
        let mut pages = 0;
        loop {
            let page = ns.list(from.as_deref(), 7).await.unwrap();
            assert!(page.keys.len() <= 7);
            got.extend(page.keys.iter().map(|k| k.as_bytes().to_vec()));
            pages += 1;
            match page.next {
                Some(n) => from = Some(n.as_bytes().to_vec()),
                None => break,
            }
        }
        assert_eq!(got, want);
        assert!(pages >= 400 / 7, "{pages} pages");
        // From a key in the middle (inclusive), and from one between two keys.
        let mid = &want[200];
        let page = ns.list(Some(mid), 3).await.unwrap();
        let page_keys: Vec<Vec<u8>> = page.keys.iter().map(|k| k.as_bytes().to_vec()).collect();
        assert_eq!(page_keys, want[200..203].to_vec());
        let mut between = mid.clone();
        between.push(0);
        if !model.contains_key(&between) && between.len() <= 16 {
            let page = ns.list(Some(&between), 1).await.unwrap();
            assert_eq!(page.keys[0].as_bytes(), &want[201][..]);
        }
        // A List buffer with room for a few entries only: the whole entries that fit.
        let (r, b) = ns.list_into(None, IoBuf::new_zeroed(64)).await;
        let n = r.unwrap();
        let listed = KvListData::parse(&b).unwrap();
        assert_eq!(listed.count(), n);
        assert!(n >= 3, "{n} keys in 64 bytes");
        let first: Vec<Vec<u8>> = listed.iter().map(|k| k.as_bytes().to_vec()).collect();
        assert_eq!(first, want[..n as usize].to_vec());
        ns.disconnect().await;
        node.shutdown().await.unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_restart_is_ridden_out_and_the_data_persists() {
    tokio::time::timeout(LIMIT, async {
        let dir = tempfile::tempdir().unwrap();
        let port = testkit::net::free_port().unwrap();
        let listen: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let drive = format!("file:{}:192M", dir.path().join("d0.img").display());
        let node = StorageNode::start(config(dir.path(), listen, std::slice::from_ref(&drive)))
            .await
            .unwrap();
        let (nqn, nsid) = kv_namespace(&node, "d0", 128 * MIB).await;
        let ns = Arc::new(
            url(&[listen], &nqn, nsid)
                .open_kv(&host(), &opts(), MultipathOptions::default())
                .await
                .unwrap(),
        );
        let mut model = BTreeMap::new();
        for i in 0..64u64 {
            let k = format!("key{i:04}").into_bytes();
            let v = pattern(1000 + (i as usize * 997) % 200_000, i);
            store(&ns, &k, &v, StoreMode::Always).await.unwrap();
            model.insert(k, v);
        }
        ns.delete(b"key0003").await.unwrap();
        model.remove(&b"key0003"[..]);

        // The node stops; commands issued meanwhile wait for the reconnect.
        node.shutdown().await.unwrap();
        drop(node);
        let during = {
            let ns = ns.clone();
            tokio::spawn(async move {
                let v = pattern(5000, 77);
                store(&ns, b"during", &v, StoreMode::OnlyIfAbsent)
                    .await
                    .unwrap();
                get(&ns, b"key0010").await.unwrap()
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!during.is_finished(), "it waits for the target");
        let mut cfg = config(dir.path(), listen, &[]);
        cfg.drives.clear();
        let node = StorageNode::start(cfg).await.unwrap();
        let v10 = during.await.unwrap();
        assert_eq!(v10, model[&b"key0010"[..]]);
        model.insert(b"during".to_vec(), pattern(5000, 77));
        // Everything acknowledged before the restart is there, and nothing else.
        for (k, v) in &model {
            assert_eq!(
                &get(&ns, k).await.unwrap(),
                v,
                "{}",
                String::from_utf8_lossy(k)
            );
        }
        assert!(matches!(
            get(&ns, b"key0003").await,
            Err(KvError::KeyNotFound)
        ));
        let all = match &*ns {
            AnyKvNamespace::Single(n) => n.list_all(None, 50).await.unwrap(),
            AnyKvNamespace::Multipath(_) => unreachable!(),
        };
        let all: Vec<Vec<u8>> = all.iter().map(|k| k.as_bytes().to_vec()).collect();
        assert_eq!(all, model.keys().cloned().collect::<Vec<_>>());
        if let AnyKvNamespace::Single(n) = &*ns {
            assert!(n.controller().status().generation >= 2, "it reconnected");
        }
        ns.disconnect().await;
        node.shutdown().await.unwrap();
    })
    .await
    .unwrap();
}

/// A node with a KV namespace on a RAM drive and two extra listeners (their handles set
/// ANA states), each behind a proxy the test can cut.
struct TwoPaths {
    node: StorageNode,
    l1: nvmf_target::ListenerHandle,
    l2: nvmf_target::ListenerHandle,
    p1: Proxy,
    p2: Proxy,
    nqn: String,
    nsid: u32,
}

async fn two_paths(dir: &Path) -> TwoPaths {
    let node = StorageNode::start(config(dir, local0(), &["ram:96M".into()]))
        .await
        .unwrap();
    let (nqn, nsid) = kv_namespace(&node, "d0", 64 * MIB).await;
    let l1 = node.target().listen(local0()).await.unwrap();
    let l2 = node.target().listen(local0()).await.unwrap();
    let p1 = Proxy::start(l1.local_addr()).await;
    let p2 = Proxy::start(l2.local_addr()).await;
    TwoPaths {
        node,
        l1,
        l2,
        p1,
        p2,
        nqn,
        nsid,
    }
}

async fn until(mp: &MultipathKvNamespace, what: &str, f: impl Fn(&[PathInfo]) -> bool) {
    for _ in 0..2000 {
        if f(&mp.paths()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}: {:?}", mp.paths());
}

/// Tasks storing and reading back their own keys with a generation in each value,
/// counting errors; `finish` checks every key's last acknowledged value.
struct Workload {
    stop: Arc<AtomicBool>,
    errors: Arc<AtomicU64>,
    ops: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<Vec<u64>>>,
}

const WORKERS: u64 = 4;
const KEYS_PER_WORKER: u64 = 32;

fn wkey(w: u64, k: u64) -> Vec<u8> {
    format!("w{w}/{k:03}").into_bytes()
}

fn wval(w: u64, k: u64, g: u64) -> Vec<u8> {
    pattern(
        512 + ((w * 31 + k * 7) % 8) as usize * 1000,
        (w << 40) ^ (k << 20) ^ g,
    )
}

fn start_workload(mp: &Arc<MultipathKvNamespace>) -> Workload {
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let ops = Arc::new(AtomicU64::new(0));
    let tasks = (0..WORKERS)
        .map(|w| {
            let (mp, stop, errors, ops) = (mp.clone(), stop.clone(), errors.clone(), ops.clone());
            tokio::spawn(async move {
                let mut gens = vec![0u64; KEYS_PER_WORKER as usize];
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let k = (i * 5 + w) % KEYS_PER_WORKER;
                    i += 1;
                    let g = gens[k as usize] + 1;
                    let v = wval(w, k, g);
                    if let Err(e) = mp
                        .store(&wkey(w, k), IoBuf::from_slice(&v), StoreMode::Always)
                        .await
                        .0
                    {
                        eprintln!("store error: {e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    gens[k as usize] = g;
                    let (r, b) = mp.retrieve(&wkey(w, k), IoBuf::new_zeroed(v.len())).await;
                    match r {
                        Ok(n) if n as usize == v.len() && b[..] == v[..] => {}
                        other => {
                            eprintln!("retrieve: {other:?}");
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    ops.fetch_add(2, Ordering::Relaxed);
                }
                gens
            })
        })
        .collect();
    Workload {
        stop,
        errors,
        ops,
        tasks,
    }
}

impl Workload {
    async fn progress(&self, n: u64) {
        let target = self.ops.load(Ordering::Relaxed) + n;
        while self.ops.load(Ordering::Relaxed) < target {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn finish(self, mp: &MultipathKvNamespace) {
        self.stop.store(true, Ordering::Relaxed);
        for (w, t) in self.tasks.into_iter().enumerate() {
            let gens = t.await.unwrap();
            for (k, &g) in gens.iter().enumerate() {
                let (w, k) = (w as u64, k as u64);
                let (r, b) = mp.retrieve(&wkey(w, k), IoBuf::new_zeroed(16 << 10)).await;
                if g == 0 {
                    assert!(matches!(r, Err(KvError::KeyNotFound)));
                    continue;
                }
                let want = wval(w, k, g);
                assert_eq!(r.unwrap() as usize, want.len());
                assert_eq!(&b[..want.len()], &want[..], "worker {w} key {k} gen {g}");
            }
        }
        assert_eq!(
            self.errors.load(Ordering::Relaxed),
            0,
            "errors during the run"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipath_fails_over_between_two_listeners_with_zero_errors() {
    tokio::time::timeout(LIMIT, async {
        let dir = tempfile::tempdir().unwrap();
        let s = two_paths(dir.path()).await;
        let AnyKvNamespace::Multipath(mp) = url(&[s.p1.addr, s.p2.addr], &s.nqn, s.nsid)
            .open_kv(&host(), &opts(), MultipathOptions::default())
            .await
            .unwrap()
        else {
            panic!("two addresses open a multipath namespace");
        };
        let mp = Arc::new(mp);
        assert_eq!(mp.paths().len(), 2);
        let w = start_workload(&mp);
        w.progress(300).await;
        let before = mp.paths();
        assert!(before[0].ios > 0 && before[1].ios == 0, "{before:?}");

        // Path 1's network dies: every command moves to path 2 without an error.
        s.p1.cut();
        until(&mp, "path 1 down", |p| p[0].state != ControllerState::Live).await;
        let at_cut = mp.paths();
        w.progress(300).await;
        let after = mp.paths();
        assert!(after[1].ios > at_cut[1].ios + 100, "{after:?}");

        // It comes back and takes the commands again.
        s.p1.restore().await;
        until(&mp, "path 1 live", |p| {
            p[0].state == ControllerState::Live && p[0].usable
        })
        .await;
        let back = mp.paths();
        w.progress(300).await;
        let end = mp.paths();
        assert!(end[0].ios > back[0].ios + 100, "{end:?}");

        // ANA: path 1 inaccessible, path 2 optimized: commands move without errors.
        let group = mp.info().anagrpid;
        s.l1.set_ana_state(group, AnaState::Inaccessible).unwrap();
        until(&mp, "path 1 inaccessible", |p| !p[0].usable).await;
        let at = mp.paths();
        w.progress(300).await;
        let p = mp.paths();
        assert!(p[1].ios > at[1].ios + 100, "{p:?}");
        assert_eq!(
            p[0].ios, at[0].ios,
            "nothing on the inaccessible path: {p:?}"
        );
        s.l1.set_ana_state(group, AnaState::Optimized).unwrap();
        let _ = &s.l2;
        w.finish(&mp).await;
        mp.disconnect().await;
        s.node.shutdown().await.unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipath_namespace_with_no_reachable_path_fails_fast_and_recovers() {
    tokio::time::timeout(LIMIT, async {
        let dir = tempfile::tempdir().unwrap();
        let s = two_paths(dir.path()).await;
        let mp = MultipathKvNamespace::connect(
            vec![s.p1.addr.into()],
            &s.nqn,
            Some(s.nsid),
            &host(),
            &ConnectOptions {
                ctrl_loss_tmo_ms: Some(300),
                ..opts()
            },
            MultipathOptions {
                no_path_timeout_ms: 200,
                ..MultipathOptions::default()
            },
        )
        .await
        .unwrap();
        store_mp(&mp, b"a", b"1").await.unwrap();
        s.p1.cut();
        until(&mp, "path down", |p| p.is_empty() || !p[0].usable).await;
        let t0 = std::time::Instant::now();
        let e = store_mp(&mp, b"a", b"2").await.unwrap_err();
        assert!(e.is_unavailable(), "{e:?}");
        assert!(
            matches!(e, KvError::Host(HostError::NoPath { .. })),
            "{e:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        // After the controller-loss timeout the path is connected again from scratch
        // when it returns.
        tokio::time::sleep(Duration::from_millis(600)).await;
        s.p1.restore().await;
        until(&mp, "path back", |p| p.len() == 1 && p[0].usable).await;
        store_mp(&mp, b"a", b"3").await.unwrap();
        let (r, b) = mp.retrieve(b"a", IoBuf::new_zeroed(1)).await;
        assert_eq!((r.unwrap(), &b[..]), (1, &b"3"[..]));
        let _ = (&s.l1, &s.l2, &s.p2);
        mp.disconnect().await;
        s.node.shutdown().await.unwrap();
    })
    .await
    .unwrap();
}

async fn store_mp(mp: &MultipathKvNamespace, k: &[u8], v: &[u8]) -> Result<(), KvError> {
    mp.store(k, IoBuf::from_slice(v), StoreMode::Always).await.0
}
