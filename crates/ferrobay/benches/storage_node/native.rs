//! Section A: `ferrobay node` as a child process on 127.0.0.1, measured from this process
//! with `bench::run` over nvmf-host's `RemoteNamespace`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench::{CpuTime, Progress, Report};
use blockdev::BlockDevice;
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl};
use serde::Serialize;
use testkit::process::{die_with_parent, pin_to_cpus};

use crate::Settings;
use crate::workload::{PRECONDITION, Workload};

/// Node name; its drive d0 is exported as `nqn.2026-01.io.ferrobay:<name>:d0`, NSID 1.
pub const NODE_NAME: &str = "bench1";
const NODE_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// One workload against the native node.
#[derive(Debug, Serialize)]
pub struct NativeResult {
    pub workload: String,
    /// The initiator's view (its `cpu_s_per_million_ios` is the bench process's CPU).
    pub report: Report,
    /// CPU seconds of the node process during the run (user + system).
    pub target_cpu_s: f64,
    pub target_cpu_s_per_million_ios: f64,
    pub initiator_cpu_s_per_million_ios: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct NativeSection {
    pub target: String,
    pub url: String,
    pub precondition: Option<Report>,
    pub results: Vec<NativeResult>,
    /// Why the section stopped early, if it did.
    pub error: Option<String>,
}

/// Runs section A; failures end up in `error` with whatever was measured before.
pub async fn run(binary: &Path, settings: &Settings) -> NativeSection {
    let mut section = NativeSection {
        target: format!(
            "ferrobay node --drive {} ({})",
            settings.native_drive,
            binary.display()
        ),
        ..NativeSection::default()
    };
    if let Err(e) = measure(binary, settings, &mut section).await {
        eprintln!("storage_node bench: native section failed: {e}");
        section.error = Some(e);
    }
    section
}

async fn measure(
    binary: &Path,
    settings: &Settings,
    section: &mut NativeSection,
) -> Result<(), String> {
    let dir = crate::scratch_dir("bench-node").map_err(|e| format!("scratch dir: {e}"))?;
    let node = NodeChild::native(binary, dir.path(), settings)?;
    let url = format!(
        "nvme+tcp://{}/nqn.2026-01.io.ferrobay:{NODE_NAME}:d0/1",
        node.nvme_addr
    );
    section.url = url.clone();
    let dev = open(&url, settings.io_queues)
        .await
        .map_err(|e| format!("{e}\n{}", node.log_tail()))?;

    eprintln!(
        "storage_node bench: native: precondition ({})",
        PRECONDITION.name
    );
    let pre = bench::run(
        dev.clone(),
        &PRECONDITION.config(0),
        &url,
        &Progress::Silent,
    )
    .await
    .map_err(|e| format!("precondition: {e}"))?;
    check_errors(&pre, &node)?;
    section.precondition = Some(pre);

    for w in &settings.workloads {
        eprintln!("storage_node bench: native: {}", w.name);
        let r = one(&dev, w, settings, &url, &node).await?;
        eprintln!(
            "  {:.0} IOPS {:.1} MB/s, target {:.2} / initiator {:.2} CPU s per million I/Os",
            r.report.iops,
            r.report.mb_per_s,
            r.target_cpu_s_per_million_ios,
            r.initiator_cpu_s_per_million_ios
        );
        section.results.push(r);
    }
    drop(dev);
    node.stop();
    Ok(())
}

async fn one(
    dev: &Arc<dyn BlockDevice>,
    w: &Workload,
    settings: &Settings,
    url: &str,
    node: &NodeChild,
) -> Result<NativeResult, String> {
    let cfg = w.config(settings.runtime_ms());
    let before = node.cpu()?;
    let report = bench::run(dev.clone(), &cfg, url, &Progress::Silent)
        .await
        .map_err(|e| format!("{}: {e}", w.name))?;
    let after = node.cpu()?;
    check_errors(&report, node)?;
    let ios = (report.read_ios + report.write_ios) as f64;
    let target_cpu_s = after.since(&before).total().as_secs_f64();
    Ok(NativeResult {
        workload: w.name.to_string(),
        target_cpu_s,
        target_cpu_s_per_million_ios: per_million(target_cpu_s, ios),
        initiator_cpu_s_per_million_ios: report.cpu_s_per_million_ios,
        report,
    })
}

pub fn per_million(cpu_s: f64, ios: f64) -> f64 {
    if ios > 0.0 { cpu_s / ios * 1e6 } else { 0.0 }
}

fn check_errors(r: &Report, node: &NodeChild) -> Result<(), String> {
    if r.errors > 0 {
        return Err(format!(
            "{} {}: {} I/O errors, first: {}\n{}",
            r.target,
            r.pattern,
            r.errors,
            r.first_error.as_deref().unwrap_or("?"),
            node.log_tail()
        ));
    }
    Ok(())
}

async fn open(url: &str, io_queues: u16) -> Result<Arc<dyn BlockDevice>, String> {
    let u = NvmeTcpUrl::parse(url).map_err(|e| e.to_string())?;
    let host = HostIdentity::system().map_err(|e| format!("host identity: {e}"))?;
    let opts = ConnectOptions {
        io_queues,
        ..ConnectOptions::default()
    };
    let ns = u
        .open(&host, &opts)
        .await
        .map_err(|e| format!("connect {url}: {e}"))?;
    Ok(Arc::new(ns))
}

/// `<data-dir>/endpoints.json`, written by the node when it listens.
#[derive(serde::Deserialize)]
struct Endpoints {
    nvme_tcp: Vec<String>,
}

/// A `ferrobay node run` child, killed on drop and when this process dies.
pub struct NodeChild {
    child: Child,
    log_path: PathBuf,
    pub nvme_addr: String,
}

impl NodeChild {
    pub fn start(binary: &Path, data_dir: &Path, drive: &str) -> Result<NodeChild, String> {
        Self::start_with(binary, data_dir, drive, &[], &[])
    }

    /// The node of sections A, C, D and F: `NODE_NAME` under `dir`, the settings' drive
    /// and extra `node run` arguments, on the targets' CPUs when pinned.
    pub fn native(binary: &Path, dir: &Path, settings: &Settings) -> Result<NodeChild, String> {
        let cpus = settings.pin.as_ref().map_or(&[][..], |p| &p.target_cpus);
        Self::start_with(
            binary,
            &dir.join(NODE_NAME),
            &settings.native_drive,
            &settings.node_args,
            cpus,
        )
    }

    /// As [`NodeChild::start`], with more `node run` arguments, on `cpus` (empty: any).
    pub fn start_with(
        binary: &Path,
        data_dir: &Path,
        drive: &str,
        extra_args: &[String],
        cpus: &[usize],
    ) -> Result<NodeChild, String> {
        if !binary.is_file() {
            return Err(format!(
                "the ferrobay binary {} does not exist: build it (cargo bench builds it) or set FERROBAY_BIN",
                binary.display()
            ));
        }
        std::fs::create_dir_all(data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
        let log_path = data_dir.join("node.log");
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let mut cmd = Command::new(binary);
        cmd.args(["node", "run", "--name", NODE_NAME, "--data-dir"])
            .arg(data_dir)
            .args(["--listen", "127.0.0.1:0"])
            .args(["--discovery-listen", "127.0.0.1:0"])
            .args(["--http-listen", "127.0.0.1:0"])
            .args(["--drive", drive])
            .args(extra_args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        die_with_parent(&mut cmd);
        pin_to_cpus(&mut cmd, cpus);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {} node run: {e}", binary.display()))?;
        let mut node = NodeChild {
            child,
            log_path,
            nvme_addr: String::new(),
        };
        let endpoints = data_dir.join("endpoints.json");
        let t0 = Instant::now();
        loop {
            if let Ok(s) = std::fs::read_to_string(&endpoints)
                && let Ok(e) = serde_json::from_str::<Endpoints>(&s)
            {
                node.nvme_addr =
                    e.nvme_tcp.first().cloned().ok_or_else(|| {
                        format!("{} lists no nvme_tcp listener", endpoints.display())
                    })?;
                return Ok(node);
            }
            if let Ok(Some(status)) = node.child.try_wait() {
                return Err(format!(
                    "ferrobay node exited at start ({status})\n{}",
                    node.log_tail()
                ));
            }
            if t0.elapsed() > NODE_READY_TIMEOUT {
                return Err(format!(
                    "ferrobay node wrote no {} within {NODE_READY_TIMEOUT:?}\n{}",
                    endpoints.display(),
                    node.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn cpu(&self) -> Result<CpuTime, String> {
        CpuTime::of_pid(self.child.id())
            .ok_or_else(|| format!("cannot read /proc/{}/stat of the node", self.child.id()))
    }

    pub fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        format!(
            "node log ({}), last lines:\n{}",
            self.log_path.display(),
            lines[lines.len().saturating_sub(30)..].join("\n")
        )
    }

    /// SIGTERM, then SIGKILL if it is still there after a few seconds.
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .stderr(Stdio::null())
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Drop kills it.
    }
}

impl Drop for NodeChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
