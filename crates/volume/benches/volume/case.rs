//! One case: a layout on one kind of media. Measures the members alone, then the volume
//! built on the same members (healthy, degraded, rebuilding), in that order.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench::Pattern;
use blockdev::BlockDevice;
use volume::{EngineOptions, LevelSpec, TaskPhase, Throttle, Volume, VolumeConfig};

use crate::Error;
use crate::measure::{Measured, concurrent, load, single};
use crate::members::{self, Media};
use crate::result::{CaseResult, Rebuild};

/// Knobs shared by every case.
#[derive(Clone, Debug)]
pub struct Settings {
    pub member_bytes: u64,
    pub stripe_unit_bytes: u64,
    pub runtime_ms: u64,
    /// Sequential loads: volume I/Os in flight (each touches every member once), and the
    /// same per member for the baseline.
    pub seq_qd: u32,
    /// 4 KiB random writes: volume queue depth; the baseline spreads it over the members.
    pub rand_qd: u32,
    /// Submitting threads (bench jobs) on the volume; the queue depths above are split
    /// over them.
    pub vol_jobs: u32,
    /// Overrides `EngineOptions::batch_bytes` (rebuild batch per member).
    pub rebuild_batch_bytes: Option<u64>,
    /// Steps to run (`base`, `write`, `randwrite`, `read`, `degraded`, `rebuild`); the
    /// others report zeroes. For profiling one path.
    pub steps: Vec<String>,
    /// The throttled rebuild is stopped after this long (its rate is what counts).
    pub rebuild_cap: Duration,
}

impl Settings {
    pub fn on(&self, step: &str) -> bool {
        self.steps.iter().any(|s| s == step)
    }
}

/// A layout to measure.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub level: LevelSpec,
    pub members: usize,
}

impl Layout {
    pub fn parse(s: &str) -> Option<Layout> {
        let level: LevelSpec = s.trim().parse().ok()?;
        let members = match level {
            LevelSpec::Raid5 => 4,
            LevelSpec::Raid6 => 6,
            LevelSpec::Erasure { k, m } => k + m,
            _ => return None,
        };
        Some(Layout { level, members })
    }
}

fn options(throttle: Throttle, s: &Settings) -> EngineOptions {
    let d = EngineOptions::default();
    EngineOptions {
        throttle,
        // The bench starts rebuilds itself, after measuring the degraded volume.
        auto_rebuild: false,
        batch_bytes: s.rebuild_batch_bytes.unwrap_or(d.batch_bytes),
        ..d
    }
}

/// Runs one case end to end; member files go in `dir`.
pub async fn run(
    media: Media,
    layout: Layout,
    s: &Settings,
    dir: &Path,
) -> Result<CaseResult, Error> {
    let n = layout.members;
    let tag = format!("{}-{}", media.name(), layout.level).replace('+', "p");
    eprintln!(
        "[{tag}] preparing {n} members + 2 spares of {} MiB",
        s.member_bytes >> 20
    );
    let all = members::make(media, dir, &tag, n + 2, s.member_bytes).await?;
    let devs: Vec<Arc<dyn BlockDevice>> = all.devs[..n].to_vec();
    let su = s.stripe_unit_bytes;
    let t = s.runtime_ms;

    // 1. The members alone, all at once (again after the volume is gone: see below).
    eprintln!("[{tag}] members alone");
    let qd_each = s.rand_qd.div_ceil(n as u32).max(1);
    let before = if s.on("base") {
        baseline(&devs, s, qd_each).await?
    } else {
        Default::default()
    };

    // 2. The volume on the same members (they hold zeroes: parity is consistent).
    let mut cfg = VolumeConfig::new(layout.level);
    cfg.stripe_unit_bytes = su;
    cfg.assume_clean = true;
    cfg.force = true;
    cfg.options = options(Throttle::Unlimited, s);
    let spares = all.devs[n..].to_vec();
    let vol = Arc::new(Volume::create(&tag, cfg, devs.clone(), spares).await?);
    let params = vol.status().layout;
    let (k, m) = (params.k, params.m);
    let full = k as u64 * su;
    let vdev: Arc<dyn BlockDevice> = vol.clone();
    eprintln!("[{tag}] volume {k}+{m}: full-stripe write, 4K randwrite, healthy read");
    // The volume gets as many submitting threads as there are cores (the members alone get
    // one each); the queue depth is split over them.
    let vload = |pattern, bs, qd: u32| {
        let mut c = load(pattern, bs, qd.div_ceil(s.vol_jobs).max(1), t);
        c.jobs = s.vol_jobs;
        c
    };
    let step = |name: &str, cfg: bench::BenchConfig| {
        let vdev = vdev.clone();
        let on = s.on(name);
        async move {
            if on {
                single(&vdev, &cfg).await
            } else {
                Ok(Measured::default())
            }
        }
    };
    let full_stripe_write = step("write", vload(Pattern::Write, full, s.seq_qd)).await?;
    let randwrite = step("randwrite", vload(Pattern::RandWrite, 4096, s.rand_qd)).await?;
    let read_healthy = step("read", vload(Pattern::Read, full, s.seq_qd)).await?;

    // 3. Degraded: member 1 failed; a spare takes its slot but is not rebuilt yet, so
    //    every read of its chunks reconstructs.
    vol.fail_member(1).await?;
    eprintln!("[{tag}] degraded read ({:?})", vol.status().state);
    let read_degraded = step("degraded", vload(Pattern::Read, full, s.seq_qd)).await?;
    drop(vdev);
    // Rebuilds onto the spares (the second after re-assembly with default options).
    let (rebuild_unlimited, rebuild_default) = if s.on("rebuild") {
        rebuilds(vol, &all.devs, s, &tag).await?
    } else {
        vol.stop().await?;
        Default::default()
    };

    // 4. The members alone again: the baseline brackets the volume's measurements, so a
    //    neighbour's load that came or went shows up as a before/after spread.
    eprintln!("[{tag}] members alone, again");
    let after = if s.on("base") {
        baseline(&devs, s, qd_each).await?
    } else {
        Default::default()
    };
    let [
        base_seq_write,
        base_seq_read,
        base_randwrite,
        base_randrw,
        base_one_seq_write,
    ] = std::array::from_fn(|i| Measured::mean_of(before[i].clone(), after[i].clone()));

    Ok(CaseResult {
        media,
        layout,
        k,
        m,
        direct: all.direct,
        uring: all.uring,
        base_seq_write,
        base_seq_read,
        base_randwrite,
        base_randrw,
        base_one_seq_write,
        full_stripe_write,
        randwrite,
        read_healthy,
        read_degraded,
        rebuild_unlimited,
        rebuild_default,
        base_rand_qd_each: qd_each,
    })
}

/// Rebuilds onto a spare: unlimited on `vol` (member 1 already failed), then at the default
/// throttle after re-assembly with default options (member 2 failed).
async fn rebuilds(
    vol: Arc<Volume>,
    all: &[Arc<dyn BlockDevice>],
    s: &Settings,
    tag: &str,
) -> Result<(Rebuild, Rebuild), Error> {
    eprintln!("[{tag}] rebuild, unlimited");
    let unlimited = rebuild(&vol, "unlimited", Duration::from_secs(600)).await?;
    let keep: Vec<Arc<dyn BlockDevice>> = current_devices(&vol, all);
    vol.stop().await?;
    drop(vol);

    let default_throttle = EngineOptions::default().throttle;
    let vol = Volume::assemble_with(keep, options(default_throttle, s)).await?;
    vol.fail_member(2).await?;
    eprintln!(
        "[{tag}] rebuild, default throttle ({default_throttle:?}), at most {:?}",
        s.rebuild_cap
    );
    let label = format!("{default_throttle:?}");
    let default = rebuild(&vol, &label, s.rebuild_cap).await?;
    vol.stop().await?;
    Ok((unlimited, default))
}

/// The members alone: seq write, seq read, 4K randwrite, 4K 50/50 randrw (all members at
/// once), then one member's seq write alone.
async fn baseline(
    devs: &[Arc<dyn BlockDevice>],
    s: &Settings,
    qd_each: u32,
) -> Result<[Measured; 5], Error> {
    let (su, t) = (s.stripe_unit_bytes, s.runtime_ms);
    let mixed = Pattern::RandRw { read_percent: 50 };
    Ok([
        concurrent(devs, &load(Pattern::Write, su, s.seq_qd, t)).await?,
        concurrent(devs, &load(Pattern::Read, su, s.seq_qd, t)).await?,
        concurrent(devs, &load(Pattern::RandWrite, 4096, qd_each, t)).await?,
        concurrent(devs, &load(mixed, 4096, qd_each, t)).await?,
        single(&devs[0], &load(Pattern::Write, su, s.seq_qd, t)).await?,
    ])
}

/// The devices the volume uses now (members and spares), for re-assembly.
fn current_devices(vol: &Volume, all: &[Arc<dyn BlockDevice>]) -> Vec<Arc<dyn BlockDevice>> {
    let st = vol.status();
    let names: Vec<String> = st
        .members
        .iter()
        .chain(st.spares.iter())
        .filter_map(|m| m.device.clone())
        .collect();
    all.iter()
        .filter(|d| names.contains(&d.info().name))
        .cloned()
        .collect()
}

/// Starts a rebuild and waits for it (at most `cap`; the caller stops the volume next).
async fn rebuild(vol: &Volume, throttle: &str, cap: Duration) -> Result<Rebuild, Error> {
    let cpu0 = bench::CpuTime::now();
    let t0 = Instant::now();
    let mut rx = vol.start_rebuild().await?;
    let finished = tokio::time::timeout(cap, rx.wait_for(|p| p.phase != TaskPhase::Running))
        .await
        .is_ok();
    let elapsed = t0.elapsed().as_secs_f64();
    let p = rx.borrow().clone();
    // An unfinished rebuild is cancelled by the caller's `Volume::stop`, not by
    // `stop_rebuild`: `stop_rebuild` then `stop` awaits the task's JoinHandle twice and
    // panics ("JoinHandle polled after completion"; reported to the engine's owner).
    let cpu_s = bench::CpuTime::now().since(&cpu0).total().as_secs_f64();
    if let TaskPhase::Failed(why) = &p.phase {
        return Err(format!("rebuild failed: {why}").into());
    }
    Ok(Rebuild {
        throttle: throttle.to_string(),
        bytes_done: p.bytes_done,
        bytes_total: p.bytes_total,
        elapsed_s: elapsed,
        mb_per_s: p.bytes_done as f64 / elapsed.max(1e-9) / 1e6,
        engine_mb_per_s: p.rate_bytes_per_sec / 1e6,
        finished,
        phase: format!("{:?}", p.phase),
        cpu_s,
        busy_fraction: p.busy_fraction,
    })
}
