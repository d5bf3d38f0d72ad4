//! Shared by the processor tests: three in-process storage targets (RAM namespaces) as
//! members of a RAID-5 volume, processor nodes sharing an embedded store, hosts using
//! multipath over the processors.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use blockdev::{BlockDevice, IoBuf, RamDevice, WriteFlags};
use control::processor::{Processor, ProcessorConfig};
use control::records::{
    MemberRecord, VolumeRecord, VolumeStatusRecord, volume_nqn, volume_status_key,
};
use meta::schema::{get_json, put_json, volume_key};
use meta::{EmbeddedOptions, EmbeddedStore, MetaStore};
use nvmf_host::{ConnectOptions, HostIdentity, MultipathNamespace, MultipathOptions, NvmeTcpUrl};
use nvmf_target::{
    ListenerHandle, NamespaceConfig, NoReservations, SubsystemConfig, Target, TargetConfig,
};
use volume::{LevelSpec, Volume, VolumeConfig};

pub const VOLUME: &str = "vol1";
pub const GROUP: u32 = 7;
pub const MEMBER_BYTES: u64 = 32 << 20;
pub const BLOCK: usize = 4096;
pub const LEASE_TTL_MS: u64 = 1500;

/// One storage target (a stand-in for a storage node) that can go down and come back
/// with the same data on the same address.
pub struct StorageTarget {
    pub target: Target,
    pub listener: Option<ListenerHandle>,
    pub nqn: String,
    pub dev: Arc<RamDevice>,
    pub addr: SocketAddr,
    /// Export the namespace without reservations (like a target that lacks them).
    pub no_reservations: bool,
}

impl StorageTarget {
    async fn start(i: usize, no_reservations: bool) -> StorageTarget {
        StorageTarget::start_sized(i, no_reservations, MEMBER_BYTES).await
    }

    async fn start_sized(i: usize, no_reservations: bool, member_bytes: u64) -> StorageTarget {
        let target = Target::new(TargetConfig::default()).unwrap();
        let nqn = format!("nqn.2026-01.io.ferrobay:test:member{i}");
        let dev = Arc::new(RamDevice::with_block_size(
            format!("ram{i}"),
            member_bytes,
            4096,
        ));
        let mut st = StorageTarget {
            target,
            listener: None,
            nqn,
            dev,
            addr: "127.0.0.1:0".parse().unwrap(),
            no_reservations,
        };
        st.up().await;
        st
    }

    pub fn url(&self) -> String {
        format!("nvme+tcp://{}/{}/1", self.addr, self.nqn)
    }

    /// Exports the namespace (again) on the same address.
    pub async fn up(&mut self) {
        self.target
            .add_subsystem(SubsystemConfig::new(self.nqn.clone()))
            .unwrap();
        let mut ns = NamespaceConfig::whole_device(1, self.dev.clone());
        if self.no_reservations {
            ns.reservations = Some(Arc::new(NoReservations));
        }
        self.target.add_namespace(&self.nqn, ns).unwrap();
        let t0 = Instant::now();
        let l = loop {
            match self.target.listen(self.addr).await {
                Ok(l) => break l,
                Err(e) if t0.elapsed() < Duration::from_secs(5) => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("relisten on {}: {e}", self.addr),
            }
        };
        self.addr = l.local_addr();
        self.listener = Some(l);
    }

    /// Like a storage node going down: connections cut, nothing listening.
    pub fn down(&mut self) {
        if let Some(l) = self.listener.take() {
            l.close();
        }
        self.target.remove_subsystem(&self.nqn).unwrap();
    }
}

pub struct Cluster {
    _dir: tempfile::TempDir,
    pub store: Arc<dyn MetaStore>,
    pub storage: Vec<StorageTarget>,
    pub rec: VolumeRecord,
}

pub fn host_opts() -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        kato_ms: 2000,
        io_timeout_ms: 10_000,
        reconnect_delay_ms: 200,
        reconnect_delay_max_ms: 500,
        ctrl_loss_tmo_ms: Some(5_000),
        ..ConnectOptions::default()
    }
}

/// Formats the volume on the members (as provisioning does) and writes its record.
async fn create_volume(store: &Arc<dyn MetaStore>, urls: &[String]) -> VolumeRecord {
    let host = HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:test:creator").unwrap();
    let mut members: Vec<Arc<dyn BlockDevice>> = Vec::new();
    for u in urls {
        let ns = NvmeTcpUrl::parse(u)
            .unwrap()
            .open(&host, &host_opts())
            .await
            .unwrap();
        members.push(Arc::new(ns));
    }
    let mut cfg = VolumeConfig::new("raid5".parse::<LevelSpec>().unwrap());
    cfg.region_bytes = 1 << 20;
    cfg.journal_bytes = 1 << 20;
    cfg.assume_clean = true;
    let vol = Volume::create(VOLUME, cfg, members, vec![]).await.unwrap();
    let st = vol.status();
    vol.stop().await.unwrap();
    drop(vol);
    let rec = VolumeRecord {
        name: VOLUME.to_string(),
        uuid: st.uuid,
        level: "raid5".to_string(),
        stripe_unit_bytes: st.layout.stripe_unit_bytes,
        size_bytes: st.size_bytes,
        block_size_bytes: st.logical_block_bytes,
        members: urls
            .iter()
            .enumerate()
            .map(|(i, u)| MemberRecord {
                url: u.clone(),
                storage_node: None,
                failure_domain: format!("d{i}"),
            })
            .collect(),
        spares: vec![],
        ana_group: GROUP,
        preferred_owner: Some("p1".to_string()),
        created_unix_ms: 0,
        qos: Default::default(),
        log: None,
    };
    put_json(store.as_ref(), &volume_key(VOLUME).unwrap(), &rec, None)
        .await
        .unwrap();
    rec
}

/// The embedded metadata store in `dir`.
async fn embedded_store(dir: &std::path::Path) -> Arc<dyn MetaStore> {
    Arc::new(
        EmbeddedStore::open(dir, EmbeddedOptions::default())
            .await
            .unwrap(),
    )
}

pub async fn cluster() -> Cluster {
    cluster_with(&[]).await
}

/// A cluster whose members `no_reservations` are on targets without reservations.
pub async fn cluster_with(no_reservations: &[usize]) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let store = embedded_store(dir.path()).await;
    let mut storage = Vec::new();
    for i in 0..3 {
        storage.push(StorageTarget::start(i, no_reservations.contains(&i)).await);
    }
    let urls: Vec<String> = storage.iter().map(StorageTarget::url).collect();
    let rec = create_volume(&store, &urls).await;
    Cluster {
        _dir: dir,
        store,
        storage,
        rec,
    }
}

/// Three members of `member_bytes` and a RAID-5 volume made by provisioning (as `ferrobay
/// volume create --members URL,... --layout log --compress C --log-block B` does), as
/// large as the members allow; preferred owner p1.
pub async fn log_cluster(member_bytes: u64, compress: &str, log_block_bytes: u32) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let store = embedded_store(dir.path()).await;
    let mut storage = Vec::new();
    for i in 0..3 {
        storage.push(StorageTarget::start_sized(i, false, member_bytes).await);
    }
    let mut req = control::provision::CreateVolume {
        name: VOLUME.to_string(),
        level: "raid5".to_string(),
        members: storage.iter().map(StorageTarget::url).collect(),
        preferred_owner: Some("p1".to_string()),
        layout: Some("log".to_string()),
        compress: Some(compress.to_string()),
        log_block_bytes: Some(log_block_bytes),
        ..Default::default()
    };
    let log = control::provision::requested_log(&req).unwrap().unwrap();
    let params = LevelSpec::Raid5
        .params(3, volume::layout::DEFAULT_STRIPE_UNIT_BYTES)
        .unwrap();
    let most =
        control::provision::sizing::exported_bytes_for(&params, member_bytes, Some(&log), 4096)
            .unwrap();
    req.size_bytes = most / 4096 * 4096;
    let host = HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:test:creator").unwrap();
    let rec = control::provision::create_volume(store.as_ref(), &req, &host)
        .await
        .unwrap();
    Cluster {
        _dir: dir,
        store,
        storage,
        rec,
    }
}

pub fn pcfg(name: &str) -> ProcessorConfig {
    let mut c = ProcessorConfig::new(name);
    c.listen = vec!["127.0.0.1:0".parse().unwrap()];
    c.lease_ttl_ms = LEASE_TTL_MS;
    c.standby_grace_ms = 500;
    c.poll_ms = 50;
    c
}

pub async fn wait_owner(p: &Processor, within: Duration) -> Duration {
    let t0 = Instant::now();
    while !p.owned_volumes().iter().any(|v| v == VOLUME) {
        assert!(
            t0.elapsed() < within,
            "{} did not take {VOLUME} over within {within:?}",
            p.name()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t0.elapsed()
}

pub async fn wait_for<F: FnMut() -> bool>(what: &str, within: Duration, mut f: F) -> Duration {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t0.elapsed()
}

pub async fn status_record(store: &Arc<dyn MetaStore>) -> Option<VolumeStatusRecord> {
    get_json::<VolumeStatusRecord, _>(store.as_ref(), &volume_status_key(VOLUME).unwrap())
        .await
        .unwrap()
        .map(|v| v.value)
}

pub async fn multipath_host(addrs: &[SocketAddr], hostnqn: &str) -> MultipathNamespace {
    multipath_host_with(addrs, hostnqn, 30_000).await
}

pub async fn multipath_host_with(
    addrs: &[SocketAddr],
    hostnqn: &str,
    no_path_timeout_ms: u64,
) -> MultipathNamespace {
    MultipathNamespace::connect(
        addrs,
        &volume_nqn(VOLUME),
        1,
        &HostIdentity::from_hostnqn(hostnqn).unwrap(),
        &host_opts(),
        MultipathOptions {
            no_path_timeout_ms,
            ..MultipathOptions::default()
        },
    )
    .await
    .unwrap()
}

pub fn pattern(block: u64, round: u64) -> Vec<u8> {
    let mut v = vec![0u8; BLOCK];
    for (i, b) in v.iter_mut().enumerate() {
        *b = (block as usize * 31 + round as usize * 7 + i / 8) as u8;
    }
    v[..8].copy_from_slice(&block.to_le_bytes());
    v[8..16].copy_from_slice(&round.to_le_bytes());
    v
}

/// Writes `blocks` blocks (stride 16 KiB) with `round`'s pattern.
pub async fn write_round(dev: &dyn BlockDevice, blocks: u64, round: u64) {
    for b in 0..blocks {
        dev.write(
            b * 4 * BLOCK as u64,
            IoBuf::from_slice(&pattern(b, round)),
            WriteFlags { fua: true },
        )
        .await
        .unwrap_or_else(|e| panic!("write of block {b} round {round}: {e}"));
    }
}

pub async fn verify(dev: &dyn BlockDevice, expect: &BTreeMap<u64, u64>) {
    for (&b, &round) in expect {
        let got = dev
            .read(b * 4 * BLOCK as u64, IoBuf::new_zeroed(BLOCK))
            .await
            .unwrap_or_else(|e| panic!("read of block {b}: {e}"));
        assert!(
            got[..] == pattern(b, round)[..],
            "block {b}: expected round {round}, found round {}",
            u64::from_le_bytes(got[8..16].try_into().unwrap())
        );
    }
}

/// Every block of `0..blocks` at `round`.
pub fn all_at(blocks: u64, round: u64) -> BTreeMap<u64, u64> {
    (0..blocks).map(|b| (b, round)).collect()
}
