//! A Key Value namespace on `ferrobay node`, used by the real Linux host: the namespace
//! is made with `ferrobay node ns create --kv`, the Linux 6.1 guest (nvme-cli, nvme-tcp,
//! `guest/kv.sh`) connects, sees it identified as KV (a generic char device /dev/ngXnY,
//! CSI 1 in its descriptors, ready in CNS 08h, its KV format in CNS 05h), and with
//! `nvme io-passthru` stores, retrieves (bytes compared), checks, lists and deletes
//! values; bad input gets the status the specification gives and the connection keeps
//! working; the node is killed (as a power cut) and restarted mid-job and the values come
//! back; `nvme create-ns --csi 1` makes another KV namespace. About a minute under TCG.
//!
//! Skips (with the reason on stderr) without QEMU or the guest image, unless
//! FERROBAY_REQUIRE_ALL=1, which makes that a failure.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{NodeProcess, ferrobay_bin, scratch_dir};
use test_guest::{GuestConfig, spawn};

const NQN: &str = "nqn.2026-01.io.ferrobay:n1:d0";
const MAX_VALUE: u64 = 1 << 20;

/// Runs `ferrobay node ARGS --data-dir DIR`; its stdout, or a panic with its stderr.
fn node_cli(data: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(ferrobay_bin())
        .arg("node")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .expect("run ferrobay node");
    assert!(
        out.status.success(),
        "ferrobay node {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn linux_host_stores_and_retrieves_through_a_kv_namespace() {
    if let Some(why) = test_guest::unavailable() {
        testkit::prereq::missing(why);
        return;
    }
    let dir = scratch_dir("kv-guest");
    let data = dir.path().join("n1");
    let drives = vec![format!("file:{}:256M", dir.path().join("d0.img").display())];
    let mut node = NodeProcess::start("n1", &data, &drives, (0, 0, 0));
    let ports = (
        node.endpoints.nvme_port(),
        node.endpoints.discovery_port(),
        0,
    );

    // The drive's default namespace makes room for a 32 MiB NVM one and a KV one.
    node_cli(&data, &["ns", "delete", NQN, "1"]);
    node_cli(&data, &["ns", "create", "--drive", "d0", "--size", "32M"]);
    let created = node_cli(
        &data,
        &[
            "ns",
            "create",
            "--drive",
            "d0",
            "--size",
            "96M",
            "--kv",
            "--max-value-size",
            "1M",
        ],
    );
    let row = created.lines().nth(1).unwrap_or_default().to_string();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        (cols.get(1), cols.get(2), cols.get(4), cols.get(5)),
        (Some(&"2"), Some(&"kv"), Some(&"96.0"), Some(&"MiB")),
        "ns create --kv prints the new namespace:\n{created}"
    );

    let cfg = GuestConfig::new("kv-namespace", include_str!("guest/kv.sh"))
        .env("PORT", ports.0)
        .env("NQN", NQN)
        .env("MAX_VALUE", MAX_VALUE)
        .timeout(Duration::from_secs(420));
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}\nnode log:\n{}", node.log()));
    guest
        .wait_for("restart-node", Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("{e}\nnode log:\n{}", node.log()));
    node.kill();
    let mut node = NodeProcess::start("n1", &data, &drives, ports);
    guest.release("restart-node").expect("release the guest");
    let run = guest
        .finish(Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("{e}\nnode log:\n{}", node.log()));
    for want in [
        "connect",
        "nvm_blockdev",
        "kv_chardev",
        "kv_no_blockdev",
        "kernel_identifies_kv",
        "ns_descs_csi_kv",
        "cs_indep_ready",
        "id_iocs_nvm_kv",
        "id_ns_kv",
        "store_small",
        "store_1mib",
        "retrieve_small",
        "retrieve_1mib",
        "retrieve_short_buffer",
        "exist",
        "list",
        "delete",
        "exist_after_delete",
        "retrieve_after_delete",
        "delete_absent_is_ok",
        "key_length_17",
        "key_length_0",
        "store_create_only_exists",
        "store_overwrite_only_absent",
        "value_above_max",
        "list_buffer_too_small",
        "nvm_read_on_kv",
        "still_works",
        "still_reads",
        "nvm_io",
        "reconnected",
        "recovered_after_kill",
        "recovered_small",
        "deleted_stays_deleted",
        "create_ns_kv",
        "attach_ns_kv",
        "new_kv_chardev",
        "new_kv_store",
        "new_kv_retrieve",
        "delete_ns_kv",
        "new_kv_gone",
        "disconnect",
    ] {
        assert!(
            run.passed(want).is_some(),
            "missing PASS {want}\n{}",
            run.diagnostics()
        );
    }
    assert!(run.fails.is_empty(), "{}", run.diagnostics());

    // What the node says about it afterwards: two keys left, the host's namespace gone.
    let listed = node_cli(&data, &["ns", "list", "--json"]);
    let nss: serde_json::Value = serde_json::from_str(&listed).expect("ns list --json");
    let kv: Vec<&serde_json::Value> = nss
        .as_array()
        .expect("a list")
        .iter()
        .filter(|n| n["kind"] == "kv")
        .collect();
    assert_eq!(kv.len(), 1, "{listed}");
    assert_eq!(kv[0]["kv"]["key_count"], 2, "{listed}");
    assert_eq!(kv[0]["kv"]["status"], "ok", "{listed}");
    let status = node.stop();
    assert!(status.success(), "clean stop: {status}\n{}", node.log());
}
