//! MinIO as the reference: one server process, erasure-coded over as many drive
//! directories as Ferrobay has storage nodes (3: one erasure set, EC:1, i.e. 2 data + 1
//! parity like Ferrobay's 2+1), on the same filesystem as Ferrobay's drive files. The
//! binary is built from MinIO's Go module (`go install`, see scripts/install-deps.sh),
//! never committed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use testkit::process::{Daemon, die_with_parent};

pub(crate) const ACCESS_KEY: &str = "minio-bench";
pub(crate) const SECRET_KEY: &str = "minio-bench-secret";
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// `$FERROBAY_BENCH_MINIO`, else `minio` on PATH, else `$(go env GOPATH)/bin/minio`.
pub(crate) fn find_binary() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("FERROBAY_BENCH_MINIO").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("$FERROBAY_BENCH_MINIO: no file {}", p.display()))
        };
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("minio");
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    let gopath = std::process::Command::new("go")
        .args(["env", "GOPATH"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let p = Path::new(&gopath).join("bin/minio");
    if !gopath.is_empty() && p.is_file() {
        return Ok(p);
    }
    Err(
        "no minio binary (scripts/install-deps.sh installs it with go install; or set \
         FERROBAY_BENCH_MINIO)"
            .into(),
    )
}

pub(crate) struct Minio {
    pub(crate) daemon: Daemon,
    pub(crate) endpoint: String,
}

impl Minio {
    /// Starts MinIO on `drives` directories under `dir`.
    pub(crate) fn start(binary: &Path, dir: &Path, drives: usize) -> anyhow::Result<Minio> {
        let ports = testkit::net::free_ports(2)?;
        let mut args = vec![
            "server".to_string(),
            "--quiet".to_string(),
            "--address".to_string(),
            format!("127.0.0.1:{}", ports[0]),
            "--console-address".to_string(),
            format!("127.0.0.1:{}", ports[1]),
        ];
        for i in 1..=drives {
            let d = dir.join(format!("drive{i}"));
            std::fs::create_dir_all(&d)?;
            args.push(d.display().to_string());
        }
        let daemon = Daemon::spawn(binary, "minio", dir, &args, "warn", |c| {
            c.env("MINIO_ROOT_USER", ACCESS_KEY)
                .env("MINIO_ROOT_PASSWORD", SECRET_KEY)
                // Drives on the root filesystem are refused otherwise.
                .env("MINIO_CI_CD", "1")
                .env("MINIO_BROWSER", "off")
                .env("MINIO_UPDATE", "off");
            die_with_parent(c);
        })
        .context("start minio")?;
        let mut m = Minio {
            daemon,
            endpoint: format!("http://127.0.0.1:{}", ports[0]),
        };
        m.wait_ready(ports[0])?;
        Ok(m)
    }

    /// Polls MinIO's readiness probe (`/minio/health/ready`).
    fn wait_ready(&mut self, port: u16) -> anyhow::Result<()> {
        use std::io::{Read, Write};
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let ready = std::net::TcpStream::connect(("127.0.0.1", port))
                .and_then(|mut s| {
                    s.write_all(
                        b"GET /minio/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    )?;
                    let mut r = String::new();
                    s.read_to_string(&mut r)?;
                    Ok(r.starts_with("HTTP/1.1 200"))
                })
                .unwrap_or(false);
            if ready {
                return Ok(());
            }
            if let Ok(Some(s)) = self.daemon.child.try_wait() {
                bail!("minio exited ({s})\n{}", self.daemon.log_tail(20));
            }
            if Instant::now() > deadline {
                bail!(
                    "minio not ready after {READY_TIMEOUT:?}\n{}",
                    self.daemon.log_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub(crate) fn stop(&mut self) {
        if self.daemon.terminate(Duration::from_secs(10)).is_none() {
            self.daemon.kill9();
        }
    }
}
