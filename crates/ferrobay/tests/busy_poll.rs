//! Busy polling (`--busy-poll-us`, issue 15), as a user runs it: a polling `ferrobay node
//! run` and a polling `ferrobay bench` move verified data at queue depths 1 and 32, the
//! node's /metrics shows that it polled, and at rest it uses no CPU (it polls only while
//! I/O flows); the event-driven default never polls; a window above a second is refused
//! with a one-line reason.

mod common;

use std::time::Duration;

use common::{NodeProcess, ferrobay_output as ferrobay, output_text as text, scratch_dir};
use serde_json::Value;

const NQN: &str = "nqn.2026-01.io.ferrobay:n1:d0";
const WINDOW_US: &str = "500";

fn u(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no {path} in {v:#}"))
}

/// A verified write run at `iodepth` over the first 8 MiB, polling or not.
fn verified_run(url: &str, iodepth: &str, busy_poll_us: &str) {
    let out = ferrobay(&[
        "bench",
        "--target",
        url,
        "--rw",
        "randwrite",
        "--bs",
        "4k",
        "--iodepth",
        iodepth,
        "--range",
        "8M",
        "--runtime",
        "700ms",
        "--verify",
        "--busy-poll-us",
        busy_poll_us,
        "--json",
    ]);
    assert!(out.status.success(), "QD {iodepth}: {}", text(&out));
    let r: Value = serde_json::from_slice(&out.stdout).expect("bench JSON");
    assert_eq!(u(&r, "/errors"), 0, "QD {iodepth}: {r:#}");
    assert!(u(&r, "/write_ios") > 0, "QD {iodepth}: {r:#}");
    // Random writes overwrite some blocks: every block written is read back once.
    let read_back = u(&r, "/verify/blocks_read_back");
    assert!(read_back > 0, "QD {iodepth}: {r:#}");
    assert!(
        read_back <= u(&r, "/verify/blocks_written"),
        "QD {iodepth}: {r:#}"
    );
    assert_eq!(
        u(&r, "/verify/blocks_checked"),
        read_back,
        "QD {iodepth}: {r:#}"
    );
    for kind in [
        "blocks_failed",
        "blocks_unreadable",
        "torn",
        "lost",
        "corrupt",
        "misdirected",
    ] {
        assert_eq!(
            u(&r, &format!("/verify/{kind}")),
            0,
            "QD {iodepth} {kind}: {r:#}"
        );
    }
}

/// `ferrobay_busy_poll_turns_total` of the node.
fn busy_poll_turns(node: &NodeProcess) -> u64 {
    let api = node.endpoints.http.as_deref().expect("HTTP listener");
    let page = common::netns::http_get(api, "/metrics").expect("/metrics");
    let line = page
        .lines()
        .find(|l| l.starts_with("ferrobay_busy_poll_turns_total{"))
        .unwrap_or_else(|| panic!("no busy poll counter in /metrics:\n{page}"));
    line.rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("bad counter line {line:?}"))
}

fn cpu_s(node: &NodeProcess) -> f64 {
    bench::CpuTime::of_pid(node.child.id())
        .expect("node's /proc stat")
        .total()
        .as_secs_f64()
}

#[test]
fn a_polling_node_and_initiator_move_verified_data_and_rest_without_cpu() {
    let dir = scratch_dir("busy-poll");
    let node = NodeProcess::start_with(
        "n1",
        dir.path(),
        &["ram:32M".to_string()],
        (0, 0, 0),
        &["--busy-poll-us", WINDOW_US],
        &[],
    );
    let url = format!("nvme+tcp://{}/{NQN}/1", node.endpoints.nvme_tcp[0]);
    assert_eq!(busy_poll_turns(&node), 0, "nothing to poll for yet");
    for iodepth in ["1", "32"] {
        verified_run(&url, iodepth, WINDOW_US);
    }
    let turns = busy_poll_turns(&node);
    assert!(turns > 0, "the node never polled");

    // At rest: once the window has passed, the node sleeps like an event-driven one.
    std::thread::sleep(Duration::from_millis(300));
    let (turns0, cpu0) = (busy_poll_turns(&node), cpu_s(&node));
    std::thread::sleep(Duration::from_secs(1));
    let (turns1, cpu1) = (busy_poll_turns(&node), cpu_s(&node));
    assert!(
        cpu1 - cpu0 < 0.1,
        "a polling node at rest used {:.3} s of CPU in 1 s",
        cpu1 - cpu0
    );
    // No NVMe/TCP connection is left (the bench is gone): nothing polls.
    assert_eq!(turns1, turns0, "polling turns at rest");
}

#[test]
fn the_event_driven_default_never_polls() {
    let dir = scratch_dir("busy-poll-off");
    let node = NodeProcess::start("n1", dir.path(), &["ram:32M".to_string()], (0, 0, 0));
    let url = format!("nvme+tcp://{}/{NQN}/1", node.endpoints.nvme_tcp[0]);
    verified_run(&url, "1", "0");
    assert_eq!(busy_poll_turns(&node), 0);
}

#[test]
fn a_window_above_a_second_is_refused_in_one_line() {
    for args in [
        &["bench", "--target", "ram:1M", "--busy-poll-us", "1000001"][..],
        &["node", "run", "--name", "n1", "--busy-poll-us", "2000000"][..],
        &[
            "processor",
            "run",
            "--name",
            "p1",
            "--busy-poll-us",
            "1000001",
        ][..],
    ] {
        let out = ferrobay(args);
        assert!(!out.status.success(), "{args:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--busy-poll-us") && err.contains("0..=1000000"),
            "{args:?}: {err}"
        );
    }
}
