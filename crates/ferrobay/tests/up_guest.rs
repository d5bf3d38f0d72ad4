//! `ferrobay up` with the real Linux host: start it as a user would, read the printed
//! `nvme connect` line, run that connect in a QEMU guest (nvme-cli, the kernel's nvme-tcp,
//! `guest/up_smoke.sh`), write and read back with O_DIRECT, see the path live and ANA
//! optimized, disconnect; then Ctrl-C (SIGINT) and a clean exit.
//! Without QEMU or the guest image it says it did not run (`testkit::prereq`). ~30 s.

mod common;

use std::time::{Duration, Instant};

use common::scratch_dir;
use common::up::{Up, arg_after};
use test_guest::{GuestConfig, spawn};

const GUEST_TIMEOUT: Duration = Duration::from_secs(120);
const VOLUME_NQN: &str = "nqn.2026-01.io.ferrobay:vol:vol0";

#[test]
fn linux_host_connects_to_ferrobay_up() {
    if let Some(why) = test_guest::unavailable() {
        testkit::prereq::missing(why);
        return;
    }
    let t0 = Instant::now();
    let dir = scratch_dir("up-guest");
    let port = test_guest::free_port().expect("free port");
    let data_dir = dir.path().join("data");
    let mut up = Up::start(&data_dir, port, data_dir.with_extension("log"));
    let words = up.wait_connect_line();
    let ready_after = t0.elapsed();
    // The line as printed, for the host it names: -t tcp -a 127.0.0.1 -s PORT -n NQN.
    let line = words.join(" ");
    assert_eq!(arg_after(&words, "-t"), Some("tcp"), "{line}");
    assert_eq!(arg_after(&words, "-a"), Some("127.0.0.1"), "{line}");
    assert_eq!(
        arg_after(&words, "-s"),
        Some(port.to_string().as_str()),
        "{line}"
    );
    let nqn = arg_after(&words, "-n").unwrap_or_default();
    assert_eq!(nqn, VOLUME_NQN, "{line}");

    // The guest reaches the host's 127.0.0.1 as $HOST_ADDR (QEMU user networking).
    let cfg = GuestConfig::new("up-smoke", include_str!("guest/up_smoke.sh"))
        .env("PORT", port)
        .env("NQN", nqn)
        .timeout(GUEST_TIMEOUT);
    let run = spawn(&cfg)
        .and_then(|g| g.finish(GUEST_TIMEOUT))
        .unwrap_or_else(|e| panic!("{e}\n{}", up.log()));
    for want in [
        "connect",
        "volume_size",
        "io_4096_at_0",
        "io_8192_at_61440",
        "io_196608_at_1052672",
        "io_1048576_at_5230592",
        "recheck_1048576_at_5230592",
        "unwritten_reads_zeros",
        "path_live_optimized",
        "disconnect",
    ] {
        assert!(
            run.passed(want).is_some(),
            "missing PASS {want}\n{}",
            run.diagnostics()
        );
    }
    // Every case (the last 64 KiB of the volume among them) written, then rechecked.
    let io = run
        .passes
        .iter()
        .filter(|p| p.name.starts_with("io_"))
        .count();
    let re = run
        .passes
        .iter()
        .filter(|p| p.name.starts_with("recheck_"))
        .count();
    assert_eq!((io, re), (5, 5), "{}", run.diagnostics());
    let guest_done = t0.elapsed();

    let status = up.interrupt();
    assert!(status.success(), "exit {status}:\n{}", up.log());
    let log = up.log();
    assert!(log.contains("stopped cleanly"), "{log}");
    eprintln!(
        "up ready after {ready_after:?}, guest done after {guest_done:?}, stopped after {:?}",
        t0.elapsed()
    );
}
