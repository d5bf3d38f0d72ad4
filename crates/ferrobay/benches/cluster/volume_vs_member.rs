//! Section 1: a RAID-5 volume through a processor node vs one member namespace read
//! directly.

use anyhow::Context;
use bench::{BenchConfig, Pattern};
use control::records::VolumeRecord;
use serde::Serialize;

use crate::daemons::Cluster;
use crate::load::{RunResult, config, measured, median_run, open, precondition, ratio};
use crate::settings::Settings;

#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Workload {
    pub(crate) name: &'static str,
    pub(crate) rw: &'static str,
    pub(crate) block_size_bytes: u64,
    pub(crate) iodepth: u32,
}

pub(crate) const READS: [Workload; 2] = [
    Workload {
        name: "randread_4k_qd32",
        rw: "randread",
        block_size_bytes: 4096,
        iodepth: 32,
    },
    Workload {
        name: "seqread_128k_qd8",
        rw: "read",
        block_size_bytes: 128 << 10,
        iodepth: 8,
    },
];

impl Workload {
    pub(crate) fn config(&self, runtime_ms: u64) -> BenchConfig {
        let p = if self.rw == "randread" {
            Pattern::RandRead
        } else {
            Pattern::Read
        };
        config(p, self.block_size_bytes, self.iodepth, runtime_ms)
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct Compare {
    pub(crate) workload: Workload,
    pub(crate) volume_runs: Vec<RunResult>,
    pub(crate) member_runs: Vec<RunResult>,
    pub(crate) volume_median: RunResult,
    pub(crate) member_median: RunResult,
    /// volume / member of the medians.
    pub(crate) ratio_iops: f64,
    pub(crate) ratio_mb_per_s: f64,
    pub(crate) ratio_lat_p50: f64,
    pub(crate) ratio_lat_p99: f64,
    /// Processor + storage CPU per I/O, volume / member.
    pub(crate) ratio_cluster_cpu_per_io: f64,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct VolumeVsMember {
    pub(crate) volume: String,
    pub(crate) volume_url: String,
    pub(crate) volume_size_bytes: u64,
    pub(crate) member_url: String,
    pub(crate) member_size_bytes: u64,
    pub(crate) precondition_mb_per_s: f64,
    pub(crate) results: Vec<Compare>,
    pub(crate) error: Option<String>,
}

pub(crate) async fn section_volume_vs_member(
    c: &Cluster,
    s: &Settings,
    rec: &VolumeRecord,
    out: &mut VolumeVsMember,
) -> anyhow::Result<()> {
    out.volume = rec.name.clone();
    out.volume_url = c.volume_url(&rec.name, &[0]);
    out.volume_size_bytes = rec.size_bytes;
    let member = rec.members.first().context("volume without members")?;
    out.member_url = member.url.clone();
    let vol = open(&out.volume_url).await?;
    let mem = open(&out.member_url).await?;
    out.member_size_bytes = mem.info().size_bytes;
    eprintln!(
        "cluster bench: 1. precondition {} (write it once)",
        rec.name
    );
    out.precondition_mb_per_s = precondition(&vol, &rec.name).await?;
    for w in READS {
        let mut volume_runs = Vec::new();
        let mut member_runs = Vec::new();
        for round in 0..s.rounds {
            // Alternate which case goes first.
            let order = if round % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for is_volume in order {
                let (dev, name, proc_idx) = if is_volume {
                    (&vol, "volume", Some(0))
                } else {
                    (&mem, "member", Some(0))
                };
                let r = measured(c, dev, &w.config(s.runtime_ms()), name, proc_idx).await?;
                eprintln!(
                    "  {} {name} round {}: {:.0} IOPS {:.1} MB/s p50 {:.0} us p99 {:.0} us, CPU s/M I/Os processor {:.2} storage {:.2}",
                    w.name,
                    round + 1,
                    r.iops,
                    r.mb_per_s,
                    r.lat_p50_us,
                    r.lat_p99_us,
                    r.processor_cpu_s_per_million_ios,
                    r.storage_cpu_s_per_million_ios
                );
                if is_volume {
                    volume_runs.push(r);
                } else {
                    member_runs.push(r);
                }
            }
        }
        let vm = median_run(&volume_runs);
        let mm = median_run(&member_runs);
        out.results.push(Compare {
            workload: w,
            ratio_iops: ratio(vm.iops, mm.iops),
            ratio_mb_per_s: ratio(vm.mb_per_s, mm.mb_per_s),
            ratio_lat_p50: ratio(vm.lat_p50_us, mm.lat_p50_us),
            ratio_lat_p99: ratio(vm.lat_p99_us, mm.lat_p99_us),
            ratio_cluster_cpu_per_io: ratio(
                vm.cluster_cpu_s_per_million_ios,
                mm.cluster_cpu_s_per_million_ios,
            ),
            volume_median: vm,
            member_median: mm,
            volume_runs,
            member_runs,
        });
    }
    Ok(())
}
