//! Fencing: a member answering Reservation Conflict fences the whole volume (no member
//! failed, nothing written, I/O fails with `Unavailable`); `detach()` and dropping a
//! volume write nothing, background work included; a member that is `Unavailable` is
//! failed like an unreachable one. The log layout (`--layout log`) fences the same way:
//! its segment writes go through the same engine.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use blockdev::{
    BlockDevice, BlockError, DeviceInfo, DeviceStats, IoBuf, IoFuture, RamDevice, WriteFlags,
};
use common::*;
use volume::{
    Compression, EngineOptions, LevelSpec, LogConfig, MemberState, TaskPhase, Throttle, TokioClock,
    Volume, VolumeError, VolumeState,
};

const SU: u64 = 64 << 10;
const MEMBER_BYTES: u64 = 8 * MIB;

/// What a member answers while "fenced".
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refuse {
    /// Serve everything.
    Nothing,
    /// Modifying commands and flush get Reservation Conflict (Write Exclusive held by
    /// another host); reads pass.
    WritesConflict,
    /// Everything gets Reservation Conflict (Exclusive Access).
    AllConflict,
    /// Modifying commands and flush fail with `Unavailable`.
    WritesUnavailable,
}

/// A RAM member that can be told to refuse I/O as a fenced NVMe namespace does.
struct Member {
    ram: Arc<RamDevice>,
    info: DeviceInfo,
    mode: std::sync::Mutex<Refuse>,
    /// Commands that reached the RAM device.
    passed: AtomicU64,
    /// Commands refused.
    refused: AtomicU64,
}

impl Member {
    fn new(name: &str) -> Arc<Member> {
        let ram = Arc::new(RamDevice::new(name, MEMBER_BYTES));
        let info = ram.info().clone();
        Arc::new(Member {
            ram,
            info,
            mode: std::sync::Mutex::new(Refuse::Nothing),
            passed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    fn set(&self, mode: Refuse) {
        *self.mode.lock().unwrap() = mode;
    }

    fn check(&self, modifies: bool) -> Result<(), BlockError> {
        let mode = *self.mode.lock().unwrap();
        let refuse = match mode {
            Refuse::Nothing => None,
            Refuse::WritesConflict if modifies => Some(BlockError::ReservationConflict),
            Refuse::AllConflict => Some(BlockError::ReservationConflict),
            Refuse::WritesUnavailable if modifies => {
                Some(BlockError::Unavailable("namespace handed over".into()))
            }
            _ => None,
        };
        match refuse {
            Some(e) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
            None => {
                self.passed.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    /// The whole RAM content.
    async fn image(&self) -> Vec<u8> {
        self.ram
            .read(0, IoBuf::new_zeroed(MEMBER_BYTES as usize))
            .await
            .unwrap()
            .to_vec()
    }
}

impl BlockDevice for Member {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            self.check(false)?;
            self.ram.read(offset_bytes, buf).await
        })
    }
    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            self.check(true)?;
            self.ram.write(offset_bytes, buf, flags).await
        })
    }
    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check(true)?;
            self.ram.flush().await
        })
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check(true)?;
            self.ram.write_zeroes(offset_bytes, len_bytes).await
        })
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check(true)?;
            self.ram.discard(offset_bytes, len_bytes).await
        })
    }
    fn stats(&self) -> DeviceStats {
        self.ram.stats()
    }
}

struct Setup {
    members: Vec<Arc<Member>>,
    vol: Volume,
    model: Vec<u8>,
}

async fn images(members: &[Arc<Member>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for m in members {
        out.push(m.image().await);
    }
    out
}

fn passed(members: &[Arc<Member>]) -> Vec<u64> {
    members
        .iter()
        .map(|m| m.passed.load(Ordering::Relaxed))
        .collect()
}

async fn setup(level: LevelSpec, count: usize, opts: EngineOptions, seed: u64) -> Setup {
    let members: Vec<Arc<Member>> = (0..count).map(|i| Member::new(&format!("m{i}"))).collect();
    let devs: Vec<Arc<dyn BlockDevice>> = members
        .iter()
        .map(|m| m.clone() as Arc<dyn BlockDevice>)
        .collect();
    let cfg = volume::VolumeConfig {
        options: opts,
        ..config(level, SU, MIB)
    };
    let vol = Volume::create("fenced", cfg, devs, vec![]).await.unwrap();
    let mut r = rng(seed);
    let model = random_bytes(&mut r, vol.size_bytes() as usize);
    write(&vol, 0, &model).await;
    vol.flush().await.unwrap();
    Setup {
        members,
        vol,
        model,
    }
}

fn assert_unavailable<T: std::fmt::Debug>(r: Result<T, BlockError>, what: &str) {
    match r {
        Err(BlockError::Unavailable(msg)) => {
            assert!(msg.starts_with("volume fenced: "), "{what}: {msg}")
        }
        other => panic!("{what}: expected Unavailable, got {other:?}"),
    }
}

/// Assembles from the bare RAM devices (what the next owner reaches) and checks that
/// nobody was failed and the generation did not move.
async fn reassemble_healthy(members: &[Arc<Member>], generation: u64) -> Volume {
    let rams: Vec<Arc<dyn BlockDevice>> = members
        .iter()
        .map(|m| m.ram.clone() as Arc<dyn BlockDevice>)
        .collect();
    let vol = Volume::assemble_with(rams, test_options()).await.unwrap();
    let st = vol.status();
    assert_eq!(
        st.generation, generation,
        "no membership change was written"
    );
    assert!(
        st.members.iter().all(|m| m.state == MemberState::Active),
        "{:?}",
        st.members
    );
    assert_eq!(st.state, VolumeState::Healthy);
    vol
}

/// Reads the volume from `from` on and compares it with the model.
async fn check_from(vol: &Volume, model: &[u8], from: usize) {
    let got = read(vol, from as u64, model.len() - from).await;
    assert!(
        got[..] == model[from..],
        "data after the fence point intact"
    );
}

#[tokio::test]
async fn a_reservation_conflict_fences_the_volume_and_fails_no_member() {
    for (level, count) in [
        (LevelSpec::Raid5, 3),
        (LevelSpec::Raid6, 5),
        ("raid10".parse::<LevelSpec>().unwrap(), 4),
    ] {
        let s = setup(level, count, test_options(), 7).await;
        let vol = &s.vol;
        let generation = vol.status().generation;
        let mut fenced = vol.fenced();
        assert!(!*fenced.borrow() && !vol.is_fenced());
        assert_eq!(vol.fence_reason(), None);
        let before = images(&s.members).await;
        let meta_bytes = vol.status().data_offset_bytes as usize;

        // Another host took member 1 over: the next write through it is refused.
        s.members[1].set(Refuse::WritesConflict);
        let r = vol
            .write(
                0,
                IoBuf::from_slice(&[0xEE; 256 << 10]),
                WriteFlags::default(),
            )
            .await;
        assert_unavailable(r, "the write that met the conflict");
        assert!(s.members[1].refused.load(Ordering::Relaxed) > 0);
        assert!(vol.is_fenced(), "{level}");
        tokio::time::timeout(Duration::from_secs(1), fenced.wait_for(|f| *f))
            .await
            .unwrap()
            .unwrap();
        let st = vol.status();
        assert_eq!(st.state, VolumeState::Fenced, "{level}");
        assert!(
            st.members.iter().all(|m| m.state == MemberState::Active),
            "no member failed: {:?}",
            st.members
        );
        assert_eq!(st.generation, generation);
        let why = vol.fence_reason().unwrap();
        assert!(
            why.contains("member 1") && why.contains("reservation conflict"),
            "{why}"
        );
        assert_eq!(serde_json::to_value(st.state).unwrap(), "fenced");

        // From now on nothing reaches any member, and every I/O fails the same way.
        let passed_at_fence = passed(&s.members);
        assert_unavailable(vol.read(0, IoBuf::new_zeroed(4096)).await, "read");
        assert_unavailable(
            vol.write(SU, IoBuf::new_zeroed(4096), WriteFlags { fua: true })
                .await,
            "write",
        );
        assert_unavailable(vol.flush().await, "flush");
        assert_unavailable(vol.write_zeroes(0, 4096).await, "write_zeroes");
        assert!(matches!(
            vol.sweep_bitmap(true).await,
            Err(VolumeError::Fenced { .. })
        ));
        assert!(matches!(vol.scrub().await, Err(VolumeError::Fenced { .. })));
        assert!(matches!(
            vol.start_rebuild().await,
            Err(VolumeError::Fenced { .. })
        ));
        assert!(matches!(
            vol.fail_member(0).await,
            Err(VolumeError::Fenced { .. })
        ));
        assert!(matches!(vol.stop().await, Err(VolumeError::Fenced { .. })));
        assert_eq!(
            passed(&s.members),
            passed_at_fence,
            "no member I/O after the fence ({level})"
        );

        // Superblocks and bitmaps are what they were (every region was dirty already).
        let after = images(&s.members).await;
        for (i, (b, a)) in before.iter().zip(&after).enumerate() {
            assert!(
                b[..meta_bytes] == a[..meta_bytes],
                "member {i}'s superblocks and bitmap untouched ({level})"
            );
        }
        assert!(
            before[1] == after[1],
            "member 1 refused everything ({level})"
        );
        let Setup {
            members,
            vol,
            model,
        } = s;
        drop(vol);
        // The next owner finds every member healthy and the data there.
        let next = reassemble_healthy(&members, generation).await;
        check_from(&next, &model, 256 << 10).await;
        next.stop().await.unwrap();
    }
}

/// A compressed log-layout RAID-5 volume: the segment write that meets the conflict
/// fences the volume, nothing after it reaches a member, no member fails, and the next
/// owner assembles the members healthy with every acknowledged block (map replayed).
#[tokio::test]
async fn a_reservation_conflict_fences_a_log_layout_volume() {
    let members: Vec<Arc<Member>> = (0..4).map(|i| Member::new(&format!("l{i}"))).collect();
    let devs: Vec<Arc<dyn BlockDevice>> = members
        .iter()
        .map(|m| m.clone() as Arc<dyn BlockDevice>)
        .collect();
    let mut cfg = config(LevelSpec::Raid5, 16 << 10, MIB);
    cfg.log = Some(LogConfig::new(Compression::Lz4));
    let vol = Volume::create("fenced-log", cfg, devs, vec![])
        .await
        .unwrap();
    assert!(vol.status().log.is_some());
    // Half text (compresses), half noise, acknowledged and flushed.
    let mut r = rng(21);
    let len = (vol.size_bytes() / 2) as usize;
    let mut model = random_bytes(&mut r, len);
    for chunk in model.chunks_mut(8192) {
        chunk[..4096].fill(b'f');
    }
    write(&vol, 0, &model).await;
    vol.flush().await.unwrap();
    let generation = vol.status().generation;

    members[2].set(Refuse::WritesConflict);
    let r = vol
        .write(
            0,
            IoBuf::from_slice(&[0xEE; 64 << 10]),
            WriteFlags { fua: true },
        )
        .await;
    assert!(
        r.is_err(),
        "the write through the conflict was acknowledged"
    );
    assert!(members[2].refused.load(Ordering::Relaxed) > 0);
    assert!(vol.is_fenced());
    let why = vol.fence_reason().unwrap();
    assert!(
        why.contains("member 2") && why.contains("reservation conflict"),
        "{why}"
    );
    let st = vol.status();
    assert_eq!(st.state, VolumeState::Fenced);
    assert!(
        st.members.iter().all(|m| m.state == MemberState::Active),
        "no member failed: {:?}",
        st.members
    );
    assert_eq!(st.generation, generation);
    let passed_at_fence = passed(&members);
    assert_unavailable(vol.read(4096, IoBuf::new_zeroed(4096)).await, "read");
    assert!(
        vol.write(8192, IoBuf::new_zeroed(4096), WriteFlags::default())
            .await
            .is_err()
    );
    assert!(vol.flush().await.is_err());
    assert!(matches!(vol.scrub().await, Err(VolumeError::Fenced { .. })));
    assert_eq!(
        passed(&members),
        passed_at_fence,
        "no member I/O after the fence"
    );
    drop(vol);

    let next = reassemble_healthy(&members, generation).await;
    // The refused write was not acknowledged: its 64 KiB read old or new, never a mix
    // within a block; everything after it is what was acknowledged.
    let head = read(&next, 0, 64 << 10).await;
    for (i, b) in head.chunks(4096).enumerate() {
        let old = &model[i * 4096..(i + 1) * 4096];
        assert!(
            b == old || b.iter().all(|&x| x == 0xEE),
            "block {i} torn after the fence"
        );
    }
    check_from(&next, &model, 64 << 10).await;
    next.stop().await.unwrap();
}

#[tokio::test]
async fn a_read_conflict_fences_too() {
    let s = setup(LevelSpec::Raid5, 3, test_options(), 8).await;
    let generation = s.vol.status().generation;
    // Exclusive Access held elsewhere: even reads are refused.
    s.members[2].set(Refuse::AllConflict);
    let r = s.vol.read(0, IoBuf::new_zeroed(1 << 20)).await;
    assert_unavailable(r, "read");
    assert!(s.vol.is_fenced());
    assert_eq!(s.vol.status().state, VolumeState::Fenced);
    s.members[2].set(Refuse::Nothing);
    let Setup {
        members,
        vol,
        model,
    } = s;
    drop(vol);
    let next = reassemble_healthy(&members, generation).await;
    check_all(&next, &model).await;
}

#[tokio::test]
async fn detach_then_drop_writes_nothing() {
    // The bitmap sweeper runs every 50 ms: a live volume would clear the dirty regions.
    let opts = EngineOptions {
        bitmap_quiet: Duration::from_millis(50),
        ..test_options()
    };
    let s = setup(LevelSpec::Raid5, 3, opts, 9).await;
    let generation = s.vol.status().generation;
    assert!(s.vol.status().dirty_regions > 0);
    let mut fenced = s.vol.fenced();
    let before = images(&s.members).await;
    let passed_before = passed(&s.members);

    s.vol.detach();
    assert!(s.vol.is_fenced());
    assert!(*fenced.borrow_and_update());
    assert_eq!(s.vol.status().state, VolumeState::Fenced);
    assert!(s.vol.fence_reason().unwrap().contains("detached"));
    assert_unavailable(
        s.vol
            .write(0, IoBuf::new_zeroed(4096), WriteFlags::default())
            .await,
        "write after detach",
    );
    assert_unavailable(s.vol.read(0, IoBuf::new_zeroed(4096)).await, "read");
    // Several sweeper periods: nothing is cleared, nothing written.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        s.vol.stop().await,
        Err(VolumeError::Fenced { .. })
    ));
    let Setup {
        members,
        vol,
        model,
    } = s;
    drop(vol);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(passed(&members), passed_before, "no member I/O at all");
    assert!(images(&members).await == before, "members untouched");
    let next = reassemble_healthy(&members, generation).await;
    assert!(
        next.status().dirty_regions > 0,
        "the bitmap stayed dirty for the next owner"
    );
    check_all(&next, &model).await;
}

#[tokio::test]
async fn dropping_a_volume_writes_nothing() {
    let opts = EngineOptions {
        bitmap_quiet: Duration::from_millis(50),
        ..test_options()
    };
    let s = setup(LevelSpec::Raid6, 5, opts, 10).await;
    let before = images(&s.members).await;
    let passed_before = passed(&s.members);
    let Setup { members, vol, .. } = s;
    drop(vol);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(passed(&members), passed_before);
    assert!(images(&members).await == before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detach_stops_a_running_rebuild_without_a_checkpoint() {
    // A slow rebuild (real clock, 2 MiB/s) with frequent checkpoints.
    let opts = EngineOptions {
        throttle: Throttle::BytesPerSec(2 << 20),
        clock: Arc::new(TokioClock::new()),
        checkpoint_bytes: 256 << 10,
        batch_bytes: 128 << 10,
        ..test_options()
    };
    let s = setup(LevelSpec::Raid5, 3, opts, 11).await;
    let vol = &s.vol;
    vol.fail_member(1).await.unwrap();
    vol.replace_member(1, s.members[1].clone()).await.unwrap();
    let progress = vol.start_rebuild().await.unwrap();
    // Let it copy (and checkpoint) a little.
    for _ in 0..1000 {
        if progress.borrow().bytes_done >= 512 << 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(progress.borrow().bytes_done > 0, "{:?}", *progress.borrow());
    let generation = vol.status().generation;
    vol.detach();
    let end = tokio::time::timeout(Duration::from_secs(5), vol.wait_rebuild())
        .await
        .unwrap()
        .unwrap();
    assert_ne!(end.phase, TaskPhase::Running);
    assert_ne!(end.phase, TaskPhase::Done);
    // Member I/O issued just before the detach may still land; then nothing more.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = images(&s.members).await;
    let passed_before = passed(&s.members);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let Setup { members, vol, .. } = s;
    drop(vol);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        passed(&members),
        passed_before,
        "no member I/O after detach"
    );
    assert!(images(&members).await == before);
    // The superblocks still say what they said at the detach.
    let rams: Vec<Arc<dyn BlockDevice>> = members
        .iter()
        .map(|m| m.ram.clone() as Arc<dyn BlockDevice>)
        .collect();
    let next = Volume::assemble_with(rams, test_options()).await.unwrap();
    let st = next.status();
    assert_eq!(st.generation, generation);
    assert_eq!(st.members[1].state, MemberState::Rebuilding);
}

#[tokio::test]
async fn an_unavailable_member_is_failed_like_an_unreachable_one() {
    let s = setup(LevelSpec::Raid5, 3, test_options(), 12).await;
    let generation = s.vol.status().generation;
    s.members[1].set(Refuse::WritesUnavailable);
    let data = vec![0x5Au8; 256 << 10];
    write(&s.vol, 0, &data).await;
    let st = s.vol.status();
    assert!(!s.vol.is_fenced());
    assert_eq!(st.state, VolumeState::Degraded);
    assert_eq!(st.members[1].state, MemberState::Failed);
    assert!(st.generation > generation, "the failure was committed");
    let mut model = s.model.clone();
    model[..data.len()].copy_from_slice(&data);
    check_all(&s.vol, &model).await;
}

/// A new owner assembles with `bump_generation_on_assemble`: every change of owner is a
/// new generation in the superblocks; a plain assembly does not bump it.
#[tokio::test]
async fn takeover_bumps_the_generation() {
    let rams: Vec<Arc<RamDevice>> = (0..3)
        .map(|i| Arc::new(RamDevice::new(format!("g{i}"), 64 * MIB)))
        .collect();
    let devs = || -> Vec<Arc<dyn BlockDevice>> { rams.iter().map(|r| r.clone() as _).collect() };
    let level: LevelSpec = "raid5".parse().unwrap();
    let old = Volume::create("gen", volume::VolumeConfig::new(level), devs(), vec![])
        .await
        .unwrap();
    let g0 = old.status().generation;
    // The previous owner lets go without writing (lease lost), the new one takes over.
    old.detach();
    drop(old);
    let opts = EngineOptions {
        bump_generation_on_assemble: true,
        ..EngineOptions::default()
    };
    let new = Volume::assemble_with(devs(), opts).await.unwrap();
    let g1 = new.status().generation;
    assert!(g1 > g0, "takeover generation {g1} must exceed {g0}");
    new.stop().await.unwrap();
    drop(new);
    let plain = Volume::assemble(devs()).await.unwrap();
    assert_eq!(
        plain.status().generation,
        g1,
        "a plain assembly keeps the generation"
    );
    plain.stop().await.unwrap();
}
