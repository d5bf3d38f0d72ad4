//! `ferrobay up` with the real Linux host: start it as a user would, read the printed
//! `nvme connect` line, run that connect in a QEMU guest (nvme-cli, the kernel's nvme-tcp,
//! `guest/up_smoke.sh`), write and read back with O_DIRECT, see the path live and ANA
//! optimized, disconnect; then Ctrl-C (SIGINT) and a clean exit.
//! Skips (with the reason on stderr) without QEMU or the guest image. About 30 s.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{ferrobay_bin, scratch_dir};
use test_guest::{GuestConfig, spawn};

const READY_TIMEOUT: Duration = Duration::from_secs(45);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
const GUEST_TIMEOUT: Duration = Duration::from_secs(120);
const VOLUME_NQN: &str = "nqn.2026-01.io.ferrobay:vol:vol0";

/// Why the guest cannot run here (printed, and the test returns), or None.
fn skip_reason() -> Option<String> {
    if let Err(e) = test_guest::find_qemu() {
        return Some(e.to_string());
    }
    test_guest::GuestImage::ensure()
        .err()
        .map(|e| format!("no guest image: {e}"))
}

/// A `ferrobay up` child: stdout lines through a channel, stderr into a file. Killed on
/// drop (a test that panics leaves nothing running).
struct Up {
    child: Child,
    lines: mpsc::Receiver<String>,
    stdout: Vec<String>,
    log: PathBuf,
}

impl Up {
    fn start(data_dir: &Path, port: u16) -> Up {
        let log = data_dir.with_extension("log");
        let err = std::fs::File::create(&log).expect("log file");
        let mut child = Command::new(ferrobay_bin())
            .args(["up", "--data-dir"])
            .arg(data_dir)
            // A small volume: creating it writes zeros over the members' data areas (the
            // 1G default leaves 1.6 GB of drive files in the scratch dir).
            .args(["--port", &port.to_string(), "--volume-size", "64M"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .expect("spawn ferrobay up");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Up {
            child,
            lines,
            stdout: Vec::new(),
            log,
        }
    }

    fn log(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            self.stdout.join("\n"),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }

    /// The words of the `nvme connect ...` line, once the ready message is complete
    /// (up to "Press Ctrl-C").
    fn wait_connect_line(&mut self) -> Vec<String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut connect = None;
        loop {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    if line.trim_start().starts_with("nvme connect ") {
                        connect = Some(line.split_whitespace().map(String::from).collect());
                    }
                    let done = line.contains("Ctrl-C");
                    self.stdout.push(line);
                    if done {
                        return connect
                            .unwrap_or_else(|| panic!("no connect line:\n{}", self.log()));
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().expect("wait");
                    panic!(
                        "ferrobay up exited ({status}) before ready:\n{}",
                        self.log()
                    );
                }
            }
            assert!(
                Instant::now() < deadline,
                "no connect line after {READY_TIMEOUT:?}:\n{}",
                self.log()
            );
        }
    }

    /// Ctrl-C, as a person at the terminal would, and wait for the exit.
    fn interrupt(&mut self) -> ExitStatus {
        // The `kill` command signals our own child, by pid.
        let _ = Command::new("kill")
            .arg("-INT")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                while let Ok(l) = self.lines.try_recv() {
                    self.stdout.push(l);
                }
                return s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("ferrobay up did not stop after SIGINT:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The value after `flag` in the connect line's words.
fn arg_after<'a>(words: &'a [String], flag: &str) -> Option<&'a str> {
    let i = words.iter().position(|w| w == flag)?;
    words.get(i + 1).map(String::as_str)
}

#[test]
fn linux_host_connects_to_ferrobay_up() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIP: {why}");
        return;
    }
    let t0 = Instant::now();
    let dir = scratch_dir("up-guest");
    let port = test_guest::free_port().expect("free port");
    let mut up = Up::start(&dir.path().join("data"), port);
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
