//! Tests of the etcd backend alone: the server dies or restarts under a keeper and a watch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use meta::testing::EtcdServer;
use meta::{EtcdStore, KeeperConfig, LeaseKeeper, LossReason, MetaError, MetaStore, SystemClock};

use crate::env::{PATIENCE, Proxy, assert_quiet, etcd_options, next_batch};

async fn server() -> EtcdServer {
    EtcdServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start the test etcd server: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeper_reports_loss_within_ttl_when_etcd_dies() {
    let mut server = server().await;
    let store: Arc<dyn MetaStore> = Arc::new(server.store(etcd_options()).await.expect("connect"));
    let margin = Duration::from_millis(300);
    let config = KeeperConfig {
        safety_margin: Some(margin),
        ..KeeperConfig::default()
    };
    let keeper = LeaseKeeper::grant(store.clone(), 2000, Arc::new(SystemClock::new()), config)
        .await
        .expect("keeper");
    let ttl = keeper.ttl();
    tokio::time::sleep(ttl).await;
    assert!(keeper.is_valid());
    let killed_at = Instant::now();
    server.kill();
    let reason = tokio::time::timeout(PATIENCE, keeper.lost())
        .await
        .expect("loss reported");
    let after = killed_at.elapsed();
    assert_eq!(reason, LossReason::Expired);
    // The last renewal was sent before the kill, so the loss comes at most TTL - margin
    // after it (plus scheduling slack).
    let bound = ttl - margin + Duration::from_millis(100);
    assert!(
        after < bound,
        "loss reported {after:?} after the kill, TTL {ttl:?}"
    );
    // Requests fail (within the request timeout) instead of hanging.
    let started = Instant::now();
    assert!(matches!(
        store.get("/x").await,
        Err(MetaError::Unavailable(_))
    ));
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_without_loss_across_an_etcd_restart() {
    let mut server = server().await;
    let store = server.store(etcd_options()).await.expect("connect");
    let mut watch = store.watch("/w/", 0).await.expect("watch");
    let r1 = store.put("/w/a", b"1".to_vec()).await.expect("put");
    assert_eq!(next_batch(&mut watch).await.revision, r1);
    server.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart().await.expect("restart");
    // Written as soon as the server is back, possibly before the watch reconnects.
    let r2 = store.put("/w/b", b"2".to_vec()).await.expect("put");
    let r3 = store.put("/w/c", b"3".to_vec()).await.expect("put");
    assert_eq!(next_batch(&mut watch).await.revision, r2);
    assert_eq!(next_batch(&mut watch).await.revision, r3);
    // Data and revisions survived the restart.
    let a = store.get("/w/a").await.expect("get").expect("a");
    assert_eq!(a.mod_revision, r1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_without_loss_when_its_connection_breaks() {
    let server = server().await;
    let writer = server.store(etcd_options()).await.expect("connect");
    let target = server
        .endpoint()
        .trim_start_matches("http://")
        .parse()
        .expect("endpoint address");
    let proxy = Proxy::start(target).await;
    let watcher = EtcdStore::connect(&[format!("http://{}", proxy.addr)], etcd_options())
        .await
        .expect("connect through proxy");
    let mut watch = watcher.watch("/w/", 0).await.expect("watch");
    let r1 = writer.put("/w/a", b"1".to_vec()).await.expect("put");
    assert_eq!(next_batch(&mut watch).await.revision, r1);

    proxy.cut();
    // Written while the watcher is disconnected (and keeps failing to reconnect).
    let mut missed = Vec::new();
    for i in 0..5u8 {
        missed.push(writer.put("/w/b", vec![i]).await.expect("put"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.restore();
    for rev in &missed {
        assert_eq!(next_batch(&mut watch).await.revision, *rev);
    }
    let after = writer.put("/w/c", vec![]).await.expect("put");
    assert_eq!(next_batch(&mut watch).await.revision, after);
    assert_quiet(&mut watch).await;
}
