//! An object storage cluster of separate processes on 127.0.0.1, as an operator runs
//! one: etcd, three `ferrobay node run --meta` storage nodes on file drives (each on a
//! fixed NVMe/TCP port so that a node killed and started again comes back where the
//! object pool's record says), an object pool made by `ferrobay s3 pool create`, and a
//! `ferrobay s3 run --meta` gateway with a SQLite index. Shared by the S3 cluster tests
//! and `benches/s3.rs` (included there with `#[path]`: it uses nothing else from
//! `common`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use testkit::process::{Daemon, die_with_parent, run_cli};

pub const STORAGE_NODES: [&str; 3] = ["n1", "n2", "n3"];
pub const ACCESS_KEY: &str = "cluster-root";
pub const SECRET_KEY: &str = "cluster-root-secret";
const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub struct ObjNode {
    pub name: String,
    pub nvme_port: u16,
    pub dir: PathBuf,
    pub drive: String,
    pub daemon: Option<Daemon>,
}

pub struct ObjectCluster {
    pub binary: PathBuf,
    pub dir: PathBuf,
    pub meta_url: String,
    pub index_url: String,
    pub nodes: Vec<ObjNode>,
    pub gateway: Option<Daemon>,
    /// `http://127.0.0.1:PORT` once the gateway serves.
    pub s3_endpoint: String,
    // Last: dropped after the daemons that use it.
    _etcd: meta::testing::EtcdServer,
}

impl ObjectCluster {
    /// etcd and three storage nodes with a `drive_bytes` file drive each in `dir`; call
    /// from the thread that stays alive (see `die_with_parent`).
    pub async fn start(binary: &Path, dir: &Path, drive_bytes: u64) -> Result<Self, String> {
        let etcd = meta::testing::EtcdServer::start()
            .await
            .map_err(|e| format!("etcd: {e}"))?;
        let meta_url = etcd.endpoint().replacen("http://", "etcd://", 1);
        let ports = testkit::net::free_ports(STORAGE_NODES.len()).map_err(|e| e.to_string())?;
        let mut c = ObjectCluster {
            binary: binary.to_path_buf(),
            dir: dir.to_path_buf(),
            meta_url,
            index_url: format!("sqlite:{}", dir.join("index.db").display()),
            nodes: Vec::new(),
            gateway: None,
            s3_endpoint: String::new(),
            _etcd: etcd,
        };
        for (name, port) in STORAGE_NODES.iter().zip(ports) {
            let nd = dir.join(name);
            c.nodes.push(ObjNode {
                name: name.to_string(),
                nvme_port: port,
                drive: format!("d0=file:{}:{drive_bytes}", nd.join("d0.img").display()),
                dir: nd,
                daemon: None,
            });
        }
        for i in 0..c.nodes.len() {
            c.start_node(i)?;
        }
        Ok(c)
    }

    /// Starts storage node `i` (again), on its port, and waits until it serves.
    pub fn start_node(&mut self, i: usize) -> Result<(), String> {
        let n = &mut self.nodes[i];
        let endpoints = n.dir.join("endpoints.json");
        let _ = std::fs::remove_file(&endpoints);
        let args: Vec<String> = [
            "node",
            "run",
            "--name",
            &n.name,
            "--listen",
            &format!("127.0.0.1:{}", n.nvme_port),
            "--discovery-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--meta",
            &self.meta_url,
            "--lease-ttl-ms",
            "2000",
            "--drive",
            &n.drive,
            "--data-dir",
            &n.dir.display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut d = Daemon::spawn(
            &self.binary,
            &n.name,
            &n.dir,
            &args,
            "warn",
            die_with_parent,
        )
        .map_err(|e| format!("start {}: {e}", n.name))?;
        d.wait_json(&endpoints, READY_TIMEOUT)
            .map_err(|e| format!("{e}\n{}", d.log_tail(20)))?;
        n.daemon = Some(d);
        Ok(())
    }

    /// `kill -9` of storage node `i`.
    pub fn kill_node(&mut self, i: usize) {
        if let Some(mut d) = self.nodes[i].daemon.take() {
            d.kill9();
        }
    }

    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        run_cli(&self.binary, args)
    }

    /// `ferrobay s3 pool create` over the three nodes, namespaces of `size`.
    pub fn create_pool(&self, size: &str) -> Result<String, String> {
        self.cli(&[
            "s3",
            "pool",
            "create",
            "--storage-nodes",
            &STORAGE_NODES.join(","),
            "--size",
            size,
            "--meta",
            &self.meta_url,
        ])
    }

    /// Starts `ferrobay s3 run --meta` (more arguments in `extra`) and waits until it
    /// serves.
    pub fn start_gateway(&mut self, extra: &[&str]) -> Result<(), String> {
        let gd = self.dir.join("gateway");
        let endpoints = gd.join("endpoints.json");
        let _ = std::fs::remove_file(&endpoints);
        let mut args: Vec<String> = [
            "s3",
            "run",
            "--listen",
            "127.0.0.1:0",
            "--meta",
            &self.meta_url,
            "--index",
            &self.index_url,
            "--endpoints-file",
            &endpoints.display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut d = Daemon::spawn(&self.binary, "gateway", &gd, &args, "info", |c| {
            c.env("FERROBAY_S3_ACCESS_KEY", ACCESS_KEY)
                .env("FERROBAY_S3_SECRET_KEY", SECRET_KEY);
            die_with_parent(c);
        })
        .map_err(|e| format!("start the gateway: {e}"))?;
        let v = d
            .wait_json(&endpoints, READY_TIMEOUT)
            .map_err(|e| format!("{e}\n{}", d.log_tail(30)))?;
        let addr = v["s3"].as_str().ok_or("endpoints file: no s3")?;
        self.s3_endpoint = format!("http://{addr}");
        self.gateway = Some(d);
        Ok(())
    }

    /// Every daemon's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for d in self
            .nodes
            .iter()
            .filter_map(|n| n.daemon.as_ref())
            .chain(self.gateway.as_ref())
        {
            out.push_str(&d.log_tail(40));
            out.push('\n');
        }
        out
    }

    /// Stops the gateway, then the nodes (SIGTERM, SIGKILL after 10 s).
    pub fn stop(&mut self) {
        let stop = |d: &mut Daemon| {
            if d.terminate(Duration::from_secs(10)).is_none() {
                d.kill9();
            }
        };
        if let Some(mut g) = self.gateway.take() {
            stop(&mut g);
        }
        for n in &mut self.nodes {
            if let Some(mut d) = n.daemon.take() {
                stop(&mut d);
            }
        }
    }
}

impl Drop for ObjectCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
