//! Test kit of the objstore integration tests: an in-process gateway over fault-injecting
//! stores; the small S3 client is `testkit::s3`.

#![allow(dead_code)]

pub use testkit::s3 as client;

use std::sync::Arc;

use objstore::clock::OffsetClock;
use objstore::gateway::{Gateway, GatewayConfig};
use objstore::index::Index;
use objstore::layout::Geometry;
use objstore::s3::Credentials;
use objstore::shard::{Faults, FaultyShardStore, MemShardStore, ShardKey, ShardStore};

pub const ACCESS_KEY: &str = "test-root";
pub const SECRET_KEY: &str = "test-root-secret";

pub struct Rig {
    pub gateway: Gateway,
    pub faults: Vec<Arc<Faults>>,
    pub mems: Vec<Arc<MemShardStore>>,
    pub clock: Arc<OffsetClock>,
    pub client: client::S3Client,
    _dir: tempfile::TempDir,
}

impl Rig {
    /// A gateway over `stores` RAM stores in distinct failure domains, SQLite index,
    /// shards of `shard_bytes`, default geometry `g`, no background work.
    pub async fn start(stores: usize, g: Geometry, shard_bytes: u32) -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let index = Index::open(&format!("sqlite:{}", dir.path().join("index.db").display()))
            .await
            .expect("index");
        let mut faults = Vec::new();
        let mut mems = Vec::new();
        let mut set: Vec<Arc<dyn ShardStore>> = Vec::new();
        for i in 0..stores {
            let mem = Arc::new(MemShardStore::new(format!("s{i}"), format!("node{i}")));
            let f = FaultyShardStore::new(mem.clone());
            faults.push(f.faults());
            mems.push(mem);
            set.push(Arc::new(f));
        }
        let mut config = GatewayConfig::new(
            "127.0.0.1:0".parse().expect("addr"),
            Credentials {
                access_key: ACCESS_KEY.into(),
                secret_key: SECRET_KEY.into(),
            },
        );
        config.objects.default_geometry = g;
        config.objects.datapath.shard_bytes = shard_bytes;
        config.objects.datapath.shard_timeout = std::time::Duration::from_secs(2);
        config.objects.gc_grace = std::time::Duration::from_secs(60);
        config.background = None;
        let clock = Arc::new(OffsetClock::default());
        let gateway = Gateway::start_with_clock(config, index, set, clock.clone())
            .await
            .expect("gateway");
        let client = client::S3Client::new(gateway.local_addr(), ACCESS_KEY, SECRET_KEY);
        Rig {
            gateway,
            faults,
            mems,
            clock,
            client,
            _dir: dir,
        }
    }

    /// Shard values held by all stores.
    pub async fn shard_count(&self) -> usize {
        let mut n = 0;
        for m in &self.mems {
            n += m.list(ShardKey::MIN, usize::MAX).await.expect("list").len();
        }
        n
    }
}

/// Deterministic pseudo-random bytes.
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    testkit::data::pattern(len, seed)
}

pub fn md5_hex(data: &[u8]) -> String {
    use s3s::crypto::Checksum;
    hex::encode(s3s::crypto::Md5::checksum(data))
}
