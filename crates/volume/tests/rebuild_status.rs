//! What background work shows in `status()`: scrub progress while it runs and at the end,
//! and what the resync at assembly did.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use volume::{EngineOptions, LevelSpec, TaskPhase, Throttle, TokioClock, Volume};

const SU: u64 = 64 << 10;

#[tokio::test(start_paused = true)]
async fn scrub_progress_shows_in_status() {
    let opts = EngineOptions {
        // 1 MiB of member bytes per virtual second.
        throttle: Throttle::BytesPerSec(1 << 20),
        // One row (256 KiB of member bytes) per batch: progress moves in small steps.
        batch_bytes: SU,
        clock: Arc::new(TokioClock::new()),
        ..test_options()
    };
    let m = ram_members(4, 3 * MIB);
    let mut cfg = config(LevelSpec::Raid5, SU, MIB);
    cfg.options = opts;
    let vol = Arc::new(
        Volume::create("sp", cfg, m.devs.clone(), vec![])
            .await
            .unwrap(),
    );
    let st = vol.status();
    assert!(st.scrub.is_none());
    let total = st.member_data_bytes * 4;
    let v = vol.clone();
    let task = tokio::spawn(async move { v.scrub().await.unwrap() });
    // Half-way in virtual time (total bytes at 1 MiB/s), between two batches.
    let half = Duration::from_secs_f64(total as f64 / (1 << 20) as f64 / 2.0);
    tokio::time::sleep(half + Duration::from_millis(100)).await;
    let p = vol.status().scrub.unwrap();
    assert_eq!(p.phase, TaskPhase::Running);
    assert_eq!(p.bytes_total, total);
    assert!(
        p.bytes_done > total / 4 && p.bytes_done < total * 3 / 4,
        "{p:?}"
    );
    assert!(
        (p.rate_bytes_per_sec - (1 << 20) as f64).abs() < 0.2 * (1 << 20) as f64,
        "{p:?}"
    );
    let eta = p.eta_secs.unwrap();
    assert!(
        eta > 0.5 * half.as_secs_f64() && eta < 1.5 * half.as_secs_f64(),
        "{p:?}"
    );
    let report = task.await.unwrap();
    assert_eq!(report.mismatches, 0);
    let p = vol.status().scrub.unwrap();
    assert_eq!(p.phase, TaskPhase::Done);
    assert_eq!(p.bytes_done, total);
    assert_eq!(report.bytes_checked, total);
    // RAM members take no virtual time: all of it was throttle rest.
    assert!(p.busy_fraction < 0.01, "{p:?}");
}

#[tokio::test]
async fn resync_after_unclean_stop_is_reported() {
    let region = MIB;
    let m = ram_members(5, 9 * MIB);
    let cfg = config(LevelSpec::Raid6, SU, region);
    let vol = Volume::create("rs", cfg, m.devs.clone(), vec![])
        .await
        .unwrap();
    assert!(
        vol.status().last_resync.is_none(),
        "nothing resynced at create"
    );
    // Writes in three regions (k = 3: a region of 1 MiB per member holds 3 MiB of data).
    let mut r = rng(3);
    for off in [0, 3 * MIB + 4096, 12 * MIB] {
        write(&vol, off, &random_bytes(&mut r, 8192)).await;
    }
    let dirty = vol.dirty_regions();
    assert_eq!(dirty, vec![0, 1, 4]);
    // Crash-like: no clean stop.
    drop(vol);
    let vol = Volume::assemble_with(m.devs.clone(), test_options())
        .await
        .unwrap();
    let rs = vol.status().last_resync.unwrap();
    assert_eq!(rs.regions, 3);
    assert_eq!(rs.bytes_resynced, 3 * 3 * region);
    // Every member's part of each region was read; parity agreed (the writes completed).
    assert_eq!(rs.member_bytes_read, 3 * 5 * region);
    assert_eq!(rs.stripes_rewritten, 0);
    assert_eq!(rs.member_bytes_written, 0);
    assert_eq!(rs.stripes_unverifiable, 0);
    assert!(rs.duration_secs >= 0.0);
    // A clean stop leaves nothing to resync, and says so.
    vol.stop().await.unwrap();
    drop(vol);
    let vol = Volume::assemble_with(m.devs.clone(), test_options())
        .await
        .unwrap();
    let rs = vol.status().last_resync.unwrap();
    assert_eq!(
        (rs.regions, rs.bytes_resynced, rs.member_bytes_read),
        (0, 0, 0)
    );
    vol.stop().await.unwrap();
}
