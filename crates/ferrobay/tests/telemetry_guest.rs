//! The telemetry log pages of `ferrobay node` read by the real Linux host: after I/O from
//! the Linux 6.1 guest (nvme-tcp), `nvme get-log --log-id=0xc0` returns the extended SMART
//! page with the drive's and the namespace's records (counts as the guest's I/O), and
//! `nvme telemetry-log` the Telemetry Host-Initiated log whose data area 1 is that page
//! (`guest/telemetry.sh`). About half a minute under TCG.
//!
//! Skips (with the reason on stderr) without QEMU or the guest image, unless
//! FERROBAY_REQUIRE_ALL=1, which makes that a failure.

mod common;

use std::time::Duration;

use common::{NodeProcess, scratch_dir};
use test_guest::{GuestConfig, spawn};

const NQN: &str = "nqn.2026-01.io.ferrobay:n1:d0";

#[test]
fn linux_host_reads_the_extended_smart_and_telemetry_logs() {
    if let Some(why) = test_guest::unavailable() {
        testkit::prereq::missing(why);
        return;
    }
    let dir = scratch_dir("telemetry-guest");
    let data = dir.path().join("n1");
    let drives = vec![format!("file:{}:64M", dir.path().join("d0.img").display())];
    let mut node = NodeProcess::start("n1", &data, &drives, (0, 0, 0));
    let cfg = GuestConfig::new("telemetry-logs", include_str!("guest/telemetry.sh"))
        .env("PORT", node.endpoints.nvme_port())
        .env("NQN", NQN)
        .timeout(Duration::from_secs(240));
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}\nnode log:\n{}", node.log()));
    let run = guest
        .finish(Duration::from_secs(240))
        .unwrap_or_else(|e| panic!("{e}\nnode log:\n{}", node.log()));
    for want in [
        "connect",
        "io_write",
        "io_read",
        "ext_smart_signature",
        "ext_smart_records",
        "ext_smart_counts",
        "ext_smart_latency",
        "telemetry_log",
        "disconnect",
    ] {
        assert!(
            run.passed(want).is_some(),
            "missing PASS {want}\n{}",
            run.diagnostics()
        );
    }
    assert!(run.fails.is_empty(), "{}", run.diagnostics());
    let status = node.stop();
    assert!(status.success(), "clean stop: {status}\n{}", node.log());
}
