//! Crash safety with the crash-recording device: a workload of stores, overwrites,
//! deletes, checkpoints and compactions; at every device write and flush, images a power
//! cut could leave (nothing pending landed, everything landed, random subsets with torn
//! writes) are recovered and checked: every acknowledged store reads back exactly, every
//! acknowledged delete stays deleted, an unacknowledged change gives the old or the new
//! value, never a mix. Some images are then written to and crashed again (the log's stale
//! tail after a crash must never be taken for new records).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use blockdev::{
    BlockDevice, CrashRecorder, DeviceInfo, DeviceStats, IoBuf, IoFuture, RamDevice, WriteFlags,
};
use common::*;
use kv::{FormatOptions, Kv, KvError, StoreMode};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What a key may hold after a crash.
#[derive(Clone, Debug, Default)]
struct KeyState {
    acked: Option<Vec<u8>>,
    /// Changes sent but not acknowledged (None = a delete).
    pending: Vec<Option<Vec<u8>>>,
}

type Expect = BTreeMap<Vec<u8>, KeyState>;

struct Captured {
    image: RamDevice,
    expect: Expect,
    what: String,
}

/// The crash recorder, taking images after every write and flush.
struct Capturing {
    rec: Arc<CrashRecorder>,
    expect: Arc<Mutex<Expect>>,
    out: Arc<Mutex<Vec<Captured>>>,
    ops: Mutex<u64>,
    seed: u64,
}

impl Capturing {
    fn capture(&self, op: &str) {
        let n = {
            let mut ops = self.ops.lock().unwrap();
            *ops += 1;
            *ops
        };
        // Held while the images are taken: no change is registered or acknowledged
        // meanwhile (other tasks may still write, which only adds pending content).
        let guard = self.expect.lock().unwrap();
        let expect = guard.clone();
        let mut out = self.out.lock().unwrap();
        let mut push = |image: RamDevice, what: String| {
            out.push(Captured {
                image,
                expect: expect.clone(),
                what,
            })
        };
        push(self.rec.durable_image(), format!("op {n} ({op}): durable"));
        push(
            self.rec.current_image(),
            format!("op {n} ({op}): everything"),
        );
        for s in 0..2 {
            let seed = self.seed ^ (n << 8) ^ s;
            push(
                self.rec.crash_image(seed),
                format!("op {n} ({op}): seed {seed}"),
            );
        }
    }
}

impl BlockDevice for Capturing {
    fn info(&self) -> &DeviceInfo {
        self.rec.info()
    }
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        self.rec.read(offset_bytes, buf)
    }
    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            let r = self.rec.write(offset_bytes, buf, flags).await;
            self.capture("write");
            r
        })
    }
    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            let r = self.rec.flush().await;
            self.capture("flush");
            r
        })
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.rec.write_zeroes(offset_bytes, len_bytes)
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.rec.discard(offset_bytes, len_bytes)
    }
    fn stats(&self) -> DeviceStats {
        self.rec.stats()
    }
}

fn crash_format() -> FormatOptions {
    FormatOptions {
        segment_bytes: 32 << 10,
        max_value_bytes: 4 << 10,
        max_keys: Some(256),
    }
}

fn crash_options() -> kv::Options {
    let mut o = small_options();
    o.batch_max_bytes = 8 << 10;
    o.checkpoint_interval_bytes = 96 << 10;
    o
}

/// The workload's options: odd seeds write values of 1 KiB and more in place (each by
/// its own device write after its batch's head, several per batch) with up to three
/// flushes in flight, so those writes and overlapped flushes are crash points too.
fn workload_options(seed: u64) -> kv::Options {
    let mut o = crash_options();
    if seed % 2 == 1 {
        o.in_place_min_bytes = 1024;
        o.max_inflight_flushes = 3;
    } else {
        o.max_inflight_flushes = 1;
    }
    o
}

/// Recovers `image` and checks it against `expect`; returns the opened store.
async fn check(image: &RamDevice, expect: &Expect, what: &str) -> (Kv, Arc<CrashRecorder>) {
    let rec = Arc::new(CrashRecorder::from_image("recovered", image));
    let dev: Arc<dyn BlockDevice> = rec.clone();
    let (kv, report) = match Kv::open(dev, crash_options()).await {
        Ok(x) => x,
        Err(e) => panic!("{what}: recovery failed: {e}"),
    };
    for (key, st) in expect {
        let got = match kv.get(key).await {
            Ok(v) => Some(v),
            Err(KvError::KeyNotFound) => None,
            Err(e) => panic!("{what}: key {key:?}: {e} ({report:?})"),
        };
        let ok = got == st.acked || st.pending.contains(&got);
        assert!(
            ok,
            "{what}: key {key:?} holds {:?} bytes; acked {:?}, pending {:?}; {report:?}",
            got.as_ref().map(|v| v.len()),
            st.acked.as_ref().map(|v| v.len()),
            st.pending
                .iter()
                .map(|p| p.as_ref().map(|v| v.len()))
                .collect::<Vec<_>>()
        );
    }
    // No key appears that was never written.
    for k in kv.list(b"", usize::MAX).unwrap() {
        assert!(
            expect.contains_key(k.as_bytes()),
            "{what}: unknown key {k:?}"
        );
    }
    (kv, rec)
}

/// Writes to a recovered image, then crashes again and checks both the old state and
/// the new acknowledged stores.
async fn check_again(kv: Kv, rec: Arc<CrashRecorder>, expect: &Expect, what: &str, seed: u64) {
    // What the recovered store holds now is the baseline (pending changes resolved).
    let mut now: Expect = BTreeMap::new();
    for key in expect.keys() {
        let v = kv.get(key).await.ok();
        now.insert(
            key.clone(),
            KeyState {
                acked: v,
                pending: Vec::new(),
            },
        );
    }
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..6u64 {
        let key = expect
            .keys()
            .nth(rng.random_range(0..expect.len().max(1)))
            .cloned();
        let Some(key) = key else { break };
        let v = value(seed ^ i, rng.random_range(1..3000));
        kv.store(&key, &v, StoreMode::Upsert).await.unwrap();
        now.get_mut(&key).unwrap().acked = Some(v);
    }
    let image = rec.crash_image(seed);
    drop(kv);
    let (kv2, _) = check(
        &image,
        &now,
        &format!("{what}, written to and crashed again"),
    )
    .await;
    drop(kv2);
}

async fn workload(seed: u64, steps: usize) -> usize {
    let rec = Arc::new(CrashRecorder::new("crash", 1536 << 10));
    let expect = Arc::new(Mutex::new(Expect::new()));
    let out = Arc::new(Mutex::new(Vec::new()));
    let dev = Arc::new(Capturing {
        rec: rec.clone(),
        expect: expect.clone(),
        out: out.clone(),
        ops: Mutex::new(0),
        seed,
    });
    let dev: Arc<dyn BlockDevice> = dev;
    Kv::format(&dev, &crash_format()).await.unwrap();
    out.lock().unwrap().clear();
    let (kv, _) = Kv::open(dev.clone(), workload_options(seed)).await.unwrap();
    let keys: Vec<Vec<u8>> = (0..12u8).map(|i| vec![b'k', i]).collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut checked = 0;
    for step in 0..steps {
        match rng.random_range(0..20) {
            0 => {
                if std::env::var_os("KV_DEBUG").is_some() {
                    eprintln!("step {step}: compact");
                }
                kv.compact().await.unwrap();
            }
            1 => {
                if std::env::var_os("KV_DEBUG").is_some() {
                    eprintln!("step {step}: checkpoint");
                }
                kv.checkpoint().await.unwrap()
            }
            _ => {
                // A group of changes on distinct keys, sent together (one group commit).
                let n = rng.random_range(1..5);
                let mut picked: Vec<Vec<u8>> = Vec::new();
                while picked.len() < n {
                    let k = keys[rng.random_range(0..keys.len())].clone();
                    if !picked.contains(&k) {
                        picked.push(k);
                    }
                }
                let mut tasks = Vec::new();
                for k in picked {
                    let exists = expect
                        .lock()
                        .unwrap()
                        .get(&k)
                        .is_some_and(|s| s.acked.is_some());
                    let change = if exists && rng.random_bool(0.25) {
                        None
                    } else {
                        let len = match rng.random_range(0..4) {
                            0 => rng.random_range(1..200),
                            1 => 512,
                            2 => rng.random_range(1000..2100),
                            _ => rng.random_range(3000..4097),
                        };
                        Some(value(rng.random(), len))
                    };
                    expect
                        .lock()
                        .unwrap()
                        .entry(k.clone())
                        .or_default()
                        .pending
                        .push(change.clone());
                    if std::env::var_os("KV_DEBUG").is_some() {
                        eprintln!(
                            "step {step}: {k:?} <- {:?}",
                            change.as_ref().map(|v| v.len())
                        );
                    }
                    let kv = kv.clone();
                    let expect = expect.clone();
                    tasks.push(tokio::spawn(async move {
                        match &change {
                            Some(v) => kv.store(&k, v, StoreMode::Upsert).await.unwrap(),
                            None => kv.delete(&k).await.unwrap(),
                        }
                        let mut e = expect.lock().unwrap();
                        let st = e.get_mut(&k).unwrap();
                        st.acked = change;
                        st.pending.clear();
                    }));
                }
                for t in tasks {
                    t.await.unwrap();
                }
            }
        }
        let captured: Vec<Captured> = std::mem::take(&mut *out.lock().unwrap());
        for (i, c) in captured.iter().enumerate() {
            let what = format!("seed {seed} step {step}, {}", c.what);
            let (kv2, rec2) = check(&c.image, &c.expect, &what).await;
            if i % 7 == 0 {
                check_again(
                    kv2,
                    rec2,
                    &c.expect,
                    &what,
                    seed ^ (step as u64) << 16 ^ i as u64,
                )
                .await;
            }
            checked += 1;
        }
    }
    let s = kv.stats();
    assert!(
        s.segments_reclaimed > 0,
        "the workload never compacted: {s:?}"
    );
    assert!(s.checkpoints > 2, "{s:?}");
    checked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_recovers_acknowledged_state() {
    let mut images = 0;
    for seed in std::env::var("KV_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(0..4, |s: u64| s..s + 1)
    {
        images += workload(seed, 180).await;
    }
    assert!(images > 1000, "only {images} crash images checked");
}
