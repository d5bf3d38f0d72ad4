//! The store against a trivially correct model (a BTreeMap): random sequences of stores
//! with options, deletes, reads, lists, reopens (clean and after a drop), checkpoints and
//! compactions, on RAM and on an O_DIRECT file.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use blockdev::{BlockDevice, FileDevice, OpenOptions};
use common::*;
use kv::{ErrorKind, Kv, StoreMode};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Store {
        key: u8,
        len: usize,
        seed: u64,
        mode: StoreMode,
    },
    Delete {
        key: u8,
    },
    Get {
        key: u8,
    },
    Exists {
        key: u8,
    },
    List {
        from: Option<u8>,
        max: usize,
    },
    /// Several stores at once (one group commit).
    Burst {
        keys: Vec<u8>,
        seed: u64,
    },
    Reopen {
        clean: bool,
    },
    Checkpoint,
    Compact,
}

const KEYS: u8 = 24;

fn key(i: u8) -> Vec<u8> {
    let len = 1 + usize::from(i) * 5 % 16;
    (0..len)
        .map(|j| i.wrapping_add((j as u8).wrapping_mul(37)))
        .collect()
}

fn len_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![
        1usize..64,
        500usize..520,
        1000usize..1100,
        Just(4096usize),
        4000usize..8193,
    ]
}

fn mode_strategy() -> impl Strategy<Value = StoreMode> {
    prop_oneof![
        4 => Just(StoreMode::Upsert),
        1 => Just(StoreMode::OnlyIfExists),
        1 => Just(StoreMode::OnlyIfAbsent),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..KEYS, len_strategy(), any::<u64>(), mode_strategy())
            .prop_map(|(key, len, seed, mode)| Op::Store { key, len, seed, mode }),
        3 => (0..KEYS).prop_map(|key| Op::Delete { key }),
        4 => (0..KEYS).prop_map(|key| Op::Get { key }),
        2 => (0..KEYS).prop_map(|key| Op::Exists { key }),
        2 => (proptest::option::of(0..KEYS), 0usize..30).prop_map(|(from, max)| Op::List { from, max }),
        2 => (proptest::collection::vec(0..KEYS, 2..12), any::<u64>())
            .prop_map(|(keys, seed)| Op::Burst { keys, seed }),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Compact),
    ]
}

async fn run_ops(dev: Arc<dyn BlockDevice>, ops: Vec<Op>) {
    let mut kv = fresh(&dev).await;
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Store {
                key: k,
                len,
                seed,
                mode,
            } => {
                let (key, v) = (key(k), value(seed, len));
                let got = kv.store(&key, &v, mode).await.map_err(|e| e.kind());
                let exists = model.contains_key(&key);
                let want = match mode {
                    StoreMode::OnlyIfExists if !exists => Err(ErrorKind::KeyNotFound),
                    StoreMode::OnlyIfAbsent if exists => Err(ErrorKind::KeyExists),
                    _ => Ok(()),
                };
                assert_eq!(got, want, "step {step}: store {key:?} {mode:?}");
                if want.is_ok() {
                    model.insert(key, v);
                }
            }
            Op::Delete { key: k } => {
                let key = key(k);
                let got = kv.delete(&key).await.map_err(|e| e.kind());
                let want = match model.remove(&key) {
                    Some(_) => Ok(()),
                    None => Err(ErrorKind::KeyNotFound),
                };
                assert_eq!(got, want, "step {step}: delete {key:?}");
            }
            Op::Get { key: k } => {
                let key = key(k);
                let got = kv.get(&key).await.map_err(|e| e.kind());
                let want = model.get(&key).cloned().ok_or(ErrorKind::KeyNotFound);
                assert_eq!(got, want, "step {step}: get {key:?}");
            }
            Op::Exists { key: k } => {
                let key = key(k);
                assert_eq!(
                    kv.exists(&key).unwrap(),
                    model.contains_key(&key),
                    "step {step}"
                );
            }
            Op::List { from, max } => {
                let from = from.map(key).unwrap_or_default();
                let got: Vec<Vec<u8>> = kv
                    .list(&from, max)
                    .unwrap()
                    .iter()
                    .map(|k| k.as_bytes().to_vec())
                    .collect();
                let want: Vec<Vec<u8>> = model
                    .range(from.clone()..)
                    .take(max)
                    .map(|(k, _)| k.clone())
                    .collect();
                assert_eq!(got, want, "step {step}: list from {from:?} max {max}");
            }
            Op::Burst { keys, seed } => {
                // Distinct keys so the outcome does not depend on the order within the batch.
                let mut keys: Vec<u8> = keys;
                keys.sort_unstable();
                keys.dedup();
                let mut tasks = Vec::new();
                for (i, k) in keys.iter().enumerate() {
                    let kv = kv.clone();
                    let (key, v) = (key(*k), value(seed ^ i as u64, 100 + i * 300));
                    model.insert(key.clone(), v.clone());
                    tasks.push(tokio::spawn(async move {
                        kv.store(&key, &v, StoreMode::Upsert).await
                    }));
                }
                for t in tasks {
                    t.await.unwrap().unwrap();
                }
            }
            Op::Reopen { clean } => {
                if clean {
                    kv.close().await.unwrap();
                }
                drop(kv);
                let (k, report) = Kv::open(dev.clone(), small_options()).await.unwrap();
                assert_eq!(
                    report.key_count,
                    model.len() as u64,
                    "step {step}: {report:?}"
                );
                kv = k;
            }
            Op::Checkpoint => kv.checkpoint().await.unwrap(),
            Op::Compact => {
                kv.compact().await.unwrap();
            }
        }
        let u = kv.usage();
        assert_eq!(u.key_count, model.len() as u64, "step {step}");
        let live: u64 = model.values().map(|v| footprint(v.len())).sum();
        assert_eq!(u.live_bytes, live, "step {step}");
    }
    // Finally everything reads back, also after a reopen.
    for (k, v) in &model {
        assert_eq!(&kv.get(k).await.unwrap(), v);
    }
    drop(kv);
    let (kv, _) = Kv::open(dev.clone(), small_options()).await.unwrap();
    let keys: Vec<Vec<u8>> = kv
        .list(b"", usize::MAX)
        .unwrap()
        .iter()
        .map(|k| k.as_bytes().to_vec())
        .collect();
    assert_eq!(keys, model.keys().cloned().collect::<Vec<_>>());
    for (k, v) in &model {
        assert_eq!(&kv.get(k).await.unwrap(), v);
    }
    kv.close().await.unwrap();
}

/// Footprint with 512-byte blocks (RAM and the file devices used here).
fn footprint(len: usize) -> u64 {
    let len = len as u64;
    40 + if len >= 512 {
        len.div_ceil(512) * 512
    } else {
        len
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn ram_store_matches_the_model(ops in proptest::collection::vec(op_strategy(), 1..120)) {
        rt().block_on(run_ops(ram(6 << 20), ops));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn file_store_matches_the_model(ops in proptest::collection::vec(op_strategy(), 1..120)) {
        let dir = tempfile::tempdir().unwrap();
        let opts = OpenOptions {
            create_size_bytes: Some(6 << 20),
            logical_block_bytes: Some(512),
            ..OpenOptions::default()
        };
        let dev: Arc<dyn BlockDevice> =
            Arc::new(FileDevice::open(dir.path().join("kv.img"), opts).unwrap());
        rt().block_on(run_ops(dev, ops));
    }
}

/// Long runs of overwrites on a small device: compaction must keep up and every value
/// must survive many segment reuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrites_many_times_the_device_size() {
    let dev = ram(3 << 20);
    let kv = fresh(&dev).await;
    let mut model = BTreeMap::new();
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let kv = kv.clone();
        tasks.push(tokio::spawn(async move {
            let mut last = BTreeMap::new();
            for i in 0..1500u64 {
                let k = (w * 16 + i % 16).to_be_bytes();
                let v = value(w * 100_000 + i, 500 + (i as usize * 97) % 3000);
                kv.store(&k, &v, StoreMode::Upsert).await.unwrap();
                last.insert(k, v);
            }
            last
        }));
    }
    for t in tasks {
        model.extend(t.await.unwrap());
    }
    let s = kv.stats();
    assert!(
        s.log_bytes_written > 5 * (3 << 20),
        "wrote {} bytes",
        s.log_bytes_written
    );
    assert!(s.segments_reclaimed > 50, "{s:?}");
    for (k, v) in &model {
        assert_eq!(&kv.get(k).await.unwrap(), v);
    }
    drop(kv);
    let (kv, _) = Kv::open(dev, small_options()).await.unwrap();
    for (k, v) in &model {
        assert_eq!(&kv.get(k).await.unwrap(), v);
    }
}
