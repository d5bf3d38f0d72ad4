//! The conformance suite: every case runs against every backend (see `meta.rs`).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use meta::schema::{
    self, OwnerRecord, OwnershipError, TypedCas, acquire_ownership, current_owner, last_epoch,
    release_ownership, seize_ownership, watch_owner,
};
use meta::{
    CasOutcome, Expect, KeeperConfig, LeaseKeeper, LeaseState, LossReason, MAX_VALUE_BYTES,
    MetaError, Txn, TxnOutcome, WatchEvent,
};

use crate::env::{
    Env, Link, PATIENCE, Partitionable, assert_quiet, committed_revision, next_batch,
};

pub async fn put_get_list_delete(env: Env) {
    let s = env.store.as_ref();
    assert_eq!(s.get("/t/a").await.expect("get"), None);
    let r1 = s.put("/t/a", b"1".to_vec()).await.expect("put");
    let kv = s.get("/t/a").await.expect("get").expect("present");
    assert_eq!(
        (kv.value.as_slice(), kv.mod_revision, kv.create_revision),
        (&b"1"[..], r1, r1)
    );
    assert_eq!(kv.lease, None);
    let r2 = s.put("/t/a", b"2".to_vec()).await.expect("put");
    assert!(r2 > r1);
    let kv = s.get("/t/a").await.expect("get").expect("present");
    assert_eq!((kv.mod_revision, kv.create_revision), (r2, r1));
    s.put("/t/ab", b"x".to_vec()).await.expect("put");
    s.put("/t/b", b"y".to_vec()).await.expect("put");
    let r5 = s.put("/u/a", b"z".to_vec()).await.expect("put");
    let listing = s.list("/t/").await.expect("list");
    let keys: Vec<_> = listing.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/t/a", "/t/ab", "/t/b"]);
    assert_eq!(
        listing.revision, r5,
        "a listing is read at the current revision"
    );
    assert_eq!(s.list("/t/a").await.expect("list").kvs.len(), 2);
    assert_eq!(s.list("").await.expect("list all").kvs.len(), 4);
    let deleted_at = s.delete("/t/a").await.expect("delete").expect("existed");
    assert!(deleted_at > r5);
    assert_eq!(s.delete("/t/a").await.expect("delete"), None);
    assert_eq!(s.get("/t/a").await.expect("get"), None);
    // Deleting nothing is no change: the revision stays.
    assert_eq!(s.list("/").await.expect("list").revision, deleted_at);
}

pub async fn invalid_requests_are_refused(env: Env) {
    let s = env.store.as_ref();
    fn invalid<T>(r: Result<T, MetaError>) -> bool {
        matches!(r, Err(MetaError::Invalid(_)))
    }
    assert!(invalid(s.put("", vec![]).await));
    assert!(invalid(s.get("").await));
    assert!(invalid(s.put("/k\0", vec![]).await));
    assert!(invalid(s.put(&"k".repeat(2000), vec![]).await));
    assert!(invalid(s.put("/big", vec![0; MAX_VALUE_BYTES + 1]).await));
    let dup = Txn::new().put("/d", vec![1], None).delete("/d");
    assert!(invalid(s.txn(dup).await));
    // The largest value is accepted.
    s.put("/big", vec![7; MAX_VALUE_BYTES])
        .await
        .expect("largest value");
    let kv = s.get("/big").await.expect("get").expect("present");
    assert_eq!(kv.value.len(), MAX_VALUE_BYTES);
}

pub async fn compare_and_swap(env: Env) {
    let s = env.store.as_ref();
    let swapped = |o: CasOutcome| match o {
        CasOutcome::Swapped { revision } => revision,
        CasOutcome::Conflict { current } => panic!("conflict: {current:?}"),
    };
    let r1 = swapped(
        s.compare_and_swap("/c", Expect::Absent, b"a".to_vec(), None)
            .await
            .expect("cas"),
    );
    match s
        .compare_and_swap("/c", Expect::Absent, b"b".to_vec(), None)
        .await
        .expect("cas")
    {
        CasOutcome::Conflict { current: Some(kv) } => {
            assert_eq!((kv.value, kv.mod_revision), (b"a".to_vec(), r1));
        }
        other => panic!("expected conflict, got {other:?}"),
    }
    let r2 = swapped(
        s.compare_and_swap("/c", Expect::ModRevision(r1), b"b".to_vec(), None)
            .await
            .expect("cas"),
    );
    assert!(matches!(
        s.compare_and_swap("/c", Expect::ModRevision(r1), b"c".to_vec(), None)
            .await,
        Ok(CasOutcome::Conflict { current: Some(_) })
    ));
    assert!(matches!(
        s.compare_and_swap("/none", Expect::ModRevision(r1), b"c".to_vec(), None)
            .await,
        Ok(CasOutcome::Conflict { current: None })
    ));
    assert!(matches!(
        s.compare_and_delete("/c", r1).await,
        Ok(CasOutcome::Conflict { .. })
    ));
    swapped(s.compare_and_delete("/c", r2).await.expect("cas delete"));
    assert_eq!(s.get("/c").await.expect("get"), None);

    // A multi-key transaction applies all or nothing, at one revision.
    s.put("/m/x", b"x".to_vec()).await.expect("put");
    let x = s.get("/m/x").await.expect("get").expect("present");
    let failing = Txn::new()
        .when("/m/x", Expect::ModRevision(x.mod_revision))
        .when("/m/y", Expect::ModRevision(1))
        .put("/m/x", b"x2".to_vec(), None)
        .put("/m/z", b"z".to_vec(), None);
    match s.txn(failing).await.expect("txn") {
        TxnOutcome::Failed { current } => {
            assert_eq!(current.len(), 2);
            assert_eq!(
                current[0].as_ref().map(|kv| kv.value.clone()),
                Some(b"x".to_vec())
            );
            assert_eq!(current[1], None);
        }
        other => panic!("expected failure, got {other:?}"),
    }
    assert_eq!(s.get("/m/z").await.expect("get"), None);
    let ok = Txn::new()
        .when("/m/x", Expect::ModRevision(x.mod_revision))
        .when("/m/y", Expect::Absent)
        .put("/m/x", b"x2".to_vec(), None)
        .put("/m/z", b"z".to_vec(), None)
        .delete("/m/nothing");
    let rev = committed_revision(s.txn(ok).await.expect("txn"));
    let z = s.get("/m/z").await.expect("get").expect("present");
    let x2 = s.get("/m/x").await.expect("get").expect("present");
    assert_eq!((z.mod_revision, x2.mod_revision), (rev, rev));
}

pub async fn cas_races_have_one_winner(env: Env) {
    const TASKS: usize = 8;
    const INCREMENTS: u64 = 5;
    let mut clients = Vec::new();
    for _ in 0..TASKS {
        clients.push(env.client().await);
    }
    // Everyone creates the same key: exactly one wins.
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut racers = Vec::new();
    for (i, store) in clients.iter().cloned().enumerate() {
        let barrier = barrier.clone();
        racers.push(tokio::spawn(async move {
            barrier.wait().await;
            let value = format!("racer-{i}").into_bytes();
            store
                .compare_and_swap("/race", Expect::Absent, value, None)
                .await
        }));
    }
    let mut winners = Vec::new();
    for (i, racer) in racers.into_iter().enumerate() {
        if let CasOutcome::Swapped { .. } = racer.await.expect("task").expect("cas") {
            winners.push(i);
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let kv = env.store.get("/race").await.expect("get").expect("present");
    assert_eq!(kv.value, format!("racer-{}", winners[0]).into_bytes());

    // Read-modify-swap increments from all tasks at once: none is lost.
    env.store.put("/counter", b"0".to_vec()).await.expect("put");
    let mut workers = Vec::new();
    for store in clients {
        workers.push(tokio::spawn(async move {
            let mut conflicts = 0u64;
            for _ in 0..INCREMENTS {
                loop {
                    let kv = store.get("/counter").await.expect("get").expect("present");
                    let n: u64 = String::from_utf8(kv.value)
                        .expect("utf8")
                        .parse()
                        .expect("number");
                    let next = (n + 1).to_string().into_bytes();
                    match store
                        .compare_and_swap(
                            "/counter",
                            Expect::ModRevision(kv.mod_revision),
                            next,
                            None,
                        )
                        .await
                        .expect("cas")
                    {
                        CasOutcome::Swapped { .. } => break,
                        CasOutcome::Conflict { .. } => conflicts += 1,
                    }
                }
            }
            conflicts
        }));
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    let kv = env
        .store
        .get("/counter")
        .await
        .expect("get")
        .expect("present");
    assert_eq!(
        kv.value,
        (TASKS as u64 * INCREMENTS).to_string().into_bytes()
    );
}

pub async fn watch_orders_and_resumes(env: Env) {
    let s = env.store.as_ref();
    s.put("/w/before", b"0".to_vec()).await.expect("put");
    let start = s.list("/w/").await.expect("list").revision;
    let mut live = s.watch("/w/", start + 1).await.expect("watch");
    let mut from_now = s.watch("/w/", 0).await.expect("watch now");
    let r1 = s.put("/w/a", b"1".to_vec()).await.expect("put");
    s.put("/other/a", b"not watched".to_vec())
        .await
        .expect("put");
    let r2 = committed_revision(
        s.txn(
            Txn::new()
                .put("/w/b", b"2".to_vec(), None)
                .put("/w/c", b"3".to_vec(), None),
        )
        .await
        .expect("txn"),
    );
    let r3 = s.delete("/w/a").await.expect("delete").expect("existed");
    let r4 = s.put("/w/b", b"4".to_vec()).await.expect("put");

    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(next_batch(&mut live).await);
    }
    let revisions: Vec<_> = seen.iter().map(|b| b.revision).collect();
    assert_eq!(revisions, [r1, r2, r3, r4]);
    match &seen[0].events[..] {
        [WatchEvent::Put(kv)] => {
            assert_eq!(
                (kv.key.as_str(), kv.value.as_slice(), kv.mod_revision),
                ("/w/a", &b"1"[..], r1)
            );
        }
        other => panic!("unexpected events {other:?}"),
    }
    let keys: Vec<_> = seen[1].events.iter().map(|e| e.key().to_owned()).collect();
    assert_eq!(keys, ["/w/b", "/w/c"], "one batch per transaction");
    assert_eq!(seen[2].events, [WatchEvent::Delete { key: "/w/a".into() }]);
    match &seen[3].events[..] {
        [WatchEvent::Put(kv)] => assert_eq!(kv.create_revision, r2),
        other => panic!("unexpected events {other:?}"),
    }
    assert_quiet(&mut live).await;
    // "From now" saw the same changes.
    assert_eq!(next_batch(&mut from_now).await.revision, r1);

    // Resuming after the batch of r2 delivers exactly what followed.
    drop(live);
    let mut resumed = s.watch("/w/", r2 + 1).await.expect("resume");
    assert_eq!(next_batch(&mut resumed).await.revision, r3);
    assert_eq!(next_batch(&mut resumed).await.revision, r4);
    let r5 = s.put("/w/d", b"5".to_vec()).await.expect("put");
    assert_eq!(next_batch(&mut resumed).await.revision, r5);
    assert_quiet(&mut resumed).await;
}

pub async fn compacted_watch_asks_to_resync(env: Env) {
    let s = env.store.as_ref();
    let r1 = s.put("/k/a", b"1".to_vec()).await.expect("put");
    s.put("/k/a", b"2".to_vec()).await.expect("put");
    let r3 = s.put("/k/a", b"3".to_vec()).await.expect("put");
    s.compact(r3).await.expect("compact");
    s.compact(r1)
        .await
        .expect("compacting an older revision is a no-op");
    let mut stale = s.watch("/k/", r1).await.expect("watch");
    match tokio::time::timeout(PATIENCE, stale.next())
        .await
        .expect("item")
    {
        Some(Err(MetaError::Compacted {
            requested,
            oldest_available,
        })) => {
            assert_eq!(requested, r1);
            assert!(
                oldest_available > r1 && oldest_available <= r3,
                "{oldest_available}"
            );
        }
        other => panic!("expected Compacted, got {other:?}"),
    }
    assert!(
        tokio::time::timeout(PATIENCE, stale.next())
            .await
            .expect("end")
            .is_none()
    );
    let mut fresh = s.watch("/k/", r3).await.expect("watch");
    assert_eq!(next_batch(&mut fresh).await.revision, r3);
    assert!(matches!(
        s.compact(r3 + 100).await,
        Err(MetaError::Invalid(_))
    ));
}

pub async fn lease_expiry_deletes_keys(env: Env) {
    let s = env.store.as_ref();
    let lease = s.grant_lease(env.ttl_ms).await.expect("grant");
    assert_eq!(lease.ttl_ms, env.ttl_ms);
    let other = s.grant_lease(env.ttl_ms).await.expect("grant");
    assert_ne!(lease.id, other.id);
    let mut watch = s.watch("/l/", 0).await.expect("watch");
    s.put_with_lease("/l/a", b"a".to_vec(), lease.id)
        .await
        .expect("put");
    s.put_with_lease("/l/b", b"b".to_vec(), lease.id)
        .await
        .expect("put");
    s.put("/l/stay", b"s".to_vec()).await.expect("put");
    let kv = s.get("/l/a").await.expect("get").expect("present");
    assert_eq!(kv.lease, Some(lease.id));
    for _ in 0..3 {
        next_batch(&mut watch).await;
    }
    // A renewed lease lives TTL past its renewal, then expires with its keys.
    env.pass(env.ttl() / 2).await;
    assert_eq!(s.keep_alive(lease.id).await.expect("renew"), env.ttl_ms);
    env.pass(env.ttl() * 3 / 4).await;
    assert!(
        s.get("/l/a").await.expect("get").is_some(),
        "renewed lease expired early"
    );
    let deleted = eventually_deleted(&env, &mut watch, &["/l/a", "/l/b"]).await;
    assert!(deleted);
    assert!(s.get("/l/stay").await.expect("get").is_some());
    assert!(
        matches!(s.keep_alive(lease.id).await, Err(MetaError::LeaseNotFound(id)) if id == lease.id)
    );
    assert!(matches!(
        s.put_with_lease("/l/c", vec![], lease.id).await,
        Err(MetaError::LeaseNotFound(_))
    ));
    assert!(!s.revoke_lease(lease.id).await.expect("revoke"));

    // Revocation deletes at once.
    let third = s.grant_lease(env.ttl_ms).await.expect("grant");
    s.put_with_lease("/l/r", vec![], third.id)
        .await
        .expect("put");
    assert!(s.revoke_lease(third.id).await.expect("revoke"));
    assert_eq!(s.get("/l/r").await.expect("get"), None);
}

/// Lets time pass until the keys vanish, then checks the watch saw their deletion.
async fn eventually_deleted(env: &Env, watch: &mut meta::WatchStream, keys: &[&str]) -> bool {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let mut any = false;
        for key in keys {
            any |= env.store.get(key).await.expect("get").is_some();
        }
        if !any {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "leased keys never expired"
        );
        env.pass(Duration::from_millis(100)).await;
    }
    let mut deleted = Vec::new();
    while deleted.len() < keys.len() {
        for event in next_batch(watch).await.events {
            match event {
                WatchEvent::Delete { key } => deleted.push(key),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    deleted.sort();
    deleted == keys
}

pub async fn keeper_keeps_and_revokes(env: Env) {
    let keeper = LeaseKeeper::grant(
        env.store.clone(),
        env.ttl_ms,
        env.clock.clone(),
        KeeperConfig::default(),
    )
    .await
    .expect("keeper");
    let s = env.store.as_ref();
    s.put_with_lease("/kk/a", vec![1], keeper.lease_id())
        .await
        .expect("put");
    env.pass(env.ttl() * 3).await;
    assert!(keeper.is_valid(), "state {:?}", keeper.state());
    assert!(
        s.get("/kk/a").await.expect("get").is_some(),
        "kept lease expired"
    );
    let mut states = keeper.subscribe();
    let id = keeper.lease_id();
    assert!(keeper.revoke().await.expect("revoke"));
    assert_eq!(
        *states.borrow_and_update(),
        LeaseState::Lost(LossReason::Revoked)
    );
    assert_eq!(s.get("/kk/a").await.expect("get"), None);
    assert!(matches!(
        s.keep_alive(id).await,
        Err(MetaError::LeaseNotFound(_))
    ));

    // Adopting a lease that is gone fails; adopting a live one works.
    assert!(
        LeaseKeeper::adopt(
            env.store.clone(),
            id,
            env.clock.clone(),
            KeeperConfig::default()
        )
        .await
        .is_err()
    );
    let lease = s.grant_lease(env.ttl_ms).await.expect("grant");
    let adopted = LeaseKeeper::adopt(
        env.store.clone(),
        lease.id,
        env.clock.clone(),
        KeeperConfig::default(),
    )
    .await
    .expect("adopt");
    env.pass(env.ttl() * 2).await;
    assert!(adopted.is_valid());
    drop(adopted);
}

/// A keeper cut off from the store declares the lease lost while the store still holds
/// its keys, i.e. before anyone else could take them over.
pub async fn keeper_reports_loss_before_expiry(env: Env) {
    for link in [Link::Fail, Link::Hang] {
        let view = Partitionable::new(env.client().await);
        let keeper = LeaseKeeper::grant(
            view.clone(),
            env.ttl_ms,
            env.clock.clone(),
            KeeperConfig::default(),
        )
        .await
        .expect("keeper");
        env.store
            .put_with_lease("/kl/a", vec![1], keeper.lease_id())
            .await
            .expect("put");
        env.pass(env.ttl()).await;
        assert!(keeper.is_valid());
        view.set(link);
        let states = keeper.subscribe();
        let lost = tokio::spawn(meta::wait_lost(states));
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !lost.is_finished() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{link:?}: loss never reported"
            );
            assert!(
                env.store.get("/kl/a").await.expect("get").is_some(),
                "{link:?}: the key vanished before the keeper reported the loss"
            );
            env.pass(Duration::from_millis(50)).await;
        }
        assert_eq!(lost.await.expect("task"), LossReason::Expired);
        assert!(!keeper.is_valid());
        let mut watch = env.store.watch("/kl/", 0).await.expect("watch");
        eventually_deleted(&env, &mut watch, &["/kl/a"]).await;
    }
}

/// Node A owns a volume; A is cut off; its lease expires; node B takes over with the next
/// epoch, and A's keeper reported the loss before B's acquisition could succeed.
pub async fn ownership_handover(env: Env) {
    let view_a = Partitionable::new(env.client().await);
    let store_b = env.client().await;
    let keeper_a = LeaseKeeper::grant(
        view_a.clone(),
        env.ttl_ms,
        env.clock.clone(),
        KeeperConfig::default(),
    )
    .await
    .expect("keeper a");
    let keeper_b = LeaseKeeper::grant(
        store_b.clone(),
        env.ttl_ms,
        env.clock.clone(),
        KeeperConfig::default(),
    )
    .await
    .expect("keeper b");
    let a = acquire_ownership(view_a.as_ref(), "vol1", "node-a", keeper_a.lease_id())
        .await
        .expect("a acquires");
    assert_eq!(
        a,
        OwnerRecord {
            node: "node-a".into(),
            epoch: 1
        }
    );
    // Idempotent for the holder, a conflict for anyone else.
    assert_eq!(
        acquire_ownership(view_a.as_ref(), "vol1", "node-a", keeper_a.lease_id())
            .await
            .expect("again"),
        a
    );
    match acquire_ownership(store_b.as_ref(), "vol1", "node-b", keeper_b.lease_id()).await {
        Err(OwnershipError::Conflict { current }) => assert_eq!(current, a),
        other => panic!("expected conflict, got {other:?}"),
    }
    let mut owners = watch_owner(store_b.clone(), "vol1").expect("watch owner");
    let first = tokio::time::timeout(PATIENCE, owners.next())
        .await
        .expect("item");
    assert_eq!(first.expect("some").expect("ok"), Some(a.clone()));

    // A is cut off (its requests hang, as with a black-holed link).
    let clock = env.clock.clone();
    let lost_a = {
        let states = keeper_a.subscribe();
        tokio::spawn(async move {
            meta::wait_lost(states).await;
            clock.now()
        })
    };
    view_a.set(Link::Hang);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let b = loop {
        assert!(tokio::time::Instant::now() < deadline, "B never acquired");
        match acquire_ownership(store_b.as_ref(), "vol1", "node-b", keeper_b.lease_id()).await {
            Ok(b) => break b,
            Err(OwnershipError::Conflict { current }) => assert_eq!(current, a),
            Err(e) => panic!("acquire: {e}"),
        }
        env.pass(Duration::from_millis(50)).await;
    };
    let acquired_at = env.clock.now();
    assert!(
        lost_a.is_finished(),
        "B acquired before A's keeper reported the loss"
    );
    assert!(!keeper_a.is_valid());
    let lost_at = lost_a.await.expect("task");
    assert!(
        lost_at < acquired_at,
        "A lost at {lost_at:?}, B acquired at {acquired_at:?}"
    );
    assert!(
        keeper_b.is_valid(),
        "B's own lease lapsed: {:?}",
        keeper_b.state()
    );
    assert_eq!(
        b,
        OwnerRecord {
            node: "node-b".into(),
            epoch: 2
        }
    );
    assert_eq!(
        last_epoch(store_b.as_ref(), "vol1").await.expect("epoch"),
        Some(b.clone())
    );
    let current = current_owner(store_b.as_ref(), "vol1")
        .await
        .expect("owner")
        .expect("owned");
    assert_eq!(
        (current.value, current.lease),
        (b.clone(), Some(keeper_b.lease_id()))
    );

    // The watcher saw A go and B come.
    let mut changes = Vec::new();
    while changes.last() != Some(&Some(b.clone())) {
        let item = tokio::time::timeout(PATIENCE, owners.next())
            .await
            .expect("owner change");
        changes.push(item.expect("some").expect("ok"));
    }
    assert_eq!(changes, [None, Some(b.clone())]);

    // A, back on the network, cannot release what it no longer holds.
    view_a.set(Link::Up);
    assert!(
        !release_ownership(view_a.as_ref(), "vol1", &a)
            .await
            .expect("release")
    );
    assert!(
        release_ownership(store_b.as_ref(), "vol1", &b)
            .await
            .expect("release")
    );
    assert_eq!(
        current_owner(store_b.as_ref(), "vol1")
            .await
            .expect("owner"),
        None
    );
    let again = acquire_ownership(store_b.as_ref(), "vol1", "node-b", keeper_b.lease_id())
        .await
        .expect("reacquire");
    assert_eq!(again.epoch, 3, "every ownership change takes a new epoch");
}

/// A standby seizes the record of an owner declared dead while its lease still runs:
/// next epoch, its own lease; only one of several seizing at once wins, a stale view of
/// the record is refused, and a record gone meanwhile is simply acquired.
pub async fn ownership_seized_from_a_dead_owner(env: Env) {
    let s = env.store.as_ref();
    let mut leases = Vec::new();
    for _ in 0..4 {
        leases.push(s.grant_lease(env.ttl_ms * 10).await.expect("grant").id);
    }
    let a = acquire_ownership(s, "vol-seize", "node-a", leases[0])
        .await
        .expect("a acquires");
    let seen = current_owner(s, "vol-seize")
        .await
        .expect("read")
        .expect("owned");
    let mut racers = Vec::new();
    for (i, lease) in leases.iter().enumerate().skip(1) {
        let (store, seen, lease) = (env.client().await, seen.clone(), *lease);
        racers.push(tokio::spawn(async move {
            let name = format!("node-{i}");
            seize_ownership(store.as_ref(), "vol-seize", &name, lease, &seen).await
        }));
    }
    let mut winners = Vec::new();
    for r in racers {
        match r.await.expect("task") {
            Ok(rec) => winners.push(rec),
            Err(OwnershipError::Conflict { current }) => assert_ne!(current, a),
            Err(e) => panic!("seize: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "winners {winners:?}");
    assert_eq!(winners[0].epoch, a.epoch + 1);
    let now = current_owner(s, "vol-seize")
        .await
        .expect("read")
        .expect("owned");
    assert_eq!(now.value, winners[0]);
    assert_ne!(
        now.lease,
        Some(leases[0]),
        "the record moved to the winner's lease"
    );
    assert_eq!(
        last_epoch(s, "vol-seize").await.expect("epoch"),
        Some(winners[0].clone())
    );
    // The dead owner's lease ending does not take the seized record with it.
    assert!(s.revoke_lease(leases[0]).await.expect("revoke"));
    assert_eq!(
        current_owner(s, "vol-seize")
            .await
            .expect("read")
            .map(|v| v.value),
        Some(winners[0].clone())
    );
    // A stale view (the record changed since) is refused.
    match seize_ownership(s, "vol-seize", "node-z", leases[1], &seen).await {
        Err(OwnershipError::Conflict { current }) => assert_eq!(current, winners[0]),
        other => panic!("expected conflict, got {other:?}"),
    }
    // Gone meanwhile: a plain acquisition.
    assert!(
        release_ownership(s, "vol-seize", &winners[0])
            .await
            .expect("release")
    );
    let z = seize_ownership(s, "vol-seize", "node-z", leases[1], &now)
        .await
        .expect("acquired");
    assert_eq!(z.epoch, winners[0].epoch + 1);
}

pub async fn ownership_race_has_one_winner(env: Env) {
    const NODES: usize = 6;
    let mut nodes = Vec::new();
    for i in 0..NODES {
        let store = env.client().await;
        let lease = store.grant_lease(env.ttl_ms * 10).await.expect("grant");
        nodes.push((format!("node-{i}"), store, lease.id));
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(NODES));
    let mut racers = Vec::new();
    for (name, store, lease) in nodes {
        let barrier = barrier.clone();
        racers.push(tokio::spawn(async move {
            barrier.wait().await;
            acquire_ownership(store.as_ref(), "vol-race", &name, lease).await
        }));
    }
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for racer in racers {
        match racer.await.expect("task") {
            Ok(record) => winners.push(record),
            Err(OwnershipError::Conflict { current }) => losers.push(current),
            Err(e) => panic!("acquire: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "winners {winners:?}");
    assert_eq!(winners[0].epoch, 1);
    assert!(losers.iter().all(|l| *l == winners[0]));

    // Typed helpers round-trip and refuse bad names.
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Node {
        addr: String,
    }
    let key = schema::node_key("n1").expect("key");
    let rec = Node {
        addr: "127.0.0.1:4420".into(),
    };
    let rev = schema::put_json(env.store.as_ref(), &key, &rec, None)
        .await
        .expect("put");
    let got = schema::get_json::<Node, _>(env.store.as_ref(), &key)
        .await
        .expect("get")
        .expect("some");
    assert_eq!((got.value, got.revision), (rec, rev));
    let stale = schema::cas_json(
        env.store.as_ref(),
        &key,
        Expect::Absent,
        &Node { addr: "x".into() },
        None,
    )
    .await
    .expect("cas");
    assert!(matches!(stale, TypedCas::Conflict { current: Some(_) }));
    let listing = schema::list_json::<Node, _>(env.store.as_ref(), schema::NODES)
        .await
        .expect("list");
    assert_eq!(listing.items.len(), 1);
    assert!(schema::node_key("../x").is_err());
    env.store
        .put(&schema::node_key("bad").expect("key"), b"not json".to_vec())
        .await
        .expect("put");
    assert!(matches!(
        schema::list_json::<Node, _>(env.store.as_ref(), schema::NODES).await,
        Err(schema::SchemaError::Decode { .. })
    ));
}

/// The event log: concurrent writers get dense unique ids, pages come newest first across
/// key buckets, and retention drops by count and by age.
pub async fn event_log_pages_and_trims(env: Env) {
    use meta::schema::{
        EventQuery, NewEvent, Retention, Severity, Subject, SubjectKind, append_event, list_events,
    };
    let ev = |i: u64, time_unix_ms: u64| NewEvent {
        kind: "member_failed".into(),
        time_unix_ms,
        severity: Severity::Warning,
        subject: Subject {
            kind: SubjectKind::Volume,
            name: format!("v{i}"),
        },
        message: format!("event {i}"),
        fields: [("member".to_string(), serde_json::json!(i))].into(),
    };
    let keep = Retention {
        max_events: 100,
        max_age_ms: 3_600_000,
    };
    let now = 10_000_000u64;
    // Three writers, 100 events each.
    let mut writers = Vec::new();
    for w in 0..3u64 {
        let store = env.client().await;
        writers.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..100u64 {
                let e = append_event(store.as_ref(), ev(w * 1000 + i, now), keep, now)
                    .await
                    .expect("append");
                ids.push(e.id);
            }
            ids
        }));
    }
    let mut ids: Vec<u64> = Vec::new();
    for w in writers {
        ids.extend(w.await.expect("writer"));
    }
    ids.sort_unstable();
    assert_eq!(ids, (1..=300).collect::<Vec<_>>(), "dense, unique ids");

    // Newest first, 40 a page, across the bucket boundary at 256; count bound: 201..=300.
    let store = env.store.as_ref();
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = list_events(
            store,
            EventQuery {
                since: 0,
                before,
                limit: 40,
            },
        )
        .await
        .expect("list");
        assert_eq!(page.last_id, 300);
        seen.extend(page.events.iter().map(|e| e.id));
        match page.next_before {
            Some(b) => before = Some(b),
            None => break,
        }
    }
    assert_eq!(seen, (201..=300).rev().collect::<Vec<_>>());
    let since = list_events(
        store,
        EventQuery {
            since: 295,
            before: None,
            limit: 0,
        },
    )
    .await
    .expect("since");
    assert_eq!(
        since.events.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![300, 299, 298, 297, 296]
    );
    assert_eq!(
        since.events[0].event.fields["member"],
        serde_json::json!(
            since.events[0].event.subject.name[1..]
                .parse::<u64>()
                .expect("n")
        )
    );

    // Age bound: an event two hours later drops the old ones (at most 32 per append).
    let later = now + 2 * 3_600_000;
    for i in 0..4 {
        append_event(store, ev(9000 + i, later), keep, later)
            .await
            .expect("append later");
    }
    let page = list_events(store, EventQuery::default())
        .await
        .expect("list");
    let kept: Vec<u64> = page.events.iter().map(|e| e.id).collect();
    assert_eq!(kept, vec![304, 303, 302, 301], "old events dropped by age");
    assert!(
        store
            .get(&schema::event_key(201))
            .await
            .expect("get")
            .is_none()
    );
}
