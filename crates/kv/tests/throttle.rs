//! The compaction throttle on a virtual clock (no real sleeping): compaction reads and
//! writes are paced to the configured rate, unless a store waits for space.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use kv::{Kv, ManualClock, Options, StoreMode};

async fn garbage_store(rate_bytes_per_sec: u64) -> (Kv, Arc<ManualClock>) {
    let dev = ram(8 << 20);
    Kv::format(&dev, &small_format()).await.unwrap();
    let clock = Arc::new(ManualClock::new());
    let mut opts: Options = small_options();
    opts.clock = clock.clone();
    opts.compaction.throttle_bytes_per_sec = rate_bytes_per_sec;
    // Background compaction stays off (plenty free); compact() does the work.
    opts.compaction.start_free_percent = 0;
    let (kv, _) = Kv::open(dev, opts).await.unwrap();
    for round in 0..3u64 {
        for i in 0..60u64 {
            kv.store(
                &i.to_be_bytes(),
                &value(round * 100 + i, 3000),
                StoreMode::Upsert,
            )
            .await
            .unwrap();
        }
    }
    (kv, clock)
}

#[tokio::test]
async fn compaction_is_paced_to_the_throttle() {
    let rate = 1 << 20;
    let (kv, clock) = garbage_store(rate).await;
    let before = clock.slept();
    let report = kv.compact().await.unwrap();
    assert!(report.segments_reclaimed > 0, "{report:?}");
    let work = report.bytes_read + report.bytes_moved;
    let slept = (clock.slept() - before).as_secs_f64();
    let want = work as f64 / rate as f64;
    // The pacer allows a burst of at most 100 ms of credit.
    assert!(
        slept <= want + 1e-6 && slept >= want - 0.1 - 1e-6,
        "slept {slept:.3} s for {work} bytes at {rate} B/s (want {want:.3} s)"
    );
    let s = kv.stats();
    assert!(
        (s.compaction_throttle_sleep_us as f64 / 1e6 - slept).abs() < 0.01,
        "{s:?}"
    );
    // Everything still reads back.
    for i in 0..60u64 {
        assert_eq!(
            kv.get(&i.to_be_bytes()).await.unwrap(),
            value(200 + i, 3000)
        );
    }
}

#[tokio::test]
async fn unlimited_compaction_never_sleeps() {
    let (kv, clock) = garbage_store(0).await;
    let report = kv.compact().await.unwrap();
    assert!(
        report.segments_reclaimed > 0 && report.bytes_moved > 0,
        "{report:?}"
    );
    assert_eq!(clock.slept().as_secs_f64(), 0.0);
    assert_eq!(kv.stats().compaction_throttle_sleep_us, 0);
}
