//! A throw-away PostgreSQL server (Debian's packages) on 127.0.0.1, on a free port, in a
//! temp dir, killed on drop. PostgreSQL refuses to run as root: as root, the server runs
//! as the `postgres` system user (created by the Debian package) through `setpriv`,
//! which also asks the kernel to kill it if the test process dies.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Overrides the directory holding `initdb` and `postgres`.
pub const PG_BIN_ENV: &str = "FERROBAY_PG_BIN";
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
const SERVER_USER: &str = "postgres";
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const START_ATTEMPTS: usize = 3;

pub struct PgServer {
    root: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    databases: std::sync::atomic::AtomicU32,
}

fn bin_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(PG_BIN_ENV) {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(DEBIAN_ROOT)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, p)| p).ok_or_else(|| {
        format!(
            "PostgreSQL server binaries not found (${PG_BIN_ENV}, {DEBIAN_ROOT}/*/bin): run \
             scripts/install-deps.sh (Debian package postgresql)"
        )
    })
}

fn is_root() -> bool {
    // The effective uid of this process, as the kernel reports it.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// uid and gid of the server user, from /etc/passwd.
fn server_user() -> Result<(u32, u32), String> {
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| format!("/etc/passwd: {e}"))?;
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[0] == SERVER_USER)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
        })
        .flatten()
        .ok_or_else(|| {
            format!(
                "user {SERVER_USER:?} not found: PostgreSQL refuses to run as root; run \
                 scripts/install-deps.sh (Debian package postgresql creates it)"
            )
        })
}

impl PgServer {
    /// Initializes a cluster in a temp dir and starts the server; waits until it accepts
    /// connections. Call from a thread that outlives the server (a test's own thread).
    pub fn start() -> Result<Self, String> {
        let bin = bin_dir()?;
        let owner = if is_root() {
            Some(server_user()?)
        } else {
            None
        };
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let root = tempfile::Builder::new()
                .prefix("ferrobay-pg-")
                .tempdir()
                .map_err(|e| format!("temp dir: {e}"))?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(root.path(), Some(uid), Some(gid))
                    .map_err(|e| format!("chown {}: {e}", root.path().display()))?;
            }
            let port = free_port()?;
            let mut server = PgServer {
                root,
                port,
                child: None,
                databases: std::sync::atomic::AtomicU32::new(0),
            };
            match server.launch(&bin, owner) {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    fn command(bin: &Path, program: &str, owner: Option<(u32, u32)>) -> Command {
        let mut c = Command::new("setpriv");
        if let Some((uid, gid)) = owner {
            c.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--clear-groups");
        }
        c.arg("--pdeathsig=KILL").arg(bin.join(program));
        c
    }

    fn launch(&mut self, bin: &Path, owner: Option<(u32, u32)>) -> Result<(), String> {
        let data = self.root.path().join("data");
        let log = self.root.path().join("server.log");
        let out = Self::command(bin, "initdb", owner)
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let log_file = std::fs::File::create(&log).map_err(|e| format!("log: {e}"))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&log, Some(uid), Some(gid))
                .map_err(|e| format!("chown log: {e}"))?;
        }
        let child = Self::command(bin, "postgres", owner)
            .arg("-D")
            .arg(&data)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(self.root.path())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("starting postgres: {e}"))?;
        self.child = Some(child);
        let deadline = std::time::Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                self.child = None;
                return Err(format!(
                    "postgres exited ({status}) at start: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            if off_runtime(|| {
                postgres::Client::connect(&self.url_for("postgres"), postgres::NoTls).map(drop)
            })
            .is_ok()
            {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                self.kill();
                return Err(format!(
                    "postgres not ready after {READY_TIMEOUT:?}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn url_for(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A new empty database on this server; returns its URL.
    pub fn create_database(&self) -> Result<String, String> {
        let n = self
            .databases
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("ferrobay_{n}");
        let url = self.url_for("postgres");
        off_runtime(|| {
            let mut c = postgres::Client::connect(&url, postgres::NoTls)
                .map_err(|e| format!("connect: {e}"))?;
            c.batch_execute(&format!("CREATE DATABASE {name}"))
                .map_err(|e| format!("create database: {e}"))
        })?;
        Ok(self.url_for(&name))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs blocking client code on a short-lived thread of its own: the synchronous client
/// starts a runtime, which tokio forbids on a thread that drives async tasks.
fn off_runtime<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}
