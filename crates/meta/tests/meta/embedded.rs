//! Tests of the embedded backend alone: restart, exclusive open, bounded history.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use meta::{EmbeddedOptions, EmbeddedStore, ManualClock, MetaError, MetaStore, schema};

use crate::env::{PATIENCE, next_batch};

fn options(clock: Arc<ManualClock>, history_revisions: usize) -> EmbeddedOptions {
    EmbeddedOptions {
        clock,
        history_revisions,
        ..EmbeddedOptions::default()
    }
}

#[tokio::test]
async fn restart_keeps_data_and_drops_leased_keys() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new());
    let (kept_rev, old_lease) = {
        let store = EmbeddedStore::open(dir.path(), options(clock.clone(), 64))
            .await
            .expect("open");
        let lease = store.grant_lease(60_000).await.expect("grant");
        let kept_rev = store.put("/r/kept", b"v".to_vec()).await.expect("put");
        store
            .put_with_lease("/r/leased", b"l".to_vec(), lease.id)
            .await
            .expect("put");
        (kept_rev, lease.id)
    };
    let store = EmbeddedStore::open(dir.path(), options(clock.clone(), 64))
        .await
        .expect("reopen");
    let kept = store.get("/r/kept").await.expect("get").expect("kept");
    assert_eq!(
        (kept.value.as_slice(), kept.mod_revision),
        (&b"v"[..], kept_rev)
    );
    assert_eq!(store.get("/r/leased").await.expect("get"), None);
    let listing = store.list("/r/").await.expect("list");
    assert!(
        listing.revision > kept_rev + 1,
        "the cleanup is a new revision"
    );
    assert!(matches!(
        store.keep_alive(old_lease).await,
        Err(MetaError::LeaseNotFound(_))
    ));
    let fresh = store.grant_lease(1000).await.expect("grant");
    assert!(fresh.id > old_lease, "lease ids are not reused");
    // History starts over: the past cannot be watched, the future can.
    let mut past = store.watch("/r/", kept_rev).await.expect("watch");
    assert!(matches!(
        past.next().await,
        Some(Err(MetaError::Compacted { .. }))
    ));
    let mut future = store
        .watch("/r/", listing.revision + 1)
        .await
        .expect("watch");
    let rev = store.put("/r/new", vec![]).await.expect("put");
    assert_eq!(rev, listing.revision + 1);
    assert_eq!(next_batch(&mut future).await.revision, rev);
}

#[tokio::test]
async fn a_second_open_of_the_same_dir_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new());
    let _store = EmbeddedStore::open(dir.path(), options(clock.clone(), 64))
        .await
        .expect("open");
    assert!(
        EmbeddedStore::open(dir.path(), options(clock, 64))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_lagging_watcher_is_told_to_resync() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = EmbeddedStore::open(dir.path(), options(Arc::new(ManualClock::new()), 8))
        .await
        .expect("open");
    let mut slow = store.watch("/s/", 0).await.expect("watch");
    let mut first = 0;
    for i in 0..20u8 {
        let rev = store.put("/s/k", vec![i]).await.expect("put");
        if i == 0 {
            first = rev;
        }
    }
    match tokio::time::timeout(PATIENCE, slow.next())
        .await
        .expect("item")
    {
        Some(Err(MetaError::Compacted {
            requested,
            oldest_available,
        })) => {
            assert_eq!(requested, first);
            assert_eq!(
                oldest_available,
                first + 12,
                "the last 8 revisions are kept"
            );
        }
        other => panic!("expected Compacted, got {other:?}"),
    }
    assert!(slow.next().await.is_none());
    // A watcher within the window catches up from the history.
    let mut recent = store.watch("/s/", first + 12).await.expect("watch");
    for rev in first + 12..first + 20 {
        assert_eq!(next_batch(&mut recent).await.revision, rev);
    }
}

#[tokio::test]
async fn watches_end_when_the_store_is_dropped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = EmbeddedStore::open(dir.path(), options(Arc::new(ManualClock::new()), 8))
        .await
        .expect("open");
    let mut watch = store.watch("/", 0).await.expect("watch");
    store.put("/x", vec![]).await.expect("put");
    drop(store);
    next_batch(&mut watch).await;
    let end = tokio::time::timeout(Duration::from_secs(5), watch.next()).await;
    assert!(matches!(end, Ok(Some(Err(MetaError::Closed)))), "{end:?}");
    // The database was closed: it can be opened again.
    EmbeddedStore::open(dir.path(), options(Arc::new(ManualClock::new()), 8))
        .await
        .expect("reopen");
}

#[tokio::test]
async fn history_is_bounded_in_bytes_too() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = EmbeddedOptions {
        clock: Arc::new(ManualClock::new()),
        history_revisions: 1000,
        history_bytes: 3 * 1024 * 1024,
    };
    let store = EmbeddedStore::open(dir.path(), options)
        .await
        .expect("open");
    let mut slow = store.watch("/b/", 0).await.expect("watch");
    let mut revisions = Vec::new();
    for i in 0..5u8 {
        revisions.push(store.put("/b/k", vec![i; 1024 * 1024]).await.expect("put"));
    }
    // Only the last two 1 MiB values fit in 3 MiB.
    match slow.next().await {
        Some(Err(MetaError::Compacted {
            oldest_available, ..
        })) => assert_eq!(oldest_available, revisions[3]),
        other => panic!("expected Compacted, got {other:?}"),
    }
    let mut recent = store.watch("/b/", revisions[3]).await.expect("watch");
    assert_eq!(next_batch(&mut recent).await.revision, revisions[3]);
    assert_eq!(next_batch(&mut recent).await.revision, revisions[4]);
}

#[tokio::test]
async fn an_owner_watch_that_lags_resyncs_by_itself() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn MetaStore> = Arc::new(
        EmbeddedStore::open(dir.path(), options(Arc::new(ManualClock::new()), 4))
            .await
            .expect("open"),
    );
    let lease = store.grant_lease(60_000).await.expect("grant");
    let mut owners = schema::watch_owner(store.clone(), "v").expect("watch");
    assert_eq!(owners.next().await.expect("item").expect("ok"), None);
    let owner = schema::acquire_ownership(store.as_ref(), "v", "n1", lease.id)
        .await
        .expect("acquire");
    // Far more changes than the history keeps, before the watcher looks again.
    for i in 0..20u8 {
        store.put("/unrelated", vec![i]).await.expect("put");
    }
    let seen = tokio::time::timeout(PATIENCE, owners.next())
        .await
        .expect("item")
        .expect("some")
        .expect("ok");
    assert_eq!(seen, Some(owner));
    assert!(store.revoke_lease(lease.id).await.expect("revoke"));
    let seen = tokio::time::timeout(PATIENCE, owners.next())
        .await
        .expect("item")
        .expect("some")
        .expect("ok");
    assert_eq!(seen, None);
}
