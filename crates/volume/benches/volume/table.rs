//! The human table (stderr).

use crate::case::Settings;
use crate::measure::Measured;
use crate::members::Media;
use crate::result::CaseResult;

pub fn print(r: &CaseResult, st: &Settings) {
    let n = r.layout.members;
    eprintln!();
    eprintln!(
        "== {} {} ({} members, {}+{}){}",
        r.media.name(),
        r.layout.level,
        n,
        r.k,
        r.m,
        match (r.media, r.direct, r.uring) {
            (Media::Ram, _, _) => String::new(),
            (_, true, true) => ", O_DIRECT + io_uring".into(),
            (_, d, u) => format!(", WARNING: O_DIRECT {d}, io_uring {u}"),
        }
    );
    let row = |what: String, v: f64, unit: &str, cpu: String| {
        eprintln!("  {what:<52} {v:>9.0} {unit:<5} {cpu}");
    };
    let extra = |m: &Measured| {
        let mut s = format!(", {:.1} cores", m.cores());
        if let Some(x) = m.spread {
            s += &format!(", after/before {x:.2}");
        }
        s
    };
    let gb = |m: &Measured| format!("cpu {:.2} s/GB{}", m.cpu_s_per_gb(), extra(m));
    let io = |m: &Measured| format!("cpu {:.1} us/IO{}", m.cpu_us_per_io(), extra(m));
    let su_kib = st.stripe_unit_bytes >> 10;
    let full_kib = r.k as u64 * su_kib;
    let (sq, rq, j) = (st.seq_qd, st.rand_qd, st.vol_jobs);

    let m = &r.base_seq_write;
    row(
        format!("members' seq write, sum of {n} ({su_kib}K QD {sq} each)"),
        m.mb_per_s,
        "MB/s",
        gb(m),
    );
    let m = &r.base_seq_read;
    row(
        format!("members' seq read, sum of {n}"),
        m.mb_per_s,
        "MB/s",
        gb(m),
    );
    let m = &r.base_randwrite;
    let qe = r.base_rand_qd_each;
    row(
        format!("members' 4K randwrite, sum of {n} (QD {qe} each)"),
        m.iops,
        "IOPS",
        io(m),
    );
    let m = &r.base_randrw;
    row(
        format!("members' 4K randrw 50/50, sum of {n}"),
        m.iops,
        "IOPS",
        io(m),
    );
    let m = &r.base_one_seq_write;
    row(
        "one member's seq write, alone".into(),
        m.mb_per_s,
        "MB/s",
        gb(m),
    );
    let m = &r.full_stripe_write;
    row(
        format!("volume full-stripe write ({full_kib}K, QD {sq}, {j} jobs)"),
        m.mb_per_s,
        "MB/s",
        gb(m),
    );
    let m = &r.randwrite;
    row(
        format!("volume 4K randwrite (QD {rq}, {j} jobs)"),
        m.iops,
        "IOPS",
        io(m),
    );
    let m = &r.read_healthy;
    row(
        format!("volume seq read, healthy ({full_kib}K, QD {sq})"),
        m.mb_per_s,
        "MB/s",
        gb(m),
    );
    let m = &r.read_degraded;
    row(
        "volume seq read, degraded (1 member lost)".into(),
        m.mb_per_s,
        "MB/s",
        gb(m),
    );
    for rb in [&r.rebuild_unlimited, &r.rebuild_default] {
        let what = format!(
            "rebuild {} ({}/{} MiB{})",
            rb.throttle,
            rb.bytes_done >> 20,
            rb.bytes_total >> 20,
            if rb.finished { "" } else { ", stopped at cap" }
        );
        let cores = if rb.elapsed_s > 0.0 {
            rb.cpu_s / rb.elapsed_s
        } else {
            0.0
        };
        row(
            what,
            rb.mb_per_s,
            "MB/s",
            format!(
                "cpu {:.2} s, {cores:.1} cores, busy {:.2} of the time",
                rb.cpu_s, rb.busy_fraction
            ),
        );
    }
    eprintln!("  ratios:");
    for q in r.ratios() {
        eprintln!("    {:>6.3}  {}", q.value, q.what);
    }
    if r.errors() > 0 {
        eprintln!("  I/O ERRORS: {}", r.errors());
    }
}
