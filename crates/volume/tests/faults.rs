//! Member faults: I/O errors, timeouts, too many failures, bit flips, FUA/flush
//! durability, concurrent writers on one stripe.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use blockdev::{
    BlockDevice, CrashRecorder, FaultAction, FaultOps, FaultRule, IoBuf, RamDevice, WriteFlags,
};
use common::*;
use volume::format::{MemberState as SbState, Superblock};
use volume::{EngineOptions, LevelSpec, MemberState, Volume, VolumeError, VolumeState};

const SU: u64 = 16 << 10;

fn superblock_of(ram: &RamDevice) -> Superblock {
    let mut b = vec![0u8; 4096];
    ram.read_at(0, &mut b).unwrap();
    Superblock::decode(&b).unwrap()
}

#[tokio::test]
async fn write_error_fails_member_in_every_surviving_superblock() {
    let m = ram_members(4, 4 * MIB);
    let vol = create_on(&m, LevelSpec::Raid5, SU).await;
    let mut r = rng(1);
    let mut model = random_bytes(&mut r, vol.size_bytes() as usize);
    write(&vol, 0, &model).await;
    let g0 = superblock_of(&m.ram[0]).generation;
    m.faults[2].add(FaultRule::new(
        FaultOps::WRITE,
        FaultAction::IoError(libc_eio()),
    ));
    let data = random_bytes(&mut r, 3 * SU as usize);
    // Acknowledged although member 2 failed under it.
    write(&vol, 0, &data).await;
    model[..data.len()].copy_from_slice(&data);
    let st = vol.status();
    assert_eq!(st.state, VolumeState::Degraded);
    assert_eq!(st.members[2].state, MemberState::Failed);
    for i in [0, 1, 3] {
        let sb = superblock_of(&m.ram[i]);
        assert!(sb.generation > g0, "member {i} not updated");
        assert_eq!(sb.members[2].state, SbState::Failed);
        assert_eq!(sb.members[2].state_generation, sb.generation);
    }
    assert_eq!(
        superblock_of(&m.ram[2]).generation,
        g0,
        "the failed member is fenced"
    );
    check_all(&vol, &model).await;
}

fn libc_eio() -> i32 {
    5
}

#[tokio::test]
async fn read_error_fails_member_and_read_is_reconstructed() {
    let m = ram_members(6, 4 * MIB);
    let vol = Volume::create(
        "t",
        config(LevelSpec::Erasure { k: 4, m: 2 }, SU, MIB),
        m.devs.clone(),
        vec![],
    )
    .await
    .unwrap();
    let mut r = rng(2);
    let model = random_bytes(&mut r, vol.size_bytes() as usize);
    write(&vol, 0, &model).await;
    m.faults[1].add(FaultRule::new(FaultOps::READ, FaultAction::Media));
    m.faults[4].add(FaultRule::new(FaultOps::READ, FaultAction::Offline));
    check_all(&vol, &model).await;
    let st = vol.status();
    assert_eq!(st.members[1].state, MemberState::Failed);
    assert_eq!(st.members[4].state, MemberState::Failed);
    assert_eq!(st.state, VolumeState::Degraded);
}

#[tokio::test(start_paused = true)]
async fn hung_member_times_out_and_is_failed() {
    let m = ram_members(3, 4 * MIB);
    let mut cfg = config(LevelSpec::Raid1, SU, MIB);
    cfg.options.member_timeout = Duration::from_secs(2);
    let vol = Volume::create("t", cfg, m.devs.clone(), vec![])
        .await
        .unwrap();
    write(&vol, 0, &[5u8; 8192]).await;
    m.faults[0].add(FaultRule::new(
        FaultOps::ALL,
        FaultAction::Hang(Duration::from_secs(600)),
    ));
    let started = tokio::time::Instant::now();
    write(&vol, 4096, &[6u8; 4096]).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(vol.status().members[0].state, MemberState::Failed);
    let got = read(&vol, 0, 8192).await;
    assert_eq!(&got[..4096], &[5u8; 4096][..]);
    assert_eq!(&got[4096..], &[6u8; 4096][..]);
}

#[tokio::test]
async fn beyond_tolerance_io_fails_with_a_clear_error() {
    let m = ram_members(3, 4 * MIB);
    let vol = create_on(&m, LevelSpec::Raid5, SU).await;
    write(&vol, 0, &[1u8; 4096]).await;
    vol.fail_member(0).await.unwrap();
    // Failing a second one by hand is refused...
    let err = vol.fail_member(1).await.unwrap_err();
    assert!(err.to_string().contains("would lose data"), "{err}");
    // ...but a member that breaks takes the volume down.
    m.faults[1].add(FaultRule::new(FaultOps::ALL, FaultAction::Offline));
    let err = vol
        .write(0, IoBuf::from_slice(&[2u8; 4096]), WriteFlags::default())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("volume t has failed: 2 of 3 members unavailable, it tolerates 1"),
        "{msg}"
    );
    assert_eq!(vol.status().state, VolumeState::Failed);
    assert!(vol.read(0, IoBuf::new_zeroed(4096)).await.is_err());
    // The last member still records what happened.
    assert_eq!(superblock_of(&m.ram[2]).members[1].state, SbState::Failed);
    // And assembly refuses.
    drop(vol);
    let err = Volume::assemble_with(m.devs.clone(), test_options())
        .await
        .unwrap_err();
    let VolumeError::TooFewMembers(shortfall) = &err else {
        panic!("expected a refusal, got {err}");
    };
    assert_eq!(shortfall.lost(), 2, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("2 of 3 members are missing or out of date, raid5 survives 1")
            && msg.contains("present: 2 m2")
            && msg.contains("0 m0 (failed by the operator)")
            // Member 1's device is still offline: its superblock cannot be read.
            && msg.contains("1 (failed at generation")
            && msg.contains("to count member 0 as current"),
        "{msg}"
    );
}

#[tokio::test]
async fn scrub_repairs_media_corruption_and_ignores_transient_flips() {
    // raid6: a corrupted data chunk is located and rewritten from the others.
    let m = ram_members(5, 4 * MIB);
    let vol = create_on(&m, LevelSpec::Raid6, SU).await;
    let mut r = rng(3);
    let model = random_bytes(&mut r, vol.size_bytes() as usize);
    write(&vol, 0, &model).await;
    let data_offset = vol.status().data_offset_bytes;
    // Member 1, row 3: flip bytes on the medium.
    let at = data_offset + 3 * SU + 100;
    let mut b = [0u8; 512];
    m.ram[1].read_at(at - 100, &mut b).unwrap();
    b[100] ^= 0xFF;
    b[300] ^= 0x01;
    m.ram[1].write_at(at - 100, &b).unwrap();
    // And a transient flip on every read of member 3 once.
    m.faults[3]
        .add(FaultRule::new(FaultOps::READ, FaultAction::FlipBits { xor_mask: 0x10 }).times(1));
    let rep = vol.scrub().await.unwrap();
    assert_eq!(rep.mismatches, 1, "{rep:?}");
    assert_eq!(rep.repaired, 1);
    assert_eq!(rep.located, 1);
    assert!(rep.transient >= 1, "{rep:?}");
    assert_eq!(rep.stripes_checked, vol.status().member_data_bytes / SU);
    check_all(&vol, &model).await;
    let rep = vol.scrub().await.unwrap();
    assert_eq!((rep.mismatches, rep.transient), (0, 0), "{rep:?}");
    assert_eq!(vol.status().last_scrub.unwrap(), rep);

    // raid5: parity is recomputed from data.
    let m = ram_members(3, 4 * MIB);
    let vol = create_on(&m, LevelSpec::Raid5, SU).await;
    let model = random_bytes(&mut r, vol.size_bytes() as usize);
    write(&vol, 0, &model).await;
    // Row 0's parity lives on member 2 (left-symmetric).
    m.ram[2].write_at(data_offset + 512, &[0xEE; 512]).unwrap();
    let rep = vol.scrub().await.unwrap();
    assert_eq!((rep.mismatches, rep.repaired, rep.located), (1, 1, 0));
    vol.fail_member(0).await.unwrap();
    check_all(&vol, &model).await;

    // raid1: the majority of three copies wins.
    let m = ram_members(3, 4 * MIB);
    let vol = create_on(&m, LevelSpec::Raid1, SU).await;
    let model = random_bytes(&mut r, vol.size_bytes() as usize);
    write(&vol, 0, &model).await;
    m.ram[0].write_at(data_offset + 4096, &[0xEE; 512]).unwrap();
    let rep = vol.scrub().await.unwrap();
    assert_eq!((rep.mismatches, rep.repaired), (1, 1));
    vol.fail_member(1).await.unwrap();
    vol.fail_member(2).await.unwrap();
    check_all(&vol, &model).await;
}

async fn recorder_members(n: usize) -> (Vec<Arc<CrashRecorder>>, Vec<Arc<dyn BlockDevice>>) {
    let recs: Vec<Arc<CrashRecorder>> = (0..n)
        .map(|i| Arc::new(CrashRecorder::new(format!("c{i}"), 4 * MIB)))
        .collect();
    let devs = recs
        .iter()
        .map(|r| r.clone() as Arc<dyn BlockDevice>)
        .collect();
    (recs, devs)
}

async fn durable_volume(recs: &[Arc<CrashRecorder>]) -> Volume {
    let devs: Vec<Arc<dyn BlockDevice>> = recs
        .iter()
        .map(|r| Arc::new(r.durable_image()) as Arc<dyn BlockDevice>)
        .collect();
    Volume::assemble_with(devs, test_options()).await.unwrap()
}

#[tokio::test]
async fn fua_and_flush_reach_the_members() {
    for level in [LevelSpec::Raid5, LevelSpec::Raid1] {
        let (recs, devs) = recorder_members(3).await;
        let vol = Volume::create("t", config(level, SU, MIB), devs, vec![])
            .await
            .unwrap();
        write(&vol, 0, &[1u8; 8192]).await;
        // Not flushed: a power loss may drop it.
        let lost = durable_volume(&recs).await;
        assert_eq!(read(&lost, 0, 8192).await, vec![0u8; 8192], "{level}");
        drop(lost);
        vol.write(
            8192,
            IoBuf::from_slice(&[2u8; 4096]),
            WriteFlags { fua: true },
        )
        .await
        .unwrap();
        let after_fua = durable_volume(&recs).await;
        assert_eq!(
            read(&after_fua, 8192, 4096).await,
            vec![2u8; 4096],
            "{level}: FUA durable"
        );
        drop(after_fua);
        vol.flush().await.unwrap();
        let after_flush = durable_volume(&recs).await;
        assert_eq!(
            read(&after_flush, 0, 8192).await,
            vec![1u8; 8192],
            "{level}: flush durable"
        );
        assert_eq!(read(&after_flush, 8192, 4096).await, vec![2u8; 4096]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_on_one_stripe_keep_parity_and_copies_consistent() {
    for (level, n) in [
        (LevelSpec::Raid6, 5),
        (LevelSpec::Raid1, 2),
        (LevelSpec::Raid10 { copies: 2 }, 3),
    ] {
        let m = ram_members(n, 4 * MIB);
        let vol = Arc::new(
            Volume::create("t", config(level, SU, MIB), m.devs.clone(), vec![])
                .await
                .unwrap(),
        );
        let mut tasks = Vec::new();
        for t in 0..16u8 {
            let vol = vol.clone();
            tasks.push(tokio::spawn(async move {
                let mut r = rng(u64::from(t));
                for i in 0..20u8 {
                    use rand::Rng;
                    let sectors = r.random_range(1..=64u64);
                    let off = r.random_range(0..(3 * SU / 512 - sectors)) * 512;
                    let fill = t.wrapping_mul(20).wrapping_add(i).wrapping_add(1);
                    vol.write(
                        off,
                        IoBuf::from_slice(&vec![fill; (sectors * 512) as usize]),
                        WriteFlags::default(),
                    )
                    .await
                    .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let rep = vol.scrub().await.unwrap();
        assert_eq!(rep.mismatches, 0, "{level}: {rep:?}");
        // Every sector holds one whole write's fill byte.
        let got = read(&vol, 0, 3 * SU as usize).await;
        for s in got.chunks(512) {
            assert!(s.iter().all(|&b| b == s[0]), "{level}: torn sector");
        }
    }
}

#[tokio::test]
async fn spare_takes_over_automatically() {
    let m = ram_members(4, 4 * MIB);
    let spare: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("spare", 4 * MIB));
    let mut cfg = config(LevelSpec::Raid5, SU, MIB);
    cfg.options = EngineOptions {
        auto_rebuild: true,
        ..test_options()
    };
    let vol = Volume::create("t", cfg, m.devs[..3].to_vec(), vec![spare])
        .await
        .unwrap();
    assert_eq!(vol.status().spares.len(), 1);
    let mut r = rng(9);
    let model = random_bytes(&mut r, vol.size_bytes() as usize);
    write(&vol, 0, &model).await;
    m.faults[1].add(FaultRule::new(FaultOps::ALL, FaultAction::Offline));
    check_all(&vol, &model).await;
    let done = vol.wait_rebuild().await.unwrap();
    assert_eq!(done.phase, volume::TaskPhase::Done);
    let st = vol.status();
    assert_eq!(st.state, VolumeState::Healthy);
    assert!(st.spares.is_empty());
    assert_eq!(st.members[1].device.as_deref(), Some("spare"));
    check_all(&vol, &model).await;
    let rep = vol.scrub().await.unwrap();
    assert_eq!(rep.mismatches, 0);
}
