//! The run's JSON document and the summary tables on stdout.

use control::records::TakeoverReport;
use serde::Serialize;

use crate::failover::CLEAN_BITMAP_TIMEOUT;

use crate::failover::Failover;
use crate::scaling::Scaling;
use crate::settings::Settings;
use crate::volume_vs_member::VolumeVsMember;

#[derive(Debug, Serialize)]
pub(crate) struct Output {
    pub(crate) schema: &'static str,
    pub(crate) mode: &'static str,
    pub(crate) command: String,
    pub(crate) machine: Machine,
    pub(crate) settings: Settings,
    pub(crate) setup: String,
    pub(crate) volume_vs_member: VolumeVsMember,
    pub(crate) scaling: Scaling,
    pub(crate) failover: Failover,
    pub(crate) error: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Machine {
    pub(crate) cpus: usize,
    pub(crate) kernel: String,
    pub(crate) binary: String,
    pub(crate) load_average: String,
}

pub(crate) fn summary(o: &Output) -> String {
    let mut t = String::new();
    let s = &o.settings;
    t += &format!(
        "Ferrobay cluster bench ({} mode): {} CPUs, {} s per run, {} rounds, RAID-5 {} MiB volumes on 3 storage nodes ({}), lease TTL {} ms\n",
        o.mode,
        o.machine.cpus,
        s.runtime_s,
        s.rounds,
        s.volume_size_bytes >> 20,
        s.drive,
        s.lease_ttl_ms
    );
    let v = &o.volume_vs_member;
    t += "\n1. RAID-5 volume (through p1) vs one member namespace (direct), medians\n";
    t += &format!(
        "{:<18} {:<7} {:>9} {:>9} {:>8} {:>8} {:>11} {:>11} {:>11}\n",
        "workload",
        "target",
        "IOPS",
        "MB/s",
        "p50 us",
        "p99 us",
        "proc s/MIO",
        "stor s/MIO",
        "init s/MIO"
    );
    for c in &v.results {
        for (name, r) in [("volume", &c.volume_median), ("member", &c.member_median)] {
            t += &format!(
                "{:<18} {:<7} {:>9.0} {:>9.1} {:>8.0} {:>8.0} {:>11.2} {:>11.2} {:>11.2}\n",
                c.workload.name,
                name,
                r.iops,
                r.mb_per_s,
                r.lat_p50_us,
                r.lat_p99_us,
                r.processor_cpu_s_per_million_ios,
                r.storage_cpu_s_per_million_ios,
                r.initiator_cpu_s_per_million_ios
            );
        }
        t += &format!(
            "{:<18} {:<7} {:>9.2} {:>9.2} {:>8.2} {:>8.2}   cluster CPU per I/O x{:.2}\n",
            c.workload.name,
            "ratio",
            c.ratio_iops,
            c.ratio_mb_per_s,
            c.ratio_lat_p50,
            c.ratio_lat_p99,
            c.ratio_cluster_cpu_per_io
        );
    }
    if let Some(e) = &v.error {
        t += &format!("  error: {e}\n");
    }
    let sc = &o.scaling;
    t += "\n2. Two volumes loaded at once (4k randread QD32 each): aggregate IOPS, medians\n";
    t += &format!(
        "  A (p1 owns both): {:.0}   B (p1 one, p2 one): {:.0}   B/A = {:.2}\n",
        sc.median_aggregate_iops_a, sc.median_aggregate_iops_b, sc.ratio_b_over_a
    );
    if !sc.note.is_empty() {
        t += &format!("  note: {}\n", sc.note);
    }
    if let Some(e) = &sc.error {
        t += &format!("  error: {e}\n");
    }
    let f = &o.failover;
    t += &format!(
        "\n3. Failover (kill -9 of the owner, multipath host, 4k randwrite QD8 with verify, lease TTL {} ms, heartbeat {} ms x {})\n",
        f.lease_ttl_ms, f.heartbeat_interval_ms, f.heartbeat_misses
    );
    t += &format!(
        "  member seq write 128k QD8: {:.1} MB/s; hyper-converged full resync of {} MiB at {:.0}%: {:.1} s ({:.0} s per TiB)\n",
        f.member_seq_write.median_mb_per_s,
        f.member_capacity_bytes >> 20,
        f.hc_resync_share * 100.0,
        f.full_resync_s,
        f.full_resync_s_per_tib
    );
    t += &format!(
        "  {:<5} {:>9} {:>6} {:>7} {:>11} {:>6} {:>6} {:>11} {:>9} {:>7} {:>10} {:>10} {:>10}\n",
        "round",
        "range MiB",
        "killed",
        "gap ms",
        "resumed ms",
        "errors",
        "verify",
        "takeover ms",
        "resync ms",
        "regions",
        "MiB/member",
        "bytes/full",
        "time/full"
    );
    let row = |round: String,
               range: u64,
               killed: &str,
               gap: f64,
               kill_io: f64,
               errors: u64,
               ok: bool,
               took: f64,
               resync: f64,
               regions: f64,
               per_member: f64,
               bytes_ratio: f64,
               time_ratio: f64| {
        format!(
            "  {:<5} {:>9} {:>6} {:>7.0} {:>11.0} {:>6} {:>6} {:>11.0} {:>9.0} {:>7.0} {:>10.1} {:>10.3} {:>10.3}\n",
            round,
            range >> 20,
            killed,
            gap,
            kill_io,
            errors,
            if ok { "pass" } else { "FAIL" },
            took,
            resync,
            regions,
            per_member / (1u64 << 20) as f64,
            bytes_ratio,
            time_ratio
        )
    };
    for r in &f.rounds {
        let tk = |g: fn(&TakeoverReport) -> u64| r.takeover.as_ref().map_or(0.0, |t| g(t) as f64);
        t += &row(
            r.round.to_string(),
            r.range_bytes,
            &r.killed,
            r.gap.io_gap_ms,
            r.gap.io_gap_end_ms_after_kill,
            r.errors,
            r.verify_passed,
            tk(|t| t.took_ms),
            tk(|t| t.resync_ms),
            tk(|t| t.resync_regions),
            r.resync_bytes_per_member as f64,
            r.ratio_resync_bytes_to_full_resync,
            r.ratio_resync_time_to_full_resync_time,
        );
    }
    for m in &f.medians {
        t += &row(
            "med".into(),
            m.range_bytes,
            "-",
            m.io_gap_ms,
            m.io_resumed_ms_after_kill,
            m.errors,
            m.all_verified,
            m.takeover_ms,
            m.resync_ms,
            m.resync_regions,
            m.resync_bytes_per_member,
            m.ratio_resync_bytes_to_full_resync,
            m.ratio_resync_time_to_full_resync_time,
        );
    }
    for r in f.rounds.iter().filter(|r| r.dirty_regions_at_start > 0) {
        t += &format!(
            "  note: round {} started with {} dirty regions (not cleared within {} s)\n",
            r.round,
            r.dirty_regions_at_start,
            CLEAN_BITMAP_TIMEOUT.as_secs()
        );
    }
    t += "  bytes/full: resync member bytes per member / member capacity; time/full: resync time / hyper-converged full-resync time\n";
    if let Some(e) = &f.error {
        t += &format!("  error: {e}\n");
    }
    if let Some(e) = &o.error {
        t += &format!("\nerror: {e}\n");
    }
    t
}
