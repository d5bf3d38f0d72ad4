//! `ferrobay node run`'s connection guards as a user sets them: a host over
//! `--max-connections-per-host` is closed at accept, a connection that sends nothing is
//! closed after `--handshake-timeout-ms`, and 0 is refused with a one-line reason.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{NodeProcess, ferrobay_bin, scratch_dir};

/// How long until the node closes `s` (reads until EOF or a reset), bounded by `limit`.
fn closed_after(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    s.set_read_timeout(Some(limit)).expect("read timeout");
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(t0.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None;
            }
            Err(_) => return Some(t0.elapsed()),
        }
    }
}

#[test]
fn connection_limits_and_handshake_timeout_take_effect() {
    let dir = scratch_dir("node-limits");
    let node = NodeProcess::start_with(
        "n1",
        &dir.path().join("n1"),
        &["d0=ram:64M".to_string()],
        (0, 0, 0),
        &[
            "--max-connections-per-host",
            "1",
            "--handshake-timeout-ms",
            "3000",
        ],
        &[],
    );
    let addr = node.endpoints.nvme_tcp[0].clone();
    let mut first = TcpStream::connect(&addr).expect("first connection");
    // Let the node count the first one before the second arrives.
    std::thread::sleep(Duration::from_millis(300));
    let mut second = TcpStream::connect(&addr).expect("second connection");
    let refused = closed_after(&mut second, Duration::from_secs(2));
    assert!(
        refused.is_some(),
        "a second connection from this host stayed open with --max-connections-per-host 1\n{}",
        node.log()
    );
    let timed_out = closed_after(&mut first, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("an idle connection stayed open\n{}", node.log()));
    assert!(
        timed_out >= Duration::from_millis(1500),
        "the idle connection was closed after {timed_out:?}, before the 3 s handshake timeout"
    );
}

#[test]
fn zero_limits_are_refused_with_a_reason() {
    let dir = scratch_dir("node-limits-zero");
    for flag in [
        "--max-connections-per-listener",
        "--max-connections-per-host",
        "--handshake-timeout-ms",
    ] {
        let out = std::process::Command::new(ferrobay_bin())
            .args(["node", "run", "--name", "n1", "--data-dir"])
            .arg(dir.path())
            .args([flag, "0"])
            .output()
            .expect("run ferrobay");
        assert_eq!(out.status.code(), Some(2), "{flag} 0");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag) && err.contains('0'), "{flag} 0: {err}");
    }
    // The defaults are in --help.
    let help = std::process::Command::new(ferrobay_bin())
        .args(["node", "run", "--help"])
        .output()
        .expect("run ferrobay");
    let help = String::from_utf8_lossy(&help.stdout);
    for default in ["[default: 16384]", "[default: 4096]", "[default: 10000]"] {
        assert!(help.contains(default), "--help lacks {default}:\n{help}");
    }
}
