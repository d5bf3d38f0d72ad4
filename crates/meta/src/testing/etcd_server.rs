//! A throw-away single-member etcd server (Debian's `etcd-server` package) on 127.0.0.1
//! with free ports and a temp data dir, killed on drop. Can be killed and restarted on the
//! same ports and data to test failures.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::etcd::{EtcdOptions, EtcdStore};
use crate::store::MetaStore;

/// Overrides where the etcd binary is looked for.
pub const ETCD_BINARY_ENV: &str = "FERROBAY_ETCD_BIN";
const DEBIAN_PATH: &str = "/usr/bin/etcd";
const START_ATTEMPTS: usize = 3;
const READY_TIMEOUT: Duration = Duration::from_secs(30);

pub struct EtcdServer {
    binary: PathBuf,
    root: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl EtcdServer {
    /// Finds the etcd binary: `$FERROBAY_ETCD_BIN`, `/usr/bin/etcd`, then `etcd` on `PATH`.
    pub fn find_binary() -> Result<PathBuf, String> {
        if let Some(path) = std::env::var_os(ETCD_BINARY_ENV) {
            return Ok(PathBuf::from(path));
        }
        if Path::new(DEBIAN_PATH).is_file() {
            return Ok(PathBuf::from(DEBIAN_PATH));
        }
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("etcd"))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                format!(
                    "etcd server binary not found (${ETCD_BINARY_ENV}, {DEBIAN_PATH}, PATH): \
                     run scripts/install-deps.sh (Debian package etcd-server)"
                )
            })
    }

    /// Starts a fresh server and waits until it serves requests. Call it from a thread
    /// that outlives the server (a test's own thread or a runtime worker, not tokio's
    /// blocking pool): the server is killed when the starting thread exits.
    pub async fn start() -> Result<Self, String> {
        let binary = Self::find_binary()?;
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let root = tempfile::Builder::new()
                .prefix("ferrobay-etcd-")
                .tempdir()
                .map_err(|e| format!("temp dir: {e}"))?;
            // Ports are free when picked; another process may take one before etcd binds
            // it, so a start that fails is retried with new ports.
            let (client_port, peer_port) = free_ports()?;
            let mut server = Self {
                binary: binary.clone(),
                root,
                client_port,
                peer_port,
                child: None,
            };
            match server.launch().await {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// `http://127.0.0.1:PORT`, the client URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// A store connected to this server.
    pub async fn store(&self, options: EtcdOptions) -> Result<EtcdStore, String> {
        EtcdStore::connect(&[self.endpoint()], options)
            .await
            .map_err(|e| format!("connecting to {}: {e}", self.endpoint()))
    }

    /// Kills the server (SIGKILL), as a crash would. Data stays for [`Self::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same ports and data.
    pub async fn restart(&mut self) -> Result<(), String> {
        self.kill();
        self.launch().await
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn log_path(&self) -> PathBuf {
        self.root.path().join("etcd.log")
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    async fn launch(&mut self) -> Result<(), String> {
        let client_url = format!("http://127.0.0.1:{}", self.client_port);
        let peer_url = format!("http://127.0.0.1:{}", self.peer_port);
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("etcd log file: {e}"))?;
        let log_err = log.try_clone().map_err(|e| format!("etcd log file: {e}"))?;
        let mut command = Command::new(&self.binary);
        command
            .arg("--name=default")
            .arg(format!(
                "--data-dir={}",
                self.root.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=default={peer_url}"))
            .arg("--initial-cluster-state=new")
            // Short election timeout: quick start, and a minimum lease TTL of 1 s.
            .arg("--heartbeat-interval=50")
            .arg("--election-timeout=500")
            .arg("--logger=zap")
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        die_with_parent(&mut command);
        let child = command
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        self.wait_ready().await
    }

    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        let options = EtcdOptions {
            request_timeout: Duration::from_millis(500),
            ..EtcdOptions::default()
        };
        loop {
            if !self.is_running() {
                self.kill();
                return Err(format!("etcd exited at start:\n{}", self.log_tail()));
            }
            if let Ok(store) = EtcdStore::connect(&[self.endpoint()], options.clone()).await
                && store.list("/").await.is_ok()
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                self.kill();
                return Err(format!(
                    "etcd not ready after {READY_TIMEOUT:?}:\n{}",
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_ports() -> Result<(u16, u16), String> {
    let a = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let b = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let port = |l: &TcpListener| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string());
    Ok((port(&a)?, port(&b)?))
}

/// Asks the kernel to kill etcd if the thread that started it dies, so that a test
/// process killed before its drops ran leaves no server behind.
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and only calls prctl,
    // which is async-signal-safe; it touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
