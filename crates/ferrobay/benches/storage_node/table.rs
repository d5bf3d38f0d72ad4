//! The short human summary (stderr), with the ratios.

use std::fmt::Write as _;

use crate::guest::{Comparison, GuestSection};
use crate::native::NativeSection;

pub fn render(native: &NativeSection, guest: &GuestSection) -> String {
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
    s
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
