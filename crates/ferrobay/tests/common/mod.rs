//! Shared helpers for the binary's integration tests: run `ferrobay node` as a process.

#![allow(dead_code)]

pub mod cluster;
pub mod netns;
pub mod object_cluster;
pub mod up;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where a running node listens, read from `<data-dir>/endpoints.json`.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Endpoints {
    pub nvme_tcp: Vec<String>,
    pub discovery: Option<String>,
    pub http: Option<String>,
}

impl Endpoints {
    pub fn port(addr: &str) -> u16 {
        addr.rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port in address")
    }
    pub fn nvme_port(&self) -> u16 {
        Self::port(&self.nvme_tcp[0])
    }
    pub fn discovery_port(&self) -> u16 {
        Self::port(self.discovery.as_deref().expect("discovery listener"))
    }
}

/// A `ferrobay node run` child process, killed on drop.
pub struct NodeProcess {
    pub child: Child,
    pub data_dir: PathBuf,
    pub endpoints: Endpoints,
    pub log_path: PathBuf,
}

/// Runs `ferrobay ARGS` to completion and returns its stdout; panics with its output if it
/// fails.
pub fn ferrobay_stdout(args: &[&str]) -> String {
    let out = Command::new(ferrobay_bin())
        .args(args)
        .output()
        .expect("run ferrobay");
    assert!(
        out.status.success(),
        "ferrobay {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `ferrobay ARGS` (warnings and errors logged) to completion.
pub fn ferrobay_output(args: &[&str]) -> std::process::Output {
    Command::new(ferrobay_bin())
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run ferrobay")
}

/// A finished command's status, stdout and stderr, for assertion messages.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "exit {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn ferrobay_bin() -> &'static str {
    env!("CARGO_BIN_EXE_ferrobay")
}

impl NodeProcess {
    /// Starts a node with `drives` (CLI drive specs); `ports` = (nvme, discovery, http),
    /// 0 for any free port.
    pub fn start(
        name: &str,
        data_dir: &Path,
        drives: &[String],
        ports: (u16, u16, u16),
    ) -> NodeProcess {
        Self::start_env(name, data_dir, drives, ports, &[])
    }

    /// As [`NodeProcess::start`], with extra environment variables for the node.
    pub fn start_env(
        name: &str,
        data_dir: &Path,
        drives: &[String],
        ports: (u16, u16, u16),
        env: &[(&str, &Path)],
    ) -> NodeProcess {
        Self::start_with(name, data_dir, drives, ports, &[], env)
    }

    /// As [`NodeProcess::start_env`], with extra `node run` arguments.
    pub fn start_with(
        name: &str,
        data_dir: &Path,
        drives: &[String],
        ports: (u16, u16, u16),
        args: &[&str],
        env: &[(&str, &Path)],
    ) -> NodeProcess {
        let endpoints_file = data_dir.join("endpoints.json");
        let _ = std::fs::remove_file(&endpoints_file);
        std::fs::create_dir_all(data_dir).expect("data dir");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(data_dir.join("node.log"))
            .expect("node log");
        let mut cmd = Command::new(ferrobay_bin());
        cmd.args(["node", "run", "--name", name, "--data-dir"])
            .arg(data_dir)
            .args(["--listen", &format!("127.0.0.1:{}", ports.0)])
            .args(["--discovery-listen", &format!("127.0.0.1:{}", ports.1)])
            .args(["--http-listen", &format!("127.0.0.1:{}", ports.2)]);
        for d in drives {
            cmd.args(["--drive", d]);
        }
        cmd.args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log.try_clone().expect("log fd"))
            .spawn()
            .expect("spawn ferrobay node");
        let mut node = NodeProcess {
            child,
            data_dir: data_dir.to_path_buf(),
            endpoints: Endpoints {
                nvme_tcp: vec![],
                discovery: None,
                http: None,
            },
            log_path: data_dir.join("node.log"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(s) = std::fs::read_to_string(&endpoints_file)
                && let Ok(e) = serde_json::from_str::<Endpoints>(&s)
            {
                node.endpoints = e;
                return node;
            }
            if let Ok(Some(status)) = node.child.try_wait() {
                panic!("ferrobay node exited early ({status}):\n{}", node.log());
            }
            assert!(
                Instant::now() < deadline,
                "node not ready after 30 s:\n{}",
                node.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// A node `name` on one 64 MiB RAM drive with a plain and a TLS NVMe/TCP listener
    /// (`--tls-listen`): the node and those two addresses.
    pub fn start_with_tls_listener(
        name: &str,
        data: &Path,
    ) -> (NodeProcess, std::net::SocketAddr, std::net::SocketAddr) {
        let node = NodeProcess::start_with(
            name,
            data,
            &["d0=ram:64M".to_string()],
            (0, 0, 0),
            &["--tls-listen", "127.0.0.1:0"],
            &[],
        );
        let plain = node.endpoints.nvme_tcp[0].parse().expect("plain listener");
        let tls = node.endpoints.nvme_tcp[1].parse().expect("TLS listener");
        (node, plain, tls)
    }

    /// The node's log once `done` holds for it (within 5 s; else the test fails, showing
    /// the log and `what` was awaited).
    pub fn wait_for_log(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let log = self.log();
            if done(&log) {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} in the node log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILL, as a power cut would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        cluster::terminate_child(&mut self.child, Duration::from_secs(20)).unwrap_or_else(|| {
            self.kill();
            panic!(
                "node did not stop within 20 s after SIGTERM:\n{}",
                self.log()
            )
        })
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        cluster::kill_if_running(&mut self.child);
    }
}

/// A scratch directory on a filesystem that supports O_DIRECT (under the target dir).
/// Writes `len_bytes` of a pattern of `seed` at byte 0 of namespace 1 and checks they
/// read back.
pub async fn round_trip(ctrl: &nvmf_host::Controller, len_bytes: usize, seed: u8) {
    let ns = ctrl.namespace(1).await.expect("namespace 1");
    let want: Vec<u8> = (0..len_bytes)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect();
    ns.write_at(0, blockdev::IoBuf::from_slice(&want), false)
        .await
        .expect("write");
    let got = ns
        .read_at(0, blockdev::IoBuf::new_zeroed(want.len()))
        .await
        .expect("read");
    assert!(got[..] == want[..], "data read back differs");
}

pub fn scratch_dir(name: &str) -> tempfile::TempDir {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&base).expect("target tmpdir");
    tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(base)
        .expect("tempdir")
}
