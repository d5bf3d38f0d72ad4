//! A cluster driven through the CLI, as separate processes on 127.0.0.1: etcd, three
//! `ferrobay node run --meta` storage nodes, two `ferrobay processor run` processor nodes.
//! `volume create --storage-nodes`, `volume list/status --json` show the owner; a
//! multipath initiator to both processor nodes writes; `volume move --to p2 --wait` hands
//! the volume over; `kill -9` of the owner makes the other one take over with a higher
//! epoch. The data stays intact throughout. `volume qos set --meta` limits the volume at
//! its owner (the host measures it), the other processor node has it in force for the
//! move, and `volume qos clear --api` removes it. A `ferrobay cdc run` central discovery
//! controller on the same etcd lists every subsystem per host and follows an access
//! list change. An owner that is only paused (SIGSTOP) loses its volume to the standby's
//! heartbeat well within its lease and, resumed, is refused by every member.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use common::cluster::{self, Daemon, node_run_args, processor_run_args};
use common::{ferrobay_bin, scratch_dir};
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl};
use serde_json::Value;

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
const OWNER_TIMEOUT: Duration = Duration::from_secs(30);
const LEASE_TTL_MS: &str = "2000";

/// Starts a ferrobay daemon (see [`Daemon::spawn`]).
fn spawn(name: &str, dir: &Path, args: &[String]) -> Daemon {
    Daemon::spawn(Path::new(ferrobay_bin()), name, dir, args, "info", |_| {})
        .expect("spawn ferrobay")
}

/// Waits for the JSON file the daemon writes when it is ready.
fn wait_json(d: &mut Daemon, path: &Path) -> Value {
    d.wait_json(path, READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}:\n{}", d.log()))
}

/// SIGTERM and wait for the exit.
fn terminate(d: &mut Daemon) -> ExitStatus {
    d.terminate(STOP_TIMEOUT).unwrap_or_else(|| {
        d.kill9();
        panic!("{} did not stop after SIGTERM:\n{}", d.name, d.log())
    })
}

/// Every daemon's whole log, each headed by its name, read when called (for failure
/// messages; the daemons may be moved or restarted meanwhile).
fn log_reader(daemons: &[&Daemon]) -> impl Fn() -> String + use<> {
    let files: Vec<(String, PathBuf)> = daemons
        .iter()
        .map(|d| (d.name.clone(), d.log.clone()))
        .collect();
    move || {
        files
            .iter()
            .map(|(name, path)| {
                format!(
                    "--- {name} ---\n{}",
                    std::fs::read_to_string(path).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Runs a ferrobay command; returns (success, stdout, stderr).
fn ferrobay(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(ferrobay_bin())
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run ferrobay");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_of(args: &[&str]) -> Value {
    let (ok, out, err) = ferrobay(args);
    assert!(ok, "ferrobay {args:?} failed:\n{out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}):\n{out}"))
}

fn wait_owner(meta: &str, volume: &str, want: &str, logs: &dyn Fn() -> String) -> (String, u64) {
    let bin = Path::new(ferrobay_bin());
    let view = cluster::wait_owner(bin, meta, volume, want, None, OWNER_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    cluster::owner_of(&view).expect("an owner with its status")
}

/// Waits until a processor node's `/metrics` has a line starting with `prefix` and
/// ending with `suffix`.
fn wait_metric(api: &str, prefix: &str, suffix: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = common::netns::http_get(api, "/metrics").unwrap_or_default();
        if text
            .lines()
            .any(|l| l.starts_with(prefix) && l.ends_with(suffix))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {prefix}...{suffix} on {api}/metrics:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ (i >> 10) as u8)
        .collect()
}

const HOST_UUID: [u8; 16] = [
    0x5e, 0x1f, 0x0a, 0x7c, 0x22, 0x41, 0x4d, 0x11, 0x9a, 0x3b, 0x70, 0x01, 0x55, 0x12, 0x9e, 0x02,
];
const CHUNK_BYTES: usize = 96 << 10;
/// Offsets of the chunks written before the move, and after it.
const BEFORE_MOVE: [u64; 3] = [0, 5 << 20, 17 << 20];
const AFTER_MOVE: [u64; 2] = [3 << 20, 29 << 20];

async fn write_chunks(dev: &Arc<dyn BlockDevice>, offsets: &[u64], seed: u8) {
    for (i, &off) in offsets.iter().enumerate() {
        let data = pattern(CHUNK_BYTES, seed.wrapping_add(i as u8));
        dev.write(off, IoBuf::from_slice(&data), WriteFlags::default())
            .await
            .expect("write through multipath");
    }
    dev.flush().await.expect("flush");
}

async fn check_chunks(dev: &Arc<dyn BlockDevice>, offsets: &[u64], seed: u8, when: &str) {
    for (i, &off) in offsets.iter().enumerate() {
        let data = pattern(CHUNK_BYTES, seed.wrapping_add(i as u8));
        let back = dev
            .read(off, IoBuf::new_zeroed(CHUNK_BYTES))
            .await
            .unwrap_or_else(|e| panic!("{when}: read at {off}: {e}"));
        assert!(
            back.as_slice() == data.as_slice(),
            "{when}: data at {off} differs"
        );
    }
}

#[test]
fn volume_moves_and_fails_over_between_processor_nodes() {
    let dir = scratch_dir("cluster-cli");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // Started from this thread, which outlives it.
    let etcd = rt
        .block_on(meta::testing::EtcdServer::start())
        .expect("etcd server");
    let meta_url = etcd.endpoint().replacen("http://", "etcd://", 1);

    let mut nodes = Vec::new();
    let mut node_apis = Vec::new();
    for name in ["n1", "n2", "n3"] {
        let d = dir.path().join(name);
        let drive = format!("d0=file:{}:256M", d.join("d0.img").display());
        let args = node_run_args(name, &meta_url, Some(LEASE_TTL_MS), &drive, &d);
        let mut n = spawn(name, &d, &args);
        let e = wait_json(&mut n, &d.join("endpoints.json"));
        // With --meta a new drive comes up without a namespace, all of it free for
        // provisioning.
        let http = e["http"].as_str().expect("node http addr");
        let token = d.join("api-token").display().to_string();
        let nss = json_of(&[
            "node",
            "ns",
            "list",
            "--api",
            http,
            "--api-token-file",
            &token,
            "--json",
        ]);
        assert_eq!(nss, serde_json::json!([]), "namespaces on {name}");
        node_apis.push(http.to_string());
        nodes.push(n);
    }
    let mut procs = Vec::new();
    let mut nvme_addrs = Vec::new();
    let mut apis = Vec::new();
    for name in ["p1", "p2"] {
        let d = dir.path().join(name);
        let ep = d.join("endpoints.json");
        let args = processor_run_args(name, &meta_url, LEASE_TTL_MS, &ep);
        let mut p = spawn(name, &d, &args);
        let e = wait_json(&mut p, &ep);
        assert_eq!(e["name"], name, "{e}");
        nvme_addrs.push(e["nvme"][0].as_str().expect("nvme addr").to_string());
        apis.push(e["api"].as_str().expect("api addr").to_string());
        procs.push(p);
    }
    let logs = log_reader(&nodes.iter().chain(procs.iter()).collect::<Vec<_>>());

    // Bad arguments: one line, usage exit code.
    let out = Command::new(ferrobay_bin())
        .args([
            "volume",
            "create",
            "bad",
            "--level",
            "raid5",
            "--storage-nodes",
            "n1,n2,n3",
        ])
        .args(["--meta", &meta_url])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--size") && err.lines().count() == 1, "{err}");
    let out = Command::new(ferrobay_bin())
        .args([
            "volume", "create", "bad", "--level", "raid7", "--size", "1G",
        ])
        .args(["--storage-nodes", "n1,n2,n3", "--meta", &meta_url])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("raid7") && err.lines().count() == 1, "{err}");

    let (ok, out, err) = ferrobay(&[
        "volume",
        "create",
        "vol1",
        "--level",
        "raid5",
        "--size",
        "64M",
        "--storage-nodes",
        "n1,n2,n3",
        "--preferred-owner",
        "p1",
        "--meta",
        &meta_url,
    ]);
    assert!(ok, "create failed:\n{out}{err}\n{}", logs());
    let nqn = "nqn.2026-01.io.ferrobay:vol:vol1";
    assert!(
        out.contains(&format!("-n {nqn}")),
        "no connect hint:\n{out}"
    );

    let (_, epoch1) = wait_owner(&meta_url, "vol1", "p1", &logs);
    check_cdc(&dir, &meta_url, &node_apis[0], &logs);
    // The same view through a processor node's API, and in the list.
    // Storage nodes of a cluster keep the cluster's API token in their data dir.
    let token = dir
        .path()
        .join("n1")
        .join("api-token")
        .display()
        .to_string();
    let list = json_of(&[
        "volume",
        "list",
        "--json",
        "--api",
        &apis[1],
        "--api-token-file",
        &token,
    ]);
    let entry = list
        .as_array()
        .and_then(|l| l.iter().find(|v| v["record"]["name"] == "vol1"))
        .unwrap_or_else(|| panic!("vol1 not listed: {list:#}"));
    assert_eq!(entry["owner"]["node"], "p1", "{entry:#}");
    let (ok, table, _) = ferrobay(&["volume", "status", "vol1", "--meta", &meta_url]);
    assert!(ok && table.contains("p1 (epoch"), "{table}");

    let url = format!("nvme+tcp://{},{}/{nqn}/1", nvme_addrs[0], nvme_addrs[1]);
    rt.block_on(async {
        let host = HostIdentity::from_uuid(HOST_UUID);
        let dev = NvmeTcpUrl::parse(&url)
            .expect("url")
            .open_device(&host, &ConnectOptions::default())
            .await
            .expect("multipath device");
        write_chunks(&dev, &BEFORE_MOVE, 1).await;
        check_chunks(&dev, &BEFORE_MOVE, 1, "before the move").await;

        // QoS: a volume limit set through the store holds at the owner.
        let (ok, out, err) = ferrobay(&[
            "volume",
            "qos",
            "set",
            "vol1",
            "--iops",
            "200",
            "--burst-iops",
            "4",
            "--meta",
            &meta_url,
        ]);
        assert!(ok, "qos set failed:\n{out}{err}");
        assert!(
            out.contains("vol1") && out.contains("generation 1"),
            "{out}"
        );
        wait_metric(&apis[0], "ferrobay_qos_limit_iops{node=\"p1\"", " 200");
        let cfg = bench::BenchConfig {
            pattern: bench::Pattern::RandRead,
            iodepth: 16,
            runtime_ms: 2500,
            ..bench::BenchConfig::default()
        };
        let r = bench::run(dev.clone(), &cfg, "vol1", &bench::Progress::auto(0))
            .await
            .expect("bench");
        assert_eq!(r.errors, 0);
        eprintln!("volume limit 200: {:.1} IOPS at the host", r.iops);
        // Never above the limit; below it only by what a loaded 2-core machine loses.
        assert!(
            (160.0..=210.0).contains(&r.iops),
            "volume limit 200: {:.0} IOPS\n{}",
            r.iops,
            logs()
        );

        // Clean handover.
        let (ok, out, err) = ferrobay(&[
            "volume", "move", "vol1", "--to", "p2", "--wait", "--meta", &meta_url,
        ]);
        assert!(ok, "move failed:\n{out}{err}\n{}", logs());
        assert!(out.contains("owned by p2"), "{out}");
        let (_, epoch2) = wait_owner(&meta_url, "vol1", "p2", &logs);
        assert!(epoch2 > epoch1, "epoch {epoch2} after {epoch1}");
        // The new owner had the limit in force already.
        wait_metric(&apis[1], "ferrobay_qos_limit_iops{node=\"p2\"", " 200");
        check_chunks(&dev, &BEFORE_MOVE, 1, "after the move").await;
        write_chunks(&dev, &AFTER_MOVE, 50).await;

        // The owner dies: p1 takes over.
        procs[1].kill9();
        let (_, epoch3) = wait_owner(&meta_url, "vol1", "p1", &logs);
        assert!(epoch3 > epoch2, "epoch {epoch3} after {epoch2}");
        check_chunks(&dev, &BEFORE_MOVE, 1, "after the takeover").await;
        check_chunks(&dev, &AFTER_MOVE, 50, "after the takeover").await;
        drop(dev);
    });

    // QoS through a processor node's API (with the token): cleared, generation 2.
    let token_file = dir.path().join("n1").join("api-token");
    let token_arg = token_file.display().to_string();
    let (ok, out, err) = ferrobay(&[
        "volume",
        "qos",
        "clear",
        "vol1",
        "--api",
        &apis[0],
        "--api-token-file",
        &token_arg,
    ]);
    assert!(ok, "qos clear failed:\n{out}{err}");
    let q = json_of(&[
        "volume", "qos", "list", "vol1", "--json", "--meta", &meta_url,
    ]);
    assert_eq!(q, serde_json::json!({"generation": 2}), "{q}");

    // The event log tells it: p1 took vol1, handed it to p2, took it back when p2 died.
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let (ok, text, err) = ferrobay(&["events", "--meta", &meta_url, "--limit", "50"]);
        assert!(ok, "{err}");
        let n = text.lines().filter(|l| l.contains(" takeover ")).count();
        if n >= 3 || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let takeovers: Vec<&str> = text.lines().filter(|l| l.contains(" takeover ")).collect();
    assert_eq!(takeovers.len(), 3, "{text}");
    assert!(takeovers[2].contains("p1 took volume vol1 over"), "{text}");
    assert!(text.contains("p1 handed volume vol1 over to p2"), "{text}");
    // The same through the API, which needs the token.
    let (ok, _, err) = ferrobay(&["events", "--api", &apis[0], "--json"]);
    assert!(!ok && err.contains("missing bearer token"), "{err}");
    let token = dir
        .path()
        .join("n1")
        .join("api-token")
        .display()
        .to_string();
    let (ok, json, err) = ferrobay(&[
        "events",
        "--api",
        &apis[0],
        "--api-token-file",
        &token,
        "--json",
    ]);
    assert!(ok, "{err}");
    let kinds: Vec<String> = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("event JSON"))
        .map(|e| e["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        kinds.iter().filter(|k| *k == "takeover").count() == 3,
        "{kinds:?}"
    );
    assert!(kinds.iter().any(|k| k == "handoff"), "{kinds:?}");

    check_log_volume(&meta_url, &apis[0], &token, &logs);

    let s = terminate(&mut procs[0]);
    assert!(s.success(), "p1 exit {s}:\n{}", procs[0].log());
    for n in &mut nodes {
        let s = terminate(n);
        assert!(s.success(), "{} exit {s}:\n{}", n.name, n.log());
    }
    drop(etcd);
}

/// A compressed log-layout volume through a processor node's API: refused where it
/// cannot work (one line, usage exit code), created with its layout, owned by p1, its
/// compression figures in `volume status` and `volume list`.
fn check_log_volume(meta_url: &str, api: &str, token: &str, logs: &dyn Fn() -> String) {
    let create = |extra: &[&str]| {
        let mut args = vec![
            "volume",
            "create",
            "logs1",
            "--size",
            "32M",
            "--storage-nodes",
            "n1,n2,n3",
            "--preferred-owner",
            "p1",
            "--api",
            api,
            "--api-token-file",
            token,
        ];
        args.extend_from_slice(extra);
        Command::new(ferrobay_bin())
            .args(&args)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run")
    };
    for (extra, needle) in [
        (&["--level", "raid1", "--layout", "log"][..], "parity level"),
        (
            &["--level", "raid5", "--compress", "zstd:3"][..],
            "needs the log layout",
        ),
    ] {
        let out = create(extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.lines().count() == 1,
            "{extra:?}: {err}"
        );
    }
    let out = create(&[
        "--level",
        "raid5",
        "--layout",
        "log",
        "--compress",
        "zstd:3",
        "--log-block",
        "16k",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "create logs1: {text}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        logs()
    );
    assert!(
        text.contains("layout log, compression zstd:3, 16.0 KiB blocks"),
        "{text}"
    );
    wait_owner(meta_url, "logs1", "p1", logs);
    let (ok, status, err) = ferrobay(&["volume", "status", "logs1", "--meta", meta_url]);
    assert!(ok, "{err}");
    assert!(
        status.contains("Layout : log, compression zstd:3, 16.0 KiB blocks")
            && status.contains("Compression : 1.00x"),
        "{status}"
    );
    let (ok, list, err) = ferrobay(&["volume", "list", "--meta", meta_url]);
    assert!(ok, "{err}");
    let row = list
        .lines()
        .find(|l| l.starts_with("logs1 "))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(row.contains("log zstd:3 1.00x"), "{list}");
    let v = json_of(&["volume", "status", "logs1", "--json", "--meta", meta_url]);
    assert_eq!(v["record"]["log"]["block_bytes"], 16384, "{v:#}");
    assert_eq!(v["status"]["status"]["log"]["logical_bytes"], 0, "{v:#}");
}

/// The subsystems (subtype 2) `ferrobay discover` finds at `addr` as `hostnqn`, if it
/// answers.
fn discovered(addr: &str, hostnqn: &str) -> Option<Vec<String>> {
    let (ok, out, _) = ferrobay(&["discover", addr, "--json", "--hostnqn", hostnqn]);
    let log: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
    let mut nqns: Vec<String> = log["records"]
        .as_array()?
        .iter()
        .filter(|e| e["subtype"] == 2)
        .filter_map(|e| e["subnqn"].as_str().map(String::from))
        .collect();
    nqns.sort();
    Some(nqns)
}

/// `ferrobay cdc run` on the cluster's etcd: one log with every drive and the volume (on
/// both processor nodes); n1's drive restricted to the processor nodes (through n1's
/// API) leaves other hosts' view.
fn check_cdc(dir: &tempfile::TempDir, meta_url: &str, n1_api: &str, logs: &dyn Fn() -> String) {
    let addr = format!(
        "127.0.0.1:{}",
        testkit::net::free_port().expect("free port")
    );
    let args: Vec<String> = ["cdc", "run", "--listen", &addr, "--meta", meta_url]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut cdc = spawn("cdc", &dir.path().join("cdc"), &args);
    let host = "nqn.2014-08.org.nvmexpress:uuid:5e1f0a7c-2241-4d11-9a3b-700155129e03";
    let vol = "nqn.2026-01.io.ferrobay:vol:vol1".to_string();
    let drive = |n: u32| format!("nqn.2026-01.io.ferrobay:n{n}:d0");
    let wait = |hostnqn: &str, want: &[String], what: &str| {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let got = discovered(&addr, hostnqn);
            if got.as_deref() == Some(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {got:?}, not {want:?}\n{}\n{}",
                cdc.log(),
                logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // The volume on each processor node's listener, then every drive.
    let all = [drive(1), drive(2), drive(3), vol.clone(), vol.clone()];
    wait(host, &all, "the CDC lists the cluster");
    // Storage nodes of a cluster keep the cluster's API token in their data dir.
    let token = dir
        .path()
        .join("n1")
        .join("api-token")
        .display()
        .to_string();
    for p in ["p1", "p2"] {
        let (ok, out, err) = ferrobay(&[
            "node",
            "host",
            "allow",
            "--api",
            n1_api,
            "--api-token-file",
            &token,
            &drive(1),
            &control::records::processor_hostnqn(p),
        ]);
        assert!(ok, "host allow:\n{out}{err}");
    }
    wait(
        host,
        &[drive(2), drive(3), vol.clone(), vol.clone()],
        "n1's drive hidden from other hosts",
    );
    wait(
        &control::records::processor_hostnqn("p2"),
        &all,
        "n1's drive still listed for p2",
    );
    let s = terminate(&mut cdc);
    assert!(s.success(), "cdc exit {s}:\n{}", cdc.log());
}

/// A storage node whose store goes away for longer than its lease registers again once
/// the store is back (its record had vanished with the lease).
#[test]
fn storage_node_registers_again_after_losing_its_lease() {
    let dir = scratch_dir("cluster-rereg");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut etcd = rt
        .block_on(meta::testing::EtcdServer::start())
        .expect("etcd server");
    let meta_url = etcd.endpoint().replacen("http://", "etcd://", 1);
    let d = dir.path().join("n1");
    let args = node_run_args("n1", &meta_url, Some("1000"), "ram:64M", &d);
    let mut node = spawn("n1", &d, &args);
    let e = wait_json(&mut node, &d.join("endpoints.json"));
    let nvme = e["nvme_tcp"][0].as_str().expect("nvme addr").to_string();

    let registered = |etcd: &meta::testing::EtcdServer| -> Vec<String> {
        rt.block_on(async {
            let Ok(store) = etcd.store(meta::EtcdOptions::default()).await else {
                return vec![];
            };
            control::registration::list_nodes(&store)
                .await
                .unwrap_or_default()
                .into_iter()
                .filter(|n| n.name == "n1")
                .flat_map(|n| n.nvme_addrs)
                .map(|a| a.to_string())
                .collect()
        })
    };
    let wait_registered = |etcd: &meta::testing::EtcdServer, node: &Daemon, when: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if registered(etcd) == vec![nvme.clone()] {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "n1 not registered {when}:\n{}",
                node.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_registered(&etcd, &node, "at start");

    // Down for three TTLs: the node's keeper gives the lease up.
    etcd.kill();
    std::thread::sleep(Duration::from_secs(3));
    rt.block_on(etcd.restart()).expect("etcd restart");
    // etcd brings the old lease back with a fresh TTL: its record shows until it expires,
    // so wait for the new registration first.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !node
        .log()
        .contains("registered again in the metadata store")
    {
        assert!(
            Instant::now() < deadline,
            "no re-registration:\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_registered(&etcd, &node, "after the store came back");
    // Past the old lease's expiry: the record is under the new lease.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        registered(&etcd),
        vec![nvme.clone()],
        "record gone with the old lease:\n{}",
        node.log()
    );

    let s = terminate(&mut node);
    assert!(s.success(), "n1 exit {s}:\n{}", node.log());
    // A clean stop revokes the lease: the record goes at once.
    assert!(
        registered(&etcd).is_empty(),
        "n1 still registered after stop"
    );
}

/// The owner is only paused (SIGSTOP) while its lease has seconds left: the standby's
/// heartbeat declares it dead (Keep Alives unanswered), seizes the volume with the next
/// epoch and fences every member (preempt-and-abort). A write through the new owner
/// succeeds; then the old owner resumes (SIGCONT): a write through it is refused, every
/// member refuses its host's writes and reports only the new owner registered and holding,
/// the old owner steps down, and the data read back is the new owner's.
#[test]
fn a_paused_owner_is_fenced_by_every_member_when_it_resumes() {
    const LONG_LEASE_MS: &str = "10000";
    let dir = scratch_dir("cluster-pause");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let etcd = rt
        .block_on(meta::testing::EtcdServer::start())
        .expect("etcd server");
    let meta_url = etcd.endpoint().replacen("http://", "etcd://", 1);
    let mut daemons = Vec::new();
    for name in ["n1", "n2", "n3"] {
        let d = dir.path().join(name);
        let drive = format!("d0=file:{}:128M", d.join("d0.img").display());
        let args = node_run_args(name, &meta_url, Some(LEASE_TTL_MS), &drive, &d);
        let mut n = spawn(name, &d, &args);
        wait_json(&mut n, &d.join("endpoints.json"));
        daemons.push(n);
    }
    let mut nvme = Vec::new();
    for name in ["p1", "p2"] {
        let d = dir.path().join(name);
        let ep = d.join("endpoints.json");
        let args = processor_run_args(name, &meta_url, LONG_LEASE_MS, &ep);
        let mut p = spawn(name, &d, &args);
        let e = wait_json(&mut p, &ep);
        nvme.push(e["nvme"][0].as_str().expect("nvme addr").to_string());
        daemons.push(p);
    }
    let logs = log_reader(&daemons.iter().collect::<Vec<_>>());
    let (ok, out, err) = ferrobay(&[
        "volume",
        "create",
        "vol1",
        "--level",
        "raid5",
        "--size",
        "32M",
        "--storage-nodes",
        "n1,n2,n3",
        "--preferred-owner",
        "p1",
        "--meta",
        &meta_url,
    ]);
    assert!(ok, "create failed:\n{out}{err}\n{}", logs());
    let (_, epoch1) = wait_owner(&meta_url, "vol1", "p1", &logs);
    let view = json_of(&["volume", "status", "vol1", "--json", "--meta", &meta_url]);
    let members: Vec<String> = view["record"]["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["url"].as_str().expect("member url").to_string())
        .collect();
    assert_eq!(members.len(), 3, "{view:#}");
    let nqn = "nqn.2026-01.io.ferrobay:vol:vol1";
    let p1_url = format!("nvme+tcp://{}/{nqn}/1", nvme[0]);
    let p2_url = format!("nvme+tcp://{}/{nqn}/1", nvme[1]);
    let host = HostIdentity::from_uuid(HOST_UUID);
    // No keep-alive and patient I/O: this host still talks to the old owner after it
    // resumes, as a host that did not notice the pause would.
    let patient = ConnectOptions {
        kato_ms: 0,
        io_timeout_ms: 30_000,
        ..ConnectOptions::default()
    };
    let offsets = [0u64, 7 << 20];
    let p1_dev = rt.block_on(async {
        let dev = NvmeTcpUrl::parse(&p1_url)
            .expect("url")
            .open_device(&host, &patient)
            .await
            .expect("p1 device");
        write_chunks(&dev, &offsets, 1).await;
        check_chunks(&dev, &offsets, 1, "through the first owner").await;
        dev
    });
    // Once p2's heartbeat has seen p1 alive, freeze p1.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&daemons[4].log)
        .unwrap_or_default()
        .contains("heartbeat: following the owner")
    {
        assert!(
            Instant::now() < deadline,
            "p2 follows no heartbeat\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    assert!(daemons[3].pause(), "SIGSTOP p1");
    let bin = Path::new(ferrobay_bin());
    let view = cluster::wait_owner(bin, &meta_url, "vol1", "p2", Some(epoch1), OWNER_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    let took = t0.elapsed();
    let (_, epoch2) = cluster::owner_of(&view).expect("owner");
    eprintln!(
        "paused owner: p2 owns vol1 (epoch {epoch2}) {took:?} after SIGSTOP of p1 (lease TTL {LONG_LEASE_MS} ms)"
    );
    assert!(
        took < Duration::from_millis(5000),
        "p2 waited for the lease instead of the heartbeat: {took:?}\n{}",
        logs()
    );
    assert!(
        logs().contains("declared dead"),
        "no heartbeat verdict in the logs:\n{}",
        logs()
    );
    rt.block_on(async {
        let p2_dev = NvmeTcpUrl::parse(&p2_url)
            .expect("url")
            .open_device(&host, &ConnectOptions::default())
            .await
            .expect("p2 device");
        write_chunks(&p2_dev, &offsets, 2).await;

        // The old owner wakes up and gets a write from a host that still uses it.
        assert!(daemons[3].resume(), "SIGCONT p1");
        let data = pattern(CHUNK_BYTES, 3);
        let r = p1_dev
            .write(
                offsets[0],
                IoBuf::from_slice(&data),
                WriteFlags { fua: true },
            )
            .await;
        eprintln!("write through the resumed old owner: {r:?}");
        assert!(r.is_err(), "the resumed old owner took a write\n{}", logs());

        // Every member refuses p1's host and shows only p2 registered, holding.
        let p1_host =
            HostIdentity::from_hostnqn(&control::records::processor_hostnqn("p1")).expect("p1 id");
        let p2_host =
            HostIdentity::from_hostnqn(&control::records::processor_hostnqn("p2")).expect("p2 id");
        let short = ConnectOptions {
            ctrl_loss_tmo_ms: Some(0),
            ..ConnectOptions::default()
        };
        for url in &members {
            let as_p1 = NvmeTcpUrl::parse(url)
                .expect("member url")
                .open(&p1_host, &short)
                .await
                .expect("member as p1");
            let report = as_p1.reservation_report().await.expect("report");
            let holders: Vec<[u8; 16]> = report
                .registrants
                .iter()
                .filter(|r| {
                    r.rcsts & nvme_proto::reservation::RegisteredController::RCSTS_HOLDS_RESERVATION
                        != 0
                })
                .map(|r| r.hostid)
                .collect();
            assert_eq!(holders, vec![p2_host.hostid], "{url}: {report:?}");
            assert!(
                report
                    .registrants
                    .iter()
                    .all(|r| r.hostid != p1_host.hostid),
                "{url}: p1 is still registered: {report:?}"
            );
            let last = as_p1.info().size_bytes - 4096;
            let r = as_p1
                .write(
                    last,
                    IoBuf::from_slice(&[0xEE; 4096]),
                    WriteFlags::default(),
                )
                .await;
            assert!(
                matches!(&r, Err(blockdev::BlockError::ReservationConflict)),
                "{url}: a write of p1's host got {r:?}"
            );
            as_p1.controller().disconnect().await;
        }

        // The old owner steps down; the data is the new owner's.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&daemons[3].log)
            .unwrap_or_default()
            .contains("volume lost")
        {
            assert!(
                Instant::now() < deadline,
                "p1 did not step down\n{}",
                logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        check_chunks(&p2_dev, &offsets, 2, "after the old owner resumed").await;
        drop(p2_dev);
    });
    let (owner, epoch) = wait_owner(&meta_url, "vol1", "p2", &logs);
    assert_eq!((owner.as_str(), epoch), ("p2", epoch2));
    drop(p1_dev);
    for d in daemons.iter_mut().rev() {
        let s = terminate(d);
        assert!(s.success(), "{} exit {s}:\n{}", d.name, d.log());
    }
    drop(etcd);
}
