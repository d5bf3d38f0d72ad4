//! Cluster processes on 127.0.0.1 as separate `ferrobay` daemons: the command lines of
//! `ferrobay node run --meta` and `ferrobay processor run`, and a daemon handle that waits
//! for the endpoints file. Shared by the CLI tests and `benches/cluster.rs` (included there
//! with `#[path]`, so it uses nothing from the rest of `common`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A ferrobay daemon, stderr in `log`, killed on drop.
pub struct Daemon {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `binary args` with `RUST_LOG=rust_log`, stderr into `dir/<name>.log`;
    /// `configure` adjusts the command before the spawn.
    pub fn spawn(
        binary: &Path,
        name: &str,
        dir: &Path,
        args: &[String],
        rust_log: &str,
        configure: impl FnOnce(&mut Command),
    ) -> std::io::Result<Daemon> {
        std::fs::create_dir_all(dir)?;
        let log = dir.join(format!("{name}.log"));
        let err = std::fs::File::create(&log)?;
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .env("RUST_LOG", rust_log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err);
        configure(&mut cmd);
        let child = cmd.spawn()?;
        Ok(Daemon {
            name: name.to_string(),
            child,
            log,
        })
    }

    /// The whole log, headed by the daemon's name.
    pub fn log(&self) -> String {
        format!(
            "--- {} ---\n{}",
            self.name,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }

    /// Waits for a JSON file the daemon writes when it is ready. The error says why
    /// (exited, or not ready within `timeout`), without the log.
    pub fn wait_json(
        &mut self,
        path: &Path,
        timeout: Duration,
    ) -> Result<serde_json::Value, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(s) = std::fs::read_to_string(path)
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&s)
            {
                return Ok(v);
            }
            if let Ok(Some(s)) = self.child.try_wait() {
                return Err(format!("{} exited at start ({s})", self.name));
            }
            if Instant::now() > deadline {
                return Err(format!("{} not ready after {timeout:?}", self.name));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, as a power cut would.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait up to `timeout` for the exit; None if it still runs.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        terminate_child(&mut self.child, timeout)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        kill_if_running(&mut self.child);
    }
}

/// SIGTERM to our own `child` and wait up to `timeout` for its exit; None if it still runs.
pub fn terminate_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    if let Ok(Some(s)) = child.try_wait() {
        return Some(s);
    }
    // The `kill` command signals our own child, by pid.
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILL and reap `child` if it still runs (for Drop: a test that panics leaves
/// nothing running).
pub fn kill_if_running(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// `ferrobay node run --meta` on any free ports with one drive; it writes
/// `data_dir/endpoints.json` when it serves.
pub fn node_run_args(
    name: &str,
    meta_url: &str,
    lease_ttl_ms: Option<&str>,
    drive: &str,
    data_dir: &Path,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "node",
        "run",
        "--name",
        name,
        "--listen",
        "127.0.0.1:0",
        "--discovery-listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--meta",
        meta_url,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(ttl) = lease_ttl_ms {
        args.extend(["--lease-ttl-ms".to_string(), ttl.to_string()]);
    }
    args.extend(["--drive".to_string(), drive.to_string()]);
    args.extend(["--data-dir".to_string(), data_dir.display().to_string()]);
    args
}

/// `ferrobay processor run` on any free ports; it writes `endpoints_file` when it serves.
pub fn processor_run_args(
    name: &str,
    meta_url: &str,
    lease_ttl_ms: &str,
    endpoints_file: &Path,
) -> Vec<String> {
    [
        "processor",
        "run",
        "--name",
        name,
        "--listen",
        "127.0.0.1:0",
        "--api-listen",
        "127.0.0.1:0",
        "--meta",
        meta_url,
        "--lease-ttl-ms",
        lease_ttl_ms,
        "--endpoints-file",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([endpoints_file.display().to_string()])
    .collect()
}
