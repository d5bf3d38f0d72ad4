//! The KV mode against an in-memory store that can misbehave on purpose (acknowledge a
//! Store and drop it, hand out another key's value, flip a bit, report a wrong size):
//! verification must catch each, and a clean store must pass.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use blockdev::IoBuf;

use super::*;
use crate::progress::Progress;

#[derive(Clone, Copy, Default)]
struct Faults {
    /// Every n-th Store is acknowledged but not kept (0: none).
    drop_every: u64,
    /// Retrieves of this key index answer with another key's value.
    swap_index: Option<u64>,
    /// Retrieves of this key index get one bit flipped.
    flip_index: Option<u64>,
    /// Retrieves of this key index report one byte more.
    bad_size_index: Option<u64>,
}

#[derive(Default)]
struct MemKv {
    values: Mutex<BTreeMap<[u8; 16], Vec<u8>>>,
    stores: AtomicU64,
    faults: Mutex<Faults>,
}

fn index_of(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[8..16]);
    u64::from_be_bytes(b)
}

impl KvTarget for MemKv {
    fn max_value_bytes(&self) -> u64 {
        1 << 20
    }

    async fn store(&self, key: &[u8], value: IoBuf) -> (Result<(), KvOpError>, IoBuf) {
        let n = self.stores.fetch_add(1, Ordering::Relaxed) + 1;
        let f = *self.faults.lock().unwrap_or_else(|p| p.into_inner());
        if f.drop_every == 0 || !n.is_multiple_of(f.drop_every) {
            let mut k = [0u8; 16];
            k.copy_from_slice(key);
            self.values
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(k, value.to_vec());
        }
        tokio::task::yield_now().await;
        (Ok(()), value)
    }

    async fn retrieve(&self, key: &[u8], mut buf: IoBuf) -> (Result<u32, KvOpError>, IoBuf) {
        tokio::task::yield_now().await;
        let f = *self.faults.lock().unwrap_or_else(|p| p.into_inner());
        let idx = index_of(key);
        let values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        let k = if f.swap_index == Some(idx) {
            // The next key's value instead.
            values
                .range(<[u8; 16]>::try_from(key).unwrap_or([0; 16])..)
                .nth(1)
                .map(|(k, _)| *k)
        } else {
            <[u8; 16]>::try_from(key).ok()
        };
        let Some(v) = k.and_then(|k| values.get(&k)) else {
            return (Err(KvOpError::NotFound), buf);
        };
        let n = v.len().min(buf.len());
        buf[..n].copy_from_slice(&v[..n]);
        if f.flip_index == Some(idx) && n > 100 {
            buf[100] ^= 0x10;
        }
        let size = v.len() as u32 + u32::from(f.bad_size_index == Some(idx));
        (Ok(size), buf)
    }
}

fn cfg(pattern: KvPattern, verify: bool) -> KvBenchConfig {
    KvBenchConfig {
        pattern,
        value_size_bytes: 1000,
        keys: 256,
        iodepth: 8,
        jobs: 2,
        runtime_ms: 0,
        verify,
        ..KvBenchConfig::default()
    }
}

async fn run(t: &Arc<MemKv>, c: &KvBenchConfig) -> crate::Report {
    run_kv(t.clone(), c, "mem", &Progress::Silent)
        .await
        .expect("run")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_pass_then_a_retrieve_pass_verify_clean() {
    let t = Arc::new(MemKv::default());
    let s = run(&t, &cfg(KvPattern::Store, true)).await;
    assert_eq!((s.write_ios, s.read_ios, s.errors), (256, 0, 0), "{s:?}");
    let kv = s.kv.clone().expect("kv report");
    let v = kv.verify.expect("verify");
    assert_eq!(
        (v.values_stored, v.values_read_back, v.values_checked),
        (256, 256, 256)
    );
    assert_eq!(v.mismatches(), 0, "{v:?}");
    assert_eq!(t.values.lock().expect("lock").len(), 256);
    assert_eq!(s.pattern, "store");
    assert!(
        s.to_text().contains("kv store value=1000 keys=256"),
        "{}",
        s.to_text()
    );
    let r = run(&t, &cfg(KvPattern::Retrieve, true)).await;
    assert_eq!((r.read_ios, r.errors), (256, 0), "{r:?}");
    let v = r.kv.clone().and_then(|k| k.verify).expect("verify");
    assert_eq!((v.values_checked, v.mismatches()), (256, 0), "{v:?}");
    assert_eq!(r.read_bytes, 256 * 1000);
    // A mixed run over the same keys, time-bounded.
    let mut m = cfg(
        KvPattern::Mixed {
            retrieve_percent: 50,
        },
        true,
    );
    m.runtime_ms = 200;
    let m = run(&t, &m).await;
    assert!(m.read_ios > 0 && m.write_ios > 0 && m.errors == 0, "{m:?}");
    assert_eq!(m.verify_failures(), 0, "{m:?}");
}

#[test]
fn a_retrieve_pass_visits_every_key_once() {
    let mut rng = crate::job::Rng(7);
    for n in [1u64, 2, 3, 10, 256, 1000, 4096, 99_991] {
        let stride = super::job::coprime_stride(n, &mut rng);
        let mut seen: Vec<u64> = (0..n)
            .map(|i| super::job::scrambled(i, n, stride))
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n {n} stride {stride}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_catches_lost_misdirected_corrupt_and_wrong_sizes() {
    let t = Arc::new(MemKv::default());
    t.faults.lock().expect("lock").drop_every = 16;
    let s = run(&t, &cfg(KvPattern::Store, true)).await;
    let v = s.kv.and_then(|k| k.verify).expect("verify");
    assert_eq!(v.lost, 256 / 16, "every dropped Store is found: {v:?}");
    assert!(
        v.first_errors[0].contains("does not exist, its Store"),
        "{v:?}"
    );

    let t = Arc::new(MemKv::default());
    run(&t, &cfg(KvPattern::Store, true)).await;
    *t.faults.lock().expect("lock") = Faults {
        swap_index: Some(3),
        flip_index: Some(200),
        bad_size_index: Some(77),
        ..Faults::default()
    };
    let r = run(&t, &cfg(KvPattern::Retrieve, true)).await;
    let v = r.kv.and_then(|k| k.verify).expect("verify");
    assert_eq!((v.misdirected, v.corrupt, v.wrong_size), (1, 1, 1), "{v:?}");
    assert_eq!(v.values_failed, 3);
    assert!(
        v.first_errors
            .iter()
            .any(|e| e.contains("key 3: holds the value of key 4")),
        "{v:?}"
    );
    // Keys a retrieve run finds missing are errors.
    let empty = Arc::new(MemKv::default());
    let r = run(&empty, &cfg(KvPattern::Retrieve, false)).await;
    assert_eq!(r.errors, 256);
    assert!(
        r.first_error
            .as_deref()
            .unwrap_or("")
            .contains("store the keys first"),
        "{r:?}"
    );
    // A Store of a newer write over an older one: the older one read back is lost.
    let t = Arc::new(MemKv::default());
    run(&t, &cfg(KvPattern::Store, true)).await;
    let before = t.values.lock().expect("lock").clone();
    let mut again = cfg(KvPattern::Store, true);
    again.generation = 2;
    t.faults.lock().expect("lock").drop_every = 1;
    let s = run(&t, &again).await;
    assert_eq!(*t.values.lock().expect("lock"), before);
    let v = s.kv.and_then(|k| k.verify).expect("verify");
    assert_eq!(
        v.lost, 256,
        "stale values of generation 1 are lost writes: {v:?}"
    );
}
