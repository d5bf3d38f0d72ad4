//! Assembly from members alone: clean restart, damaged superblock copies, fencing of stale
//! members with partial rebuild, missing members.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use blockdev::{BlockDevice, RamDevice};
use common::*;
use volume::{LevelSpec, MemberState, TaskPhase, Volume, VolumeError, VolumeState};

const SU: u64 = 64 << 10;

async fn raid6_with_data(seed: u64) -> (Members, Volume, Vec<u8>) {
    let m = ram_members(5, 8 * MIB);
    let vol = Volume::create(
        "r6",
        config(LevelSpec::Raid6, SU, MIB),
        m.devs.clone(),
        vec![],
    )
    .await
    .unwrap();
    let mut r = rng(seed);
    let model = random_bytes(&mut r, vol.size_bytes() as usize);
    write(&vol, 0, &model).await;
    (m, vol, model)
}

#[tokio::test]
async fn clean_stop_and_reassemble_in_any_order() {
    let (m, vol, model) = raid6_with_data(1).await;
    let uuid = vol.uuid();
    vol.stop().await.unwrap();
    assert!(vol.status().clean);
    let err = vol
        .read(0, blockdev::IoBuf::new_zeroed(512))
        .await
        .unwrap_err();
    assert!(matches!(err, blockdev::BlockError::Closed));
    drop(vol);
    let mut devs = m.devs.clone();
    devs.reverse();
    let vol = Volume::assemble_with(devs, test_options()).await.unwrap();
    assert_eq!(vol.uuid(), uuid);
    let st = vol.status();
    assert_eq!(st.state, VolumeState::Healthy);
    assert_eq!(st.dirty_regions, 0, "clean stop leaves no dirty region");
    assert!(!st.clean, "an assembled volume is dirty until stopped");
    check_all(&vol, &model).await;
    // Generation unchanged by a plain restart (no membership change).
    assert_eq!(st.generation, 1);
}

#[tokio::test]
async fn damaged_superblock_copy_is_repaired() {
    let (m, vol, model) = raid6_with_data(2).await;
    vol.stop().await.unwrap();
    drop(vol);
    // Member 1: copy A garbage; member 3: copy B checksum broken.
    m.ram[1].write_at(0, &[0xAB; 4096]).unwrap();
    let mut b = vec![0u8; 4096];
    m.ram[3].read_at(4096, &mut b).unwrap();
    b[100] ^= 1;
    m.ram[3].write_at(4096, &b).unwrap();
    let vol = Volume::assemble_with(m.devs.clone(), test_options())
        .await
        .unwrap();
    let notes = vol.status().notes.join("\n");
    assert!(notes.contains("m1: superblock copy rewritten"), "{notes}");
    assert!(
        notes.contains("copy 1: superblock checksum mismatch"),
        "{notes}"
    );
    check_all(&vol, &model).await;
    // Both copies are valid again on every member.
    for r in &m.ram {
        let mut area = vec![0u8; 8192];
        r.read_at(0, &mut area).unwrap();
        let a = volume::format::Superblock::decode(&area[..4096]).unwrap();
        let b = volume::format::Superblock::decode(&area[4096..]).unwrap();
        assert_eq!(a, b);
    }
}

#[tokio::test]
async fn both_copies_gone_means_not_a_member() {
    let (m, vol, model) = raid6_with_data(3).await;
    vol.stop().await.unwrap();
    drop(vol);
    m.ram[0].write_at(0, &[0u8; 8192]).unwrap();
    let vol = Volume::assemble_with(m.devs.clone(), test_options())
        .await
        .unwrap();
    let st = vol.status();
    assert_eq!(st.state, VolumeState::Degraded);
    assert_eq!(st.members[0].state, MemberState::Failed);
    check_all(&vol, &model).await;
}

#[tokio::test]
async fn stale_member_is_fenced_and_partially_rebuilt() {
    let (m, vol, mut model) = raid6_with_data(4).await;
    // The initial fill is flushed and its bits cleared before member 2 leaves.
    assert!(vol.sweep_bitmap(true).await.unwrap());
    assert_eq!(vol.status().dirty_regions, 0);
    vol.fail_member(2).await.unwrap();
    let g_failed = vol.status().generation;
    assert!(g_failed > 1);
    // Writes while member 2 is away touch only the first region (1 MiB of member space).
    let mut r = rng(40);
    let data = random_bytes(&mut r, (3 * SU) as usize);
    write(&vol, SU, &data).await;
    model[SU as usize..(4 * SU) as usize].copy_from_slice(&data);
    vol.stop().await.unwrap();
    assert!(!vol.status().clean, "degraded stop is not clean");
    drop(vol);

    // Member 2 still holds old data and an old superblock claiming it is active.
    let vol = Volume::assemble_with(m.devs.clone(), test_options())
        .await
        .unwrap();
    let st = vol.status();
    assert_eq!(st.members[2].state, MemberState::Rebuilding);
    assert_eq!(st.members[2].valid_bytes, st.member_data_bytes);
    assert!(
        st.notes.iter().any(|n| n.contains("stale")),
        "{:?}",
        st.notes
    );
    // Its stale data is never served.
    check_all(&vol, &model).await;
    let mut progress = vol.start_rebuild().await.unwrap();
    progress
        .wait_for(|p| p.phase != TaskPhase::Running)
        .await
        .unwrap();
    let p = progress.borrow().clone();
    assert_eq!(p.phase, TaskPhase::Done);
    assert!(p.partial);
    assert_eq!(p.bytes_total, MIB, "only the one dirty region");
    let st = vol.status();
    assert_eq!(st.state, VolumeState::Healthy);
    assert!(st.generation > g_failed);
    check_all(&vol, &model).await;
    let report = vol.scrub().await.unwrap();
    assert_eq!(report.mismatches, 0);
    assert_eq!(report.skipped, 0);
    // Healthy again: the bitmap can be cleared.
    assert!(vol.sweep_bitmap(true).await.unwrap());
    assert_eq!(vol.status().dirty_regions, 0);
}

#[tokio::test]
async fn missing_members_within_and_beyond_tolerance() {
    let (m, vol, model) = raid6_with_data(5).await;
    vol.stop().await.unwrap();
    drop(vol);
    let two: Vec<Arc<dyn BlockDevice>> = m.devs[2..].to_vec();
    let vol = Volume::assemble_with(two, test_options()).await.unwrap();
    let st = vol.status();
    assert_eq!(st.state, VolumeState::Degraded);
    assert_eq!(st.members[0].state, MemberState::Failed);
    assert_eq!(st.members[1].state, MemberState::Failed);
    check_all(&vol, &model).await;
    vol.stop().await.unwrap();
    drop(vol);
    let err = Volume::assemble_with(m.devs[3..].to_vec(), test_options())
        .await
        .unwrap_err();
    assert!(matches!(err, VolumeError::Failed { lost: 3, .. }), "{err}");
    assert!(err.to_string().contains("tolerates 2"), "{err}");
}

#[tokio::test]
async fn foreign_and_replaced_devices() {
    let (m, vol, _model) = raid6_with_data(6).await;
    // Create refuses devices in use.
    let err = Volume::create(
        "again",
        config(LevelSpec::Raid1, SU, MIB),
        m.devs[..2].to_vec(),
        vec![],
    )
    .await
    .unwrap_err();
    assert!(matches!(err, VolumeError::InUse { .. }), "{err}");
    // Replace member 0 with a new device; the old one is no longer part of the volume.
    let fresh: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("fresh", 8 * MIB));
    vol.replace_member(0, fresh.clone()).await.unwrap();
    vol.start_rebuild().await.unwrap();
    assert_eq!(vol.wait_rebuild().await.unwrap().phase, TaskPhase::Done);
    vol.stop().await.unwrap();
    drop(vol);
    let mut devs = m.devs.clone();
    devs.push(fresh);
    let vol = Volume::assemble_with(devs, test_options()).await.unwrap();
    let st = vol.status();
    assert_eq!(st.state, VolumeState::Healthy);
    assert_eq!(st.members[0].device.as_deref(), Some("fresh"));
    assert!(
        st.notes
            .iter()
            .any(|n| n.contains("m0") && n.contains("no longer part")),
        "{:?}",
        st.notes
    );
    // Devices of another volume cannot be mixed in.
    let other = ram_members(2, 8 * MIB);
    let v2 = Volume::create(
        "other",
        config(LevelSpec::Raid1, SU, MIB),
        other.devs.clone(),
        vec![],
    )
    .await
    .unwrap();
    v2.stop().await.unwrap();
    let mut mixed = m.devs[1..].to_vec();
    mixed.push(other.devs[0].clone());
    vol.stop().await.unwrap();
    let err = Volume::assemble_with(mixed, test_options())
        .await
        .unwrap_err();
    assert!(matches!(err, VolumeError::MixedVolumes(..)), "{err}");
}
