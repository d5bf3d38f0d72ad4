//! Log layout vs in place, side by side in one run, on the same kind of members, for each
//! member medium of `LOG_BENCH_MEDIA` (default `file,ram`):
//!
//! - `file`: real files opened with O_DIRECT (io_uring) in `LOG_BENCH_DIR` (default
//!   `<target>/bench/log_layout_members`, so on the disk the build uses, not a tmpfs),
//!   written out whole first (allocated, like a drive's blocks) and reused by every case:
//!   device-bound members, the medium the goals are about. The JSON says whether
//!   the filesystem took O_DIRECT (`o_direct`); a buffered fallback is reported, not hidden.
//! - `ram`: RAM disks: the layouts' own CPU costs without device time.
//!
//! Per medium, `LOG_BENCH_ROUNDS` rounds (default 3), each creating every layout on fresh
//! members; ratios are taken within a round and their medians reported (the machine is
//! shared: `load` is /proc/loadavg before and after each medium).
//!
//! 1. 4 KiB random write IOPS, RAID-5 on 4 members, queue depth 32: in place, log
//!    (compression off) and log (lz4); the load's data is the bench crate's pseudo-random
//!    stamps (incompressible) and is verified afterwards. Ratio: log / in place (the
//!    issue's goal: >= 2).
//!    Then (unless `LOG_BENCH_FULL=0`) the volume is filled to 80 % sequentially,
//!    random writes of half that range warm it up, and the random writes run again over
//!    the filled range (the log layout collecting garbage):
//!    ratio to the fresh rate (the goal for the log layout: >= 0.5).
//! 2. 4 KiB random read latency at QD1 over a prefilled 32 MiB range: log (lz4) vs in
//!    place (overhead goal: <= 20 %).
//! 3. Compression of the generated corpora (`log_layout/corpus.rs`: text, JSON, logs,
//!    database pages; documented there) written into log volumes with lz4 and zstd:3 on
//!    RAM members: the volume's ratio (logical / stored bytes) and write throughput,
//!    against the `lz4 -1` / `zstd -3` command-line tools compressing the same 4 KiB
//!    blocks one by one (a sample of blocks, one process each; skipped if the tool is
//!    missing).
//!
//! Output: JSON on stdout and in `<target>/bench/log_layout.json` (or
//! `LOG_BENCH_OUT`), a summary on stderr. Knobs: `LOG_BENCH_MEDIA`, `LOG_BENCH_ROUNDS`,
//! `LOG_BENCH_FULL`, `LOG_BENCH_RUNTIME_MS` (default 2000), `LOG_BENCH_MEMBER_MIB`
//! (default 128), `LOG_BENCH_QD` (default 32), `LOG_BENCH_DIR`, `LOG_BENCH_COMPRESSION`
//! (default 1; 0 skips step 3).

#[path = "log_layout/corpus.rs"]
mod corpus;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Instant;

use bench::{BenchConfig, Pattern, Progress, Report};
use blockdev::{BlockDevice, FileDevice, IoBuf, OpenOptions, RamDevice, WriteFlags};
use serde_json::{Value, json};
use volume::{Compression, EngineOptions, LevelSpec, LogConfig, Volume, VolumeConfig};

type Error = Box<dyn std::error::Error + Send + Sync>;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn target_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().map_or_else(|| tmp.clone(), PathBuf::from)
}

/// What the members of a case are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Medium {
    Ram,
    File,
}

impl Medium {
    fn name(self) -> &'static str {
        match self {
            Medium::Ram => "ram",
            Medium::File => "file",
        }
    }
}

/// Members of one case.
struct Members {
    devs: Vec<Arc<dyn BlockDevice>>,
    o_direct: bool,
}

fn member_path(st: &Settings, i: usize) -> PathBuf {
    st.dir.join(format!("member{i}.img"))
}

/// Writes the file members out whole (zeroes, synced) once per medium: every case then
/// runs on allocated blocks, as on a drive, instead of paying the filesystem's block
/// allocation on first writes (which would slow the fresh runs and flatter the
/// 80 %-full ones). The cases reuse them; each creates its volume anew.
fn prepare_files(st: &Settings) -> Result<(), Error> {
    std::fs::create_dir_all(&st.dir)?;
    let chunk = vec![0u8; 1 << 20];
    for i in 0..4 {
        let mut f = std::fs::File::create(member_path(st, i))?;
        let mut left = st.member_bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            f.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        f.sync_all()?;
    }
    Ok(())
}

fn remove_files(st: &Settings) {
    for i in 0..4 {
        let _ = std::fs::remove_file(member_path(st, i));
    }
}

fn members(medium: Medium, member_bytes: u64, st: &Settings) -> Result<Members, Error> {
    match medium {
        Medium::Ram => Ok(Members {
            devs: (0..4)
                .map(|i| Arc::new(RamDevice::new(format!("ram{i}"), member_bytes)) as _)
                .collect(),
            o_direct: false,
        }),
        Medium::File => {
            let mut m = Members {
                devs: vec![],
                o_direct: true,
            };
            for i in 0..4 {
                let dev = FileDevice::open(member_path(st, i), OpenOptions::default())?;
                m.o_direct &= dev.is_direct();
                m.devs.push(Arc::new(dev));
            }
            Ok(m)
        }
    }
}

async fn volume(
    log: Option<Compression>,
    medium: Medium,
    st: &Settings,
) -> Result<(Arc<Volume>, Members), Error> {
    let m = members(medium, st.member_bytes, st)?;
    let mut cfg = VolumeConfig::new(LevelSpec::Raid5);
    // RAM disks read as zeroes; file members hold an earlier case's blocks, whose parity
    // no bench step depends on (nothing reads degraded, reads cover written ranges only).
    cfg.assume_clean = true;
    // The file members carry the previous case's superblocks.
    cfg.force = true;
    cfg.options = EngineOptions::default();
    cfg.log = log.map(LogConfig::new);
    let vol = Volume::create("bench", cfg, m.devs.clone(), vec![]).await?;
    Ok((Arc::new(vol), m))
}

fn load(
    pattern: Pattern,
    bs: u64,
    qd: u32,
    runtime_ms: u64,
    range_bytes: u64,
    verify: bool,
) -> BenchConfig {
    BenchConfig {
        pattern,
        block_size_bytes: bs,
        iodepth: qd,
        jobs: 1,
        runtime_ms,
        range_bytes,
        verify,
        ..BenchConfig::default()
    }
}

async fn run(vol: &Arc<Volume>, cfg: &BenchConfig) -> Result<Report, Error> {
    let dev: Arc<dyn BlockDevice> = vol.clone();
    Ok(bench::run(dev, cfg, "volume", &Progress::Silent).await?)
}

fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Random writes and QD1 reads on one layout.
async fn layout_case(
    name: &str,
    log: Option<Compression>,
    medium: Medium,
    st: &Settings,
) -> Result<Value, Error> {
    let (vol, members) = volume(log, medium, st).await?;
    let o_direct = members.o_direct;
    let w = run(
        &vol,
        &load(Pattern::RandWrite, 4096, st.qd, st.runtime_ms, 0, true),
    )
    .await?;
    let read_range = 32u64 << 20;
    let fill = BenchConfig {
        size_bytes: read_range,
        runtime_ms: 0,
        ..load(Pattern::Write, 1 << 20, 4, 0, read_range, false)
    };
    run(&vol, &fill).await?;
    let r = run(
        &vol,
        &load(
            Pattern::RandRead,
            4096,
            1,
            st.runtime_ms / 2,
            read_range,
            false,
        ),
    )
    .await?;
    if w.errors > 0 || w.verify.as_ref().is_some_and(|v| v.blocks_failed > 0) {
        return Err(format!(
            "{name}: random writes failed or did not verify: {:?}",
            w.verify
        )
        .into());
    }
    let fresh = vol.status();
    eprintln!(
        "{:>5} {name:>9}: 4 KiB randwrite QD{} {:>9.0} IOPS (errors {}, failing verification {:?}) | QD1 randread p50 {:.1} us mean {:.1} us",
        medium.name(),
        st.qd,
        w.iops,
        w.errors,
        w.verify.as_ref().map(|v| v.blocks_failed),
        r.read_latency.p50_us,
        r.read_latency.mean_us
    );
    if !st.full {
        vol.stop().await?;
        return Ok(json!({
            "layout": name,
            "o_direct": o_direct,
            "randwrite_4k": w,
            "randread_4k_qd1": r,
            "log": fresh.log,
            "size_bytes": fresh.size_bytes,
        }));
    }
    // 80 % full: sequential fill, random writes over the filled range until garbage
    // collection runs steadily (free segments under its low water), then the measured
    // random writes (the log layout collecting garbage all along).
    let full_range = vol.size_bytes() * 8 / 10 / (1 << 20) * (1 << 20);
    let fill = BenchConfig {
        size_bytes: full_range,
        runtime_ms: 0,
        ..load(Pattern::Write, 1 << 20, 4, 0, full_range, false)
    };
    run(&vol, &fill).await?;
    let randwrite_full = |ms| load(Pattern::RandWrite, 4096, st.qd, ms, full_range, false);
    // Warm-up: random writes of half the filled range (at most 10 s), so the segments
    // the collector picks are as sparse as random overwrites leave them, not the
    // near-empty ones the sequential fill left behind.
    let t = Instant::now();
    let warmup = BenchConfig {
        size_bytes: full_range / 2,
        ..randwrite_full(10_000)
    };
    run(&vol, &warmup).await?;
    let warmup_s = t.elapsed().as_secs_f64();
    let before = vol.status().log;
    let full = run(&vol, &randwrite_full(st.runtime_ms)).await?;
    let status = vol.status();
    let gc_during = status.log.as_ref().map_or(0, |l| l.gc_segments)
        - before.as_ref().map_or(0, |l| l.gc_segments);
    let ckpt_during = status.log.as_ref().map_or(0, |l| l.checkpoints)
        - before.as_ref().map_or(0, |l| l.checkpoints);
    eprintln!(
        "{:>5} {name:>9}: 4 KiB randwrite QD{} at 80 % full {:>9.0} IOPS ({:.2} of fresh; {gc_during} segments cleaned, {ckpt_during} checkpoints meanwhile; warm-up {warmup_s:.1} s)",
        medium.name(),
        st.qd,
        full.iops,
        full.iops / w.iops.max(1.0)
    );
    vol.stop().await?;
    Ok(json!({
        "layout": name,
        "o_direct": o_direct,
        "randwrite_4k": w,
        "randread_4k_qd1": r,
        "randwrite_4k_80pct_full": full,
        "full_vs_fresh": r2(full.iops / w.iops.max(1.0)),
        "full_warmup_s": r2(warmup_s),
        "gc_segments_during_full": gc_during,
        "checkpoints_during_full": ckpt_during,
        "log_after_fresh_randwrite": fresh.log,
        "log": status.log,
        "size_bytes": status.size_bytes,
    }))
}

/// The CLI's compressed size of each block, or None if the tool is missing.
fn cli_sizes(tool: &str, args: &[&str], blocks: &[&[u8]]) -> Option<u64> {
    let mut total = 0u64;
    for b in blocks {
        let mut child = Command::new(tool)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        child.stdin.take()?.write_all(b).ok()?;
        let out = child.wait_with_output().ok()?;
        if !out.status.success() {
            return None;
        }
        total += out.stdout.len() as u64;
    }
    Some(total)
}

async fn compression_case(st: &Settings) -> Result<Vec<Value>, Error> {
    let corpus_bytes = 8usize << 20;
    let mut out = Vec::new();
    for (name, data) in corpus::all(corpus_bytes) {
        let blocks: Vec<&[u8]> = data.chunks(4096).collect();
        // An odd stride: an even one would sample only the first half of 8 KiB pages.
        let stride = (blocks.len() / 128) | 1;
        let sample: Vec<&[u8]> = blocks.iter().step_by(stride).copied().collect();
        let sample_raw: u64 = sample.iter().map(|b| b.len() as u64).sum();
        for (codec, tool, args) in [
            (
                Compression::Lz4,
                "lz4",
                vec!["-1", "-q", "-c", "--no-frame-crc"],
            ),
            (
                Compression::Zstd(3),
                "zstd",
                vec!["-3", "-q", "-c", "--no-check"],
            ),
        ] {
            let (vol, _members) = volume(Some(codec), Medium::Ram, st).await?;
            let t0 = Instant::now();
            // 1 MiB writes, 8 at a time.
            let chunks: Vec<(u64, &[u8])> = data
                .chunks(1 << 20)
                .enumerate()
                .map(|(i, c)| ((i as u64) << 20, c))
                .collect();
            for group in chunks.chunks(8) {
                let writes = group.iter().map(|(off, c)| {
                    let vol = vol.clone();
                    let buf = IoBuf::from_slice(c);
                    let off = *off;
                    async move { vol.write(off, buf, WriteFlags::default()).await }
                });
                for r in futures::future::join_all(writes).await {
                    r?;
                }
            }
            vol.flush().await?;
            let write_s = t0.elapsed().as_secs_f64();
            let back = vol.read(0, IoBuf::new_zeroed(data.len())).await?;
            if back[..] != data[..] {
                return Err(format!("{name} {codec}: read back differs").into());
            }
            let log = vol.status().log.ok_or("no log status")?;
            // The sample through the volume's own codec, block by block, as the CLI sees it.
            let cli = cli_sizes(tool, &args, &sample);
            let cli_ratio = cli.map(|c| r2(sample_raw as f64 / c as f64));
            let ratio = r2(log.compression_ratio);
            eprintln!(
                "{name:>5} {codec:>7}: volume ratio {ratio:.2} ({:.0} MB/s written) | {tool} CLI on the same 4 KiB blocks: {}",
                data.len() as f64 / write_s / 1e6,
                cli_ratio.map_or("tool missing".to_string(), |r| format!(
                    "{r:.2} (volume/CLI {:.2})",
                    ratio / r
                ))
            );
            out.push(json!({
                "corpus": name,
                "compression": codec.to_string(),
                "block_bytes": 4096,
                "logical_bytes": log.logical_bytes,
                "physical_bytes": log.physical_bytes,
                "volume_ratio": ratio,
                "write_mb_per_s": r2(data.len() as f64 / write_s / 1e6),
                "cli_tool": tool,
                "cli_args": args,
                "cli_sample_blocks": sample.len(),
                "cli_ratio": cli_ratio,
                "volume_vs_cli": cli_ratio.map(|c| r2(ratio / c)),
            }));
            vol.stop().await?;
        }
    }
    Ok(out)
}

struct Settings {
    /// Also the 80 %-full step (`LOG_BENCH_FULL=0` skips it).
    full: bool,
    member_bytes: u64,
    runtime_ms: u64,
    qd: u32,
    rounds: usize,
    media: Vec<Medium>,
    dir: PathBuf,
    compression: bool,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(r2(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }))
}

/// The ratios of one round (every layout on fresh members of one medium).
fn round_ratios(layouts: &[Value]) -> Value {
    let iops = |i: usize| layouts[i]["randwrite_4k"]["iops"].as_f64().unwrap_or(0.0);
    let lat = |i: usize| {
        layouts[i]["randread_4k_qd1"]["read_latency"]["mean_us"]
            .as_f64()
            .unwrap_or(0.0)
    };
    let full = |i: usize| layouts[i]["full_vs_fresh"].as_f64();
    json!({
        "randwrite_80pct_full_vs_fresh_in_place": full(0),
        "randwrite_80pct_full_vs_fresh_log": full(1),
        "randwrite_80pct_full_vs_fresh_log_lz4": full(2),
        "randwrite_log_vs_in_place": r2(iops(1) / iops(0).max(1.0)),
        "randwrite_log_lz4_vs_in_place": r2(iops(2) / iops(0).max(1.0)),
        "read_qd1_latency_log_lz4_vs_in_place": r2(lat(2) / lat(0).max(0.001)),
    })
}

/// Every round of one medium, and the medians of their ratios.
async fn medium_case(medium: Medium, st: &Settings) -> Result<Value, Error> {
    if medium == Medium::File {
        prepare_files(st)?;
    }
    let r = medium_rounds(medium, st).await;
    if medium == Medium::File {
        remove_files(st);
    }
    r
}

async fn medium_rounds(medium: Medium, st: &Settings) -> Result<Value, Error> {
    let load_before = loadavg();
    let mut rounds = Vec::new();
    let mut o_direct = medium == Medium::File;
    for round in 0..st.rounds {
        let mut layouts = Vec::new();
        for (name, log) in [
            ("in-place", None),
            ("log", Some(Compression::Off)),
            ("log+lz4", Some(Compression::Lz4)),
        ] {
            layouts.push(layout_case(name, log, medium, st).await?);
        }
        o_direct &= layouts
            .iter()
            .all(|l| l["o_direct"].as_bool() == Some(true));
        let ratios = round_ratios(&layouts);
        eprintln!(
            "{:>5} round {}: ratios {ratios} (load {})",
            medium.name(),
            round + 1,
            loadavg()
        );
        rounds.push(json!({ "layouts": layouts, "ratios": ratios, "load": loadavg() }));
    }
    let mut medians = serde_json::Map::new();
    if let Some(first) = rounds.first().and_then(|r| r["ratios"].as_object()) {
        for key in first.keys() {
            let v: Vec<f64> = rounds
                .iter()
                .filter_map(|r| r["ratios"][key].as_f64())
                .collect();
            medians.insert(key.clone(), json!(median(v)));
        }
    }
    eprintln!(
        "{:>5} medians of {} rounds: {}",
        medium.name(),
        rounds.len(),
        Value::Object(medians.clone())
    );
    Ok(json!({
        "member_kind": medium.name(),
        "real": true,
        "o_direct": o_direct,
        "member_dir": (medium == Medium::File).then(|| st.dir.display().to_string()),
        "load_before": load_before,
        "load_after": loadavg(),
        "median_ratios": medians,
        "rounds": rounds,
    }))
}

fn main() -> ExitCode {
    let media: Result<Vec<Medium>, String> = std::env::var("LOG_BENCH_MEDIA")
        .unwrap_or_else(|_| "file,ram".into())
        .split(',')
        .filter(|m| !m.trim().is_empty())
        .map(|m| match m.trim() {
            "ram" => Ok(Medium::Ram),
            "file" => Ok(Medium::File),
            other => Err(format!("unknown medium {other:?} (file, ram)")),
        })
        .collect();
    let media = match media {
        Ok(m) => m,
        Err(e) => {
            eprintln!("LOG_BENCH_MEDIA: {e}");
            return ExitCode::FAILURE;
        }
    };
    let st = Settings {
        full: std::env::var_os("LOG_BENCH_FULL").is_none_or(|v| v != "0"),
        member_bytes: env_u64("LOG_BENCH_MEMBER_MIB", 128) << 20,
        runtime_ms: env_u64("LOG_BENCH_RUNTIME_MS", 2000),
        qd: env_u64("LOG_BENCH_QD", 32) as u32,
        rounds: env_u64("LOG_BENCH_ROUNDS", 3).max(1) as usize,
        media,
        dir: std::env::var_os("LOG_BENCH_DIR")
            .filter(|p| !p.is_empty())
            .map_or_else(
                || target_dir().join("bench").join("log_layout_members"),
                PathBuf::from,
            ),
        compression: env_u64("LOG_BENCH_COMPRESSION", 1) != 0,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let t0 = Instant::now();
    let result: Result<Value, Error> = rt.block_on(async {
        let mut media = Vec::new();
        for &m in &st.media {
            media.push(medium_case(m, &st).await?);
        }
        let compression = if st.compression {
            compression_case(&st).await?
        } else {
            Vec::new()
        };
        Ok(json!({
            "bench": "log_layout",
            "units": "IOPS = completed I/Os/s; latency in us; MB/s = 1e6 bytes/s of volume data",
            "level": "raid5",
            "members": 4,
            "member_bytes": st.member_bytes,
            "stripe_unit_bytes": 64 << 10,
            "runtime_ms": st.runtime_ms,
            "randwrite_qd": st.qd,
            "rounds": st.rounds,
            "media": media,
            "compression": compression,
            "total_s": r2(t0.elapsed().as_secs_f64()),
        }))
    });
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("log layout bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let text = serde_json::to_string_pretty(&report).unwrap_or_default();
    println!("{text}");
    let path = std::env::var_os("LOG_BENCH_OUT")
        .filter(|p| !p.is_empty())
        .map_or_else(
            || target_dir().join("bench").join("log_layout.json"),
            PathBuf::from,
        );
    if let Some(d) = path.parent() {
        let _ = std::fs::create_dir_all(d);
    }
    if let Err(e) = std::fs::write(&path, text + "\n") {
        eprintln!("cannot write {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    eprintln!("wrote {}", path.display());
    ExitCode::SUCCESS
}
