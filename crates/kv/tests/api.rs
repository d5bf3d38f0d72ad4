//! The command interface: sizes, store options, errors, retrieve into small buffers,
//! list order, usage and counters, reopen.
#![allow(clippy::unwrap_used)]

mod common;

use blockdev::IoBuf;
use common::*;
use kv::{ErrorKind, Kv, KvError, StoreMode};

#[tokio::test]
async fn store_retrieve_delete_exist() {
    let dev = ram(8 << 20);
    let kv = fresh(&dev).await;
    kv.store(b"alpha", b"one", StoreMode::Upsert).await.unwrap();
    assert_eq!(kv.get(b"alpha").await.unwrap(), b"one");
    assert!(kv.exists(b"alpha").unwrap());
    assert!(!kv.exists(b"beta").unwrap());
    kv.store(b"alpha", &value(1, 5000), StoreMode::Upsert)
        .await
        .unwrap();
    assert_eq!(kv.get(b"alpha").await.unwrap(), value(1, 5000));
    kv.delete(b"alpha").await.unwrap();
    assert!(!kv.exists(b"alpha").unwrap());
    assert!(matches!(kv.get(b"alpha").await, Err(KvError::KeyNotFound)));
    assert!(matches!(
        kv.delete(b"alpha").await,
        Err(KvError::KeyNotFound)
    ));
}

#[tokio::test]
async fn sizes_are_checked_with_their_own_errors() {
    let dev = ram(8 << 20);
    let kv = fresh(&dev).await;
    let max = kv.format_info().max_value_bytes as usize;
    assert_eq!(max, 8 << 10);
    let e = kv.store(b"", b"v", StoreMode::Upsert).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidKeySize);
    let e = kv
        .store(&[1u8; 17], b"v", StoreMode::Upsert)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidKeySize);
    assert!(e.to_string().contains("17 bytes"), "{e}");
    let e = kv.store(b"k", b"", StoreMode::Upsert).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidValueSize);
    let e = kv
        .store(b"k", &vec![0u8; max + 1], StoreMode::Upsert)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidValueSize);
    // The limits themselves work: 16-byte key, 1-byte and max-size values.
    kv.store(&[0xffu8; 16], &value(2, max), StoreMode::Upsert)
        .await
        .unwrap();
    kv.store(&[0u8; 1], b"x", StoreMode::Upsert).await.unwrap();
    assert_eq!(kv.get(&[0xffu8; 16]).await.unwrap(), value(2, max));
    assert_eq!(kv.get(&[0u8]).await.unwrap(), b"x");
    assert!(matches!(
        kv.exists(&[0u8; 17]),
        Err(KvError::InvalidKeySize { len: 17 })
    ));
}

#[tokio::test]
async fn store_options_give_distinct_errors() {
    let dev = ram(8 << 20);
    let kv = fresh(&dev).await;
    let e = kv
        .store(b"k", b"v1", StoreMode::OnlyIfExists)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::KeyNotFound);
    assert!(!kv.exists(b"k").unwrap());
    kv.store(b"k", b"v1", StoreMode::OnlyIfAbsent)
        .await
        .unwrap();
    let e = kv
        .store(b"k", b"v2", StoreMode::OnlyIfAbsent)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::KeyExists);
    assert_eq!(kv.get(b"k").await.unwrap(), b"v1");
    kv.store(b"k", b"v3", StoreMode::OnlyIfExists)
        .await
        .unwrap();
    assert_eq!(kv.get(b"k").await.unwrap(), b"v3");
    assert!(kv.stats().rejected >= 2);
}

#[tokio::test]
async fn concurrent_conditional_stores_on_one_key_admit_exactly_one() {
    let dev = ram(8 << 20);
    let kv = fresh(&dev).await;
    let mut tasks = Vec::new();
    for i in 0..32u64 {
        let kv = kv.clone();
        tasks.push(tokio::spawn(async move {
            kv.store(b"once", &value(i, 100), StoreMode::OnlyIfAbsent)
                .await
                .map(|()| i)
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(i) => winners.push(i),
            Err(e) => assert_eq!(e.kind(), ErrorKind::KeyExists),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(kv.get(b"once").await.unwrap(), value(winners[0], 100));
}

#[tokio::test]
async fn retrieve_into_a_small_buffer_reports_the_value_size() {
    let dev = ram(8 << 20);
    let kv = fresh(&dev).await;
    let v = value(3, 3000);
    kv.store(b"big", &v, StoreMode::Upsert).await.unwrap();
    let mut small = [0u8; 100];
    let r = kv.retrieve(b"big", &mut small).await.unwrap();
    assert_eq!(r.value_bytes, 3000);
    assert_eq!(r.copied_bytes, 100);
    assert!(r.is_truncated());
    assert_eq!(&small[..], &v[..100]);
    let mut exact = vec![0u8; 3000];
    let r = kv.retrieve(b"big", &mut exact).await.unwrap();
    assert!(!r.is_truncated());
    assert_eq!(exact, v);
    let mut larger = vec![0u8; 5000];
    let r = kv.retrieve(b"big", &mut larger).await.unwrap();
    assert_eq!((r.value_bytes, r.copied_bytes), (3000, 3000));
    assert_eq!(&larger[..3000], &v[..]);
    assert_eq!(kv.value_len(b"big").unwrap(), 3000);
}

/// A buffer of `len` bytes, every one 0xEE (what a reused transfer buffer may hold).
fn dirty(len: usize) -> IoBuf {
    let mut b = IoBuf::new_zeroed(len);
    b.fill(0xEE);
    b
}

#[tokio::test]
async fn store_buf_and_retrieve_buf_give_the_buffers_back() {
    let dev = ram(8 << 20);
    let kv = fresh(&dev).await; // values of 2 KiB and more go in place
    // Small (packed, not block aligned), in place with a partial last block, whole blocks.
    let lens = [10usize, 100, 700, 2048, 3001, 4096, 8192];
    for (i, &len) in lens.iter().enumerate() {
        let v = value(i as u64, len);
        let (r, back) = kv
            .store_buf(&[b'k', i as u8], IoBuf::from_slice(&v), StoreMode::Upsert)
            .await;
        r.unwrap();
        let back = back.expect("the buffer comes back");
        assert_eq!(&back[..], &v[..], "length and content unchanged");
    }
    for (i, &len) in lens.iter().enumerate() {
        let v = value(i as u64, len);
        let key = [b'k', i as u8];
        assert_eq!(kv.get(&key).await.unwrap(), v);
        // Exact, larger (zeros after the value), shorter (the first bytes, whole value
        // checked), and a buffer whose capacity cannot hold the value's blocks.
        for want in [len, len + 1000, len / 2, 1] {
            let (r, b) = kv.retrieve_buf(&key, dirty(want)).await;
            let r = r.unwrap();
            let n = want.min(len);
            assert_eq!((r.value_bytes as usize, r.copied_bytes), (len, n));
            assert_eq!(b.len(), want);
            assert_eq!(&b[..n], &v[..n], "len {len} into {want}");
            assert!(b[n..].iter().all(|&x| x == 0), "zeros after the value");
        }
    }
    // Refused: the buffer comes back untouched.
    let (r, b) = kv.retrieve_buf(b"none", dirty(4096)).await;
    assert!(matches!(r, Err(KvError::KeyNotFound)));
    assert_eq!(b.len(), 4096);
    let (r, b) = kv
        .store_buf(b"zz", dirty(100), StoreMode::OnlyIfExists)
        .await;
    assert!(matches!(r, Err(KvError::KeyNotFound)));
    assert_eq!(b.unwrap().len(), 100);
    let (r, b) = kv
        .store_buf(b"k\x03", dirty(5000), StoreMode::OnlyIfAbsent)
        .await;
    assert!(matches!(r, Err(KvError::KeyExists)));
    assert_eq!(b.unwrap().len(), 5000);
    let (r, b) = kv
        .store_buf(b"k", IoBuf::new_zeroed(0), StoreMode::Upsert)
        .await;
    assert!(matches!(r, Err(KvError::InvalidValueSize { .. })));
    assert!(b.is_some());
    // Many in-place values in one batch, with small ones between them, reopened.
    let mut tasks = Vec::new();
    for i in 0..40u64 {
        let kv = kv.clone();
        tasks.push(tokio::spawn(async move {
            let v = value(100 + i, [50, 2500, 8192, 3000][i as usize % 4]);
            let (r, _) = kv
                .store_buf(&[b'm', i as u8], IoBuf::from_slice(&v), StoreMode::Upsert)
                .await;
            r.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    kv.close().await.unwrap();
    let (kv, _) = Kv::open(dev.clone(), small_options()).await.unwrap();
    for i in 0..40u64 {
        let v = value(100 + i, [50, 2500, 8192, 3000][i as usize % 4]);
        assert_eq!(kv.get(&[b'm', i as u8]).await.unwrap(), v);
    }
}

#[tokio::test]
async fn list_is_ordered_bounded_and_starts_at_the_given_key() {
    let dev = ram(8 << 20);
    let kv = fresh(&dev).await;
    for k in [&b"b"[..], b"a", b"ab", b"a\0", b"c", b"\xff\xff"] {
        kv.store(k, k, StoreMode::Upsert).await.unwrap();
    }
    let all: Vec<Vec<u8>> = kv
        .list(b"", 100)
        .unwrap()
        .iter()
        .map(|k| k.as_bytes().to_vec())
        .collect();
    assert_eq!(
        all,
        vec![
            b"a".to_vec(),
            b"a\0".to_vec(),
            b"ab".to_vec(),
            b"b".to_vec(),
            b"c".to_vec(),
            b"\xff\xff".to_vec()
        ]
    );
    let some: Vec<Vec<u8>> = kv
        .list(b"aa", 2)
        .unwrap()
        .iter()
        .map(|k| k.as_bytes().to_vec())
        .collect();
    assert_eq!(some, vec![b"ab".to_vec(), b"b".to_vec()]);
    // Inclusive start.
    assert_eq!(kv.list(b"c", 10).unwrap().len(), 2);
    assert!(kv.list(b"\xff\xff\xff", 10).unwrap().is_empty());
    assert!(kv.list(&[0u8; 17], 1).is_err());
}

#[tokio::test]
async fn usage_and_counters_follow_the_commands() {
    let dev = ram(8 << 20);
    let kv = fresh(&dev).await;
    let u0 = kv.usage();
    assert_eq!(u0.key_count, 0);
    assert_eq!(u0.max_keys, 4096);
    assert!(u0.capacity_bytes > 0 && u0.capacity_bytes < 8 << 20);
    for i in 0..10u64 {
        kv.store(&i.to_be_bytes(), &value(i, 1000), StoreMode::Upsert)
            .await
            .unwrap();
    }
    let u = kv.usage();
    assert_eq!(u.key_count, 10);
    // 10 values of 1000 bytes (packed: smaller than a 512-byte-block multiple) + descriptors.
    assert_eq!(u.live_bytes, 10 * (1024 + 40));
    assert!(u.used_bytes >= u.live_bytes);
    assert_eq!(u.garbage_bytes, u.used_bytes - u.live_bytes);
    for i in 0..5u64 {
        kv.delete(&i.to_be_bytes()).await.unwrap();
    }
    let u2 = kv.usage();
    assert_eq!(u2.key_count, 5);
    assert_eq!(u2.live_bytes, 5 * (1024 + 40));
    assert!(u2.garbage_bytes > u.garbage_bytes);
    let s = kv.stats();
    assert_eq!(s.stores, 10);
    assert_eq!(s.store_bytes, 10_000);
    assert_eq!(s.deletes, 5);
    assert!(s.batches >= 1 && s.batch_records >= 15);
    assert!(s.log_bytes_written >= 10_000);
}

#[tokio::test]
async fn reopen_after_close_and_after_drop_keeps_everything_acknowledged() {
    let dev = ram(8 << 20);
    let kv = fresh(&dev).await;
    for i in 0..200u64 {
        kv.store(
            &i.to_be_bytes(),
            &value(i, 100 + i as usize * 20),
            StoreMode::Upsert,
        )
        .await
        .unwrap();
    }
    kv.delete(&7u64.to_be_bytes()).await.unwrap();
    kv.close().await.unwrap();
    assert!(matches!(kv.get(b"x").await, Err(KvError::Closed)));
    drop(kv);
    let (kv, report) = Kv::open(dev.clone(), small_options()).await.unwrap();
    assert_eq!(report.key_count, 199);
    // close() checkpointed: nothing to replay.
    assert_eq!(report.replayed_batches, 0, "{report:?}");
    for i in 0..200u64 {
        let got = kv.get(&i.to_be_bytes()).await;
        if i == 7 {
            assert!(matches!(got, Err(KvError::KeyNotFound)));
        } else {
            assert_eq!(got.unwrap(), value(i, 100 + i as usize * 20), "key {i}");
        }
    }
    // More changes, then drop without close: replay brings them back.
    kv.store(b"late", b"value", StoreMode::Upsert)
        .await
        .unwrap();
    kv.delete(&8u64.to_be_bytes()).await.unwrap();
    drop(kv);
    let (kv, report) = Kv::open(dev.clone(), small_options()).await.unwrap();
    assert!(report.replayed_batches >= 2, "{report:?}");
    assert_eq!(kv.get(b"late").await.unwrap(), b"value");
    assert!(!kv.exists(&8u64.to_be_bytes()).unwrap());
    assert_eq!(kv.usage().key_count, 199);
}

#[tokio::test]
async fn open_refuses_unformatted_devices_with_a_reason() {
    let dev = ram(8 << 20);
    let e = Kv::open(dev.clone(), small_options()).await.unwrap_err();
    assert!(matches!(e, KvError::NotFormatted(_)), "{e}");
    assert!(e.to_string().contains("superblock"), "{e}");
    let tiny = ram(64 << 10);
    let e = Kv::format(&tiny, &small_format()).await.unwrap_err();
    assert!(matches!(e, KvError::InvalidOptions(_)), "{e}");
}

#[tokio::test]
async fn capacity_exceeded_by_keys_and_by_bytes() {
    let dev = ram(8 << 20);
    let mut f = small_format();
    f.max_keys = Some(10);
    Kv::format(&dev, &f).await.unwrap();
    let (kv, _) = Kv::open(dev.clone(), small_options()).await.unwrap();
    for i in 0..10u8 {
        kv.store(&[i], b"v", StoreMode::Upsert).await.unwrap();
    }
    let e = kv.store(&[99], b"v", StoreMode::Upsert).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CapacityExceeded);
    assert!(e.to_string().contains("10 keys"), "{e}");
    // Overwrites still work at the key limit; deleting makes room.
    kv.store(&[0], b"w", StoreMode::Upsert).await.unwrap();
    kv.delete(&[1]).await.unwrap();
    kv.store(&[99], b"v", StoreMode::Upsert).await.unwrap();

    let dev = ram(2 << 20);
    let kv = fresh(&dev).await;
    let cap = kv.usage().capacity_bytes;
    let mut stored = 0u64;
    let mut i = 0u64;
    let err = loop {
        match kv
            .store(&i.to_be_bytes(), &value(i, 8192), StoreMode::Upsert)
            .await
        {
            Ok(()) => stored += 8192 + 40,
            Err(e) => break e,
        }
        i += 1;
        assert!(i < 10_000);
    };
    assert_eq!(err.kind(), ErrorKind::CapacityExceeded, "{err}");
    assert!(
        stored <= cap && stored + 8232 > cap,
        "stored {stored} of {cap}"
    );
    // Everything stored reads back; deleting frees capacity for new stores.
    for j in 0..i {
        assert_eq!(kv.get(&j.to_be_bytes()).await.unwrap(), value(j, 8192));
    }
    for j in 0..i / 2 {
        kv.delete(&j.to_be_bytes()).await.unwrap();
    }
    for j in 0..i / 2 {
        kv.store(
            &(j + 100_000).to_be_bytes(),
            &value(j, 8192),
            StoreMode::Upsert,
        )
        .await
        .unwrap();
    }
    assert!(kv.stats().segments_reclaimed > 0, "{:?}", kv.stats());
}
