//! Proactive copy (`copy_member`, like `mdadm --replace`): the member stays in service
//! while a spare is filled, writes during the copy reach both, the spare takes the slot
//! with no degraded window; resumable across a stop; a member that fails or cannot read
//! during the copy hands over to the replacement or is reconstructed around.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use blockdev::{BlockDevice, FaultAction, FaultOps, FaultRule, FaultyDevice, RamDevice};
use common::*;
use rand::Rng;
use volume::{LevelSpec, MemberState, TaskPhase, Volume, VolumeConfig, VolumeState};

const SU: u64 = 64 << 10;

async fn filled(level: LevelSpec, n: usize, seed: u64) -> (Members, Volume, Vec<u8>) {
    filled_with(config(level, SU, MIB), n, seed).await
}

async fn filled_with(cfg: VolumeConfig, n: usize, seed: u64) -> (Members, Volume, Vec<u8>) {
    let m = ram_members(n, 6 * MIB);
    let vol = Volume::create("cp", cfg, m.devs.clone(), vec![])
        .await
        .unwrap();
    let mut r = rng(seed);
    let model = random_bytes(&mut r, vol.size_bytes() as usize);
    write(&vol, 0, &model).await;
    (m, vol, model)
}

/// RAID 5 with a copy checkpoint every 512 KiB.
fn checkpointed_raid5() -> VolumeConfig {
    let mut cfg = config(LevelSpec::Raid5, SU, MIB);
    cfg.options.checkpoint_bytes = 512 << 10;
    cfg
}

/// A new device whose writes take `delay` (so a copy is still running when we look).
fn slow_device(name: &str, delay: Duration) -> (Arc<dyn BlockDevice>, blockdev::FaultHandle) {
    let f = FaultyDevice::new(Arc::new(RamDevice::new(name, 6 * MIB)));
    let h = f.handle();
    if !delay.is_zero() {
        h.add(FaultRule::new(FaultOps::WRITE, FaultAction::Delay(delay)));
    }
    (Arc::new(f), h)
}

/// Waits until the running copy has done at least `min_bytes`, and checks it is not done
/// (the tests' runtime has one thread: nothing else runs between this and the caller's
/// next step).
async fn copy_underway(vol: &Volume, min_bytes: u64) {
    let mut progress = vol.copy_progress().expect("a copy runs");
    progress
        .wait_for(|p| p.bytes_done >= min_bytes)
        .await
        .expect("copy progress");
    let p = progress.borrow().clone();
    assert!(
        p.bytes_done < p.bytes_total,
        "the copy is still running: {p:?}"
    );
}

/// Random writes of 4 KiB..64 KiB into `vol` and `model`.
async fn scribble(vol: &Volume, model: &mut [u8], seed: u64, count: usize) {
    let mut r = rng(seed);
    for _ in 0..count {
        let len = 4096 * r.random_range(1..=16usize);
        let off = 4096 * r.random_range(0..(model.len() - len) / 4096);
        let data = random_bytes(&mut r, len);
        write(vol, off as u64, &data).await;
        model[off..off + len].copy_from_slice(&data);
    }
}

#[tokio::test]
async fn copy_every_layout_with_writes_during_the_copy_and_no_degraded_window() {
    for (level, n, victim) in [
        (LevelSpec::Raid1, 2, 0),
        (LevelSpec::Raid10 { copies: 2 }, 3, 1),
        (LevelSpec::Raid5, 4, 2),
        (LevelSpec::Raid6, 5, 4),
    ] {
        let (m, vol, mut model) = filled(level, n, 7).await;
        let old_uuid = vol.status().members[victim].uuid;
        let (new, _h) = slow_device("new", Duration::from_millis(2));
        let rx = vol.copy_member(victim, new).await.unwrap();
        // During the copy: full redundancy, the replacement listed, writes go on.
        let st = vol.status();
        assert_eq!(st.state, VolumeState::Healthy, "{level}");
        assert_eq!(st.spares[0].state, MemberState::Replacing);
        assert_eq!(st.spares[0].replaces, Some(victim));
        scribble(&vol, &mut model, 11, 3).await;
        assert_eq!(
            rx.borrow().phase,
            TaskPhase::Running,
            "{level}: still copying"
        );
        scribble(&vol, &mut model, 13, 30).await;
        let p = vol.wait_copy().await.unwrap();
        assert_eq!(p.phase, TaskPhase::Done, "{level}");
        assert_eq!(p.bytes_done, p.bytes_total);
        let st = vol.status();
        assert_eq!(st.state, VolumeState::Healthy);
        assert_ne!(st.members[victim].uuid, old_uuid, "{level}: a new member");
        assert_eq!(st.members[victim].device.as_deref(), Some("new"));
        assert!(st.spares.is_empty());
        check_all(&vol, &model).await;
        // The new member carries its share: lose the others the layout tolerates.
        let tol = level.params(n, SU).unwrap().m;
        let others: Vec<usize> = match level {
            LevelSpec::Raid1 | LevelSpec::Raid10 { .. } => vec![(victim + 1) % n],
            _ => (0..n).filter(|&i| i != victim).take(tol).collect(),
        };
        for o in others {
            vol.fail_member(o).await.unwrap();
        }
        check_all(&vol, &model).await;
        // The old device is no longer written.
        let before = m.ram[victim].stats().write_ops;
        scribble(&vol, &mut model, 12, 5).await;
        assert_eq!(m.ram[victim].stats().write_ops, before, "{level}");
    }
}

#[tokio::test]
async fn a_stopped_copy_resumes_at_its_checkpoint_after_assembly() {
    let (m, vol, mut model) = filled_with(checkpointed_raid5(), 4, 3).await;
    let (new, _h) = slow_device("new", Duration::from_millis(5));
    vol.copy_member(1, new.clone()).await.unwrap();
    // Past the first checkpoint (every 512 KiB).
    copy_underway(&vol, 640 << 10).await;
    scribble(&vol, &mut model, 4, 10).await;
    vol.stop().await.unwrap();
    // Examine sees the replacement and its checkpoint.
    let mut devs = m.devs.clone();
    devs.push(new.clone());
    let ex = Volume::examine(devs.clone()).await.unwrap();
    let r = &ex.status.spares[0];
    assert_eq!((r.state, r.replaces), (MemberState::Replacing, Some(1)));
    let checkpoint = r.rebuild_offset_bytes;
    assert!(checkpoint > 0, "a checkpoint was saved");
    let mut opts = test_options();
    opts.auto_rebuild = true;
    let vol = Volume::assemble_with(devs, opts).await.unwrap();
    let rx = vol.copy_progress().expect("the copy resumed");
    let first = rx.borrow().clone();
    assert_eq!(first.member, 1);
    let p = vol.wait_copy().await.unwrap();
    assert_eq!(p.phase, TaskPhase::Done);
    assert_eq!(p.bytes_done, p.bytes_total);
    assert_eq!(vol.status().members[1].device.as_deref(), Some("new"));
    check_all(&vol, &model).await;
    vol.fail_member(0).await.unwrap();
    check_all(&vol, &model).await;
}

#[tokio::test]
async fn a_copy_cut_by_a_crash_starts_over_and_completes() {
    let (m, vol, mut model) = filled_with(checkpointed_raid5(), 4, 21).await;
    let (new, _h) = slow_device("new", Duration::from_millis(5));
    vol.copy_member(2, new.clone()).await.unwrap();
    copy_underway(&vol, 1).await;
    scribble(&vol, &mut model, 22, 10).await;
    // The power goes: nothing more is written, no clean flag.
    vol.detach();
    let mut devs = m.devs.clone();
    devs.push(new.clone());
    let ex = Volume::examine(devs.clone()).await.unwrap();
    assert!(!ex.status.clean);
    assert_eq!(ex.status.spares[0].state, MemberState::Replacing);
    let mut opts = test_options();
    opts.auto_rebuild = true;
    let vol = Volume::assemble_with(devs, opts).await.unwrap();
    let first = vol
        .copy_progress()
        .expect("the copy resumed")
        .borrow()
        .clone();
    assert!(
        first.bytes_done < first.bytes_total / 2,
        "from the start: {first:?}"
    );
    let p = vol.wait_copy().await.unwrap();
    assert_eq!(p.phase, TaskPhase::Done, "{p:?}");
    assert_eq!(vol.status().members[2].device.as_deref(), Some("new"));
    check_all(&vol, &model).await;
    vol.fail_member(0).await.unwrap();
    check_all(&vol, &model).await;
}

#[tokio::test]
async fn a_member_failing_during_the_copy_hands_over_to_the_replacement() {
    let (m, vol, mut model) = filled(LevelSpec::Raid5, 4, 5).await;
    let (new, _h) = slow_device("new", Duration::from_millis(1));
    vol.copy_member(3, new).await.unwrap();
    copy_underway(&vol, 1).await;
    // The drive dies for good: the next write to it fails it.
    m.faults[3].add(FaultRule::new(FaultOps::ALL, FaultAction::Offline));
    scribble(&vol, &mut model, 6, 20).await;
    let st = vol.status();
    assert_eq!(st.members[3].device.as_deref(), Some("new"));
    assert_eq!(st.members[3].state, MemberState::Rebuilding);
    assert!(
        st.members[3].rebuild_offset_bytes > 0,
        "keeps the copied part"
    );
    check_all(&vol, &model).await;
    let mut rx = vol.start_rebuild().await.unwrap();
    rx.wait_for(|p| p.phase != TaskPhase::Running)
        .await
        .unwrap();
    assert_eq!(rx.borrow().phase, TaskPhase::Done);
    assert!(
        rx.borrow().bytes_total < vol.status().member_data_bytes,
        "rebuilt from the copy's frontier"
    );
    assert_eq!(vol.status().state, VolumeState::Healthy);
    vol.fail_member(0).await.unwrap();
    check_all(&vol, &model).await;
}

#[tokio::test]
async fn unreadable_rows_of_the_member_are_reconstructed_into_the_copy() {
    let (m, vol, model) = filled(LevelSpec::Raid6, 5, 9).await;
    // Member 2 cannot read its first 2 MiB of data any more (grown defects).
    m.faults[2].add(FaultRule::new(FaultOps::READ, FaultAction::Media).in_range(0..3 * MIB));
    let (new, _h) = slow_device("new", Duration::ZERO);
    vol.copy_member(2, new).await.unwrap();
    let p = vol.wait_copy().await.unwrap();
    assert_eq!(p.phase, TaskPhase::Done, "{p:?}");
    assert!(p.bytes_reconstructed > 0);
    assert_eq!(vol.status().state, VolumeState::Healthy);
    m.faults[2].clear();
    vol.fail_member(0).await.unwrap();
    vol.fail_member(1).await.unwrap();
    check_all(&vol, &model).await;
}

#[tokio::test]
async fn refusals_say_why() {
    let (_m, vol, _model) = filled(LevelSpec::Raid5, 4, 1).await;
    let small: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("small", MIB));
    assert!(vol.copy_member(0, small).await.is_err());
    let (a, _) = slow_device("a", Duration::from_millis(1));
    vol.copy_member(0, a).await.unwrap();
    let (b, _) = slow_device("b", Duration::ZERO);
    let e = vol.copy_member(1, b).await.unwrap_err().to_string();
    assert!(e.contains("already running"), "{e}");
    vol.cancel_copy().await.unwrap();
    assert_eq!(vol.status().spares[0].state, MemberState::Spare);
    vol.fail_member(2).await.unwrap();
    let (c, _) = slow_device("c", Duration::ZERO);
    let e = vol.copy_member(2, c).await.unwrap_err().to_string();
    assert!(e.contains("only an active member is copied"), "{e}");
}
