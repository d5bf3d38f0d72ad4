//! The central discovery controller against real parts: three storage nodes in this
//! process (sparse-file drives, loopback, port 0) that publish their subsystems in their
//! node records, a processor node, the embedded store, and our own initiator: one-shot
//! discovery per host (access lists filter), a persistent discovery connection (KATO,
//! AER) that gets the discovery log change event and sees a new volume after it is
//! created, then connects to it through the entry; a node that leaves drops out. A
//! processor node with a TLS listener: its own discovery controller and the CDC list the
//! volume on both listeners, the TLS one as a TLS entry, and our initiator connects to that
//! entry with the volume's PSK.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use control::cdc::{Cdc, CdcConfig};
use control::exports::storage_node_feed;
use control::processor::{Processor, ProcessorConfig};
use control::provision::{CreateVolume, create_volume};
use control::records::{processor_hostnqn, volume_nqn};
use control::registration::LiveRegistration;
use meta::MetaStore;
use nvme_proto::log::discovery::subtype;
use nvmf_host::discovery::{entry_socket_addr, read_discovery_log};
use nvmf_host::{ConnectOptions, Controller, DiscoveryEntry, HostIdentity, NvmeTcpUrl, discover};
use nvmf_target::DISCOVERY_NQN;
use storage_node::StorageNode;

use common::{TTL, embedded_store, local0, start_node};

const LIMIT: Duration = Duration::from_secs(60);
/// A host allowed on every volume, not on the drive of n0.
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-1111-2222-3333-444444444444";

fn host() -> HostIdentity {
    HostIdentity::from_hostnqn(HOST).unwrap()
}

fn p1_host() -> HostIdentity {
    HostIdentity::from_hostnqn(&processor_hostnqn("p1")).unwrap()
}

fn drive_nqn(node: &str) -> String {
    format!("nqn.2026-01.io.ferrobay:{node}:d0")
}

fn raid5(name: &str) -> CreateVolume {
    CreateVolume {
        name: name.into(),
        level: "raid5".into(),
        size_bytes: 16 << 20,
        storage_nodes: vec!["n0".into(), "n1".into(), "n2".into()],
        preferred_owner: Some("p1".into()),
        ..CreateVolume::default()
    }
}

fn nqns(entries: &[DiscoveryEntry], st: u8) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e.subtype == st)
        .map(|e| e.subnqn.clone())
        .collect()
}

/// Discovery as `host` until `ok` holds for the entries (records propagate in the
/// background).
async fn discover_until(
    cdc: SocketAddr,
    host: &HostIdentity,
    what: &str,
    ok: impl Fn(&[DiscoveryEntry]) -> bool,
) -> Vec<DiscoveryEntry> {
    let t0 = Instant::now();
    loop {
        let entries = discover(cdc, host).await.unwrap();
        if ok(&entries) {
            return entries;
        }
        assert!(
            t0.elapsed() < LIMIT,
            "{what}: not within {LIMIT:?}: {entries:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Cluster {
    _dir: tempfile::TempDir,
    store: Arc<dyn MetaStore>,
    nodes: Vec<(StorageNode, Option<LiveRegistration>)>,
    processor: Option<Processor>,
    cdc: Option<Cdc>,
}

impl Cluster {
    async fn start() -> Cluster {
        Cluster::start_with(false).await
    }

    /// `tls`: the processor node has a TLS listener beside its plain one.
    async fn start_with(tls: bool) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let store = embedded_store(&dir.path().join("meta")).await;
        // The CDC first: it follows the records as they appear.
        let cdc = Cdc::start(store.clone(), CdcConfig::new(vec![local0()]))
            .await
            .unwrap();
        // The nodes take the cluster's API token, as `node run --meta` does.
        let token = control::auth::cluster_token(store.as_ref()).await.unwrap();
        let mut nodes = Vec::new();
        for i in 0..3 {
            let name = format!("n{i}");
            let node = start_node(&name, &dir.path().join(&name), 128, &token).await;
            if i == 0 {
                // n0's drive serves the processor node only.
                node.allow_host(&drive_nqn("n0"), &processor_hostnqn("p1"))
                    .await
                    .unwrap();
            }
            let reg = LiveRegistration::start(store.clone(), storage_node_feed(&node), TTL)
                .await
                .unwrap();
            nodes.push((node, Some(reg)));
        }
        let mut pcfg = ProcessorConfig::new("p1");
        pcfg.listen = vec![local0()];
        if tls {
            pcfg.tls_listen = vec![local0()];
        }
        pcfg.poll_ms = 50;
        let processor = Processor::start(store.clone(), pcfg).await.unwrap();
        Cluster {
            _dir: dir,
            store,
            nodes,
            processor: Some(processor),
            cdc: Some(cdc),
        }
    }

    fn cdc_addr(&self) -> SocketAddr {
        self.cdc.as_ref().unwrap().addrs()[0]
    }

    fn p1_addr(&self) -> SocketAddr {
        self.processor.as_ref().unwrap().nvme_addrs()[0]
    }

    async fn stop(mut self) {
        if let Some(c) = self.cdc.take() {
            c.stop().await;
        }
        if let Some(p) = self.processor.take() {
            p.shutdown().await.unwrap();
        }
        for (node, reg) in &mut self.nodes {
            if let Some(r) = reg.take() {
                r.stop().await;
            }
            node.shutdown().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdc_lists_the_cluster_per_host_and_announces_changes() {
    let c = Cluster::start().await;
    create_volume(c.store.as_ref(), &raid5("vol1"), &p1_host())
        .await
        .unwrap();
    let cdc = c.cdc_addr();
    let vol1 = volume_nqn("vol1");

    // One-shot discovery, as `nvme discover` does: the volume on the processor node's
    // listener, the drives this host may use, a referral per node.
    let entries = discover_until(cdc, &host(), "vol1 listed", |e| {
        nqns(e, subtype::NVME).contains(&vol1)
    })
    .await;
    assert_eq!(
        nqns(&entries, subtype::NVME),
        [drive_nqn("n1"), drive_nqn("n2"), vol1.clone()],
        "n0's drive is for p1 only: {entries:#?}"
    );
    let v = entries.iter().find(|e| e.subnqn == vol1).unwrap();
    assert_eq!(entry_socket_addr(v), Some(c.p1_addr()));
    let own = entries
        .iter()
        .find(|e| e.subtype == subtype::CURRENT_DISCOVERY)
        .expect("the CDC's own entry");
    assert_eq!(entry_socket_addr(own), Some(cdc));
    let mut referrals: Vec<SocketAddr> = entries
        .iter()
        .filter(|e| e.subtype == subtype::REFERRAL)
        .filter_map(entry_socket_addr)
        .collect();
    referrals.sort();
    let mut ddcs: Vec<SocketAddr> = c
        .nodes
        .iter()
        .map(|(n, _)| n.discovery_addr().unwrap())
        .chain([c.p1_addr()])
        .collect();
    ddcs.sort();
    assert_eq!(
        referrals, ddcs,
        "one referral per node's own discovery controller"
    );
    // The processor node is allowed on n0's drive and finds it.
    let as_p1 = discover(cdc, &p1_host()).await.unwrap();
    assert!(nqns(&as_p1, subtype::NVME).contains(&drive_nqn("n0")));

    // A persistent discovery connection: keep-alive on, an AER outstanding.
    let opts = ConnectOptions {
        io_queues: 0,
        kato_ms: 1000,
        admin_timeout_ms: 10_000,
        ..ConnectOptions::default()
    };
    let ctrl = Controller::connect(cdc, DISCOVERY_NQN, &host(), &opts)
        .await
        .unwrap();
    assert!(ctrl.is_discovery());
    assert_eq!(
        ctrl.id().dctype,
        2,
        "Identify says: central discovery controller"
    );
    let first = read_discovery_log(&ctrl).await.unwrap();
    assert!(!nqns(&first.entries, subtype::NVME).contains(&volume_nqn("vol2")));
    // Past a few KATOs it is still there: keep-alive works on the discovery controller.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(ctrl.status().is_live(), "{:?}", ctrl.status());

    let mut w = ctrl.watch();
    let t0 = Instant::now();
    create_volume(c.store.as_ref(), &raid5("vol2"), &p1_host())
        .await
        .unwrap();
    let vol2 = volume_nqn("vol2");
    let st = tokio::time::timeout(
        LIMIT,
        w.wait_for(|s| {
            s.discovery_log
                .as_ref()
                .is_some_and(|l| nqns(&l.entries, subtype::NVME).contains(&vol2))
        }),
    )
    .await
    .expect("discovery log change event with vol2")
    .unwrap()
    .clone();
    eprintln!(
        "vol2 in the log through the event {:?} after volume create started ({} events)",
        t0.elapsed(),
        st.discovery_changes
    );
    let log = st.discovery_log.unwrap();
    assert!(log.genctr > first.genctr, "the generation moved");
    assert_eq!(
        st.last_event.map(|e| (e.event_type, e.info, e.log_page)),
        Some((2, 0xF0, 0x70)),
        "a discovery log change notice"
    );
    // The new entry works: connect to vol2 where it says and do I/O.
    let e = log.entries.iter().find(|e| e.subnqn == vol2).unwrap();
    let at = entry_socket_addr(e).unwrap();
    let url = NvmeTcpUrl::parse(&format!("nvme+tcp://{at}/{vol2}/1")).unwrap();
    let ns = url
        .open(
            &host(),
            &ConnectOptions {
                io_queues: 1,
                ..ConnectOptions::default()
            },
        )
        .await
        .unwrap();
    let t0 = Instant::now();
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
    // The owner takes vol2 over in the background; until then the path is inaccessible.
    loop {
        match ns
            .write(0, IoBuf::from_slice(&data), WriteFlags { fua: true })
            .await
        {
            Ok(_) => break,
            Err(e) => {
                assert!(t0.elapsed() < LIMIT, "write to vol2: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let back = ns.read(0, IoBuf::new_zeroed(8192)).await.unwrap();
    assert_eq!(&back[..], &data[..]);
    drop(ns);

    // A node that leaves drops out of the log, and the persistent host hears of it.
    let mut c = c;
    let n2_ddc = c.nodes[2].0.discovery_addr().unwrap();
    c.nodes[2].1.take().unwrap().stop().await;
    tokio::time::timeout(
        LIMIT,
        w.wait_for(|s| {
            s.discovery_log.as_ref().is_some_and(|l| {
                !nqns(&l.entries, subtype::NVME).contains(&drive_nqn("n2"))
                    && !l
                        .entries
                        .iter()
                        .any(|e| entry_socket_addr(e) == Some(n2_ddc))
            })
        }),
    )
    .await
    .expect("n2 gone from the log")
    .unwrap();
    assert!(ctrl.status().is_live());
    ctrl.shutdown().await.unwrap();
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdc_port_in_use_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let store = embedded_store(dir.path()).await;
    let taken = std::net::TcpListener::bind(local0()).unwrap();
    let addr = taken.local_addr().unwrap();
    let e = Cdc::start(store.clone(), CdcConfig::new(vec![addr]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("already in use"), "{e}");
    let e = Cdc::start(store, CdcConfig::new(vec![])).await.unwrap_err();
    assert!(e.to_string().contains("listen address"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listeners_are_discovered_as_tls_entries() {
    use nvme_proto::log::discovery::{sectype, treq};
    use nvme_proto::tls_key::ConfiguredPsk;
    use nvmf_host::TlsCredentials;

    let c = Cluster::start_with(true).await;
    create_volume(c.store.as_ref(), &raid5("vol1"), &p1_host())
        .await
        .unwrap();
    let psk = ConfiguredPsk::new(1, &[0x5a; 32]).unwrap();
    control::volume_auth::set_host_tls(
        c.store.as_ref(),
        "vol1",
        storage_node::state::TlsPskHostRecord {
            host_nqn: HOST.into(),
            psk: psk.to_interchange().to_string(),
        },
    )
    .await
    .unwrap();
    let vol1 = volume_nqn("vol1");
    let p = c.processor.as_ref().unwrap();
    let (plain, tls) = (p.nvme_addrs()[0], p.tls_addrs()[0]);
    let check = |entries: &[DiscoveryEntry], from: &str| {
        let vol: Vec<&DiscoveryEntry> = entries.iter().filter(|e| e.subnqn == vol1).collect();
        let at = |a| {
            vol.iter()
                .find(|e| entry_socket_addr(e) == Some(a))
                .unwrap_or_else(|| panic!("{from}: no vol1 entry on {a}: {entries:#?}"))
        };
        let (p, t) = (at(plain), at(tls));
        assert_eq!((p.treq & 3, p.sectype), (0, sectype::NONE), "{from}");
        assert_eq!(
            (t.treq & 3, t.sectype),
            (treq::SECURE_CHANNEL_REQUIRED, sectype::TLS13),
            "{from}: the TLS listener is a TLS entry"
        );
        assert_ne!(p.portid, t.portid, "{from}");
    };
    // The processor node's own discovery controller (through its plain listener) and the
    // CDC, which knows it from the node record's tls_addrs.
    let own = discover_until(plain, &host(), "vol1 on p1", |e| {
        e.iter().filter(|e| e.subnqn == vol1).count() == 2
    })
    .await;
    check(&own, "p1's discovery");
    let central = discover_until(c.cdc_addr(), &host(), "vol1 in the CDC", |e| {
        e.iter().filter(|e| e.subnqn == vol1).count() == 2
    })
    .await;
    check(&central, "the CDC");

    // Connect to the TLS entry with the PSK, as `nvme connect-all --tls` would.
    let e = central
        .iter()
        .find(|e| e.subnqn == vol1 && e.sectype == sectype::TLS13)
        .unwrap();
    let at = entry_socket_addr(e).unwrap();
    let opts = ConnectOptions {
        io_queues: 1,
        connect_timeout_ms: 5000,
        tls: Some(TlsCredentials::new(psk)),
        ..ConnectOptions::default()
    };
    let t0 = Instant::now();
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 11) as u8).collect();
    // The owner takes vol1 over and applies its TLS record at its next poll.
    loop {
        let r = async {
            let ctrl = Controller::connect(at, &vol1, &host(), &opts).await?;
            let ns = ctrl.namespace(1).await?;
            ns.write_at(0, IoBuf::from_slice(&data), true).await?;
            let back = ns.read_at(0, IoBuf::new_zeroed(data.len())).await?;
            ctrl.shutdown().await?;
            Ok::<_, nvmf_host::HostError>(back)
        }
        .await;
        match r {
            Ok(back) => {
                assert_eq!(&back[..], &data[..]);
                break;
            }
            Err(e) => {
                assert!(t0.elapsed() < LIMIT, "I/O over TLS to {at}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    c.stop().await;
}
