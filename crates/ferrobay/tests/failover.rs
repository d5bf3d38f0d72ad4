//! Failover with the Linux kernel host: storage and processor nodes each in their own
//! network namespace (separate hosts on a private bridge, `common::netns`), etcd as the
//! store, and the kernel's native NVMe multipath (QEMU guest, `guest/failover.sh`)
//! connected through both processor nodes, writing and verifying with fio.
//!
//! Each scenario prints one JSON line on stdout (`{"bench":"failover","scenario":..,
//! "io_gap_ms":..}`: the longest time without a completed I/O in the guest, when it
//! started and when the fault was injected, ms since the workload started, plus what the
//! host side measured: takeover time, resync and rebuild bytes). Run with `--nocapture`
//! to see them; they are also written to `target/tmp/failover-{harness,cluster}.jsonl`.
//! Without QEMU, the guest image, root (network namespaces) or etcd it says it did not
//! run (a failure under `FERROBAY_REQUIRE_ALL=1`, see `testkit::prereq`). About 100 s
//! on 2 cores.

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::netns::{Net, Netns, NsProcess};
use common::{Endpoints, scratch_dir};
use test_guest::{GuestConfig, spawn};

const NVME_PORT: u16 = 4420;
const DISCOVERY_PORT: u16 = 8009;
const HTTP_PORT: u16 = 9420;
/// The guest's NVMe keep-alive timeout (`nvme connect -k`; 5 s, the kernel's default, or
/// `$FERROBAY_FAILOVER_KATO_S`): a path that goes silent (link cut) is noticed only after
/// this, so it bounds the I/O gap of a cut.
fn host_kato_s() -> u32 {
    std::env::var("FERROBAY_FAILOVER_KATO_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|k| *k > 0)
        .unwrap_or(5)
}

/// Why the guest tests cannot run here (see `testkit::prereq`), or None.
fn skip_reason() -> Option<String> {
    if let Err(e) = test_guest::find_qemu() {
        return Some(e.to_string());
    }
    if let Err(e) = test_guest::GuestImage::ensure_fio() {
        return Some(format!("no guest image with fio: {e}"));
    }
    Net::unavailable()
}

macro_rules! skip_unless_ready {
    () => {
        if let Some(why) = skip_reason() {
            testkit::prereq::missing(why);
            return;
        }
    };
}

/// A `ferrobay node run` inside a namespace, on fixed ports (the namespace is ours).
struct NsNode {
    ns: Netns,
    proc: NsProcess,
    endpoints: Endpoints,
}

impl NsNode {
    /// Starts (or restarts: no drives given, the data dir has them) a storage node.
    fn start(
        net: &Net,
        ns: &Netns,
        name: &str,
        dir: &Path,
        drive_mb: Option<u64>,
        meta: Option<&str>,
    ) -> NsNode {
        std::fs::create_dir_all(dir).expect("node dir");
        let endpoints_file = dir.join("endpoints.json");
        let _ = std::fs::remove_file(&endpoints_file);
        let mut args: Vec<String> = vec![
            "node".into(),
            "run".into(),
            "--name".into(),
            name.into(),
            "--data-dir".into(),
            dir.display().to_string(),
            "--listen".into(),
            ns.sock(NVME_PORT),
            "--discovery-listen".into(),
            ns.sock(DISCOVERY_PORT),
            "--http-listen".into(),
            ns.sock(HTTP_PORT),
        ];
        if let Some(mb) = drive_mb {
            args.push("--drive".into());
            args.push(format!("d0=file:{}:{mb}M", dir.join("d0.img").display()));
        }
        if let Some(m) = meta {
            args.push("--meta".into());
            args.push(m.into());
        }
        let mut proc = net
            .spawn_ferrobay(ns, name, &args, &dir.join("node.log"))
            .expect("spawn storage node");
        let endpoints: Endpoints = proc
            .wait_json(&endpoints_file)
            .unwrap_or_else(|e| panic!("{e}"));
        NsNode {
            ns: ns.clone(),
            proc,
            endpoints,
        }
    }
}

fn can_connect(addr: &str) -> bool {
    let sa: std::net::SocketAddr = addr.parse().expect("socket address");
    std::net::TcpStream::connect_timeout(&sa, Duration::from_millis(500)).is_ok()
}

/// Reachable within `timeout` (a port that just came up, a neighbour entry to refresh).
fn reachable_within(addr: &str, timeout: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if can_connect(addr) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Prints the JSON lines and writes them to `<target tmp>/failover-TEST.jsonl` for benches.
fn emit(test: &str, lines: &[String]) {
    let mut text = String::new();
    for l in lines {
        println!("{l}");
        text.push_str(l);
        text.push('\n');
    }
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("failover-{test}.jsonl"));
    if let Err(e) = std::fs::write(&path, text) {
        eprintln!("cannot write {}: {e}", path.display());
    }
}

/// `k=v` words of a guest message.
fn kv(msg: &str) -> BTreeMap<String, String> {
    msg.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What the guest reported about one scenario's workload.
#[derive(Debug, Clone)]
struct Workload {
    scenario: String,
    fields: BTreeMap<String, String>,
}

impl Workload {
    fn num(&self, key: &str) -> u64 {
        self.fields
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(u64::MAX)
    }
    fn ok(&self) -> bool {
        self.num("rc") == 0 && self.num("io_errors") == 0
    }
    /// One JSON line for benches: the host-visible I/O gap and what else we measured.
    fn json_line(&self, extra: &[(&str, serde_json::Value)]) -> String {
        let mut m = serde_json::Map::new();
        m.insert("bench".into(), "failover".into());
        m.insert("scenario".into(), self.scenario.clone().into());
        m.insert("host_kato_s".into(), host_kato_s().into());
        for (k, out) in [
            ("gap_ms", "io_gap_ms"),
            ("gap_at_ms", "gap_at_ms"),
            ("fault_at_ms", "fault_at_ms"),
            ("ios", "ios"),
            ("max_clat_ms", "max_clat_ms"),
            ("io_errors", "io_errors"),
            ("rc", "fio_rc"),
        ] {
            if let Some(v) = self.fields.get(k).and_then(|v| v.parse::<u64>().ok()) {
                m.insert(out.into(), v.into());
            }
        }
        if let Some(v) = self.fields.get("secs").and_then(|v| v.parse::<f64>().ok()) {
            m.insert("workload_secs".into(), v.into());
        }
        for (k, v) in extra {
            m.insert((*k).into(), v.clone());
        }
        serde_json::Value::Object(m).to_string()
    }
}

/// The test's side of `guest/failover.sh`: per scenario, `fault` runs while fio is
/// writing (the guest waits in `NAME-fault` only until it returns), `after` once fio
/// ended (the guest waits for it before the next scenario), `before_final` before the
/// guest re-reads everything. Errors carry the guest's diagnostics.
struct Driver<'a> {
    guest: test_guest::RunningGuest,
    diag: &'a dyn Fn() -> String,
}

impl Driver<'_> {
    fn fail(&self, what: &str, e: impl std::fmt::Display) -> ! {
        panic!(
            "{what}: {e}\n--- guest ---\n{}\n--- nodes ---\n{}",
            self.guest.snapshot().diagnostics(),
            (self.diag)()
        )
    }

    fn wait(&self, name: &str, timeout: Duration) -> String {
        match self.guest.wait_for(name, timeout) {
            Ok(m) => m,
            Err(e) => self.fail(&format!("guest at {name}"), e),
        }
    }

    fn release(&self, name: &str) {
        if let Err(e) = self.guest.release(name) {
            self.fail(&format!("release {name}"), e)
        }
    }

    /// Runs one scenario; returns what the guest measured.
    fn scenario(
        &self,
        name: &str,
        fault: impl FnOnce(&BTreeMap<String, String>) -> Result<(), String>,
        after: impl FnOnce(&Workload) -> Result<(), String>,
    ) -> Workload {
        let msg = self.wait(&format!("{name}-fault"), Duration::from_secs(240));
        eprintln!("[{name}] fault ({msg})");
        if let Err(e) = fault(&kv(&msg)) {
            self.fail(&format!("{name}: fault"), e)
        }
        self.release(&format!("{name}-fault"));
        let msg = self.wait(&format!("{name}-done"), Duration::from_secs(240));
        eprintln!("[{name}] done ({msg})");
        let w = Workload {
            scenario: name.to_string(),
            fields: kv(&msg),
        };
        if let Err(e) = after(&w) {
            self.fail(&format!("{name}: after"), e)
        }
        self.release(&format!("{name}-done"));
        w
    }

    /// A `RESULT` value the guest printed so far.
    fn result(&self, key: &str) -> Option<String> {
        self.guest.snapshot().result(key).map(str::to_string)
    }

    fn finish(self, before_final: impl FnOnce() -> Result<(), String>) -> test_guest::GuestRun {
        let msg = self.wait("final", Duration::from_secs(240));
        eprintln!("[final] ({msg})");
        if let Err(e) = before_final() {
            self.fail("before the final verify", e)
        }
        self.release("final");
        let diag = self.diag;
        self.guest
            .finish(Duration::from_secs(300))
            .unwrap_or_else(|e| panic!("{e}\n--- nodes ---\n{}", diag()))
    }
}

/// The guest config for `guest/failover.sh`.
fn workload_guest(name: &str, nqn: &str, addrs: &[String], scenarios: &[&str]) -> GuestConfig {
    workload_guest_for(name, nqn, addrs, scenarios, 8)
}

/// [`workload_guest`] with each scenario's write phase sized to last `work_secs`.
fn workload_guest_for(
    name: &str,
    nqn: &str,
    addrs: &[String],
    scenarios: &[&str],
    work_secs: u32,
) -> GuestConfig {
    GuestConfig::new(name, include_str!("guest/failover.sh"))
        .with_fio()
        .env("NQN", nqn)
        .env("ADDRS", addrs.join(" "))
        .env("PORT", NVME_PORT)
        .env("SCENARIOS", scenarios.join(" "))
        .env("WORK_SECS", work_secs)
        .env("LEAD_SECS", 2)
        .env("REGION_MB", 128)
        .env("KATO_S", host_kato_s())
        // Path errors fail over; only an I/O that no path can serve for this long
        // reaches fio (it must not happen: that is what the tests check).
        .append("nvme_core.io_timeout=30")
        .timeout(Duration::from_secs(600))
}

fn assert_passes(run: &test_guest::GuestRun, names: &[&str]) {
    for want in names {
        assert!(
            run.passed(want).is_some(),
            "missing PASS {want}\n{}",
            run.diagnostics()
        );
    }
    assert!(run.fails.is_empty(), "{}", run.diagnostics());
}

/// The harness on its own, against one storage node in a namespace: reachable from the
/// root namespace, unreachable while its link is down; the guest connects through
/// QEMU's user network and runs the scenario workload while the node is killed (-9) and
/// restarted: no I/O error, data verified, the I/O gap measured; every namespace and
/// link is gone afterwards.
#[test]
fn harness_storage_node_in_netns() {
    skip_unless_ready!();
    let dir = scratch_dir("failover-harness");
    let net = Net::new().expect("bridge");
    let ns = net.add("n1").expect("netns n1");
    let node_dir = dir.path().join("n1");
    let node = RefCell::new(NsNode::start(&net, &ns, "n1", &node_dir, Some(1024), None));
    assert_eq!(node.borrow().endpoints.nvme_tcp, vec![ns.sock(NVME_PORT)]);

    let nvme = ns.sock(NVME_PORT);
    assert!(
        can_connect(&nvme),
        "node not reachable from the root namespace"
    );
    net.link_down(&ns).expect("link down");
    assert!(!can_connect(&nvme), "node reachable with its link down");
    net.link_up(&ns).expect("link up");
    assert!(
        reachable_within(&nvme, Duration::from_secs(10)),
        "node not reachable after link up"
    );

    let nqn = "nqn.2026-01.io.ferrobay:n1:d0";
    let cfg = workload_guest(
        "failover-harness",
        nqn,
        &[ns.addr.to_string()],
        &["node_kill"],
    )
    .env("NEED_ANA", 0);
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}\n{}", node.borrow().proc.log_tail(40)));
    let diag = || node.borrow().proc.log_tail(40);
    let driver = Driver { guest, diag: &diag };
    let w = driver.scenario(
        "node_kill",
        |_| {
            node.borrow_mut().proc.kill();
            std::thread::sleep(Duration::from_millis(500));
            *node.borrow_mut() = NsNode::start(&net, &ns, "n1", &node_dir, None, None);
            Ok(())
        },
        |w| {
            if w.ok() {
                Ok(())
            } else {
                Err(format!("workload failed: {:?}", w.fields))
            }
        },
    );
    emit(
        "harness",
        &[w.json_line(&[("target", "storage-node".into())])],
    );
    let run = driver.finish(|| Ok(()));
    assert_passes(
        &run,
        &[
            "multipath_paths",
            "calibrate",
            "node_kill_workload",
            "node_kill_reverify",
            "no_io_errors",
            "disconnect",
        ],
    );
    eprintln!("guest nvme_core multipath={:?}", run.result("multipath"));

    let names: Vec<String> = net.namespaces().iter().map(|n| n.name.clone()).collect();
    let bridge_gw = net.gateway();
    drop(node);
    drop(net);
    let left = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip");
    let left = String::from_utf8_lossy(&left.stdout);
    for n in names {
        assert!(
            !left
                .lines()
                .any(|l| l.split_whitespace().next() == Some(n.as_str())),
            "netns {n} left behind"
        );
    }
    let addrs = std::process::Command::new("ip")
        .args(["-4", "-o", "addr"])
        .output()
        .expect("ip");
    assert!(
        !String::from_utf8_lossy(&addrs.stdout).contains(&format!("{bridge_gw}/")),
        "bridge address left behind"
    );
}

// ------------------------------------------------------------------ the cluster

const VOLUME: &str = "vol0";
/// Lease TTL of the processor nodes: a dead owner's volume moves after about this long.
const LEASE_TTL_MS: u64 = 4000;
const API_PORT: u16 = 9430;

/// What `processor run --endpoints-file` writes.
#[derive(Debug, Clone, serde::Deserialize)]
struct ProcEndpoints {
    nvme: Vec<String>,
}

/// A `ferrobay processor run` inside its namespace.
struct ProcNode {
    name: String,
    ns: Netns,
    proc: NsProcess,
}

impl ProcNode {
    fn start(net: &Net, ns: &Netns, name: &str, dir: &Path, meta: &str) -> ProcNode {
        std::fs::create_dir_all(dir).expect("processor dir");
        let endpoints_file = dir.join("endpoints.json");
        let _ = std::fs::remove_file(&endpoints_file);
        let args: Vec<String> = [
            "processor",
            "run",
            "--name",
            name,
            "--listen",
            &ns.sock(NVME_PORT),
            "--api-listen",
            &ns.sock(API_PORT),
            "--meta",
            meta,
            "--lease-ttl-ms",
            &LEASE_TTL_MS.to_string(),
            "--endpoints-file",
            &endpoints_file.display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut proc = net
            .spawn_ferrobay(ns, name, &args, &dir.join(format!("{name}.log")))
            .expect("spawn processor");
        let endpoints: ProcEndpoints = proc
            .wait_json(&endpoints_file)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(endpoints.nvme, vec![ns.sock(NVME_PORT)], "{name} endpoints");
        ProcNode {
            name: name.into(),
            ns: ns.clone(),
            proc,
        }
    }
}

/// Three storage nodes, two processor nodes and etcd, each in its own namespace.
/// Fields drop in order: processes first, the bridge and namespaces last.
struct Cluster {
    procs: RefCell<Vec<ProcNode>>,
    nodes: RefCell<Vec<NsNode>>,
    etcd: common::netns::NsEtcd,
    dir: tempfile::TempDir,
    net: Net,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = scratch_dir("failover-cluster");
        let net = Net::new().expect("bridge");
        let etcd_ns = net.add("etcd").expect("netns etcd");
        let etcd = common::netns::NsEtcd::start(&net, &etcd_ns).unwrap_or_else(|e| panic!("{e}"));
        let meta = etcd.meta_url();
        let nodes = ["n1", "n2", "n3"]
            .iter()
            .map(|n| {
                let ns = net.add(n).expect("netns");
                let node = NsNode::start(&net, &ns, n, &dir.path().join(n), Some(512), Some(&meta));
                {
                    // With --meta a new drive comes up without a namespace: all of it is
                    // free for the namespaces `volume create --storage-nodes` makes.
                    let api = ns.sock(HTTP_PORT);
                    let token = dir.path().join(n).join("api-token").display().to_string();
                    let out = net.ferrobay(&[
                        "node",
                        "ns",
                        "list",
                        "--api",
                        &api,
                        "--api-token-file",
                        &token,
                        "--json",
                    ]);
                    assert!(
                        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "[]",
                        "namespaces on {n}: {out:?}\n{}",
                        node.proc.log_tail(20)
                    );
                }
                node
            })
            .collect();
        let procs = ["p1", "p2"]
            .iter()
            .map(|p| {
                let ns = net.add(p).expect("netns");
                ProcNode::start(&net, &ns, p, &dir.path().join(p), &meta)
            })
            .collect();
        Cluster {
            procs: RefCell::new(procs),
            nodes: RefCell::new(nodes),
            etcd,
            dir,
            net,
        }
    }

    fn meta(&self) -> String {
        self.etcd.meta_url()
    }

    /// `ferrobay ARGS --meta URL` from the root namespace; stdout on success.
    fn cli(&self, args: &[&str]) -> Result<String, String> {
        let meta = self.meta();
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--meta", &meta]);
        let out = self.net.ferrobay(&all);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "ferrobay {} -> {}\nstdout: {}\nstderr: {}",
                all.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// A RAID-5 volume with one new namespace on each storage node (Namespace
    /// Management over the fabric), p1 preferred.
    fn create_volume(&self) {
        let out = self
            .cli(&[
                "volume",
                "create",
                VOLUME,
                "--level",
                "raid5",
                "--size",
                "768M",
                "--storage-nodes",
                "n1,n2,n3",
                "--preferred-owner",
                "p1",
            ])
            .unwrap_or_else(|e| panic!("{e}\n{}", self.logs(30)));
        eprintln!("{out}");
    }

    /// `volume status NAME --json`.
    fn status(&self) -> Result<serde_json::Value, String> {
        let out = self.cli(&["volume", "status", VOLUME, "--json"])?;
        serde_json::from_str(&out).map_err(|e| format!("status JSON: {e}\n{out}"))
    }

    /// The owner named by the status (`owner.node`), if any.
    fn owner(&self) -> Option<String> {
        self.status().ok().as_ref().and_then(owner_of)
    }

    /// Polls until `pred(status)` holds; returns that status and how long it took.
    fn wait_status(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<(serde_json::Value, Duration), String> {
        let t0 = Instant::now();
        loop {
            let last = match self.status() {
                Ok(v) if pred(&v) => return Ok((v, t0.elapsed())),
                Ok(v) => v.to_string(),
                Err(e) => e,
            };
            if t0.elapsed() > timeout {
                return Err(format!(
                    "{what}: not after {timeout:?}; last status: {last}"
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn proc_index(&self, name: &str) -> usize {
        self.procs
            .borrow()
            .iter()
            .position(|p| p.name == name)
            .unwrap_or_else(|| panic!("no processor {name}"))
    }

    fn restart_proc(&self, name: &str) {
        let i = self.proc_index(name);
        let ns = self.procs.borrow()[i].ns.clone();
        let p = ProcNode::start(
            &self.net,
            &ns,
            name,
            &self.dir.path().join(name),
            &self.meta(),
        );
        self.procs.borrow_mut()[i] = p;
    }

    fn logs(&self, n: usize) -> String {
        let mut s = String::new();
        for p in self.procs.borrow().iter() {
            s += &p.proc.log_tail(n);
        }
        for node in self.nodes.borrow().iter() {
            s += &node.proc.log_tail(n / 2);
        }
        s
    }
}

/// `owner.node` of a volume view (or a plain `owner` string).
fn owner_of(v: &serde_json::Value) -> Option<String> {
    match v.get("owner")? {
        serde_json::Value::String(s) => Some(s.clone()),
        o => o.get("node").and_then(|n| n.as_str()).map(str::to_string),
    }
}

/// The volume engine's status inside a view (`status.status`), if published.
fn engine_status(v: &serde_json::Value) -> Option<&serde_json::Value> {
    let s = v.get("status").filter(|s| !s.is_null())?;
    s.get("status").or(Some(s)).filter(|s| !s.is_null())
}

fn member_states(v: &serde_json::Value) -> Vec<String> {
    engine_status(v)
        .and_then(|s| s.get("members"))
        .and_then(|m| m.as_array())
        .map(|a| {
            a.iter()
                .map(|m| {
                    m.get("state")
                        .map(|s| s.as_str().map_or_else(|| s.to_string(), str::to_string))
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Reservation state of every member, read through a side connection with a host
/// identity of its own: holder and registrant keys, and whether a write from a host that
/// does not hold the reservation is refused with Reservation Conflict.
struct MemberReservation {
    url: String,
    rtype: u8,
    holder_key: Option<u64>,
    keys: Vec<u64>,
    write_refused: bool,
}

fn member_reservations(view: &serde_json::Value) -> Result<Vec<MemberReservation>, String> {
    use blockdev::{BlockDevice, IoBuf, WriteFlags};
    let urls: Vec<String> = view
        .get("record")
        .and_then(|r| r.get("members"))
        .and_then(|m| m.as_array())
        .ok_or("no record.members in the status")?
        .iter()
        .filter_map(|m| m.get("url").and_then(|u| u.as_str()).map(str::to_string))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let host = nvmf_host::HostIdentity::from_hostnqn(
            "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-4908-8706-050403020100",
        )
        .map_err(|e| e.to_string())?;
        let opts = nvmf_host::ConnectOptions::default();
        let mut out = Vec::new();
        for url in urls {
            let u = nvmf_host::NvmeTcpUrl::parse(&url).map_err(|e| format!("{url}: {e}"))?;
            let ns = u
                .open(&host, &opts)
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            let st = ns
                .reservation_report()
                .await
                .map_err(|e| format!("{url}: report: {e}"))?;
            let holder_key = st
                .registrants
                .iter()
                .find(|r| r.rcsts & 1 != 0)
                .map(|r| r.rkey);
            // Write back what is there: harmless if it were allowed, refused if fenced.
            let lba_bytes = u64::from(ns.info().logical_block_bytes);
            let data = ns
                .read(lba_bytes * 64, IoBuf::new_zeroed(lba_bytes as usize))
                .await
                .map_err(|e| format!("{url}: read: {e}"))?;
            let write_refused = ns
                .write(lba_bytes * 64, data, WriteFlags::default())
                .await
                .is_err_and(|e| matches!(e, blockdev::BlockError::ReservationConflict));
            out.push(MemberReservation {
                url,
                rtype: st.rtype,
                holder_key,
                keys: st.registrants.iter().map(|r| r.rkey).collect(),
                write_refused,
            });
        }
        Ok(out)
    })
}

/// The whole issue-5 story with the Linux kernel host: a RAID-5 volume over three
/// storage nodes exported by two processor nodes; the guest writes and verifies with
/// fio through native multipath while (d) the volume moves, (a) the owner is killed -9,
/// (b) the owner is cut off (and comes back fenced), (c) a storage node dies and
/// returns (partial rebuild). No I/O error, no verify mismatch, I/O gaps as JSON lines.
#[test]
fn kernel_multipath_failover() {
    skip_unless_ready!();
    if let Some(why) = common::netns::NsEtcd::binary()
        .is_none()
        .then_some("etcd not installed (Debian package etcd-server)")
    {
        testkit::prereq::missing(why);
        return;
    }
    let c = Cluster::start();
    c.create_volume();
    let (v, took) = c
        .wait_status("p1 owns the volume", Duration::from_secs(60), |v| {
            owner_of(v).as_deref() == Some("p1") && engine_status(v).is_some()
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", c.logs(40)));
    eprintln!(
        "p1 owns {VOLUME} after {took:?}: members {:?}",
        member_states(&v)
    );

    let addrs: Vec<String> = c
        .procs
        .borrow()
        .iter()
        .map(|p| p.ns.addr.to_string())
        .collect();
    let nqn = format!("nqn.2026-01.io.ferrobay:vol:{VOLUME}");
    let scenarios = ["move", "kill9", "linkcut", "storage"];
    let cfg = workload_guest("failover-cluster", &nqn, &addrs, &scenarios);
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}\n{}", c.logs(40)));
    let diag = || c.logs(60);
    let d = Driver { guest, diag: &diag };
    let addr_of = |name: &str| c.procs.borrow()[c.proc_index(name)].ns.addr.to_string();
    // The guest's optimized path must be the owner's.
    let optimized_is = |paths: &str, owner: &str| -> Result<(), String> {
        let want = format!("{}:live:optimized", addr_of(owner));
        if paths.split(',').any(|p| p == want) {
            Ok(())
        } else {
            Err(format!("guest paths {paths}: want {want}"))
        }
    };
    let mut lines = Vec::new();

    // (d) clean move p1 -> p2 under load.
    let moved = RefCell::new(Duration::ZERO);
    let w = d.scenario(
        "move",
        |m| {
            optimized_is(m.get("paths").map_or("", |s| s), "p1")?;
            let t0 = Instant::now();
            c.cli(&["volume", "move", VOLUME, "--to", "p2", "--wait"])?;
            *moved.borrow_mut() = t0.elapsed();
            Ok(())
        },
        |w| {
            if !w.ok() {
                return Err(format!("workload: {:?}", w.fields));
            }
            optimized_is(w.fields.get("paths").map_or("", |s| s), "p2")
        },
    );
    lines.push(w.json_line(&[
        ("from", "p1".into()),
        ("to", "p2".into()),
        ("move_ms", (moved.borrow().as_millis() as u64).into()),
    ]));

    // (a) kill -9 of the owner (p2): p1 takes over; p2 comes back as standby.
    let takeover = RefCell::new(None::<std::thread::JoinHandle<Result<Duration, String>>>);
    let w = d.scenario(
        "kill9",
        |m| {
            let owner = c.owner().ok_or("no owner")?;
            if owner != "p2" {
                return Err(format!("owner {owner} after the move, want p2"));
            }
            optimized_is(m.get("paths").map_or("", |s| s), &owner)?;
            let i = c.proc_index(&owner);
            c.procs.borrow_mut()[i].proc.kill();
            *takeover.borrow_mut() = Some(watch_owner_change(&c, &owner));
            Ok(())
        },
        |w| {
            if !w.ok() {
                return Err(format!("workload: {:?}", w.fields));
            }
            c.restart_proc("p2");
            Ok(())
        },
    );
    let took = join_watch(&takeover);
    let mut extra = vec![("killed", "p2".into()), ("takeover_ms", took.into())];
    extra.extend(resync_fields(&c, &d));
    lines.push(w.json_line(&extra));

    // (b) the owner (p1) is cut off; p2 takes over; back on the network, p1 is fenced.
    let takeover = RefCell::new(None);
    let fence = RefCell::new(String::new());
    let w = d.scenario(
        "linkcut",
        |m| {
            let owner = c.owner().ok_or("no owner")?;
            if owner != "p1" {
                return Err(format!("owner {owner}, want p1"));
            }
            optimized_is(m.get("paths").map_or("", |s| s), "p1")?;
            let ns = c.procs.borrow()[c.proc_index("p1")].ns.clone();
            c.net.link_down(&ns)?;
            *takeover.borrow_mut() = Some(watch_owner_change(&c, "p1"));
            Ok(())
        },
        |w| {
            if !w.ok() {
                return Err(format!("workload: {:?}", w.fields));
            }
            let (v, _) = c.wait_status("p2 owns", Duration::from_secs(30), |v| {
                owner_of(v).as_deref() == Some("p2")
            })?;
            let ns = c.procs.borrow()[c.proc_index("p1")].ns.clone();
            c.net.link_up(&ns)?;
            // p1 comes back: still alive, not the owner, and fenced at every member.
            std::thread::sleep(Duration::from_millis(2 * LEASE_TTL_MS));
            let i = c.proc_index("p1");
            if !c.procs.borrow_mut()[i].proc.running() {
                return Err("p1 exited after link up".into());
            }
            if c.owner().as_deref() != Some("p2") {
                return Err(format!("owner after link up: {:?}", c.owner()));
            }
            let p2_key = control::records::reservation_key("p2");
            let p1_key = control::records::reservation_key("p1");
            let mut report = Vec::new();
            for r in member_reservations(&v)? {
                report.push(format!(
                    "{} rtype={} holder={:?} keys={:x?} write_refused={}",
                    r.url, r.rtype, r.holder_key, r.keys, r.write_refused
                ));
                if r.holder_key != Some(p2_key) || r.keys.contains(&p1_key) || !r.write_refused {
                    return Err(format!(
                        "member {} not fenced for p2 (key {p2_key:#x}; p1 {p1_key:#x}): {}",
                        r.url,
                        report.join("; ")
                    ));
                }
            }
            *fence.borrow_mut() = report.join("; ");
            Ok(())
        },
    );
    let took = join_watch(&takeover);
    eprintln!("[linkcut] members after link up: {}", fence.borrow());
    let mut extra = vec![("cut", "p1".into()), ("takeover_ms", took.into())];
    extra.extend(resync_fields(&c, &d));
    lines.push(w.json_line(&extra));

    // (c) a storage node (n3) dies under load: degraded I/O; back: partial rebuild.
    let rebuild = RefCell::new(serde_json::Value::Null);
    let w = d.scenario(
        "storage",
        |m| {
            // p1, back from the cut, serves its path again and says it is not the owner.
            let paths = m.get("paths").map_or("", |s| s);
            optimized_is(paths, "p2")?;
            let want = format!("{}:live:inaccessible", addr_of("p1"));
            if !paths.split(',').any(|p| p == want) {
                return Err(format!(
                    "old owner's path after link up: {paths}, want {want}"
                ));
            }
            let i = c.proc_index("p1");
            let standby: Vec<String> = c.procs.borrow()[i]
                .proc
                .log()
                .lines()
                .filter(|l| l.contains("standby") || l.contains("fenced") || l.contains("lost"))
                .map(str::to_string)
                .collect();
            eprintln!("[linkcut] p1 says:\n{}", standby.join("\n"));
            c.nodes.borrow_mut()[2].proc.kill();
            Ok(())
        },
        |w| {
            if !w.ok() {
                return Err(format!("workload: {:?}", w.fields));
            }
            let (v, _) = c.wait_status("a failed member", Duration::from_secs(30), |v| {
                member_states(v).iter().any(|s| s != "active")
            })?;
            eprintln!("[storage] degraded: {:?}", member_states(&v));
            let ns = c.nodes.borrow()[2].ns.clone();
            let dir = c.dir.path().join("n3");
            let meta = c.meta();
            c.nodes.borrow_mut()[2] = NsNode::start(&c.net, &ns, "n3", &dir, None, Some(&meta));
            let seen = RefCell::new(serde_json::Value::Null);
            let (v, took) = c.wait_status("rebuilt", Duration::from_secs(120), |v| {
                if let Some(r) = engine_status(v).and_then(|s| s.get("rebuild"))
                    && !r.is_null()
                {
                    *seen.borrow_mut() = r.clone();
                }
                let states = member_states(v);
                states.len() == 3 && states.iter().all(|s| s == "active")
            })?;
            let r = seen.into_inner();
            eprintln!(
                "[storage] rebuilt after {took:?}: {r}; status {}",
                engine_status(&v).map(|s| s.to_string()).unwrap_or_default()
            );
            *rebuild.borrow_mut() = r;
            Ok(())
        },
    );
    let r = rebuild.into_inner();
    let member_bytes = c
        .status()
        .ok()
        .as_ref()
        .and_then(engine_status)
        .and_then(|s| s.get("member_data_bytes"))
        .and_then(|b| b.as_u64());
    lines.push(w.json_line(&[
        ("killed", "n3".into()),
        ("rebuild", r.clone()),
        ("member_data_bytes", member_bytes.into()),
    ]));

    let run = d.finish(|| Ok(()));
    emit("cluster", &lines);
    assert_passes(
        &run,
        &[
            "multipath_paths",
            "list_subsys_ana",
            "move_workload",
            "kill9_workload",
            "linkcut_workload",
            "storage_workload",
            "move_reverify",
            "kill9_reverify",
            "linkcut_reverify",
            "storage_reverify",
            "no_io_errors",
            "disconnect",
        ],
    );
    // The rebuild copied only what changed while n3 was away.
    assert_eq!(
        r.get("partial").and_then(|p| p.as_bool()),
        Some(true),
        "rebuild not partial (or never seen): {r}"
    );
    let total = r
        .get("bytes_total")
        .and_then(|b| b.as_u64())
        .unwrap_or(u64::MAX);
    assert!(
        member_bytes.is_some_and(|m| total < m),
        "rebuild copied {total} of {member_bytes:?} member bytes"
    );
}

/// A rolling upgrade of the whole cluster (`ferrobay cluster upgrade`: three storage
/// nodes, then both processor nodes, each re-executed as a copy of the binary) while the
/// Linux host writes with fio through native multipath: no I/O error, everything
/// verified afterwards, the longest I/O pause reported (`{"scenario":"upgrade",...}`).
#[test]
fn kernel_multipath_rolling_upgrade() {
    skip_unless_ready!();
    if common::netns::NsEtcd::binary().is_none() {
        testkit::prereq::missing("etcd not installed (Debian package etcd-server)");
        return;
    }
    let c = Cluster::start();
    c.create_volume();
    c.wait_status("p1 owns the volume", Duration::from_secs(60), |v| {
        owner_of(v).as_deref() == Some("p1") && engine_status(v).is_some()
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", c.logs(40)));
    let new_binary = c.dir.path().join("ferrobay-new");
    std::fs::copy(common::ferrobay_bin(), &new_binary).expect("copy the binary");
    let started: Vec<u32> = c
        .nodes
        .borrow()
        .iter()
        .map(|n| n.proc.pid())
        .chain(c.procs.borrow().iter().map(|p| p.proc.pid()))
        .collect();

    let addrs: Vec<String> = c
        .procs
        .borrow()
        .iter()
        .map(|p| p.ns.addr.to_string())
        .collect();
    let nqn = format!("nqn.2026-01.io.ferrobay:vol:{VOLUME}");
    // fio keeps writing for the whole upgrade (about 10 s on a quiet machine).
    let cfg = workload_guest_for("rolling-upgrade", &nqn, &addrs, &["upgrade"], 40);
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}\n{}", c.logs(40)));
    let diag = || c.logs(60);
    let d = Driver { guest, diag: &diag };
    let report = RefCell::new(serde_json::Value::Null);
    let took = RefCell::new(Duration::ZERO);
    let w = d.scenario(
        "upgrade",
        |_| {
            let t0 = Instant::now();
            let out = c.cli(&[
                "cluster",
                "upgrade",
                "--binary",
                &new_binary.display().to_string(),
                "--settle-timeout-s",
                "180",
                "--json",
            ])?;
            *took.borrow_mut() = t0.elapsed();
            *report.borrow_mut() =
                serde_json::from_str(&out).map_err(|e| format!("report: {e}: {out}"))?;
            Ok(())
        },
        |w| {
            if !w.ok() {
                return Err(format!("workload: {:?}", w.fields));
            }
            Ok(())
        },
    );
    let run = d.finish(|| Ok(()));
    let report = report.into_inner();
    let line = w.json_line(&[
        ("upgrade_ms", (took.borrow().as_millis() as u64).into()),
        ("nodes", report["nodes"].clone()),
    ]);
    emit("upgrade", &[line]);
    assert_passes(
        &run,
        &[
            "multipath_paths",
            "upgrade_workload",
            "upgrade_reverify",
            "no_io_errors",
            "disconnect",
        ],
    );
    let upgraded: Vec<&str> = report["nodes"]
        .as_array()
        .map(|n| n.iter().filter_map(|n| n["node"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(upgraded, ["n1", "n2", "n3", "p1", "p2"], "{report:#}");
    // The same processes run on, from the new binary.
    for pid in started {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .unwrap_or_else(|e| panic!("pid {pid} is gone ({e})\n{}", c.logs(40)));
        assert_eq!(exe, new_binary, "pid {pid}");
    }
}

/// Polls (in a thread) until the volume's owner is someone other than `old`.
fn watch_owner_change(c: &Cluster, old: &str) -> std::thread::JoinHandle<Result<Duration, String>> {
    let meta = c.meta();
    let old = old.to_string();
    let t0 = Instant::now();
    std::thread::spawn(move || {
        loop {
            let out = std::process::Command::new(common::ferrobay_bin())
                .args(["volume", "status", VOLUME, "--json", "--meta", &meta])
                .env("RUST_LOG", "warn")
                .output()
                .map_err(|e| e.to_string())?;
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout)
                && let Some(o) = owner_of(&v)
                && o != old
                && engine_status(&v).is_some()
            {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > Duration::from_secs(90) {
                return Err(format!("{old} still owns after 90 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

fn join_watch(h: &RefCell<Option<std::thread::JoinHandle<Result<Duration, String>>>>) -> u64 {
    match h.borrow_mut().take().map(|h| h.join()) {
        Some(Ok(Ok(d))) => d.as_millis() as u64,
        Some(Ok(Err(e))) => panic!("takeover: {e}"),
        _ => panic!("takeover watch thread missing or panicked"),
    }
}

/// What the new owner's takeover resynced (`last_resync` of the volume status), and the
/// time a full resync of the same capacity would take at 20 % of the measured write
/// bandwidth (what a hyper-converged cluster without shared members would need).
fn resync_fields(c: &Cluster, d: &Driver<'_>) -> Vec<(&'static str, serde_json::Value)> {
    let mut out = Vec::new();
    let Ok(v) = c.status() else {
        return out;
    };
    let st = engine_status(&v);
    if let Some(r) = st.and_then(|s| s.get("last_resync")) {
        out.push(("last_resync", r.clone()));
        if let Some(b) = r.get("bytes_resynced") {
            out.push(("resync_bytes", b.clone()));
        }
    }
    let size = st
        .and_then(|s| s.get("size_bytes"))
        .and_then(|b| b.as_u64());
    let kib_s = d.result("write_kib_s").and_then(|k| k.parse::<f64>().ok());
    if let (Some(size), Some(kib_s)) = (size, kib_s)
        && kib_s > 0.0
    {
        out.push(("size_bytes", size.into()));
        out.push(("write_bytes_per_sec", (kib_s * 1024.0).into()));
        out.push((
            "full_resync_estimate_secs",
            (size as f64 / (0.2 * kib_s * 1024.0)).into(),
        ));
    }
    out
}
