//! Section 2: two volumes loaded at once, owned by one processor node or by two.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use bench::{Pattern, Progress};
use blockdev::BlockDevice;
use serde::Serialize;
use testkit::stats::median;

use crate::daemons::Cluster;
use crate::load::{config, open, per_million, ratio};
use crate::settings::Settings;
use crate::{VOL_A, VOL_B};

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ScalingRun {
    pub(crate) case: &'static str,
    pub(crate) owner_a: String,
    pub(crate) owner_b: String,
    pub(crate) iops_a: f64,
    pub(crate) iops_b: f64,
    pub(crate) aggregate_iops: f64,
    pub(crate) p1_cpu_s: f64,
    pub(crate) p2_cpu_s: f64,
    pub(crate) storage_cpu_s: f64,
    /// p1 + p2 + storage nodes per million I/Os of both volumes.
    pub(crate) cluster_cpu_s_per_million_ios: f64,
    pub(crate) machine_busy_cpu_s: f64,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Scaling {
    pub(crate) workload: String,
    pub(crate) volumes: Vec<String>,
    pub(crate) runs: Vec<ScalingRun>,
    pub(crate) median_aggregate_iops_a: f64,
    pub(crate) median_aggregate_iops_b: f64,
    pub(crate) ratio_b_over_a: f64,
    pub(crate) note: String,
    pub(crate) error: Option<String>,
}

pub(crate) async fn section_scaling(
    c: &Cluster,
    s: &Settings,
    out: &mut Scaling,
    vol_b_dev: &Arc<dyn BlockDevice>,
) -> anyhow::Result<()> {
    out.workload = "randread_4k_qd32 on each volume, both at once".into();
    out.volumes = vec![VOL_A.into(), VOL_B.into()];
    out.note = format!(
        "{} CPUs: the storage nodes, both processor nodes and this initiator share them, so \
         case B cannot show the scaling separate machines would; it shows whether spreading \
         volumes over processor nodes costs or gains anything on the same CPUs",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let both = [0, 1];
    let a = open(&c.volume_url(VOL_A, &both)).await?;
    let b = vol_b_dev.clone();
    let cfg = config(Pattern::RandRead, 4096, 32, s.runtime_ms());
    for round in 0..s.rounds {
        let order = if round % 2 == 0 {
            ["A", "B"]
        } else {
            ["B", "A"]
        };
        for case in order {
            let owner_b = if case == "A" { "p1" } else { "p2" };
            if c.view(VOL_B)?.owner.is_none_or(|o| o.node != owner_b) {
                c.move_volume(VOL_B, owner_b)?;
                // Let the host see the ANA change before measuring.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let before = c.cpu();
            let (ra, rb) = tokio::join!(
                bench::run(a.clone(), &cfg, VOL_A, &Progress::Silent),
                bench::run(b.clone(), &cfg, VOL_B, &Progress::Silent)
            );
            let cpu = c.cpu().since(&before);
            let (ra, rb) = (ra?, rb?);
            for r in [&ra, &rb] {
                if r.errors > 0 {
                    bail!(
                        "{}: {} errors, first: {}",
                        r.target,
                        r.errors,
                        r.first_error.as_deref().unwrap_or("?")
                    );
                }
            }
            let ios = ra.read_ios + rb.read_ios;
            let cluster_cpu = cpu.proc(0) + cpu.proc(1) + cpu.nodes_total();
            let run = ScalingRun {
                case,
                owner_a: "p1".into(),
                owner_b: owner_b.into(),
                iops_a: ra.iops,
                iops_b: rb.iops,
                aggregate_iops: ra.iops + rb.iops,
                p1_cpu_s: cpu.proc(0),
                p2_cpu_s: cpu.proc(1),
                storage_cpu_s: cpu.nodes_total(),
                cluster_cpu_s_per_million_ios: per_million(cluster_cpu, ios),
                machine_busy_cpu_s: cpu.machine_busy_s,
            };
            eprintln!(
                "  case {case} round {}: {:.0} + {:.0} = {:.0} IOPS (CPU s: p1 {:.1} p2 {:.1} storage {:.1})",
                round + 1,
                run.iops_a,
                run.iops_b,
                run.aggregate_iops,
                run.p1_cpu_s,
                run.p2_cpu_s,
                run.storage_cpu_s
            );
            out.runs.push(run);
        }
    }
    let agg = |case: &str| {
        median(
            out.runs
                .iter()
                .filter(|r| r.case == case)
                .map(|r| r.aggregate_iops)
                .collect(),
        )
    };
    out.median_aggregate_iops_a = agg("A");
    out.median_aggregate_iops_b = agg("B");
    out.ratio_b_over_a = ratio(out.median_aggregate_iops_b, out.median_aggregate_iops_a);
    // Back to one owner for what follows.
    c.move_volume(VOL_B, "p1")?;
    Ok(())
}
