//! Issue 12's QoS test with real processes over real TCP: one `ferrobay node run` with a
//! RAM drive, two hosts on its namespace, each a `ferrobay bench` process with its own host
//! NQN. One is limited with `ferrobay node qos set` (through the node's API): it stays
//! within ±5% of its limit over its run. The other, a latency probe at queue depth 1, is
//! measured alone before and after and while the limited host runs, in the same test: its
//! p50 and p99 with the limited host running are no higher than alone, beyond noise. The
//! limit is far below what the node does, so what is compared is QoS, not the machine.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{NodeProcess, ferrobay_bin, scratch_dir};
use serde_json::Value;

const NQN: &str = "nqn.2026-01.io.ferrobay:n1:d0";
const LIMITED: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-aaaa-4000-8000-000000000001";
const PROBE: &str = "nqn.2014-08.org.nvmexpress:uuid:22222222-bbbb-4000-8000-000000000002";
const LIMIT_IOPS: f64 = 400.0;

/// Runs a ferrobay command to completion; its stdout (panics with its output on failure).
fn ferrobay(args: &[&str]) -> String {
    let out = Command::new(ferrobay_bin())
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run ferrobay");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ferrobay {args:?} failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A `ferrobay bench` host: 4 KiB random reads at `qd` for `secs`, as `hostnqn`.
fn start_bench(addr: &str, hostnqn: &str, qd: u32, secs: u32) -> Child {
    Command::new(ferrobay_bin())
        .args([
            "bench",
            "--target",
            &format!("nvme+tcp://{addr}/{NQN}/1"),
            "--hostnqn",
            hostnqn,
            "--rw",
            "randread",
            "--bs",
            "4k",
            "--iodepth",
            &qd.to_string(),
            "--runtime",
            &format!("{secs}s"),
            "--json",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ferrobay bench")
}

/// The bench's JSON report.
fn report(child: Child) -> Value {
    let out = child.wait_with_output().expect("bench output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(r["errors"], 0, "{r}");
    r
}

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut v = v;
    for p in path {
        v = &v[*p];
    }
    v.as_f64().unwrap_or_else(|| panic!("{path:?} in {v}"))
}

/// (p50, p99) read latency in µs of a report.
fn latency(r: &Value) -> (f64, f64) {
    (
        num(r, &["read_latency", "p50_us"]),
        num(r, &["read_latency", "p99_us"]),
    )
}

fn data_dir_arg(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn a_limited_host_stays_at_its_limit_and_the_other_host_does_not_slow_down() {
    let dir = scratch_dir("qos-cli");
    let data = dir.path().join("n1");
    let node = NodeProcess::start("n1", &data, &["d0=ram:256M".to_string()], (0, 0, 0));
    let addr = node.endpoints.nvme_tcp[0].clone();
    let dd = data_dir_arg(&data);

    // The limit, through the CLI and the node's API.
    let set = ferrobay(&[
        "node",
        "qos",
        "set",
        "--data-dir",
        &dd,
        NQN,
        "1",
        "--host",
        LIMITED,
        "--iops",
        "400",
        "--burst-iops",
        "4",
    ]);
    assert!(set.contains(LIMITED) && set.contains("400"), "{set}");

    // The probe alone, then with the limited host running, then alone again. Latency on a
    // shared 2-core machine has outliers from other processes: the comparison is repeated
    // (up to 3 times) before it counts as a failure; the limit must hold every time.
    const ATTEMPTS: usize = 3;
    // The limited host's commands over every attempt (the limit's counters add up).
    let mut limited_ios = 0.0;
    for attempt in 1..=ATTEMPTS {
        let alone_before = report(start_bench(&addr, PROBE, 1, 3));
        let limited = start_bench(&addr, LIMITED, 32, 6);
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let with_limited = report(start_bench(&addr, PROBE, 1, 3));
        let limited = report(limited);
        let alone_after = report(start_bench(&addr, PROBE, 1, 3));

        let iops = num(&limited, &["iops"]);
        limited_ios += num(&limited, &["read_ios"]);
        let (b50, b99) = latency(&alone_before);
        let (a50, a99) = latency(&alone_after);
        let (w50, w99) = latency(&with_limited);
        eprintln!(
            "attempt {attempt}: limited host: {iops:.0} IOPS (limit {LIMIT_IOPS}); probe alone \
             p50 {b50:.0}/{a50:.0} µs p99 {b99:.0}/{a99:.0} µs, with the limited host p50 \
             {w50:.0} µs p99 {w99:.0} µs, alone {:.0} IOPS",
            num(&alone_before, &["iops"])
        );
        assert!(
            (iops - LIMIT_IOPS).abs() <= LIMIT_IOPS * 0.05,
            "limited host: {iops:.0} IOPS for a limit of {LIMIT_IOPS}\n{limited}"
        );
        assert!(
            num(&alone_before, &["iops"]) > 3.0 * LIMIT_IOPS,
            "the node does far more than the limit alone: {alone_before}"
        );
        // Noise: the worse of the two runs alone, a relative margin and a small absolute
        // one (scheduling on a shared 2-core machine).
        let (n50, n99) = (b50.max(a50), b99.max(a99));
        let p50_ok = w50 <= n50 * 1.3 + 25.0;
        let p99_ok = w99 <= n99 * 1.6 + 250.0;
        if p50_ok && p99_ok {
            break;
        }
        assert!(
            attempt < ATTEMPTS,
            "the limited host slowed the other one down in {ATTEMPTS} attempts: probe p50 \
             {w50:.0} µs, p99 {w99:.0} µs with the limited host, p50 {b50:.0}/{a50:.0} µs, \
             p99 {b99:.0}/{a99:.0} µs alone"
        );
    }

    // What the limit did, as `qos list` shows it; then it goes.
    let listed: Value = serde_json::from_str(&ferrobay(&[
        "node",
        "qos",
        "list",
        "--data-dir",
        &dd,
        "--json",
    ]))
    .expect("qos list JSON");
    let entry = &listed["limits"][0];
    assert_eq!(entry["host_nqn"], LIMITED, "{listed}");
    assert_eq!(entry["max_iops"], 400);
    assert!(
        entry["stats"]["throttled_commands"].as_u64().unwrap_or(0) > 0,
        "{listed}"
    );
    assert_eq!(
        entry["stats"]["commands"].as_f64(),
        Some(limited_ios),
        "only the limited host's commands pass its limit: {listed}"
    );
    let text = ferrobay(&["node", "qos", "list", "--data-dir", &dd]);
    assert!(text.starts_with("SUBSYSTEM"), "{text}");
    ferrobay(&[
        "node",
        "qos",
        "clear",
        "--data-dir",
        &dd,
        NQN,
        "1",
        "--host",
        LIMITED,
    ]);
    assert_eq!(
        ferrobay(&["node", "qos", "list", "--data-dir", &dd]),
        "no QoS limits\n"
    );
    // A bad limit is refused with its reason.
    let out = Command::new(ferrobay_bin())
        .args([
            "node",
            "qos",
            "set",
            "--data-dir",
            &dd,
            NQN,
            "7",
            "--iops",
            "5",
        ])
        .output()
        .expect("run ferrobay");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no namespace 7 in"), "{err}");
    drop(node);
}
