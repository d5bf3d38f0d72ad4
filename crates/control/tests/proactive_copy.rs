//! Proactive copy end to end on a local volume: drives with a service time (one I/O at a
//! time, like a drive's single queue) behind telemetry meters, a host load writing and
//! verifying through the volume, and the health monitor running the policy. A drive whose
//! service time grows is graded failing before it dies, copied onto the spare with no
//! degraded window, and host I/O never sees an error; a drive that is merely busy (extra
//! load sent to it directly) is not flagged.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use blockdev::{
    BlockDevice, BlockError, DeviceInfo, DeviceStats, IoBuf, IoFuture, RamDevice, WriteFlags,
};
use control::health::{HealthMonitor, ProactivePolicy};
use rand::{Rng, SeedableRng};
use telemetry::{Grade, MeteredDevice, MonotonicClock, PredictionConfig, Retention};
use tokio::sync::Semaphore;
use volume::{MemberState, Volume, VolumeState};

use common::watched_raid5;

const MIB: u64 = 1 << 20;

/// A RAM drive that serves one I/O at a time, each taking `service_us` (changeable: a
/// drive that degrades), and that can die (every I/O fails).
struct ServiceDrive {
    ram: RamDevice,
    queue: Semaphore,
    service_us: AtomicU64,
    dead: AtomicBool,
}

impl ServiceDrive {
    fn new(name: &str, size: u64, service_us: u64) -> Arc<ServiceDrive> {
        Arc::new(ServiceDrive {
            ram: RamDevice::new(name, size),
            queue: Semaphore::new(1),
            service_us: AtomicU64::new(service_us),
            dead: AtomicBool::new(false),
        })
    }

    async fn serve(&self) -> Result<(), BlockError> {
        if self.dead.load(Ordering::Acquire) {
            return Err(BlockError::Closed);
        }
        let _turn = self.queue.acquire().await.map_err(|_| BlockError::Closed)?;
        tokio::time::sleep(Duration::from_micros(
            self.service_us.load(Ordering::Relaxed),
        ))
        .await;
        Ok(())
    }
}

impl BlockDevice for ServiceDrive {
    fn info(&self) -> &DeviceInfo {
        self.ram.info()
    }
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::boxed(async move {
            self.serve().await?;
            self.ram.read(offset_bytes, buf).await
        })
    }
    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::boxed(async move {
            self.serve().await?;
            self.ram.write(offset_bytes, buf, flags).await
        })
    }
    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::boxed(async move {
            self.serve().await?;
            self.ram.flush().await
        })
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::boxed(async move {
            self.serve().await?;
            self.ram.write_zeroes(offset_bytes, len_bytes).await
        })
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.ram.discard(offset_bytes, len_bytes)
    }
    fn stats(&self) -> DeviceStats {
        self.ram.stats()
    }
}

struct Rig {
    drives: Vec<Arc<ServiceDrive>>,
    metered: Vec<Arc<MeteredDevice>>,
    volume: Arc<Volume>,
    monitor: Arc<HealthMonitor>,
}

/// RAID-5 over 4 drives plus one spare, all metered, watched by a monitor with the test
/// window (200 ms samples, 3 s window).
async fn rig() -> Rig {
    let drives: Vec<Arc<ServiceDrive>> = (0..5)
        .map(|i| ServiceDrive::new(&format!("d{i}"), 8 * MIB, 1_000))
        .collect();
    let config = PredictionConfig {
        window_ms: 3_000,
        min_ops_per_sample: 5,
        min_judged_samples: 8,
        ..PredictionConfig::default()
    };
    let monitor = Arc::new(HealthMonitor::new(
        config,
        ProactivePolicy::default(),
        Retention::default(),
        Arc::new(MonotonicClock::new()),
    ));
    let (volume, metered) = watched_raid5(
        &monitor,
        "v",
        drives
            .iter()
            .map(|d| d.clone() as Arc<dyn BlockDevice>)
            .collect(),
    )
    .await;
    Rig {
        drives,
        metered,
        volume,
        monitor,
    }
}

/// Host load: `workers` tasks, each writing random 16 KiB blocks into its own part of the
/// volume and reading them back, until `stop`. Returns (I/Os, errors, mismatches).
fn host_load(
    volume: Arc<Volume>,
    workers: usize,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(u64, Vec<String>)> {
    tokio::spawn(async move {
        let part = volume.size_bytes() / workers as u64;
        let tasks = (0..workers).map(|w| {
            let (volume, stop) = (volume.clone(), stop.clone());
            async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64);
                let mut model = vec![0u8; part as usize];
                let mut ios = 0u64;
                let mut problems = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    let block = 16 << 10;
                    let at = block * rng.random_range(0..part as usize / block);
                    let mut data = vec![0u8; block];
                    rng.fill(&mut data[..]);
                    let off = w as u64 * part + at as u64;
                    match volume
                        .write(off, IoBuf::from_slice(&data), WriteFlags::default())
                        .await
                    {
                        Ok(_) => model[at..at + block].copy_from_slice(&data),
                        Err(e) => problems.push(format!("write {off}: {e}")),
                    }
                    match volume.read(off, IoBuf::new_zeroed(block)).await {
                        Ok(b) if b[..] == model[at..at + block] => {}
                        Ok(_) => problems.push(format!("read {off}: wrong bytes")),
                        Err(e) => problems.push(format!("read {off}: {e}")),
                    }
                    ios += 2;
                }
                // Every byte this worker wrote, read back once more.
                let got = volume
                    .read(w as u64 * part, IoBuf::new_zeroed(part as usize))
                    .await;
                match got {
                    Ok(b) if b[..] == model[..] => {}
                    Ok(_) => problems.push(format!("worker {w}: final verify differs")),
                    Err(e) => problems.push(format!("worker {w}: final verify: {e}")),
                }
                (ios, problems)
            }
        });
        let all = futures::future::join_all(tasks).await;
        let ios = all.iter().map(|r| r.0).sum();
        let problems = all.into_iter().flat_map(|r| r.1).collect();
        (ios, problems)
    })
}

/// Runs the monitor every 200 ms for `secs`, with `each` called before every round.
async fn monitor_for(
    rig: &Rig,
    secs: f64,
    mut each: impl FnMut(f64),
) -> Vec<control::health::HealthEvent> {
    let start = std::time::Instant::now();
    let mut events = Vec::new();
    while start.elapsed().as_secs_f64() < secs {
        each(start.elapsed().as_secs_f64());
        events.extend(rig.monitor.tick().await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degrading_drive_is_copied_out_before_it_dies_and_host_io_sees_no_error() {
    let rig = rig().await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = host_load(rig.volume.clone(), 4, stop.clone());
    let victim = rig.drives[2].clone();
    // The schedule: healthy for 1.5 s, then 1 ms more service time every 300 ms.
    let mut flagged_at = None;
    let mut copied_at = None;
    let mut died_at = None;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(25) {
        let t = start.elapsed().as_secs_f64();
        if t > 1.5 {
            let steps = ((t - 1.5) / 0.3) as u64;
            victim
                .service_us
                .store(1_000 + 1_000 * steps.min(12), Ordering::Relaxed);
        }
        for e in rig.monitor.tick().await {
            if e.kind == "prediction" && e.grade == Some(Grade::Failing) && e.member == Some(2) {
                flagged_at.get_or_insert(t);
            }
            if e.kind == "proactive_copy_done" {
                copied_at.get_or_insert(t);
            }
            if e.kind == "proactive_copy_failed" {
                panic!("copy failed: {e:?}");
            }
        }
        // The drive dies for good once it was copied out (or at 20 s: too late).
        if (copied_at.is_some() || t > 20.0) && died_at.is_none() {
            victim.dead.store(true, Ordering::Release);
            died_at = Some(t);
        }
        if died_at.is_some_and(|d| t > d + 1.0) {
            break;
        }
        // During the copy the volume never degrades.
        assert_ne!(
            rig.volume.status().state,
            VolumeState::Degraded,
            "at {t:.1} s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Release);
    let (ios, problems) = load.await.unwrap();
    let flagged = flagged_at.expect("the degrading drive was graded failing");
    let copied = copied_at.expect("the proactive copy completed");
    let died = died_at.unwrap();
    assert!(
        flagged < copied && copied <= died,
        "flagged {flagged:.1} s, copied {copied:.1} s, died {died:.1} s"
    );
    assert!(problems.is_empty(), "host I/O problems: {problems:?}");
    assert!(ios > 100, "the load ran ({ios} I/Os)");
    let st = rig.volume.status();
    assert_eq!(st.state, VolumeState::Healthy);
    assert_eq!(
        st.members[2].device.as_deref(),
        Some("d4"),
        "the spare took slot 2"
    );
    let events = rig.monitor.events();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert!(kinds.contains(&"proactive_copy_started"), "{kinds:?}");
    // Only the degrading drive was ever flagged.
    for e in events
        .iter()
        .filter(|e| e.kind == "prediction" && e.grade != Some(Grade::Ok))
    {
        assert_eq!(e.device.as_deref(), Some("d2"), "{e:?}");
    }
    let _ = &rig.metered;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drive_that_is_merely_busy_is_not_flagged() {
    let rig = rig().await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = host_load(rig.volume.clone(), 4, stop.clone());
    // Extra load straight at member 1 (another user of the same drive): 6 readers.
    let busy = rig.metered[1].clone();
    let extra_stop = Arc::new(AtomicBool::new(false));
    let extra: Vec<_> = (0..6)
        .map(|i| {
            let (busy, s) = (busy.clone(), extra_stop.clone());
            tokio::spawn(async move {
                let mut buf = IoBuf::new_zeroed(4096);
                while !s.load(Ordering::Acquire) {
                    buf = busy.read(7 * MIB + i * 4096, buf).await.unwrap();
                }
            })
        })
        .collect();
    let events = monitor_for(&rig, 6.0, |_| {}).await;
    extra_stop.store(true, Ordering::Release);
    for e in extra {
        e.await.unwrap();
    }
    stop.store(true, Ordering::Release);
    let (_, problems) = load.await.unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let flagged: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "prediction" && e.grade != Some(Grade::Ok))
        .collect();
    assert!(flagged.is_empty(), "nothing flagged: {flagged:?}");
    // It was busy, and the model saw it: its latency was explained by its load.
    let grades = rig.monitor.grades();
    let g1 = grades.iter().find(|g| g.member == 1).unwrap();
    assert_eq!(g1.assessment.grade, Grade::Ok);
    assert!(
        g1.assessment
            .notes
            .iter()
            .any(|n| n.starts_with("busy, not slow")),
        "{:?}",
        g1.assessment
    );
    assert_eq!(
        rig.volume.status().spares[0].state,
        MemberState::Spare,
        "no copy started"
    );
}
