//! The behaviour every ShardStore must show, checked against a BTreeMap model.

use std::collections::BTreeMap;

use bytes::Bytes;
use rand::{Rng, SeedableRng};

use super::{MAX_VALUE_BYTES, ShardError, ShardKey, ShardStore, StoreMode};

/// Runs the fixed edge cases, then a random sequence of operations compared with a model.
/// The store must be empty and hold at least 64 MiB.
pub(crate) async fn check(store: &dyn ShardStore) {
    let k1 = ShardKey([1; 16]);
    let mut buf = vec![0u8; 16];
    assert_eq!(
        store.retrieve(k1, &mut buf).await,
        Err(ShardError::KeyNotFound)
    );
    assert_eq!(store.delete(k1).await, Err(ShardError::KeyNotFound));
    assert_eq!(store.exist(k1).await, Ok(false));
    assert_eq!(
        store
            .store(k1, Bytes::from_static(b"x"), StoreMode::OnlyIfExists)
            .await,
        Err(ShardError::KeyNotFound)
    );
    store
        .store(k1, Bytes::from_static(b"hello"), StoreMode::OnlyIfAbsent)
        .await
        .expect("absent");
    assert_eq!(
        store
            .store(k1, Bytes::from_static(b"x"), StoreMode::OnlyIfAbsent)
            .await,
        Err(ShardError::KeyExists)
    );
    // A short buffer gets a prefix and the full size.
    let mut short = [0u8; 2];
    assert_eq!(store.retrieve(k1, &mut short).await, Ok(5));
    assert_eq!(&short, b"he");
    store
        .store(k1, Bytes::from_static(b"world!"), StoreMode::OnlyIfExists)
        .await
        .expect("exists");
    assert_eq!(store.retrieve(k1, &mut buf).await, Ok(6));
    assert_eq!(&buf[..6], b"world!");
    // Empty values are refused (as NVMe KV does); the smallest is 1 byte.
    let k0 = ShardKey([0; 16]);
    assert_eq!(
        store.store(k0, Bytes::new(), StoreMode::Upsert).await,
        Err(ShardError::EmptyValue)
    );
    assert_eq!(store.exist(k0).await, Ok(false));
    store
        .store(k0, Bytes::from_static(b"1"), StoreMode::Upsert)
        .await
        .expect("1-byte value");
    assert_eq!(store.exist(k0).await, Ok(true));
    assert_eq!(store.retrieve(k0, &mut buf).await, Ok(1));
    // A buffer of 0 bytes asks for the size.
    assert_eq!(store.retrieve(k1, &mut []).await, Ok(6));
    let too_big = Bytes::from(vec![0u8; MAX_VALUE_BYTES + 1]);
    assert_eq!(
        store.store(k1, too_big, StoreMode::Upsert).await,
        Err(ShardError::ValueTooLarge {
            bytes: MAX_VALUE_BYTES + 1
        })
    );
    let max = Bytes::from(vec![7u8; MAX_VALUE_BYTES]);
    store
        .store(k1, max.clone(), StoreMode::Upsert)
        .await
        .expect("max value");
    let mut big = vec![0u8; MAX_VALUE_BYTES];
    assert_eq!(store.retrieve(k1, &mut big).await, Ok(MAX_VALUE_BYTES));
    assert_eq!(big, max);
    store.delete(k1).await.expect("delete");
    store.delete(k0).await.expect("delete");
    assert_eq!(store.list(ShardKey::MIN, 10).await, Ok(vec![]));

    // Random operations against the model.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut model: BTreeMap<ShardKey, Vec<u8>> = BTreeMap::new();
    for _ in 0..400 {
        let mut key = [0u8; 16];
        key[0] = rng.random_range(0..8);
        key[15] = rng.random_range(0..4);
        let key = ShardKey(key);
        match rng.random_range(0..5) {
            0 | 1 => {
                let len = rng.random_range(1..300);
                let value: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                let mode = match rng.random_range(0..3) {
                    0 => StoreMode::Upsert,
                    1 => StoreMode::OnlyIfAbsent,
                    _ => StoreMode::OnlyIfExists,
                };
                let want = match (mode, model.contains_key(&key)) {
                    (StoreMode::OnlyIfAbsent, true) => Err(ShardError::KeyExists),
                    (StoreMode::OnlyIfExists, false) => Err(ShardError::KeyNotFound),
                    _ => Ok(()),
                };
                let got = store.store(key, Bytes::from(value.clone()), mode).await;
                assert_eq!(got, want);
                if got.is_ok() {
                    model.insert(key, value);
                }
            }
            2 => {
                let mut buf = vec![0u8; 300];
                let got = store.retrieve(key, &mut buf).await;
                match model.get(&key) {
                    Some(v) => {
                        assert_eq!(got, Ok(v.len()));
                        assert_eq!(&buf[..v.len()], v.as_slice());
                    }
                    None => assert_eq!(got, Err(ShardError::KeyNotFound)),
                }
            }
            3 => {
                let want = match model.remove(&key) {
                    Some(_) => Ok(()),
                    None => Err(ShardError::KeyNotFound),
                };
                assert_eq!(store.delete(key).await, want);
            }
            _ => {
                let max = rng.random_range(1..6);
                let want: Vec<ShardKey> = model.range(key..).take(max).map(|(k, _)| *k).collect();
                assert_eq!(store.list(key, max).await, Ok(want));
                assert_eq!(store.exist(key).await, Ok(model.contains_key(&key)));
            }
        }
    }
}
