//! The short human summary (stderr), with the ratios.

use std::fmt::Write as _;

use crate::guest::{Comparison, GuestSection};
use crate::native::NativeSection;
use crate::spdk::SpdkSection;

pub fn render(native: &NativeSection, guest: &GuestSection, spdk: &SpdkSection) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nA. native loopback: {} <- nvmf-host in this process",
        native.target
    );
    let _ = writeln!(
        s,
        "   {:<20} {:>10} {:>9} {:>8} {:>8} {:>14} {:>14}",
        "workload", "IOPS", "MB/s", "p50 us", "p99 us", "target s/MIO", "initiator s/MIO"
    );
    for r in &native.results {
        let lat = if r.report.read_ios >= r.report.write_ios {
            &r.report.read_latency
        } else {
            &r.report.write_latency
        };
        let _ = writeln!(
            s,
            "   {:<20} {:>10.0} {:>9.1} {:>8.1} {:>8.1} {:>14.2} {:>14.2}",
            r.workload,
            r.report.iops,
            r.report.mb_per_s,
            lat.p50_us,
            lat.p99_us,
            r.target_cpu_s_per_million_ios,
            r.initiator_cpu_s_per_million_ios
        );
    }
    if let Some(e) = &native.error {
        let _ = writeln!(s, "   error: {}", first_line(e));
    }

    let _ = writeln!(
        s,
        "\nB. {}",
        if guest.description.is_empty() {
            "guest"
        } else {
            &guest.description
        }
    );
    if let Some(why) = &guest.skipped {
        let _ = writeln!(s, "   skipped: {why}");
    }
    for initiator in ["nvmf-host", "linux-nvme-tcp+fio"] {
        let rows: Vec<&Comparison> = guest
            .comparisons
            .iter()
            .filter(|c| c.initiator == initiator)
            .collect();
        let Some(first) = rows.first() else {
            continue;
        };
        let _ = writeln!(
            s,
            "   initiator {initiator}, mean of {} run(s) per target; ratio = ferrobay / kernel",
            first.ferrobay.runs.min(first.kernel.runs)
        );
        let _ = writeln!(
            s,
            "   {:<20} {:>9} {:>9} {:>6} | {:>7} {:>7} {:>6} | {:>7} {:>7} {:>6} | {:>7} {:>7} {:>6}",
            "workload",
            "IOPS f",
            "IOPS k",
            "ratio",
            "MB/s f",
            "MB/s k",
            "ratio",
            "p99us f",
            "p99us k",
            "ratio",
            "CPU f",
            "CPU k",
            "ratio"
        );
        for c in rows {
            let (cf, ck, cr) = match (
                c.ferrobay.target_cpu_s_per_million_ios_est,
                c.kernel.target_cpu_s_per_million_ios_est,
                c.ratio_target_cpu_per_io_est,
            ) {
                (Some(f), Some(k), Some(r)) => (f, k, r),
                _ => (
                    c.ferrobay.guest_busy_cpu_s_per_million_ios,
                    c.kernel.guest_busy_cpu_s_per_million_ios,
                    c.ratio_guest_busy_cpu_per_io,
                ),
            };
            let _ = writeln!(
                s,
                "   {:<20} {:>9.0} {:>9.0} {:>6.2} | {:>7.1} {:>7.1} {:>6.2} | {:>7.0} {:>7.0} {:>6.2} | {:>7.0} {:>7.0} {:>6.2}",
                c.workload,
                c.ferrobay.iops,
                c.kernel.iops,
                c.ratio_iops,
                c.ferrobay.mb_per_s,
                c.kernel.mb_per_s,
                c.ratio_mb_per_s,
                c.ferrobay.p99_us,
                c.kernel.p99_us,
                c.ratio_p99_latency,
                cf,
                ck,
                cr
            );
        }
        let _ = writeln!(
            s,
            "   (CPU: {})",
            if initiator == "nvmf-host" {
                "target CPU s per million I/Os = guest busy CPU minus the initiator process"
            } else {
                "whole-guest busy CPU s per million I/Os (kernel host + fio + target)"
            }
        );
    }
    // How much slower the emulated guest is than this machine, for the same target and load.
    let mut tcg = Vec::new();
    for n in &native.results {
        if let Some(g) = guest.results.iter().find(|g| {
            g.initiator == "nvmf-host" && g.target == "ferrobay" && g.workload == n.workload
        }) && g.iops > 0.0
        {
            tcg.push(format!("{} {:.0}x", n.workload, n.report.iops / g.iops));
        }
    }
    let spread = guest
        .comparisons
        .iter()
        .flat_map(|c| [&c.ferrobay, &c.kernel])
        .filter(|side| side.iops > 0.0)
        .map(|side| (side.iops_max - side.iops_min) / side.iops)
        .fold(0.0, f64::max);
    if !guest.comparisons.is_empty() {
        let _ = writeln!(
            s,
            "   largest IOPS spread between rounds of one target: {:.0}% of its mean",
            spread * 100.0
        );
    }
    if !tcg.is_empty() {
        let _ = writeln!(
            s,
            "   native / guest IOPS of ferrobay (the cost of TCG): {}",
            tcg.join(", ")
        );
    }
    if let Some(e) = &guest.error {
        let _ = writeln!(s, "   error: {}", first_line(e));
    }
    if !guest.log.is_empty() {
        let _ = writeln!(s, "   guest log: {}", guest.log);
    }
    s += &render_spdk(spdk);
    s
}

/// Section C: two tables per workload row, speed and CPU; ratio = ferrobay / SPDK.
fn render_spdk(spdk: &SpdkSection) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nC. ferrobay vs SPDK nvmf_tgt{}",
        if spdk.description.is_empty() {
            String::new()
        } else {
            format!(": {}", spdk.description)
        }
    );
    if let Some(why) = &spdk.skipped {
        let _ = writeln!(s, "   not run: {why}");
    }
    if let Some(first) = spdk.comparisons.first() {
        let _ = writeln!(
            s,
            "   median of {} run(s) per target; ratio = ferrobay / SPDK",
            first.ferrobay.runs.min(first.spdk.runs)
        );
        let _ = writeln!(
            s,
            "   {:<18} {:>8} {:>8} {:>5} | {:>7} {:>7} {:>5} | {:>6} {:>6} {:>5} | {:>6} {:>6} {:>5}",
            "workload",
            "IOPS f",
            "IOPS s",
            "ratio",
            "MB/s f",
            "MB/s s",
            "ratio",
            "p50 f",
            "p50 s",
            "ratio",
            "p99 f",
            "p99 s",
            "ratio"
        );
        for c in &spdk.comparisons {
            let _ = writeln!(
                s,
                "   {:<18} {:>8.0} {:>8.0} {:>5.2} | {:>7.1} {:>7.1} {:>5.2} | {:>6.0} {:>6.0} {:>5.2} | {:>6.0} {:>6.0} {:>5.2}",
                c.workload,
                c.ferrobay.iops,
                c.spdk.iops,
                c.ratio_iops,
                c.ferrobay.mb_per_s,
                c.spdk.mb_per_s,
                c.ratio_mb_per_s,
                c.ferrobay.p50_us,
                c.spdk.p50_us,
                c.ratio_p50_latency,
                c.ferrobay.p99_us,
                c.spdk.p99_us,
                c.ratio_p99_latency
            );
        }
        let _ = writeln!(
            s,
            "   target CPU: s per million I/Os (process CPU; SPDK also its reactors' busy time), \
             cores held, IOPS per target CPU second; init r = initiator CPU per I/O f/s; \
             other = most cores other work on the machine took during one of these runs; \
             irq r = ratio of irq+softirq cores (loopback TCP, charged to no process)"
        );
        let _ = writeln!(
            s,
            "   {:<18} {:>6} {:>6} {:>6} {:>5} {:>5} | {:>5} {:>5} | {:>8} {:>8} {:>5} | {:>6} | {:>5} {:>5}",
            "workload",
            "CPU f",
            "CPU s",
            "busy s",
            "f/s",
            "f/bsy",
            "cor f",
            "cor s",
            "IOPS/c f",
            "IOPS/c s",
            "ratio",
            "init r",
            "other",
            "irq r"
        );
        for c in &spdk.comparisons {
            let busy = c.spdk.target_busy_s_per_million_ios;
            let _ = writeln!(
                s,
                "   {:<18} {:>6.2} {:>6.2} {:>6} {:>5.2} {:>5} | {:>5.2} {:>5.2} | {:>8.0} {:>8.0} {:>5.2} | {:>6.2} | {:>5} {:>5}",
                c.workload,
                c.ferrobay.target_cpu_s_per_million_ios,
                c.spdk.target_cpu_s_per_million_ios,
                busy.map_or("-".into(), |b| format!("{b:.2}")),
                c.ratio_target_cpu_per_io,
                c.ratio_target_cpu_per_io_vs_spdk_busy
                    .map_or("-".into(), |r| format!("{r:.2}")),
                c.ferrobay.target_cores,
                c.spdk.target_cores,
                c.ferrobay.iops_per_target_cpu_s,
                c.spdk.iops_per_target_cpu_s,
                c.ratio_iops_per_target_cpu_s,
                c.ferrobay.initiator_cpu_s_per_million_ios
                    / c.spdk
                        .initiator_cpu_s_per_million_ios
                        .max(f64::MIN_POSITIVE),
                match (c.ferrobay.other_cores_max, c.spdk.other_cores_max) {
                    (Some(f), Some(s)) => format!("{:.2}", f.max(s)),
                    _ => "-".into(),
                },
                c.ferrobay
                    .irq_cores
                    .zip(c.spdk.irq_cores)
                    .map_or("-".into(), |(f, s)| format!(
                        "{:.2}",
                        f / s.max(f64::MIN_POSITIVE)
                    ))
            );
        }
        let spread = spdk
            .comparisons
            .iter()
            .flat_map(|c| [&c.ferrobay, &c.spdk])
            .filter(|side| side.iops > 0.0)
            .map(|side| (side.iops_max - side.iops_min) / side.iops)
            .fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "   largest IOPS spread between rounds of one target: {:.0}% of its mean",
            spread * 100.0
        );
        let _ = writeln!(
            s,
            "   (SPDK polls: its process CPU is ~ wall time x reactor cores at any load; \
             'busy s' is the time its pollers did work; ferrobay's CPU is its work)"
        );
    }
    if !spdk.comparisons_quiet.is_empty() {
        let _ = writeln!(
            s,
            "   quiet runs only (other work <= {:.2} cores), medians; n = runs of each target",
            spdk.quiet_other_cores_max
        );
        let _ = writeln!(
            s,
            "   {:<18} {:>3} {:>3} | {:>8} {:>8} {:>5} | {:>6} {:>6} | {:>6} {:>6} | {:>6} {:>6} {:>6}",
            "workload",
            "n f",
            "n s",
            "IOPS f",
            "IOPS s",
            "ratio",
            "p99 f",
            "p99 s",
            "cor f",
            "cor s",
            "CPU f",
            "CPU s",
            "busy s"
        );
        for c in &spdk.comparisons_quiet {
            let _ = writeln!(
                s,
                "   {:<18} {:>3} {:>3} | {:>8.0} {:>8.0} {:>5.2} | {:>6.0} {:>6.0} | {:>6.2} {:>6.2} | {:>6.2} {:>6.2} {:>6}",
                c.workload,
                c.ferrobay.runs,
                c.spdk.runs,
                c.ferrobay.iops,
                c.spdk.iops,
                c.ratio_iops,
                c.ferrobay.p99_us,
                c.spdk.p99_us,
                c.ferrobay.target_cores,
                c.spdk.target_cores,
                c.ferrobay.target_cpu_s_per_million_ios,
                c.spdk.target_cpu_s_per_million_ios,
                c.spdk
                    .target_busy_s_per_million_ios
                    .map_or("-".into(), |b| format!("{b:.2}"))
            );
        }
    }
    for l in &spdk.spdk_log_problems {
        let _ = writeln!(s, "   nvmf_tgt log: {l}");
    }
    for n in &spdk.interop_notes {
        let _ = writeln!(s, "   interop: {n}");
    }
    if let Some(e) = &spdk.error {
        let _ = writeln!(s, "   error: {}", first_line(e));
    }
    s
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
