//! Rebuild: throttling through the clock, checkpoints and resume, progress, writes during a
//! rebuild, every layout.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use blockdev::{BlockDevice, FaultAction, FaultOps, FaultRule, RamDevice};
use common::*;
use rand::Rng;
use volume::{
    EngineOptions, LevelSpec, ManualClock, MemberState, TaskPhase, Throttle, TokioClock, Volume,
    VolumeState,
};

const SU: u64 = 64 << 10;

async fn filled(
    level: LevelSpec,
    n: usize,
    member_bytes: u64,
    opts: EngineOptions,
) -> (Members, Volume, Vec<u8>) {
    let m = ram_members(n, member_bytes);
    let mut cfg = config(level, SU, MIB);
    cfg.options = opts;
    let vol = Volume::create("rb", cfg, m.devs.clone(), vec![])
        .await
        .unwrap();
    let mut r = rng(n as u64);
    let model = random_bytes(&mut r, vol.size_bytes() as usize);
    write(&vol, 0, &model).await;
    (m, vol, model)
}

fn fresh(name: &str, size: u64) -> Arc<dyn BlockDevice> {
    Arc::new(RamDevice::new(name, size))
}

#[tokio::test]
async fn full_rebuild_every_layout() {
    for (level, n, victim) in [
        (LevelSpec::Raid1, 2, 1),
        (LevelSpec::Raid10 { copies: 2 }, 3, 2),
        (LevelSpec::Raid10 { copies: 2 }, 4, 0),
        (LevelSpec::Raid5, 4, 3),
        (LevelSpec::Raid6, 5, 0),
        (LevelSpec::Erasure { k: 4, m: 2 }, 6, 4),
        (LevelSpec::Erasure { k: 2, m: 3 }, 5, 1),
    ] {
        let (_m, vol, model) = filled(level, n, 6 * MIB, test_options()).await;
        vol.fail_member(victim).await.unwrap();
        vol.replace_member(victim, fresh("new", 6 * MIB))
            .await
            .unwrap();
        assert_eq!(vol.status().members[victim].state, MemberState::Rebuilding);
        // Reads never use the unrebuilt member.
        check_all(&vol, &model).await;
        let mut rx = vol.start_rebuild().await.unwrap();
        rx.wait_for(|p| p.phase != TaskPhase::Running)
            .await
            .unwrap();
        let p = rx.borrow().clone();
        assert_eq!(p.phase, TaskPhase::Done, "{level}");
        assert!(!p.partial);
        assert_eq!(p.bytes_done, p.bytes_total);
        assert_eq!(p.bytes_total, vol.status().member_data_bytes);
        assert_eq!(vol.status().state, VolumeState::Healthy, "{level}");
        // Now lose everything else we can: the rebuilt member must carry its share.
        let tol = level.params(n, SU).unwrap().m;
        let others: Vec<usize> = match level {
            LevelSpec::Raid10 { .. } | LevelSpec::Raid1 => {
                // Fail the other copy of the rebuilt member's chunks.
                vec![if n == 2 { 1 - victim } else { (victim + 1) % n }]
            }
            _ => (0..n).filter(|&i| i != victim).take(tol).collect(),
        };
        for o in others {
            vol.fail_member(o).await.unwrap();
        }
        check_all(&vol, &model).await;
    }
}

#[tokio::test]
async fn bandwidth_throttle_uses_the_clock() {
    let clock = Arc::new(ManualClock::new());
    let opts = EngineOptions {
        throttle: Throttle::BytesPerSec(1 << 20),
        clock: clock.clone(),
        ..test_options()
    };
    let (_m, vol, model) = filled(LevelSpec::Raid5, 3, 9 * MIB, opts).await;
    vol.fail_member(0).await.unwrap();
    vol.replace_member(0, fresh("new", 9 * MIB)).await.unwrap();
    vol.start_rebuild().await.unwrap();
    let p = vol.wait_rebuild().await.unwrap();
    assert_eq!(p.phase, TaskPhase::Done);
    // 8 MiB at 1 MiB/s: 8 virtual seconds of sleeping (the work itself takes no virtual
    // time), none of it real.
    let slept = clock.slept();
    assert!(
        slept >= Duration::from_millis(7900) && slept <= Duration::from_secs(8),
        "{slept:?}"
    );
    assert!(
        (p.rate_bytes_per_sec - (1 << 20) as f64).abs() < 0.05 * (1 << 20) as f64,
        "{p:?}"
    );
    check_all(&vol, &model).await;
}

#[tokio::test(start_paused = true)]
async fn fraction_throttle_keeps_members_mostly_idle() {
    let opts = EngineOptions {
        throttle: Throttle::Fraction(0.2),
        clock: Arc::new(TokioClock::new()),
        inflight_batches: 4,
        // One row per batch: 64 batches in 4 MiB.
        batch_bytes: SU,
        ..test_options()
    };
    let (m, vol, model) = filled(LevelSpec::Raid1, 2, 5 * MIB, opts).await;
    vol.fail_member(1).await.unwrap();
    vol.replace_member(1, fresh("new", 5 * MIB)).await.unwrap();
    // Every member read takes 10 ms (virtual).
    m.faults[0].add(FaultRule::new(
        FaultOps::READ,
        FaultAction::Delay(Duration::from_millis(10)),
    ));
    let start = tokio::time::Instant::now();
    vol.start_rebuild().await.unwrap();
    let p = vol.wait_rebuild().await.unwrap();
    assert_eq!(p.phase, TaskPhase::Done);
    // 4 MiB in 64 KiB batches, 4 at a time: 16 waves of 10 ms = 160 ms busy; a 20 %
    // duty cycle makes that 800 ms (+-10 %).
    let batches = p.bytes_total.div_ceil(SU);
    assert_eq!(batches, 64);
    let busy = Duration::from_millis(10) * batches.div_ceil(4) as u32;
    let took = start.elapsed();
    let duty = busy.as_secs_f64() / took.as_secs_f64();
    assert!((duty - 0.2).abs() <= 0.02, "{took:?}, duty cycle {duty:.3}");
    // The engine's own account agrees.
    assert!((p.busy_fraction - duty).abs() <= 0.01, "{p:?}");
    m.faults[0].clear();
    check_all(&vol, &model).await;
}

/// Batches in flight overlap their member I/O: the rebuild takes about one read latency
/// per `inflight_batches` batches, not one per batch.
#[tokio::test(start_paused = true)]
async fn batches_in_flight_overlap() {
    for (depth, waves) in [(1u32, 16u32), (4, 4)] {
        let opts = EngineOptions {
            clock: Arc::new(TokioClock::new()),
            inflight_batches: depth as usize,
            ..test_options()
        };
        let (m, vol, model) = filled(LevelSpec::Raid5, 3, 5 * MIB, opts).await;
        vol.fail_member(2).await.unwrap();
        vol.replace_member(2, fresh("new", 5 * MIB)).await.unwrap();
        for f in &m.faults[..2] {
            f.add(FaultRule::new(
                FaultOps::READ,
                FaultAction::Delay(Duration::from_millis(10)),
            ));
        }
        let start = tokio::time::Instant::now();
        vol.start_rebuild().await.unwrap();
        let p = vol.wait_rebuild().await.unwrap();
        assert_eq!(p.phase, TaskPhase::Done);
        assert_eq!(p.bytes_total.div_ceil(256 << 10), 16);
        assert_eq!(p.busy_fraction, 1.0, "unthrottled: never rests");
        let took = start.elapsed();
        let want = Duration::from_millis(10) * waves;
        assert!(
            took >= want && took < want + Duration::from_millis(5),
            "depth {depth}: {took:?}"
        );
        for f in &m.faults {
            f.clear();
        }
        check_all(&vol, &model).await;
    }
}

#[tokio::test(start_paused = true)]
async fn rebuild_resumes_from_its_checkpoint() {
    let opts = || EngineOptions {
        throttle: Throttle::BytesPerSec(4 << 20),
        clock: Arc::new(TokioClock::new()),
        checkpoint_bytes: MIB,
        ..test_options()
    };
    let (m, vol, mut model) = filled(LevelSpec::Erasure { k: 3, m: 2 }, 5, 17 * MIB, opts()).await;
    vol.fail_member(3).await.unwrap();
    let new = fresh("new", 17 * MIB);
    vol.replace_member(3, new.clone()).await.unwrap();
    let mut rx = vol.start_rebuild().await.unwrap();
    rx.wait_for(|p| p.bytes_done >= 7 * MIB).await.unwrap();
    let mid = rx.borrow().clone();
    assert!(mid.eta_secs.is_some_and(|e| e > 0.5 && e < 3.0), "{mid:?}");
    assert!(
        (mid.rate_bytes_per_sec - (4 << 20) as f64).abs() < 0.1 * (4 << 20) as f64,
        "{mid:?}"
    );
    // A write lands during the rebuild, behind and ahead of the frontier.
    let mut r = rng(5);
    for off in [MIB, 40 * MIB] {
        let data = random_bytes(&mut r, 300 * 1024);
        write(&vol, off, &data).await;
        model[off as usize..off as usize + data.len()].copy_from_slice(&data);
    }
    // Crash-like stop: the volume object disappears without a clean stop.
    drop(rx);
    drop(vol);
    let mut devs = m.devs.clone();
    devs[3] = new;
    let vol = Volume::assemble_with(devs, opts()).await.unwrap();
    let st = vol.status();
    let checkpoint = st.members[3].rebuild_offset_bytes;
    assert!(
        (6 * MIB..=8 * MIB).contains(&checkpoint),
        "checkpoint {checkpoint}"
    );
    assert_eq!(st.members[3].state, MemberState::Rebuilding);
    check_all(&vol, &model).await;
    let mut rx = vol.start_rebuild().await.unwrap();
    rx.wait_for(|p| p.phase != TaskPhase::Running)
        .await
        .unwrap();
    let p = rx.borrow().clone();
    assert_eq!(p.phase, TaskPhase::Done);
    assert_eq!(
        p.bytes_total,
        st.member_data_bytes - checkpoint,
        "resumed, not restarted"
    );
    check_all(&vol, &model).await;
    assert_eq!(vol.scrub().await.unwrap().mismatches, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_reads_during_rebuild() {
    let opts = EngineOptions {
        throttle: Throttle::BytesPerSec(64 << 20),
        clock: Arc::new(TokioClock::new()),
        ..test_options()
    };
    let (_m, vol, mut model) = filled(LevelSpec::Raid6, 5, 9 * MIB, opts).await;
    vol.fail_member(1).await.unwrap();
    vol.fail_member(4).await.unwrap();
    vol.replace_member(1, fresh("n1", 9 * MIB)).await.unwrap();
    vol.replace_member(4, fresh("n4", 9 * MIB)).await.unwrap();
    let rx = vol.start_rebuild().await.unwrap();
    let mut r = rng(6);
    let size = model.len() as u64;
    while rx.borrow().phase == TaskPhase::Running {
        let len = r.random_range(1..=256u64) * 512;
        let off = r.random_range(0..(size - len) / 512) * 512;
        if r.random_bool(0.5) {
            let data = random_bytes(&mut r, len as usize);
            write(&vol, off, &data).await;
            model[off as usize..(off + len) as usize].copy_from_slice(&data);
        } else {
            assert!(
                read(&vol, off, len as usize).await == model[off as usize..(off + len) as usize]
            );
        }
    }
    assert_eq!(vol.wait_rebuild().await.unwrap().phase, TaskPhase::Done);
    assert_eq!(vol.status().state, VolumeState::Healthy);
    check_all(&vol, &model).await;
    assert_eq!(vol.scrub().await.unwrap().mismatches, 0);
    // The rebuilt pair alone plus k-2... lose two others: data must come from the new ones.
    vol.fail_member(0).await.unwrap();
    vol.fail_member(2).await.unwrap();
    check_all(&vol, &model).await;
}

/// `stop_rebuild` then `stop` must not poll the finished rebuild task again (it panicked).
#[tokio::test]
async fn stop_after_stop_rebuild_does_not_panic() {
    use blockdev::{BlockDevice, RamDevice};
    use std::sync::Arc;
    use volume::{LevelSpec, Volume, VolumeConfig};
    let members: Vec<Arc<dyn BlockDevice>> = (0..3)
        .map(|i| Arc::new(RamDevice::new(format!("m{i}"), 32 << 20)) as _)
        .collect();
    let spare: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("s", 32 << 20));
    let level: LevelSpec = "raid5".parse().unwrap();
    let vol = Volume::create("sr", VolumeConfig::new(level), members, vec![spare])
        .await
        .unwrap();
    vol.fail_member(1).await.unwrap();
    let _ = vol.start_rebuild().await;
    vol.stop_rebuild().await;
    vol.stop_rebuild().await;
    vol.stop().await.unwrap();
}
