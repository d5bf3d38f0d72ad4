//! [`MemKvBackend`]: a KV namespace's store as a `BTreeMap` in memory, trivially correct,
//! for tests, fuzzing and as the model the real engine is compared against. Not durable.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Mutex;

use nvme_proto::kv::{KvKey, StoreMode};

use crate::kv_backend::{KvBackend, KvBackendError, KvFuture, KvRetrieved, KvUsage};
use crate::sync::lock;

struct State {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    used_bytes: u64,
    /// Every operation fails with this while set (fault injection for tests).
    fault: Option<KvBackendError>,
}

/// A `BTreeMap` behind a KV namespace, with a capacity (sum of value bytes) and a key
/// limit so that Capacity Exceeded can be tested.
pub struct MemKvBackend {
    state: Mutex<State>,
    capacity_bytes: u64,
    max_keys: u64,
}

impl MemKvBackend {
    pub fn new(capacity_bytes: u64, max_keys: u64) -> MemKvBackend {
        MemKvBackend {
            state: Mutex::new(State {
                map: BTreeMap::new(),
                used_bytes: 0,
                fault: None,
            }),
            capacity_bytes,
            max_keys,
        }
    }

    /// Makes every operation fail with `e` until cleared with `None`.
    pub fn set_fault(&self, e: Option<KvBackendError>) {
        lock(&self.state).fault = e;
    }

    /// A copy of the contents.
    pub fn contents(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        lock(&self.state).map.clone()
    }

    fn check(st: &State) -> Result<(), KvBackendError> {
        match &st.fault {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn store_now(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<(), KvBackendError> {
        let mut st = lock(&self.state);
        Self::check(&st)?;
        let old = st.map.get(key).map(|v| v.len() as u64);
        match (mode, old) {
            (StoreMode::OnlyIfExists, None) => return Err(KvBackendError::KeyNotFound),
            (StoreMode::OnlyIfAbsent, Some(_)) => return Err(KvBackendError::KeyExists),
            _ => {}
        }
        if old.is_none() && st.map.len() as u64 >= self.max_keys {
            return Err(KvBackendError::CapacityExceeded(format!(
                "{} keys stored, the most this namespace holds",
                self.max_keys
            )));
        }
        let used = st.used_bytes - old.unwrap_or(0) + value.len() as u64;
        if used > self.capacity_bytes {
            return Err(KvBackendError::CapacityExceeded(format!(
                "{used} bytes would exceed the capacity of {}",
                self.capacity_bytes
            )));
        }
        st.used_bytes = used;
        st.map.insert(key.to_vec(), value.to_vec());
        Ok(())
    }
}

impl KvBackend for MemKvBackend {
    fn store<'a>(&'a self, key: &'a [u8], value: &'a [u8], mode: StoreMode) -> KvFuture<'a, ()> {
        let r = self.store_now(key, value, mode);
        Box::pin(async move { r })
    }

    fn retrieve<'a>(&'a self, key: &'a [u8], out: &'a mut [u8]) -> KvFuture<'a, KvRetrieved> {
        let r = (|| {
            let st = lock(&self.state);
            Self::check(&st)?;
            let v = st.map.get(key).ok_or(KvBackendError::KeyNotFound)?;
            let n = v.len().min(out.len());
            out[..n].copy_from_slice(&v[..n]);
            Ok(KvRetrieved {
                value_bytes: v.len() as u32,
                copied_bytes: n,
            })
        })();
        Box::pin(async move { r })
    }

    fn delete<'a>(&'a self, key: &'a [u8]) -> KvFuture<'a, ()> {
        let r = (|| {
            let mut st = lock(&self.state);
            Self::check(&st)?;
            let v = st.map.remove(key).ok_or(KvBackendError::KeyNotFound)?;
            st.used_bytes -= v.len() as u64;
            Ok(())
        })();
        Box::pin(async move { r })
    }

    fn flush(&self) -> KvFuture<'_, ()> {
        let r = Self::check(&lock(&self.state));
        Box::pin(async move { r })
    }

    fn exists(&self, key: &[u8]) -> Result<bool, KvBackendError> {
        let st = lock(&self.state);
        Self::check(&st)?;
        Ok(st.map.contains_key(key))
    }

    fn list(&self, from: Option<&[u8]>, max: usize) -> Result<Vec<KvKey>, KvBackendError> {
        let st = lock(&self.state);
        Self::check(&st)?;
        let lower = from.map_or(Bound::Unbounded, Bound::Included);
        let keys = st.map.range::<[u8], _>((lower, Bound::Unbounded));
        Ok(keys
            .take(max)
            .filter_map(|(k, _)| KvKey::new(k).ok())
            .collect())
    }

    fn usage(&self) -> KvUsage {
        let st = lock(&self.state);
        KvUsage {
            capacity_bytes: self.capacity_bytes,
            used_bytes: st.used_bytes,
            key_count: st.map.len() as u64,
            max_keys: self.max_keys,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<T>(f: KvFuture<'_, T>) -> Result<T, KvBackendError> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn modes_limits_and_list() {
        let m = MemKvBackend::new(10, 2);
        assert_eq!(
            block_on(m.store(b"a", b"123", StoreMode::OnlyIfExists)),
            Err(KvBackendError::KeyNotFound)
        );
        block_on(m.store(b"a", b"123", StoreMode::OnlyIfAbsent)).unwrap();
        assert_eq!(
            block_on(m.store(b"a", b"9", StoreMode::OnlyIfAbsent)),
            Err(KvBackendError::KeyExists)
        );
        block_on(m.store(b"b", b"1234567", StoreMode::Always)).unwrap();
        // 10 bytes used of 10; a third key is over the key limit, growing over capacity.
        assert!(matches!(
            block_on(m.store(b"c", b"x", StoreMode::Always)),
            Err(KvBackendError::CapacityExceeded(_))
        ));
        assert!(matches!(
            block_on(m.store(b"a", b"1234", StoreMode::Always)),
            Err(KvBackendError::CapacityExceeded(_))
        ));
        let mut out = [0u8; 2];
        let r = block_on(m.retrieve(b"b", &mut out)).unwrap();
        assert_eq!((r.value_bytes, r.copied_bytes, out), (7, 2, *b"12"));
        let keys: Vec<Vec<u8>> = m
            .list(Some(b"a\0"), 10)
            .unwrap()
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        assert_eq!(keys, vec![b"b".to_vec()]);
        block_on(m.delete(b"a")).unwrap();
        assert_eq!(block_on(m.delete(b"a")), Err(KvBackendError::KeyNotFound));
        assert_eq!(m.usage().used_bytes, 7);
        m.set_fault(Some(KvBackendError::NotReady("test".into())));
        assert!(m.exists(b"b").is_err());
    }
}
