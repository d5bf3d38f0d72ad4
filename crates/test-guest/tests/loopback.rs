//! Harness self-test: the kernel's NVMe/TCP target (nvmet-tcp on a brd RAM
//! disk) and host (nvme-tcp) inside one guest, driven by nvme-cli, with the
//! O_DIRECT I/O matrix, fio write+verify (the fio image), and a host_sync
//! round trip in the middle of the job (guest -> host message, host -> guest
//! payload).

use std::time::Duration;

use test_guest::{GuestConfig, spawn};

const JOB: &str = r#"
NQN=nqn.2026-01.io.ferrobay.test:loopback
dev=$(nvmet_ramdisk 64) && nvmet_setup $NQN 127.0.0.1 4420 "$dev" ||
    { fail target_setup; dmesg_tail 20; exit 1; }
pass target_setup backing=$dev
check discover nvme discover -t tcp -a 127.0.0.1 -s 4420
ns=$(nvme_connect_tcp 127.0.0.1 4420 $NQN -i 2) || { fail connect; exit 1; }
ctrl=$(nvme_ctrl_dev $NQN)
pass connect ns=$ns ctrl=$ctrl queues=$(cat /sys/class/nvme/${ctrl#/dev/}/queue_count)
capture id-ns nvme id-ns $ns
io_matrix $ns 0 || exit 1
check fio_verify fio_verify $ns 16m 16m
payload=$(host_sync written "ns=$ns") || exit 1
result payload="$payload"
check disconnect nvme disconnect -n $NQN
check ns_gone wait_path_gone $ns 10
ns=$(nvme_connect_tcp 127.0.0.1 4420 $NQN) || { fail reconnect; exit 1; }
pass reconnect ns=$ns
io_matrix_check $ns 0
check fio_reverify fio_reverify $ns 16m 16m
# The 1 MiB case is on the target's backing device too.
check backing_store_matches io_check /dev/ram0 $((7 * 2097152 + 512)) 1048576 io.7
check final_disconnect nvme disconnect -n $NQN
"#;

#[test]
fn kernel_target_and_host_in_one_guest_with_host_sync() {
    let cfg = GuestConfig::new("selftest-loopback", JOB)
        .with_fio()
        .timeout(Duration::from_secs(240));
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let msg = guest
        .wait_for("written", Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        msg.starts_with("ns=/dev/nvme"),
        "message from the guest: {msg:?}"
    );
    // While the guest waits, the I/O matrix has run.
    let before = guest.snapshot();
    assert!(before.fails.is_empty(), "{}", before.diagnostics());
    assert!(
        before.passed("io_1048576_at_14680576").is_some(),
        "{}",
        before.diagnostics()
    );
    assert!(
        before.result("payload").is_none(),
        "the guest must still be blocked"
    );

    let token = format!("token-{}", std::process::id());
    guest.release_with("written", &token).expect("release");
    let run = guest
        .finish(Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.result("payload"), Some(token.as_str()));
    let matrix = run
        .passes
        .iter()
        .filter(|r| r.name.starts_with("io_"))
        .count();
    assert_eq!(
        matrix,
        16,
        "8 cases written + 8 re-checked:\n{}",
        run.diagnostics()
    );
    for name in [
        "target_setup",
        "discover",
        "connect",
        "ns_gone",
        "reconnect",
        "backing_store_matches",
        "final_disconnect",
        "fio_verify",
        "fio_reverify",
    ] {
        assert!(
            run.passed(name).is_some(),
            "PASS {name} missing\n{}",
            run.diagnostics()
        );
    }
    assert_eq!(
        run.passed("connect").and_then(|r| r.get("queues")),
        Some("3")
    );
}
