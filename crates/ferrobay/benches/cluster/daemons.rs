//! The cluster under test: etcd, storage nodes and processor nodes as `ferrobay`
//! daemons on 127.0.0.1 (command lines from `tests/common/cluster.rs`, handles from
//! `testkit::process`), and the `ferrobay` commands that manage it.

use std::path::{Path, PathBuf};

use std::time::Duration;

use anyhow::{Context, bail};
use bench::CpuTime;
use control::provision::VolumeView;
use control::records::VolumeRecord;

use crate::cluster::{self, Daemon, node_run_args, processor_run_args};
use crate::cpu::{CpuSnap, machine_busy_s};
use crate::settings::Settings;

pub(crate) const STORAGE_NODES: [&str; 3] = ["n1", "n2", "n3"];
pub(crate) const PROCESSORS: [&str; 2] = ["p1", "p2"];
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const OWNER_TIMEOUT: Duration = Duration::from_secs(60);

/// A ferrobay daemon (stderr in `log`), killed on drop and when this process dies.
pub(crate) fn spawn_daemon(
    binary: &Path,
    name: &str,
    dir: &Path,
    args: &[String],
) -> anyhow::Result<Daemon> {
    // Processor nodes log takeovers and handoffs at info; storage nodes only problems.
    let level = if name.starts_with('p') {
        "info"
    } else {
        "warn"
    };
    Daemon::spawn(
        binary,
        name,
        dir,
        args,
        level,
        testkit::process::die_with_parent,
    )
    .with_context(|| format!("start {} ({}) in {}", name, binary.display(), dir.display()))
}

/// What the bench asks of its daemons beyond `testkit::process::Daemon`.
pub(crate) trait BenchDaemon {
    fn wait_ready(&mut self, path: &Path) -> anyhow::Result<serde_json::Value>;
    fn cpu_s(&self) -> f64;
    fn stop(&mut self);
}

impl BenchDaemon for Daemon {
    /// Waits for the JSON file the daemon writes once it serves.
    fn wait_ready(&mut self, path: &Path) -> anyhow::Result<serde_json::Value> {
        self.wait_json(path, READY_TIMEOUT)
            .map_err(|e| anyhow::anyhow!("{e}\n{}", self.log_tail(20)))
    }

    fn cpu_s(&self) -> f64 {
        CpuTime::of_pid(self.pid()).map_or(0.0, |c| c.total().as_secs_f64())
    }

    /// SIGTERM, then SIGKILL after 10 s.
    fn stop(&mut self) {
        if self.terminate(Duration::from_secs(10)).is_none() {
            eprintln!("cluster bench: {} ignored SIGTERM, killing it", self.name);
            self.kill9();
        }
    }
}

pub(crate) struct StorageNode {
    pub(crate) d: Daemon,
    pub(crate) nvme: String,
    /// `ferrobay node ... --data-dir` reads the node's address and API token there.
    pub(crate) data_dir: String,
}

pub(crate) struct ProcessorNode {
    pub(crate) d: Daemon,
    pub(crate) nvme: String,
}

/// etcd, three storage nodes, two processor nodes.
pub(crate) struct Cluster {
    pub(crate) binary: PathBuf,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) meta_url: String,
    pub(crate) lease_ttl_ms: u64,
    pub(crate) processor_args: Vec<String>,
    pub(crate) nodes: Vec<StorageNode>,
    pub(crate) procs: Vec<ProcessorNode>,
    // Last: dropped after the daemons that use it.
    pub(crate) _etcd: meta::testing::EtcdServer,
}

impl Cluster {
    /// Starts everything; call from the main thread (see `die_with_parent`).
    pub(crate) async fn start(binary: &Path, s: &Settings) -> anyhow::Result<Cluster> {
        if !binary.is_file() {
            bail!(
                "the ferrobay binary {} does not exist: build it (cargo bench builds it) or set FERROBAY_BIN",
                binary.display()
            );
        }
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(&base)?;
        let dir = tempfile::Builder::new()
            .prefix("bench-cluster")
            .tempdir_in(base)?;
        let etcd = meta::testing::EtcdServer::start()
            .await
            .map_err(|e| anyhow::anyhow!("etcd: {e}"))?;
        let meta_url = etcd.endpoint().replacen("http://", "etcd://", 1);
        let mut c = Cluster {
            binary: binary.to_path_buf(),
            dir,
            meta_url,
            lease_ttl_ms: s.lease_ttl_ms,
            processor_args: s.processor_args.clone(),
            nodes: Vec::new(),
            procs: Vec::new(),
            _etcd: etcd,
        };
        for name in STORAGE_NODES {
            let d = c.dir.path().join(name);
            let args = node_run_args(name, &c.meta_url, None, &s.drive, &d);
            let mut daemon = spawn_daemon(&c.binary, name, &d, &args)?;
            let e = daemon.wait_ready(&d.join("endpoints.json"))?;
            let nvme = e["nvme_tcp"][0]
                .as_str()
                .context("node endpoints: no nvme_tcp")?
                .to_string();
            c.nodes.push(StorageNode {
                d: daemon,
                nvme,
                data_dir: d.display().to_string(),
            });
        }
        // With --meta a new drive has no namespace; one that has (a data dir from another
        // run, --default-namespace) would leave provisioning no room: delete it.
        for n in &c.nodes {
            let nss = c.cli_json(&["node", "ns", "list", "--data-dir", &n.data_dir, "--json"])?;
            for ns in nss.as_array().into_iter().flatten() {
                let nqn = ns["subsystem_nqn"].as_str().unwrap_or_default().to_string();
                let nsid = ns["nsid"].as_u64().unwrap_or(0).to_string();
                eprintln!(
                    "cluster bench: deleting namespace {nqn}/{nsid} on {}",
                    n.d.name
                );
                c.cli(&[
                    "node",
                    "ns",
                    "delete",
                    "--data-dir",
                    &n.data_dir,
                    &nqn,
                    &nsid,
                ])?;
            }
        }
        for name in PROCESSORS {
            let p = c.start_processor(name)?;
            c.procs.push(p);
        }
        Ok(c)
    }

    /// Starts (or restarts, on a new port) processor node `name`.
    pub(crate) fn start_processor(&self, name: &str) -> anyhow::Result<ProcessorNode> {
        let d = self.dir.path().join(name);
        let ep = d.join("endpoints.json");
        let _ = std::fs::remove_file(&ep);
        let ttl = self.lease_ttl_ms.to_string();
        let mut args = processor_run_args(name, &self.meta_url, &ttl, &ep);
        args.extend(self.processor_args.iter().cloned());
        let mut daemon = spawn_daemon(&self.binary, name, &d, &args)?;
        let e = daemon.wait_ready(&ep)?;
        let nvme = e["nvme"][0]
            .as_str()
            .context("processor endpoints: no nvme")?
            .to_string();
        Ok(ProcessorNode { d: daemon, nvme })
    }

    pub(crate) fn proc_index(name: &str) -> usize {
        PROCESSORS.iter().position(|p| *p == name).unwrap_or(0)
    }

    /// Runs a ferrobay command, returns its stdout.
    pub(crate) fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        cluster::run_cli(&self.binary, args).map_err(anyhow::Error::msg)
    }

    pub(crate) fn cli_json(&self, args: &[&str]) -> anyhow::Result<serde_json::Value> {
        let out = self.cli(args)?;
        serde_json::from_str(&out).with_context(|| format!("ferrobay {args:?}: not JSON: {out}"))
    }

    pub(crate) fn create_volume(&self, name: &str, s: &Settings) -> anyhow::Result<VolumeRecord> {
        let out = self.cli(&[
            "volume",
            "create",
            name,
            "--level",
            "raid5",
            "--size",
            &format!("{}M", s.volume_size_bytes >> 20),
            "--stripe-unit",
            &format!("{}k", s.stripe_unit_bytes >> 10),
            "--storage-nodes",
            &STORAGE_NODES.join(","),
            "--preferred-owner",
            PROCESSORS[0],
            "--json",
            "--meta",
            &self.meta_url,
        ])?;
        serde_json::from_str(&out).with_context(|| format!("volume create: not a record: {out}"))
    }

    pub(crate) fn view(&self, volume: &str) -> anyhow::Result<VolumeView> {
        let out = self.cli(&[
            "volume",
            "status",
            volume,
            "--json",
            "--meta",
            &self.meta_url,
        ])?;
        serde_json::from_str(&out).with_context(|| format!("volume status: not a view: {out}"))
    }

    /// Waits until `want` owns `volume` with an epoch above `after_epoch` and has
    /// published its status.
    pub(crate) fn wait_owner(
        &self,
        volume: &str,
        want: &str,
        after_epoch: u64,
    ) -> anyhow::Result<VolumeView> {
        let view = cluster::wait_owner(
            &self.binary,
            &self.meta_url,
            volume,
            want,
            Some(after_epoch),
            OWNER_TIMEOUT,
        )
        .map_err(|e| anyhow::anyhow!("{e}\n{}", self.logs()))?;
        serde_json::from_value(view).context("volume status: not a view")
    }

    pub(crate) fn move_volume(&self, volume: &str, to: &str) -> anyhow::Result<()> {
        self.cli(&[
            "volume",
            "move",
            volume,
            "--to",
            to,
            "--wait",
            "--meta",
            &self.meta_url,
        ])?;
        Ok(())
    }

    pub(crate) fn volume_url(&self, volume: &str, via: &[usize]) -> String {
        let addrs: Vec<&str> = via.iter().map(|&i| self.procs[i].nvme.as_str()).collect();
        format!(
            "nvme+tcp://{}/{}/1",
            addrs.join(","),
            control::records::volume_nqn(volume)
        )
    }

    pub(crate) fn cpu(&self) -> CpuSnap {
        CpuSnap {
            procs: self.procs.iter().map(|p| p.d.cpu_s()).collect(),
            nodes: self.nodes.iter().map(|n| n.d.cpu_s()).collect(),
            machine_busy_s: machine_busy_s(),
        }
    }

    pub(crate) fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| &n.d)
            .chain(self.procs.iter().map(|p| &p.d))
            .map(|d| d.log_tail(20))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub(crate) fn stop(mut self) {
        for p in &mut self.procs {
            p.d.stop();
        }
        for n in &mut self.nodes {
            n.d.stop();
        }
    }
}
