//! A `ferrobay up` child process as a user runs it: stdout lines come through a channel,
//! stderr goes to a file. Killed on drop (a test that panics leaves nothing running).
//! `$FERROBAY_UP_BIN` runs another build of the binary (scripts/fresh-clone-check.sh: the
//! one built in a fresh clone without protoc).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::cluster::kill_if_running;
use super::ferrobay_bin;

/// Path of the `ferrobay` binary to run instead of this build's.
pub const UP_BIN_ENV: &str = "FERROBAY_UP_BIN";
const READY_TIMEOUT: Duration = Duration::from_secs(45);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Up {
    /// The S3 gateway's port (`--s3-port`).
    pub s3_port: u16,
    child: Child,
    lines: mpsc::Receiver<String>,
    /// The stdout lines read so far.
    pub stdout: Vec<String>,
    log: PathBuf,
}

impl Up {
    /// Starts `ferrobay up` on `data_dir` and `port` (S3 on a free port), stderr into
    /// `log`.
    pub fn start(data_dir: &Path, port: u16, log: PathBuf) -> Up {
        Up::start_with(data_dir, port, log, &[])
    }

    /// [`Up::start`] with more arguments (e.g. `--cdc-port`).
    pub fn start_with(data_dir: &Path, port: u16, log: PathBuf, extra: &[&str]) -> Up {
        let s3_port = loop {
            let p = testkit::net::free_port().expect("free port");
            if p != port {
                break p;
            }
        };
        Self::start_ports(data_dir, port, s3_port, log, extra)
    }

    /// [`Up::start_with`] with the S3 port given.
    pub fn start_ports(
        data_dir: &Path,
        port: u16,
        s3_port: u16,
        log: PathBuf,
        extra: &[&str],
    ) -> Up {
        let err = std::fs::File::create(&log).expect("log file");
        let mut child = Command::new(up_bin())
            .args(["up", "--data-dir"])
            .arg(data_dir)
            // A small volume: creating it writes zeros over the members' data areas (the
            // 1G default leaves 1.6 GB of drive files in the scratch dir).
            .args(["--port", &port.to_string(), "--volume-size", "64M"])
            // Small KV namespaces for the S3 gateway (sparse, but the drives grow by it).
            .args(["--s3-port", &s3_port.to_string(), "--s3-size", "256M"])
            .args(extra)
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
            s3_port,
            child,
            lines,
            stdout: Vec::new(),
            log,
        }
    }

    /// Stdout so far and the whole stderr file, for failure messages.
    pub fn log(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            self.stdout.join("\n"),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }

    /// The words of the `nvme connect ...` line, once the ready message is complete
    /// (up to "Press Ctrl-C").
    pub fn wait_connect_line(&mut self) -> Vec<String> {
        self.wait_ready().unwrap_or_else(|log| panic!("{log}"))
    }

    /// [`Up::wait_connect_line`], or what `up` said if it exited before it was ready.
    pub fn wait_ready(&mut self) -> Result<Vec<String>, String> {
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
                        return connect.ok_or_else(|| format!("no connect line:\n{}", self.log()));
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().expect("wait");
                    return Err(format!(
                        "ferrobay up exited ({status}) before ready:\n{}",
                        self.log()
                    ));
                }
            }
            assert!(
                Instant::now() < deadline,
                "no connect line after {READY_TIMEOUT:?}:\n{}",
                self.log()
            );
        }
    }

    /// What the ready message says about S3 (after [`Up::wait_connect_line`]).
    pub fn s3(&self) -> UpS3 {
        let endpoint = self
            .stdout
            .iter()
            .find_map(|l| l.strip_prefix("S3: "))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_else(|| panic!("no S3 line:\n{}", self.log()))
            .to_string();
        let export = self
            .stdout
            .iter()
            .find_map(|l| l.trim().strip_prefix("export "))
            .unwrap_or_else(|| panic!("no credentials line:\n{}", self.log()));
        let var = |name: &str| {
            export
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("no {name} in {export}"))
                .to_string()
        };
        UpS3 {
            endpoint,
            access_key: var("AWS_ACCESS_KEY_ID"),
            secret_key: var("AWS_SECRET_ACCESS_KEY"),
            region: var("AWS_DEFAULT_REGION"),
        }
    }

    /// Ctrl-C, as a person at the terminal would, and wait for the exit.
    pub fn interrupt(&mut self) -> ExitStatus {
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

/// The S3 endpoint and credentials `ferrobay up` printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpS3 {
    pub endpoint: String,
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
}

impl Drop for Up {
    fn drop(&mut self) {
        kill_if_running(&mut self.child);
    }
}

/// `$FERROBAY_UP_BIN` if set (it must be a file), else this build's binary.
fn up_bin() -> PathBuf {
    let Some(bin) = std::env::var_os(UP_BIN_ENV) else {
        return PathBuf::from(ferrobay_bin());
    };
    let bin = PathBuf::from(bin);
    assert!(bin.is_file(), "${UP_BIN_ENV}: no file {}", bin.display());
    eprintln!("running {} (${UP_BIN_ENV})", bin.display());
    bin
}

/// The words of the first stdout line (so far) that starts with `prefix`, trimmed.
pub fn line_words(stdout: &[String], prefix: &str) -> Option<Vec<String>> {
    stdout
        .iter()
        .find(|l| l.trim_start().starts_with(prefix))
        .map(|l| l.split_whitespace().map(String::from).collect())
}

/// The value after `flag` in the connect line's words.
pub fn arg_after<'a>(words: &'a [String], flag: &str) -> Option<&'a str> {
    let i = words.iter().position(|w| w == flag)?;
    words.get(i + 1).map(String::as_str)
}
