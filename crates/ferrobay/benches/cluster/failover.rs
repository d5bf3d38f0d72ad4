//! Section 3: failover seen by a multipath host (kill -9 of the owner), against the
//! full resync a hyper-converged cluster would need.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bench::{BenchConfig, Pattern, Progress, VerifyReport};
use blockdev::BlockDevice;
use control::records::{TakeoverReport, VolumeRecord};
use serde::Serialize;
use testkit::stats::median;

use crate::daemons::{Cluster, PROCESSORS};
use crate::exact_check::{ExactCheck, exact_check};
use crate::io_gap::{Gap, gaps};
use crate::load::{RunResult, config, measured, open, ratio};
use crate::settings::Settings;
use crate::watched::Watched;

/// The hot range of the first failover round: a host's working set, a region or two of
/// the write-intent bitmap.
const HOT_RANGE_BYTES: u64 = 64 << 20;
/// How long a failover round waits for the owner's bitmap to come clean first.
pub(crate) const CLEAN_BITMAP_TIMEOUT: Duration = Duration::from_secs(30);
/// The share of write bandwidth a hyper-converged cluster gives a background resync.
pub(crate) const HC_RESYNC_SHARE: f64 = 0.2;
const TIB: f64 = (1u64 << 40) as f64;

#[derive(Debug, Default, Serialize)]
pub(crate) struct SeqWrite {
    pub(crate) url: String,
    pub(crate) capacity_bytes: u64,
    pub(crate) runs: Vec<RunResult>,
    pub(crate) median_mb_per_s: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct FailoverRound {
    pub(crate) round: u32,
    pub(crate) volume: String,
    pub(crate) url: String,
    /// Bytes of the volume the writes went to (from offset 0).
    pub(crate) range_bytes: u64,
    pub(crate) volume_size_bytes: u64,
    pub(crate) killed: String,
    pub(crate) new_owner: String,
    /// Dirty write-intent regions when the round started (after waiting for the sweeper).
    pub(crate) dirty_regions_at_start: u64,
    pub(crate) waited_for_clean_bitmap_ms: u64,
    pub(crate) epoch_before: u64,
    pub(crate) epoch_after: u64,
    pub(crate) lease_ttl_ms: u64,
    pub(crate) kill_after_ms: u64,
    pub(crate) runtime_ms: u64,
    pub(crate) write_ios: u64,
    pub(crate) write_iops: f64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) write_lat_p99_us: f64,
    pub(crate) write_lat_max_us: f64,
    pub(crate) gap: Gap,
    /// bench's verify-only pass over the range (stamps: offset, CRC, torn).
    pub(crate) verify: Option<VerifyReport>,
    /// Every block written: holds its last acknowledged write.
    pub(crate) exact: ExactCheck,
    pub(crate) verify_passed: bool,
    /// As the new owner reports it in its status record.
    pub(crate) takeover: Option<TakeoverReport>,
    pub(crate) resync_member_bytes_written: u64,
    /// Member bytes the resync read, per member: takeover.resync_member_bytes_read /
    /// members_total.
    pub(crate) resync_bytes_per_member: u64,
    /// resync_bytes_per_member / member capacity: the share of a member the takeover
    /// re-checked, against a hyper-converged full resync that rewrites all of it.
    pub(crate) ratio_resync_bytes_to_full_resync: f64,
    /// takeover.resync_ms / the hyper-converged full-resync time.
    pub(crate) ratio_resync_time_to_full_resync_time: f64,
    /// takeover.took_ms (fence, assemble, resync, optimized) / the full-resync time.
    pub(crate) ratio_takeover_time_to_full_resync_time: f64,
}

/// Medians over the failover rounds of one write range.
#[derive(Debug, Default, Serialize)]
pub(crate) struct FailoverMedians {
    pub(crate) range_bytes: u64,
    pub(crate) rounds: usize,
    pub(crate) io_gap_ms: f64,
    pub(crate) io_resumed_ms_after_kill: f64,
    pub(crate) takeover_ms: f64,
    pub(crate) resync_ms: f64,
    pub(crate) resync_regions: f64,
    pub(crate) resync_bytes_per_member: f64,
    pub(crate) ratio_resync_bytes_to_full_resync: f64,
    pub(crate) ratio_resync_time_to_full_resync_time: f64,
    pub(crate) errors: u64,
    pub(crate) all_verified: bool,
}

pub(crate) fn failover_medians(rounds: &[FailoverRound], range_bytes: u64) -> FailoverMedians {
    let rs: Vec<&FailoverRound> = rounds
        .iter()
        .filter(|r| r.range_bytes == range_bytes)
        .collect();
    let m = |f: &dyn Fn(&FailoverRound) -> f64| median(rs.iter().map(|r| f(r)).collect());
    let tk = |r: &FailoverRound, f: fn(&TakeoverReport) -> u64| {
        r.takeover.as_ref().map_or(0.0, |t| f(t) as f64)
    };
    FailoverMedians {
        range_bytes,
        rounds: rs.len(),
        io_gap_ms: m(&|r| r.gap.io_gap_ms),
        io_resumed_ms_after_kill: m(&|r| r.gap.io_gap_end_ms_after_kill),
        takeover_ms: m(&|r| tk(r, |t| t.took_ms)),
        resync_ms: m(&|r| tk(r, |t| t.resync_ms)),
        resync_regions: m(&|r| tk(r, |t| t.resync_regions)),
        resync_bytes_per_member: m(&|r| r.resync_bytes_per_member as f64),
        ratio_resync_bytes_to_full_resync: m(&|r| r.ratio_resync_bytes_to_full_resync),
        ratio_resync_time_to_full_resync_time: m(&|r| r.ratio_resync_time_to_full_resync_time),
        errors: rs.iter().map(|r| r.errors).sum(),
        all_verified: rs.iter().all(|r| r.verify_passed),
    }
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Failover {
    pub(crate) lease_ttl_ms: u64,
    /// The standbys' heartbeat (`processor run` defaults): Keep Alive period and the
    /// unanswered ones that declare the owner dead; a killed owner's closed connection
    /// declares it dead at once, without waiting for the lease.
    pub(crate) heartbeat_interval_ms: u64,
    pub(crate) heartbeat_misses: u32,
    /// Member bandwidth a hyper-converged resync would get a share of: 128 KiB
    /// sequential writes at QD 8 to a namespace of member size on n1 (RAM drive).
    pub(crate) member_seq_write: SeqWrite,
    pub(crate) member_capacity_bytes: u64,
    pub(crate) hc_resync_share: f64,
    /// member capacity / (share x member sequential write bandwidth).
    pub(crate) full_resync_s: f64,
    pub(crate) full_resync_s_per_tib: f64,
    pub(crate) rounds: Vec<FailoverRound>,
    /// Medians of the hot-range rounds and of the whole-volume rounds.
    pub(crate) medians: Vec<FailoverMedians>,
    pub(crate) definitions: Vec<&'static str>,
    pub(crate) error: Option<String>,
}

pub(crate) const FAILOVER_DEFINITIONS: [&str; 6] = [
    "gap.io_gap_ms: longest interval between two completed host I/Os during the run",
    "gap.io_gap_end_ms_after_kill: when host I/O resumed (the end of the longest gap), ms after kill -9 of the owner",
    "takeover: the new owner's report in its status record (took_ms: ownership acquired to ANA optimized, resync included)",
    "full_resync_s: member_capacity_bytes / (hc_resync_share x median member 128k sequential write bandwidth)",
    "ratio_resync_bytes_to_full_resync: (takeover.resync_member_bytes_read / members_total) / member_capacity_bytes",
    "rounds alternate the write range: odd rounds a 64 MiB hot range, even rounds the whole volume (random 4 KiB writes over all of it dirty every write-intent region)",
];

pub(crate) async fn section_member_write(
    c: &Cluster,
    s: &Settings,
    out: &mut Failover,
) -> anyhow::Result<()> {
    let n1 = &c.nodes[0];
    let size_mb = out.member_capacity_bytes.div_ceil(1 << 20).max(1);
    let ns = c.cli_json(&[
        "node",
        "ns",
        "create",
        "--data-dir",
        &n1.data_dir,
        "--drive",
        "d0",
        "--size",
        &format!("{size_mb}M"),
        "--block-size",
        "4096",
        "--json",
    ])?;
    let nqn = ns["subsystem_nqn"]
        .as_str()
        .context("ns create: no subsystem_nqn")?;
    let nsid = ns["nsid"].as_u64().context("ns create: no nsid")?;
    let url = format!("nvme+tcp://{}/{nqn}/{nsid}", n1.nvme);
    let dev = open(&url).await?;
    out.member_seq_write.url = url;
    out.member_seq_write.capacity_bytes = dev.info().size_bytes;
    let cfg = config(Pattern::Write, 128 << 10, 8, s.runtime_ms());
    for round in 0..s.rounds {
        let r = measured(c, &dev, &cfg, "member seqwrite", None).await?;
        eprintln!(
            "  member seqwrite_128k_qd8 round {}: {:.1} MB/s",
            round + 1,
            r.mb_per_s
        );
        out.member_seq_write.runs.push(r);
    }
    out.member_seq_write.median_mb_per_s = median(
        out.member_seq_write
            .runs
            .iter()
            .map(|r| r.mb_per_s)
            .collect(),
    );
    drop(dev);
    c.cli(&[
        "node",
        "ns",
        "delete",
        "--data-dir",
        &n1.data_dir,
        nqn,
        &nsid.to_string(),
    ])?;
    let bw = out.member_seq_write.median_mb_per_s * 1e6 * HC_RESYNC_SHARE;
    if bw > 0.0 {
        out.full_resync_s = out.member_capacity_bytes as f64 / bw;
        out.full_resync_s_per_tib = TIB / bw;
    }
    Ok(())
}

pub(crate) async fn failover_round(
    c: &mut Cluster,
    s: &Settings,
    round: u32,
    rec: &VolumeRecord,
    full_resync_s: f64,
    member_capacity_bytes: u64,
) -> anyhow::Result<FailoverRound> {
    // Start from a clean bitmap (the sweeper clears regions quiet for one or two
    // `bitmap_quiet` periods), so that the resync shows what this round dirtied.
    let wait_t0 = Instant::now();
    let before = loop {
        let v = c.view(&rec.name)?;
        let dirty = v.status.as_ref().map_or(0, |s| s.status.dirty_regions);
        if dirty == 0 || wait_t0.elapsed() > CLEAN_BITMAP_TIMEOUT {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let waited_for_clean_bitmap_ms = wait_t0.elapsed().as_millis() as u64;
    let dirty_regions_at_start = before.status.as_ref().map_or(0, |s| s.status.dirty_regions);
    let owner = before.owner.clone().context("volume has no owner")?;
    let victim = Cluster::proc_index(&owner.node);
    let survivor = 1 - victim;
    let url = c.volume_url(&rec.name, &[0, 1]);
    let inner = open(&url).await?;
    let watched = Arc::new(Watched::new(inner.clone()));
    let dev: Arc<dyn BlockDevice> = watched.clone();
    let range_bytes = if round % 2 == 1 {
        HOT_RANGE_BYTES.min(rec.size_bytes)
    } else {
        rec.size_bytes / 4096 * 4096
    };
    let runtime_ms = s.kill_after_ms + s.lease_ttl_ms + 4000;
    let cfg = BenchConfig {
        pattern: Pattern::RandWrite,
        block_size_bytes: 4096,
        iodepth: 8,
        jobs: 1,
        runtime_ms,
        range_bytes,
        verify: true,
        generation: 10 + round,
        ..BenchConfig::default()
    };
    eprintln!(
        "cluster bench: 3. failover round {round}: randwrite 4k QD8 over {} MiB of {}, kill -9 {} after {} ms",
        range_bytes >> 20,
        rec.name,
        owner.node,
        s.kill_after_ms
    );
    let kill_after = Duration::from_millis(s.kill_after_ms);
    let victim_daemon = &mut c.procs[victim].d;
    let (report, kill_at) = tokio::join!(
        bench::run(dev.clone(), &cfg, &url, &Progress::Silent),
        async {
            tokio::time::sleep(kill_after).await;
            let t = Instant::now();
            victim_daemon.kill9();
            t
        }
    );
    let report = report?;
    let st = watched.take();
    let gap = gaps(st.completions, kill_at);
    let new_owner = PROCESSORS[survivor];
    let after = c.wait_owner(&rec.name, new_owner, owner.epoch)?;
    eprintln!(
        "  {} writes, {} errors, gap {:.0} ms (I/O resumed {:.0} ms after the kill); verifying",
        report.write_ios, report.errors, gap.io_gap_ms, gap.io_gap_end_ms_after_kill
    );
    let verify_cfg = BenchConfig {
        pattern: Pattern::Read,
        block_size_bytes: 4096,
        iodepth: 32,
        jobs: 1,
        runtime_ms: 0,
        range_bytes,
        verify_only: true,
        generation: cfg.generation,
        ..BenchConfig::default()
    };
    let verify = bench::run(inner.clone(), &verify_cfg, &url, &Progress::Silent).await?;
    let exact = exact_check(&inner, st.acked).await;
    let verify_ok =
        verify.errors == 0 && verify.verify.as_ref().is_some_and(|v| v.mismatches() == 0);
    drop(dev);
    drop(watched);
    drop(inner);
    let status = after.status.as_ref();
    let takeover = status.and_then(|s| s.takeover.clone());
    let resync_member_bytes_written = status
        .and_then(|s| s.status.last_resync.as_ref())
        .map_or(0, |r| r.member_bytes_written);
    let resync_bytes_per_member = takeover.as_ref().map_or(0, |t| {
        t.resync_member_bytes_read / (t.members_total.max(1) as u64)
    });
    let (resync_s, took_s) = takeover.as_ref().map_or((0.0, 0.0), |t| {
        (t.resync_ms as f64 / 1e3, t.took_ms as f64 / 1e3)
    });
    // The killed node comes back as a standby (on a new port).
    eprintln!("  restarting {}", PROCESSORS[victim]);
    let p = c.start_processor(PROCESSORS[victim])?;
    c.procs[victim] = p;
    Ok(FailoverRound {
        round,
        volume: rec.name.clone(),
        url,
        range_bytes,
        volume_size_bytes: rec.size_bytes,
        killed: owner.node.clone(),
        new_owner: new_owner.into(),
        dirty_regions_at_start,
        waited_for_clean_bitmap_ms,
        epoch_before: owner.epoch,
        epoch_after: after.owner.as_ref().map_or(0, |o| o.epoch),
        lease_ttl_ms: s.lease_ttl_ms,
        kill_after_ms: s.kill_after_ms,
        runtime_ms,
        write_ios: report.write_ios,
        write_iops: report.iops,
        errors: report.errors,
        first_error: report.first_error.clone(),
        write_lat_p99_us: report.write_latency.p99_us,
        write_lat_max_us: report.write_latency.max_us,
        gap,
        verify_passed: verify_ok && exact.mismatches() == 0,
        verify: verify.verify,
        exact,
        takeover,
        resync_member_bytes_written,
        resync_bytes_per_member,
        ratio_resync_bytes_to_full_resync: ratio(
            resync_bytes_per_member as f64,
            member_capacity_bytes as f64,
        ),
        ratio_resync_time_to_full_resync_time: ratio(resync_s, full_resync_s),
        ratio_takeover_time_to_full_resync_time: ratio(took_s, full_resync_s),
    })
}

pub(crate) async fn section_failover(
    c: &mut Cluster,
    s: &Settings,
    rec: &VolumeRecord,
    out: &mut Failover,
) -> anyhow::Result<()> {
    out.lease_ttl_ms = s.lease_ttl_ms;
    let defaults = control::processor::ProcessorConfig::new("p");
    out.heartbeat_interval_ms = defaults.heartbeat_interval_ms;
    out.heartbeat_misses = defaults.heartbeat_misses;
    out.hc_resync_share = HC_RESYNC_SHARE;
    out.definitions = FAILOVER_DEFINITIONS.to_vec();
    eprintln!("cluster bench: 3. member sequential write bandwidth");
    section_member_write(c, s, out).await?;
    for round in 1..=s.failovers {
        let r = failover_round(
            c,
            s,
            round,
            rec,
            out.full_resync_s,
            out.member_capacity_bytes,
        )
        .await?;
        eprintln!(
            "  round {round}: gap {:.0} ms, errors {}, verify {}, takeover {:?} ms, resync {} regions {} MiB",
            r.gap.io_gap_ms,
            r.errors,
            if r.verify_passed { "passed" } else { "FAILED" },
            r.takeover.as_ref().map(|t| t.took_ms),
            r.takeover.as_ref().map_or(0, |t| t.resync_regions),
            r.takeover.as_ref().map_or(0, |t| t.resync_bytes >> 20)
        );
        out.rounds.push(r);
    }
    let mut ranges: Vec<u64> = out.rounds.iter().map(|r| r.range_bytes).collect();
    ranges.sort_unstable();
    ranges.dedup();
    out.medians = ranges
        .into_iter()
        .map(|range| failover_medians(&out.rounds, range))
        .collect();
    Ok(())
}
