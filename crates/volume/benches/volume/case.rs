//! One case: a layout on one kind of media. Measures the members alone, then the volume
//! built on the same members (healthy, degraded, rebuilding), in that order.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench::Pattern;
use blockdev::BlockDevice;
use serde_json::{Value, json};
use volume::{EngineOptions, LevelSpec, TaskPhase, Throttle, Volume, VolumeConfig};

use crate::Error;
use crate::measure::{Measured, concurrent, load, round, single};
use crate::members::{self, Media};

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
    /// The throttled rebuild is stopped after this long (its rate is what counts).
    pub rebuild_cap: Duration,
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

/// Everything measured in one case.
pub struct CaseResult {
    pub media: Media,
    pub layout: Layout,
    pub k: usize,
    pub m: usize,
    pub direct: bool,
    pub uring: bool,
    pub base_seq_write: Measured,
    pub base_seq_read: Measured,
    pub base_randwrite: Measured,
    pub base_randrw: Measured,
    pub base_one_seq_write: Measured,
    pub full_stripe_write: Measured,
    pub randwrite: Measured,
    pub read_healthy: Measured,
    pub read_degraded: Measured,
    pub rebuild_unlimited: Rebuild,
    pub rebuild_default: Rebuild,
    pub base_rand_qd_each: u32,
}

/// One rebuild onto a spare.
#[derive(Clone, Debug, Default)]
pub struct Rebuild {
    pub throttle: String,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub elapsed_s: f64,
    /// Our own figure: bytes done / wall time.
    pub mb_per_s: f64,
    /// The engine's `RebuildProgress::rate_bytes_per_sec`.
    pub engine_mb_per_s: f64,
    pub finished: bool,
    pub phase: String,
    pub cpu_s: f64,
}

impl Rebuild {
    fn json(&self) -> Value {
        json!({
            "throttle": self.throttle,
            "bytes_done": self.bytes_done,
            "bytes_total": self.bytes_total,
            "elapsed_s": round(self.elapsed_s),
            "mb_per_s": round(self.mb_per_s),
            "engine_mb_per_s": round(self.engine_mb_per_s),
            "finished": self.finished,
            "phase": self.phase,
            "cpu_s": round(self.cpu_s),
        })
    }
}

/// A named ratio for the table and the JSON.
pub struct Ratio {
    pub key: &'static str,
    pub what: String,
    pub value: f64,
}

impl CaseResult {
    /// Member I/Os of one small read-modify-write: read and write one data chunk and
    /// every parity chunk.
    pub fn rmw_ios(&self) -> f64 {
        2.0 * (1 + self.m) as f64
    }

    pub fn ratios(&self) -> Vec<Ratio> {
        let n = self.layout.members as f64;
        let k = self.k as f64;
        let div = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let rmw = self.rmw_ios();
        let one_member_write = self.base_one_seq_write.mb_per_s;
        vec![
            Ratio {
                key: "full_stripe_write_vs_members_sum",
                what: "full-stripe write / members' seq write sum (raw; at most k/n)".into(),
                value: div(
                    self.full_stripe_write.mb_per_s,
                    self.base_seq_write.mb_per_s,
                ),
            },
            Ratio {
                key: "full_stripe_write_vs_members_sum_k_over_n",
                what: format!(
                    "full-stripe write / (members' sum x {}/{}) (efficiency; 1 = member speed)",
                    self.k, self.layout.members
                ),
                value: div(
                    self.full_stripe_write.mb_per_s,
                    self.base_seq_write.mb_per_s * k / n,
                ),
            },
            Ratio {
                key: "randwrite_vs_member_write_iops_over_rmw",
                what: format!(
                    "4K randwrite IOPS / (members' randwrite IOPS sum / {rmw:.0}) (RMW limit)"
                ),
                value: div(self.randwrite.iops, self.base_randwrite.iops / rmw),
            },
            Ratio {
                key: "randwrite_vs_member_mixed_iops_over_rmw",
                what: format!("4K randwrite IOPS / (members' 50/50 randrw IOPS sum / {rmw:.0})"),
                value: div(self.randwrite.iops, self.base_randrw.iops / rmw),
            },
            Ratio {
                key: "healthy_read_vs_members_read_sum",
                what: "healthy seq read / members' seq read sum".into(),
                value: div(self.read_healthy.mb_per_s, self.base_seq_read.mb_per_s),
            },
            Ratio {
                key: "degraded_read_vs_healthy",
                what: "degraded seq read / healthy seq read (same volume)".into(),
                value: div(self.read_degraded.mb_per_s, self.read_healthy.mb_per_s),
            },
            Ratio {
                key: "rebuild_unlimited_vs_member_write",
                what: "unlimited rebuild / one member's seq write alone".into(),
                value: div(self.rebuild_unlimited.mb_per_s, one_member_write),
            },
            Ratio {
                key: "rebuild_default_vs_member_write",
                what: "default-throttle rebuild / one member's seq write alone (issue: 0.2)".into(),
                value: div(self.rebuild_default.mb_per_s, one_member_write),
            },
            Ratio {
                key: "rebuild_default_vs_unlimited",
                what: "default-throttle rebuild / unlimited rebuild".into(),
                value: div(
                    self.rebuild_default.mb_per_s,
                    self.rebuild_unlimited.mb_per_s,
                ),
            },
        ]
    }

    pub fn errors(&self) -> u64 {
        [
            &self.base_seq_write,
            &self.base_seq_read,
            &self.base_randwrite,
            &self.base_randrw,
            &self.base_one_seq_write,
            &self.full_stripe_write,
            &self.randwrite,
            &self.read_healthy,
            &self.read_degraded,
        ]
        .iter()
        .map(|m| m.errors)
        .sum()
    }

    pub fn json(&self) -> Value {
        json!({
            "media": self.media.name(),
            "level": self.layout.level.to_string(),
            "members": self.layout.members,
            "k": self.k,
            "m": self.m,
            "o_direct": self.direct,
            "io_uring": self.uring,
            "members_alone": {
                "seq_write": self.base_seq_write.json(),
                "seq_read": self.base_seq_read.json(),
                "randwrite_4k": self.base_randwrite.json(),
                "randrw50_4k": self.base_randrw.json(),
                "rand_qd_per_member": self.base_rand_qd_each,
                "one_member_seq_write": self.base_one_seq_write.json(),
            },
            "volume": {
                "full_stripe_write": self.full_stripe_write.json(),
                "randwrite_4k": self.randwrite.json(),
                "seq_read_healthy": self.read_healthy.json(),
                "seq_read_degraded": self.read_degraded.json(),
                "rebuild_unlimited": self.rebuild_unlimited.json(),
                "rebuild_default_throttle": self.rebuild_default.json(),
            },
            "rmw_member_ios": self.rmw_ios(),
            "ratios": self.ratios().iter().map(|r| (r.key.to_string(), json!(round(r.value))))
                .collect::<serde_json::Map<_, _>>(),
        })
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
    let before = baseline(&devs, s, qd_each).await?;

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
    let full_stripe_write = single(&vdev, &vload(Pattern::Write, full, s.seq_qd)).await?;
    let randwrite = single(&vdev, &vload(Pattern::RandWrite, 4096, s.rand_qd)).await?;
    let read_healthy = single(&vdev, &vload(Pattern::Read, full, s.seq_qd)).await?;

    // 3. Degraded: member 1 failed; a spare takes its slot but is not rebuilt yet, so
    //    every read of its chunks reconstructs.
    vol.fail_member(1).await?;
    eprintln!("[{tag}] degraded read ({:?})", vol.status().state);
    let read_degraded = single(&vdev, &vload(Pattern::Read, full, s.seq_qd)).await?;

    // 4. Rebuild onto the spare, unlimited.
    eprintln!("[{tag}] rebuild, unlimited");
    let rebuild_unlimited = rebuild(&vol, "unlimited", Duration::from_secs(600)).await?;
    let keep: Vec<Arc<dyn BlockDevice>> = current_devices(&vol, &all.devs);
    drop(vdev);
    vol.stop().await?;
    drop(vol);

    // 5. Again at the default throttle, after re-assembly with default options.
    let default_throttle = EngineOptions::default().throttle;
    let vol = Volume::assemble_with(keep, options(default_throttle, s)).await?;
    vol.fail_member(2).await?;
    eprintln!(
        "[{tag}] rebuild, default throttle ({default_throttle:?}), at most {:?}",
        s.rebuild_cap
    );
    let label = format!("{default_throttle:?}");
    let rebuild_default = rebuild(&vol, &label, s.rebuild_cap).await?;
    vol.stop().await?;
    drop(vol);

    // 6. The members alone again: the baseline brackets the volume's measurements, so a
    //    neighbour's load that came or went shows up as a before/after spread.
    eprintln!("[{tag}] members alone, again");
    let after = baseline(&devs, s, qd_each).await?;
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

/// Starts a rebuild and waits for it (at most `cap`, then stops it).
async fn rebuild(vol: &Volume, throttle: &str, cap: Duration) -> Result<Rebuild, Error> {
    let cpu0 = bench::CpuTime::now();
    let t0 = Instant::now();
    let mut rx = vol.start_rebuild().await?;
    let finished = tokio::time::timeout(cap, rx.wait_for(|p| p.phase != TaskPhase::Running))
        .await
        .is_ok();
    let elapsed = t0.elapsed().as_secs_f64();
    let p = rx.borrow().clone();
    if !finished {
        vol.stop_rebuild().await;
    }
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
    })
}
