//! Assembly from members alone: clean restart, damaged superblock copies, fencing of stale
//! members with partial rebuild, missing members.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use blockdev::{BlockDevice, FaultAction, FaultOps, FaultRule, RamDevice};
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

/// Writes while member 2 is away touch only the first region (1 MiB of member space).
async fn write_while_away(vol: &Volume, model: &mut [u8]) {
    let mut r = rng(40);
    let data = random_bytes(&mut r, (3 * SU) as usize);
    write(vol, SU, &data).await;
    model[SU as usize..(4 * SU) as usize].copy_from_slice(&data);
}

/// A partial rebuild of member 2 that copies only the one dirty region.
async fn partial_rebuild_of_one_region(vol: &Volume, model: &[u8], g_failed: u64) {
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
    check_all(vol, model).await;
    let report = vol.scrub().await.unwrap();
    assert_eq!(report.mismatches, 0);
    assert_eq!(report.skipped, 0);
    // Healthy again: the bitmap can be cleared.
    assert!(vol.sweep_bitmap(true).await.unwrap());
    assert_eq!(vol.status().dirty_regions, 0);
}

/// A member that dropped out by an error (here: its device went offline) comes back by
/// itself at the next assembly, fenced, with a partial rebuild.
#[tokio::test]
async fn member_failed_by_an_error_returns_with_a_partial_rebuild() {
    let (m, vol, mut model) = raid6_with_data(4).await;
    // The initial fill is flushed and its bits cleared before member 2 leaves.
    assert!(vol.sweep_bitmap(true).await.unwrap());
    assert_eq!(vol.status().dirty_regions, 0);
    m.faults[2].add(FaultRule::new(FaultOps::ALL, FaultAction::Offline));
    vol.flush().await.unwrap();
    let st = vol.status();
    assert_eq!(st.members[2].state, MemberState::Failed);
    assert!(!st.members[2].failed_by_operator);
    let g_failed = st.generation;
    assert!(g_failed > 1);
    m.faults[2].clear();
    write_while_away(&vol, &mut model).await;
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
    partial_rebuild_of_one_region(&vol, &model, g_failed).await;
}

/// A member the operator failed stays out: assembly neither re-adds it nor bumps the
/// generation for it, `examine` changes nothing; `re_add_member` brings it back with a
/// partial rebuild.
#[tokio::test]
async fn member_failed_by_the_operator_stays_out_until_re_added() {
    let (m, vol, mut model) = raid6_with_data(7).await;
    assert!(vol.sweep_bitmap(true).await.unwrap());
    vol.fail_member(2).await.unwrap();
    let st = vol.status();
    assert!(st.members[2].failed_by_operator, "{:?}", st.members[2]);
    write_while_away(&vol, &mut model).await;
    vol.stop().await.unwrap();
    drop(vol);

    let images = |m: &Members| -> Vec<Vec<u8>> {
        m.ram
            .iter()
            .map(|r| {
                let mut b = vec![0u8; 8 * MIB as usize];
                r.read_at(0, &mut b).unwrap();
                b
            })
            .collect()
    };
    let before = images(&m);
    let found = Volume::examine(m.devs.clone()).await.unwrap();
    assert_eq!(images(&m), before, "examine wrote to a member");
    let st = &found.status;
    assert_eq!(st.state, VolumeState::Degraded);
    assert_eq!(st.members[2].state, MemberState::Failed);
    assert!(st.members[2].failed_by_operator);
    assert_eq!(st.members[2].device.as_deref(), Some("m2"));
    assert!(found.shortfall.is_none());
    assert!(
        st.notes
            .iter()
            .any(|n| n.contains("member 2 (m2) was failed by the operator")),
        "{:?}",
        st.notes
    );

    for round in 0..2 {
        let vol = Volume::assemble_with(m.devs.clone(), test_options())
            .await
            .unwrap();
        let st = vol.status();
        assert_eq!(st.members[2].state, MemberState::Failed, "round {round}");
        assert!(st.members[2].failed_by_operator);
        assert_eq!(st.members[2].device, None, "the device is not used");
        assert_eq!(
            st.generation, found.status.generation,
            "no membership change"
        );
        check_all(&vol, &model).await;
        vol.stop().await.unwrap();
    }

    let vol = Volume::assemble_with(m.devs.clone(), test_options())
        .await
        .unwrap();
    let g_failed = vol.status().generation;
    // Another device is not member 2.
    let err = vol.re_add_member(2, m.devs[3].clone()).await.unwrap_err();
    assert!(err.to_string().contains("is not member 2"), "{err}");
    let err = vol.re_add_member(1, m.devs[1].clone()).await.unwrap_err();
    assert!(err.to_string().contains("member 1 is active"), "{err}");
    vol.re_add_member(2, m.devs[2].clone()).await.unwrap();
    let st = vol.status();
    assert_eq!(st.members[2].state, MemberState::Rebuilding);
    assert!(!st.members[2].failed_by_operator);
    check_all(&vol, &model).await;
    partial_rebuild_of_one_region(&vol, &model, g_failed).await;
}

/// Failing an already failed member (dropped out by an error) makes it stay out.
#[tokio::test]
async fn operator_fail_of_an_error_failed_member_keeps_it_out() {
    let (m, vol, model) = raid6_with_data(8).await;
    m.faults[1].add(FaultRule::new(FaultOps::ALL, FaultAction::Offline));
    vol.flush().await.unwrap();
    assert!(!vol.status().members[1].failed_by_operator);
    m.faults[1].clear();
    vol.fail_member(1).await.unwrap();
    assert!(vol.status().members[1].failed_by_operator);
    vol.stop().await.unwrap();
    drop(vol);
    let vol = Volume::assemble_with(m.devs.clone(), test_options())
        .await
        .unwrap();
    assert_eq!(vol.status().members[1].state, MemberState::Failed);
    check_all(&vol, &model).await;
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
    // Beyond the tolerance: refused, nothing written, and the error says which members
    // are there and which are not.
    let before: Vec<Vec<u8>> = m.ram[3..]
        .iter()
        .map(|r| {
            let mut b = vec![0u8; 8192];
            r.read_at(0, &mut b).unwrap();
            b
        })
        .collect();
    let err = Volume::assemble_with(m.devs[3..].to_vec(), test_options())
        .await
        .unwrap_err();
    let VolumeError::TooFewMembers(shortfall) = &err else {
        panic!("expected a refusal, got {err}");
    };
    assert_eq!(shortfall.lost(), 3);
    assert!(!shortfall.force_helps);
    let msg = err.to_string();
    assert!(
        msg.contains("3 of 5 members are missing or out of date, raid6 survives 2")
            && msg.contains("present: 3 m3, 4 m4;")
            && msg.contains("0 (failed at generation 2, no device)")
            && msg.contains("2 (no device holding its superblock)")
            && msg.contains("bring the missing members back"),
        "{msg}"
    );
    for (r, b) in m.ram[3..].iter().zip(before) {
        let mut now = vec![0u8; 8192];
        r.read_at(0, &mut now).unwrap();
        assert_eq!(now, b, "a refused assembly wrote a superblock");
    }
}

/// More members out than the layout survives, but some of them only failed (their
/// devices are here and were current when they left): refused, unless forced, which
/// counts them as current again (`mdadm --assemble --force`).
#[tokio::test]
async fn force_counts_members_that_left_current() {
    let (m, vol, model) = raid6_with_data(9).await;
    vol.fail_member(0).await.unwrap();
    vol.fail_member(1).await.unwrap();
    vol.stop().await.unwrap();
    drop(vol);
    // Member 4 is gone as well: three out, raid6 survives two.
    let devs: Vec<Arc<dyn BlockDevice>> = m.devs[..4].to_vec();
    let err = Volume::assemble_with(devs.clone(), test_options())
        .await
        .unwrap_err();
    let VolumeError::TooFewMembers(shortfall) = &err else {
        panic!("expected a refusal, got {err}");
    };
    assert!(shortfall.force_helps);
    assert_eq!(shortfall.forceable_list(), "0, 1");
    assert!(
        err.to_string()
            .contains("assemble with force_stale to count members 0, 1 as current"),
        "{err}"
    );
    let opts = volume::EngineOptions {
        force_stale: true,
        ..test_options()
    };
    let vol = Volume::assemble_with(devs, opts).await.unwrap();
    let st = vol.status();
    assert_eq!(st.state, VolumeState::Degraded);
    // Only as many as needed, the last to leave first.
    assert_eq!(st.members[1].state, MemberState::Active);
    assert_eq!(st.members[0].state, MemberState::Failed);
    assert!(
        st.notes
            .iter()
            .any(|n| n.contains("member 1 (m1) forced back")),
        "{:?}",
        st.notes
    );
    // Nothing was written while they were out: every byte is right.
    check_all(&vol, &model).await;
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
