//! The Linux kernel NVMe/TCP host (nvme-cli in a QEMU guest) against `ferrobay node`:
//! discovery, connect with and without digests and with 1 and 2 I/O queues, O_DIRECT
//! data verification, identify, SMART counters, reservations, namespace management,
//! a node restart while connected, disconnect.

mod common;

use std::time::Duration;

use common::{NodeProcess, scratch_dir};
use test_guest::{GuestConfig, spawn};

#[test]
fn linux_host_against_storage_node() {
    let dir = scratch_dir("kernel-host");
    let data = dir.path().join("n1");
    let drives = vec![
        format!("file:{}:256M", dir.path().join("d0.img").display()),
        format!("file:{}:256M", dir.path().join("d1.img").display()),
    ];
    let mut node = NodeProcess::start("n1", &data, &drives, (0, 0, 0));
    let ports = (
        node.endpoints.nvme_port(),
        node.endpoints.discovery_port(),
        0,
    );
    let nqn0 = "nqn.2026-01.io.ferrobay:n1:d0";
    let nqn1 = "nqn.2026-01.io.ferrobay:n1:d1";

    let cfg = GuestConfig::new(
        "kernel-host-storage-node",
        include_str!("guest/storage_node.sh"),
    )
    .env("PORT", ports.0)
    .env("DPORT", ports.1)
    .env("NQN0", nqn0)
    .env("NQN1", nqn1)
    .timeout(Duration::from_secs(600));
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}\nnode log:\n{}", node.log()));

    // Mid-job: kill the node as a power cut would and bring it back on the same ports.
    guest
        .wait_for("restart-node", Duration::from_secs(420))
        .unwrap_or_else(|e| panic!("{e}\nnode log:\n{}", node.log()));
    node.kill();
    let node = NodeProcess::start("n1", &data, &drives, ports);
    guest.release("restart-node").expect("release the guest");

    let run = guest
        .finish(Duration::from_secs(420))
        .unwrap_or_else(|e| panic!("{e}\nnode log:\n{}", node.log()));
    for want in [
        "discover_port_",
        "connect_digests",
        "io_queues_2",
        "id_ctrl",
        "id_ns",
        "smart_log_moved",
        "resv_report",
        "new_blockdev_2",
        "reconnected_after_restart",
        "unsafe_shutdown_counted",
        "io_queues_1",
        "disconnect",
    ] {
        assert!(
            run.passes.iter().any(|p| p.name.starts_with(want)),
            "missing PASS {want}\n{}",
            run.diagnostics()
        );
    }
    assert!(run.fails.is_empty(), "{}", run.diagnostics());
}
