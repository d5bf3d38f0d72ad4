//! Background resync after assembly (`EngineOptions::background_resync`): the volume
//! serves I/O while the dirty regions are resynced; pending regions stay dirty until
//! their batch is done (a crash or a stop meanwhile leaves them for the next assembly).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use blockdev::{BlockDevice, FaultAction, FaultOps, FaultRule, IoBuf, WriteFlags};
use common::*;
use volume::{EngineOptions, LevelSpec, ResyncProgress, TaskPhase, Volume};

const SU: u64 = 4096;
const REGION: u64 = 64 << 10;
/// raid5 over 6 members (k = 5): a one-sector write would be read-modify-write.
const MEMBERS: usize = 6;
const MEMBER_BYTES: u64 = 3 * MIB;
/// Member data rows whose parity the "crash" left wrong (spread over the regions).
const TORN_ROWS: [u64; 6] = [5, 100, 300, 470, 500, 511];
const READ_DELAY: Duration = Duration::from_millis(60);

fn opts(background: bool) -> EngineOptions {
    EngineOptions {
        // One region per batch, one batch at a time: the resync takes a while.
        batch_bytes: REGION,
        inflight_batches: 1,
        background_resync: background,
        ..test_options()
    }
}

struct Setup {
    m: Members,
    model: Vec<u8>,
    data_offset: u64,
    regions: u64,
}

/// A raid5 volume full of random data, "crashed" (dropped without stop: every region
/// dirty) with the parity of `TORN_ROWS` wrong, as a torn stripe write leaves it.
async fn crashed_volume(seed: u64) -> Setup {
    let m = ram_members(MEMBERS, MEMBER_BYTES);
    let vol = Volume::create(
        "bg",
        config(LevelSpec::Raid5, SU, REGION),
        m.devs.clone(),
        vec![],
    )
    .await
    .unwrap();
    let mut r = rng(seed);
    let model = random_bytes(&mut r, vol.size_bytes() as usize);
    write(&vol, 0, &model).await;
    let st = vol.status();
    let (data_offset, regions) = (st.data_offset_bytes, st.region_count);
    assert_eq!(vol.dirty_regions().len() as u64, regions);
    drop(vol);
    let n = MEMBERS as u64;
    for row in TORN_ROWS {
        let parity_member = (n - 1 - row % n) as usize;
        let junk = random_bytes(&mut r, SU as usize);
        m.ram[parity_member]
            .write(
                data_offset + row * SU,
                IoBuf::from_slice(&junk),
                WriteFlags::default(),
            )
            .await
            .unwrap();
    }
    Setup {
        m,
        model,
        data_offset,
        regions,
    }
}

/// Slows every member data read down (the resync reads one region per batch).
fn slow_reads(s: &Setup) {
    for f in &s.m.faults {
        f.add(
            FaultRule::new(FaultOps::READ, FaultAction::Delay(READ_DELAY))
                .in_range(s.data_offset..u64::MAX),
        );
    }
}

fn fast_reads(s: &Setup) {
    for f in &s.m.faults {
        f.clear();
    }
}

fn progress(vol: &Volume) -> ResyncProgress {
    vol.status().resync.expect("background resync progress")
}

/// Waits until the resync finished some regions but not all of them.
async fn wait_half_way(vol: &Volume) -> ResyncProgress {
    let t0 = Instant::now();
    loop {
        let p = progress(vol);
        if p.regions_pending > 0 && p.regions_pending < p.regions {
            return p;
        }
        assert!(
            p.regions_pending > 0,
            "resync finished before it could be observed: {p:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(10), "no progress: {p:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Regions still pending are the highest ones (the resync goes up in order): all of them
/// must be dirty.
fn assert_pending_dirty(dirty: &[usize], regions: u64, pending: u64) {
    for r in (regions - pending) as usize..regions as usize {
        assert!(
            dirty.contains(&r),
            "pending region {r} not dirty: {dirty:?}"
        );
    }
}

async fn assert_consistent(vol: &Volume, model: &[u8]) {
    let report = vol.scrub().await.unwrap();
    assert_eq!(report.mismatches, 0, "{report:?}");
    assert!(report.stripes_checked > 0);
    check_all(vol, model).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_is_served_while_the_resync_runs_in_the_background() {
    let mut s = crashed_volume(1).await;
    slow_reads(&s);
    let t0 = Instant::now();
    let vol = Volume::assemble_with(s.m.devs.clone(), opts(true))
        .await
        .unwrap();
    let assembled = t0.elapsed();
    let st = vol.status();
    assert!(st.last_resync.is_none(), "assembly waited for the resync");
    let p = st.resync.clone().unwrap();
    assert_eq!(p.regions, s.regions);
    assert!(p.regions_pending > 0, "{p:?}");
    assert_eq!(p.phase, Some(TaskPhase::Running));
    assert!(p.bytes_total > 0);
    // A scrub would judge torn rows itself: refused while the resync runs.
    assert!(vol.scrub().await.is_err());

    // Writes to rows the resync has not reached: partial (reconstruct-write on pending
    // rows) and full-row, some on torn rows.
    let row_bytes = (MEMBERS as u64 - 1) * SU;
    let mut r = rng(7);
    let partial = [
        (500 * row_bytes + 512, 512usize),
        (511 * row_bytes + 3 * SU + 1024, 2048),
        (470 * row_bytes, 4096),
        (480 * row_bytes + 100 * 512, 512),
    ];
    for (off, len) in partial {
        let data = random_bytes(&mut r, len);
        write(&vol, off, &data).await;
        s.model[off as usize..off as usize + len].copy_from_slice(&data);
    }
    let full = 490 * row_bytes;
    let data = random_bytes(&mut r, 2 * row_bytes as usize);
    write(&vol, full, &data).await;
    s.model[full as usize..full as usize + data.len()].copy_from_slice(&data);
    // Reads meanwhile.
    let tail = s.model.len() - MIB as usize;
    assert_eq!(read(&vol, tail as u64, MIB as usize).await, s.model[tail..]);

    // The sweeper clears finished regions only.
    vol.sweep_bitmap(true).await.unwrap();
    let pending = progress(&vol).regions_pending;
    assert!(pending > 0, "the resync ended too early for this test");
    assert_pending_dirty(&vol.dirty_regions(), s.regions, pending);

    let t1 = Instant::now();
    let report = loop {
        if let Some(r) = vol.status().last_resync {
            break r;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(15),
            "{:?}",
            progress(&vol)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let p = progress(&vol);
    assert_eq!(p.phase, Some(TaskPhase::Done));
    assert_eq!(p.regions_pending, 0);
    assert_eq!(p.bytes_done, p.bytes_total);
    assert_eq!(report.regions, s.regions);
    let resynced = t0.elapsed();
    // Row 470 was made consistent by the reconstruct-write of a whole chunk before the
    // resync got there (a read-modify-write would have carried its bad parity over); the
    // partial writes to rows 500 and 511 left the rest of their parity for the resync.
    assert_eq!(
        report.stripes_rewritten,
        TORN_ROWS.len() as u64 - 1,
        "{report:?}"
    );
    eprintln!("assembly {assembled:?}, background resync done after {resynced:?}: {report:?}");
    assert!(
        assembled * 4 < resynced,
        "assembly {assembled:?} waited for the resync ({resynced:?})"
    );
    fast_reads(&s);
    assert_consistent(&vol, &s.model).await;
    // Now everything may be cleared.
    vol.sweep_bitmap(true).await.unwrap();
    assert!(vol.dirty_regions().is_empty());
    vol.stop().await.unwrap();
    assert!(vol.status().clean);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_the_background_resync_leaves_pending_regions_dirty() {
    let s = crashed_volume(2).await;
    slow_reads(&s);
    let vol = Volume::assemble_with(s.m.devs.clone(), opts(true))
        .await
        .unwrap();
    wait_half_way(&vol).await;
    vol.sweep_bitmap(true).await.unwrap();
    let pending = progress(&vol).regions_pending;
    let dirty = vol.dirty_regions();
    assert_pending_dirty(&dirty, s.regions, pending);
    assert!(
        (dirty.len() as u64) < s.regions,
        "finished regions are cleared: {dirty:?}"
    );
    // Crash: nothing more is written.
    drop(vol);
    fast_reads(&s);

    let vol = Volume::assemble_with(s.m.devs.clone(), opts(false))
        .await
        .unwrap();
    let again = vol.dirty_regions();
    assert_eq!(
        again, dirty,
        "the on-disk bitmap is what was dirty at the crash"
    );
    let report = vol.status().last_resync.unwrap();
    assert_eq!(report.regions, dirty.len() as u64);
    assert!(report.stripes_rewritten >= 1, "{report:?}");
    assert_consistent(&vol, &s.model).await;
    vol.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_during_the_background_resync_keeps_the_rest_dirty() {
    let s = crashed_volume(3).await;
    slow_reads(&s);
    let vol = Volume::assemble_with(s.m.devs.clone(), opts(true))
        .await
        .unwrap();
    wait_half_way(&vol).await;
    let t0 = Instant::now();
    vol.stop().await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let st = vol.status();
    let p = st.resync.unwrap();
    assert_eq!(p.phase, Some(TaskPhase::Stopped));
    assert!(p.regions_pending > 0);
    assert!(!st.clean, "a stop with regions left to resync is not clean");
    assert!(st.last_resync.is_none());
    drop(vol);
    fast_reads(&s);

    let vol = Volume::assemble_with(s.m.devs.clone(), opts(false))
        .await
        .unwrap();
    let dirty = vol.dirty_regions();
    assert_pending_dirty(&dirty, s.regions, p.regions_pending);
    let report = vol.status().last_resync.unwrap();
    assert_eq!(report.regions, dirty.len() as u64);
    assert!(
        report.regions < s.regions,
        "finished regions were cleared: {report:?}"
    );
    assert_consistent(&vol, &s.model).await;
    vol.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detach_during_the_background_resync_ends_it_without_member_writes() {
    let s = crashed_volume(4).await;
    slow_reads(&s);
    let vol = Volume::assemble_with(s.m.devs.clone(), opts(true))
        .await
        .unwrap();
    wait_half_way(&vol).await;
    vol.detach();
    let writes = || -> Vec<u64> { s.m.ram.iter().map(|r| r.stats().write_ops).collect() };
    let before = writes();
    // Longer than a resync batch (one delayed read, then the parity writes).
    tokio::time::sleep(READ_DELAY * 5).await;
    assert_eq!(writes(), before, "member writes after detach");
    let p = progress(&vol);
    assert_eq!(p.phase, Some(TaskPhase::Stopped));
    assert!(p.regions_pending > 0);
    assert!(
        vol.stop().await.is_err(),
        "a detached volume cannot stop cleanly"
    );
    drop(vol);
    fast_reads(&s);
    let vol = Volume::assemble_with(s.m.devs.clone(), opts(false))
        .await
        .unwrap();
    assert_pending_dirty(&vol.dirty_regions(), s.regions, p.regions_pending);
    assert_consistent(&vol, &s.model).await;
    vol.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_reads_of_pending_chunks_use_the_copy_the_resync_keeps() {
    // raid1 over 3 members: copy j of chunk x is member j, row x.
    let m = ram_members(3, MEMBER_BYTES);
    let vol = Volume::create(
        "m",
        config(LevelSpec::Raid1, SU, REGION),
        m.devs.clone(),
        vec![],
    )
    .await
    .unwrap();
    let mut r = rng(5);
    let model = random_bytes(&mut r, vol.size_bytes() as usize);
    write(&vol, 0, &model).await;
    let st = vol.status();
    let s = Setup {
        m,
        model,
        data_offset: st.data_offset_bytes,
        regions: st.region_count,
    };
    drop(vol);
    // A torn mirror write: the other copies of the last chunks differ from copy 0.
    let chunks = st.member_data_bytes / SU;
    let torn: Vec<u64> = (chunks - 8..chunks).collect();
    for &x in &torn {
        for j in 1..3 {
            let junk = random_bytes(&mut r, SU as usize);
            s.m.ram[j]
                .write(
                    s.data_offset + x * SU,
                    IoBuf::from_slice(&junk),
                    WriteFlags::default(),
                )
                .await
                .unwrap();
        }
    }
    slow_reads(&s);
    let vol = Volume::assemble_with(s.m.devs.clone(), opts(true))
        .await
        .unwrap();
    for &x in &torn {
        // A request starting at chunk x prefers copy x % 3 when nothing is pending.
        let got = read(&vol, x * SU, SU as usize).await;
        assert!(progress(&vol).regions_pending > 0);
        assert_eq!(
            got,
            s.model[(x * SU) as usize..((x + 1) * SU) as usize],
            "chunk {x}"
        );
    }
    let t0 = Instant::now();
    while vol.status().last_resync.is_none() {
        assert!(t0.elapsed() < Duration::from_secs(15));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fast_reads(&s);
    assert_consistent(&vol, &s.model).await;
    vol.stop().await.unwrap();
}
