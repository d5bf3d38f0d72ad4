//! Volume QoS on processor nodes: limits set in the volume record (compare-and-swap,
//! generations) reach every processor node's target; the owner holds a host's load on the
//! volume to the volume's limit and to a per-host limit, over real TCP through the whole
//! stack (host → processor target → volume → members).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod processor_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use blockdev::BlockDevice;
use control::processor::Processor;
use control::records::volume_nqn;
use nvmf_target::{QosKey, QosLimits, Target};

use processor_common::*;

const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-00000000000a";

fn iops(n: u64) -> QosLimits {
    QosLimits {
        max_iops: Some(n),
        burst_ios: Some(5),
        ..QosLimits::default()
    }
}

/// Bounds (low, high) on the commands per second the limit of `key` let through over
/// `window`, after `settle`. Timestamps are taken on both sides of each reading, so a
/// stall of this process while it reads widens the bounds instead of skewing the rate.
async fn rate_of(t: &Target, key: &QosKey, settle: Duration, window: Duration) -> (f64, f64) {
    let commands = |t: &Target| {
        t.qos_stats()
            .limits
            .iter()
            .find(|s| &s.key == key)
            .map_or(0, |s| s.commands)
    };
    tokio::time::sleep(settle).await;
    let (a0, c0, b0) = (Instant::now(), commands(t), Instant::now());
    tokio::time::sleep(window).await;
    let (a1, c1, b1) = (Instant::now(), commands(t), Instant::now());
    let n = (c1 - c0) as f64;
    (n / (b1 - a0).as_secs_f64(), n / (a1 - b0).as_secs_f64())
}

/// Whether a rate measured as `(low, high)` bounds is within 5% of `limit`.
fn within_5_percent((low, high): (f64, f64), limit: f64) -> bool {
    low <= limit * 1.05 && high >= limit * 0.95
}

async fn load(dev: Arc<dyn BlockDevice>, ms: u64) -> bench::Report {
    let cfg = bench::BenchConfig {
        pattern: bench::Pattern::RandRead,
        block_size_bytes: 4096,
        iodepth: 32,
        runtime_ms: ms,
        ..bench::BenchConfig::default()
    };
    bench::run(dev, &cfg, "vol", &bench::Progress::auto(0))
        .await
        .unwrap()
}

async fn wait_generation(p: &Processor, generation: u64) {
    wait_for(
        &format!("{} applies QoS generation {generation}", p.name()),
        Duration::from_secs(5),
        || p.qos_generation(VOLUME) == Some(generation),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_and_host_limits_hold_on_the_owner_and_reach_every_processor() {
    let c = cluster().await;
    let mut cfg1 = pcfg("p1");
    cfg1.api_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg1.qos_event_interval_ms = 300;
    let p1 = Processor::start(c.store.clone(), cfg1).await.unwrap();
    let p2 = Processor::start(c.store.clone(), pcfg("p2")).await.unwrap();
    wait_owner(&p1, Duration::from_secs(10)).await;
    let store = c.store.as_ref();

    // The volume as a whole: 300 IOPS.
    let q = control::qos::set_volume_qos(store, VOLUME, None, iops(300))
        .await
        .unwrap();
    assert_eq!((q.generation, q.volume), (1, Some(iops(300))));
    wait_generation(&p1, 1).await;
    wait_generation(&p2, 1).await;
    let nqn = volume_nqn(VOLUME);
    let vol_key = QosKey::namespace(nqn.clone(), 1);
    assert_eq!(p2.target().qos_limits(), vec![(vol_key.clone(), iops(300))]);

    let dev: Arc<dyn BlockDevice> = Arc::new(multipath_host(&p1.nvme_addrs(), HOST_A).await);
    let (r, rate) = tokio::join!(
        load(dev.clone(), 2500),
        rate_of(
            p1.target(),
            &vol_key,
            Duration::from_millis(500),
            Duration::from_millis(1500)
        ),
    );
    assert_eq!(r.errors, 0);
    eprintln!("volume limit 300: {rate:.1?} IOPS (bounds)");
    assert!(
        within_5_percent(rate, 300.0),
        "volume limit 300: {rate:.0?} IOPS"
    );

    // One host tighter than the volume: 150 IOPS for host A (the volume limit stays).
    let q = control::qos::set_volume_qos(store, VOLUME, Some(HOST_A), iops(150))
        .await
        .unwrap();
    assert_eq!(q.generation, 2);
    wait_generation(&p1, 2).await;
    let host_key = QosKey::host_on_namespace(nqn.clone(), 1, HOST_A);
    let (r, rate) = tokio::join!(
        load(dev.clone(), 2500),
        rate_of(
            p1.target(),
            &host_key,
            Duration::from_millis(500),
            Duration::from_millis(1500)
        ),
    );
    assert_eq!(r.errors, 0);
    eprintln!("host limit 150: {rate:.1?} IOPS (bounds)");
    assert!(
        within_5_percent(rate, 150.0),
        "host limit 150: {rate:.0?} IOPS"
    );

    // Setting the same limits again changes nothing; clearing both leaves no limit.
    let same = control::qos::set_volume_qos(store, VOLUME, Some(HOST_A), iops(150))
        .await
        .unwrap();
    assert_eq!(same.generation, 2, "no change, no new generation");
    assert_eq!(
        control::qos::clear_volume_qos(store, VOLUME, Some(HOST_A))
            .await
            .unwrap(),
        iops(150)
    );
    control::qos::clear_volume_qos(store, VOLUME, None)
        .await
        .unwrap();
    wait_generation(&p1, 4).await;
    wait_generation(&p2, 4).await;
    assert!(p1.target().qos_limits().is_empty());
    assert!(p2.target().qos_limits().is_empty());
    let r = load(dev.clone(), 1000).await;
    assert!(r.iops > 600.0, "no limit left: {:.0} IOPS", r.iops);

    let err = control::qos::clear_volume_qos(store, VOLUME, None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "volume vol1 has no QoS limits for the volume"
    );
    let err = control::qos::set_volume_qos(
        store,
        VOLUME,
        Some(HOST_A),
        QosLimits {
            min_iops: Some(10),
            ..QosLimits::default()
        },
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("a minimum applies to a namespace as a whole"),
        "{err}"
    );
    let err = control::qos::set_volume_qos(store, "nope", None, iops(5))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "no volume named \"nope\"");
    drop(dev);
    p2.shutdown().await.unwrap();
    p1.shutdown().await.unwrap();
}
