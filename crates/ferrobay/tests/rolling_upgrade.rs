//! Rolling upgrade under host I/O, as separate processes on 127.0.0.1: etcd, three
//! storage nodes, two processor nodes, a RAID-5 volume written and read back by a
//! multipath host (nvmf-host to both processor nodes) while `ferrobay cluster upgrade`
//! re-executes every node as a copy of the binary. No host I/O fails, every block reads
//! back as last written, every node runs again (same pid) from the new path, and the
//! longest I/O pause the host saw is printed. Before that: what is refused and changes
//! nothing (a missing binary, a binary that is not ferrobay, a build that cannot run
//! beside the cluster's, a node starting beside an incompatible node's record).

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use common::cluster::{Daemon, node_run_args, processor_run_args};
use common::{ferrobay_bin, scratch_dir};
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl};
use serde_json::Value;

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
const LEASE_TTL_MS: &str = "2000";
const HOST_UUID: [u8; 16] = [
    0x5e, 0x1f, 0x0a, 0x7c, 0x22, 0x41, 0x4d, 0x11, 0x9a, 0x3b, 0x70, 0x01, 0x55, 0x12, 0x9e, 0x03,
];
/// The host writes blocks of this size at block-aligned offsets in the first
/// `SPAN_BYTES` of the volume, each stamped with its offset and write number.
const BLOCK_BYTES: usize = 16 << 10;
const SPAN_BYTES: u64 = 32 << 20;

fn spawn(name: &str, dir: &Path, args: &[String]) -> Daemon {
    Daemon::spawn(Path::new(ferrobay_bin()), name, dir, args, "info", |_| {})
        .expect("spawn ferrobay")
}

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

/// Every live node's record by name.
fn node_records(rt: &tokio::runtime::Runtime, meta_url: &str) -> BTreeMap<String, Value> {
    rt.block_on(async {
        let store = control::metaurl::open_meta(meta_url)
            .await
            .expect("open store");
        control::registration::list_nodes(store.as_ref())
            .await
            .expect("list nodes")
            .into_iter()
            .map(|n| (n.name.clone(), serde_json::to_value(&n).expect("json")))
            .collect()
    })
}

fn started(records: &BTreeMap<String, Value>) -> BTreeMap<String, u64> {
    records
        .iter()
        .map(|(k, v)| (k.clone(), v["started_unix_ms"].as_u64().expect("started")))
        .collect()
}

fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A block as the host writes it: offset and write number in the first 16 bytes, then a
/// pattern of both.
fn block(offset: u64, seq: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_BYTES];
    b[..8].copy_from_slice(&offset.to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    for (i, x) in b[16..].iter_mut().enumerate() {
        *x = (i as u64 ^ offset.rotate_left(7) ^ seq.wrapping_mul(0x9e37)) as u8;
    }
    b
}

/// What the host did while the upgrade ran.
#[derive(Debug, Default)]
struct Workload {
    writes: u64,
    reads: u64,
    errors: Vec<String>,
    mismatches: Vec<String>,
    /// The longest time between two completed I/Os.
    max_pause: Duration,
    /// offset -> write number of its last acknowledged write.
    model: BTreeMap<u64, u64>,
}

/// Writes and reads back blocks until `done`: each write goes to a pseudo-random block,
/// every fourth I/O reads a block back and checks it against the model.
async fn host_io(dev: Arc<dyn BlockDevice>, done: Arc<AtomicBool>) -> Workload {
    let mut w = Workload::default();
    let blocks = SPAN_BYTES / BLOCK_BYTES as u64;
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut last = Instant::now();
    let mut seq = 0u64;
    while !done.load(Ordering::Acquire) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let offset = (x % blocks) * BLOCK_BYTES as u64;
        let read_back = seq % 4 == 3 && w.model.contains_key(&offset);
        let result = if read_back {
            w.reads += 1;
            match dev.read(offset, IoBuf::new_zeroed(BLOCK_BYTES)).await {
                Ok(back) => {
                    let want = block(offset, w.model[&offset]);
                    if back.as_slice() != want.as_slice() {
                        w.mismatches.push(format!("block at {offset}"));
                    }
                    Ok(())
                }
                Err(e) => Err(format!("read at {offset}: {e}")),
            }
        } else {
            seq += 1;
            w.writes += 1;
            match dev
                .write(
                    offset,
                    IoBuf::from_slice(&block(offset, seq)),
                    WriteFlags::default(),
                )
                .await
            {
                Ok(_) => {
                    w.model.insert(offset, seq);
                    Ok(())
                }
                Err(e) => Err(format!("write at {offset}: {e}")),
            }
        };
        if let Err(e) = result {
            w.errors.push(e);
            if w.errors.len() > 20 {
                break;
            }
        }
        w.max_pause = w.max_pause.max(last.elapsed());
        last = Instant::now();
    }
    w
}

#[test]
fn every_node_is_upgraded_under_host_io_without_an_error() {
    let dir = scratch_dir("rolling-upgrade");
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
        let drive = format!("d0=file:{}:192M", d.join("d0.img").display());
        let args = node_run_args(name, &meta_url, Some(LEASE_TTL_MS), &drive, &d);
        let mut n = spawn(name, &d, &args);
        n.wait_json(&d.join("endpoints.json"), READY_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}:\n{}", n.log()));
        daemons.push(n);
    }
    let mut nvme_addrs = Vec::new();
    for name in ["p1", "p2"] {
        let d = dir.path().join(name);
        let ep = d.join("endpoints.json");
        let args = processor_run_args(name, &meta_url, LEASE_TTL_MS, &ep);
        let mut p = spawn(name, &d, &args);
        let e = p
            .wait_json(&ep, READY_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}:\n{}", p.log()));
        nvme_addrs.push(e["nvme"][0].as_str().expect("nvme addr").to_string());
        daemons.push(p);
    }
    let pids: Vec<u32> = daemons.iter().map(Daemon::pid).collect();
    let logs = |daemons: &[Daemon]| {
        daemons
            .iter()
            .map(Daemon::log)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let (ok, out, err) = ferrobay(&[
        "volume",
        "create",
        "vol1",
        "--level",
        "raid5",
        "--size",
        "96M",
        "--storage-nodes",
        "n1,n2,n3",
        "--preferred-owner",
        "p1",
        "--meta",
        &meta_url,
    ]);
    assert!(ok, "create failed:\n{out}{err}\n{}", logs(&daemons));
    common::cluster::wait_owner(
        Path::new(ferrobay_bin()),
        &meta_url,
        "vol1",
        "p1",
        None,
        READY_TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", logs(&daemons)));
    let url = format!(
        "nvme+tcp://{},{}/nqn.2026-01.io.ferrobay:vol:vol1/1",
        nvme_addrs[0], nvme_addrs[1]
    );
    let dev = rt.block_on(async {
        NvmeTcpUrl::parse(&url)
            .expect("url")
            .open_device(
                &HostIdentity::from_uuid(HOST_UUID),
                &ConnectOptions::default(),
            )
            .await
            .expect("multipath device")
    });
    let before = node_records(&rt, &meta_url);
    assert_eq!(before.len(), 5, "{before:#?}");
    for (name, r) in &before {
        assert_eq!(r["protocol"], release::CLUSTER_PROTOCOL, "{name}: {r}");
    }

    // Refused, and nothing restarts: a missing binary, one that is not ferrobay, one
    // whose cluster protocol the running nodes do not speak.
    let fake_old = dir.path().join("ferrobay-protocol-9");
    script(
        &fake_old,
        r#"echo '{"version":"9.0.0","protocol":9,"oldest_protocol":9}'"#,
    );
    let not_ferrobay = dir.path().join("not-ferrobay");
    script(&not_ferrobay, "echo hello");
    for (binary, why) in [
        (dir.path().join("missing"), "no such file"),
        (not_ferrobay.clone(), "not a ferrobay binary"),
        (fake_old.clone(), "cannot run beside node"),
    ] {
        let (ok, out, err) = ferrobay(&[
            "cluster",
            "upgrade",
            "--binary",
            &binary.display().to_string(),
            "--meta",
            &meta_url,
        ]);
        assert!(
            !ok,
            "upgrade to {} was accepted:\n{out}{err}",
            binary.display()
        );
        assert!(err.contains(why), "{}: {err}", binary.display());
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    // A node's own API refuses such a binary too.
    let n1_api = before["n1"]["api_addr"]
        .as_str()
        .expect("n1 api")
        .to_string();
    let token = std::fs::read_to_string(dir.path().join("n1").join("api-token"))
        .expect("token")
        .trim()
        .to_string();
    let (status, body) = rt.block_on(async {
        httpapi::HttpClient::new(n1_api.clone())
            .with_token(Some(token.clone()))
            .request(
                "POST",
                "/api/v1/node/upgrade",
                Some(format!(r#"{{"binary":"{}"}}"#, fake_old.display()).into_bytes()),
            )
            .await
            .expect("node API")
    });
    assert_eq!(status, 409, "{}", String::from_utf8_lossy(&body));
    let (status, _) = rt.block_on(async {
        httpapi::HttpClient::new(n1_api.clone())
            .with_token(Some(token.clone()))
            .request(
                "POST",
                "/api/v1/node/upgrade",
                Some(br#"{"binary":"ferrobay"}"#.to_vec()),
            )
            .await
            .expect("node API")
    });
    assert_eq!(status, 400, "a relative path");
    // A processor node that owns volumes refuses without force.
    let p1_api = before["p1"]["api_addr"]
        .as_str()
        .expect("p1 api")
        .to_string();
    let (status, body) = rt.block_on(async {
        httpapi::HttpClient::new(p1_api)
            .with_token(Some(token.clone()))
            .request(
                "POST",
                "/api/v1/node/upgrade",
                Some(format!(r#"{{"binary":"{}"}}"#, ferrobay_bin()).into_bytes()),
            )
            .await
            .expect("processor API")
    });
    let body = String::from_utf8_lossy(&body);
    assert!(
        status == 409 && body.contains("owns volumes vol1"),
        "{status} {body}"
    );
    assert_eq!(
        started(&node_records(&rt, &meta_url)),
        started(&before),
        "nothing restarted"
    );

    // A node does not start beside a node whose build it cannot work with.
    rt.block_on(async {
        let store = control::metaurl::open_meta(&meta_url).await.expect("store");
        let mut future =
            control::records::NodeRecord::new("n9", control::records::NodeRole::Storage, vec![]);
        future.version = "9.0.0".into();
        future.protocol = 9;
        future.oldest_protocol = 9;
        meta::schema::put_json(
            store.as_ref(),
            &meta::schema::node_key("n9").expect("key"),
            &future,
            None,
        )
        .await
        .expect("put record");
    });
    let d4 = dir.path().join("n4");
    let drive = format!("d0=file:{}:64M", d4.join("d0.img").display());
    let args = node_run_args("n4", &meta_url, Some(LEASE_TTL_MS), &drive, &d4);
    std::fs::create_dir_all(&d4).expect("n4 dir");
    let out = Command::new(ferrobay_bin())
        .args(&args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run n4");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "n4 started beside protocol 9:\n{err}"
    );
    assert!(
        err.contains("cannot run beside node n9") && err.contains("cluster protocol 9"),
        "{err}"
    );
    rt.block_on(async {
        let store = control::metaurl::open_meta(&meta_url).await.expect("store");
        store
            .delete(&meta::schema::node_key("n9").expect("key"))
            .await
            .expect("delete record");
    });

    // The upgrade, under host I/O.
    let new_binary = dir.path().join("ferrobay-new");
    std::fs::copy(ferrobay_bin(), &new_binary).expect("copy the binary");
    let done = Arc::new(AtomicBool::new(false));
    let io = rt.spawn(host_io(dev.clone(), done.clone()));
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    let (ok, out, err) = ferrobay(&[
        "cluster",
        "upgrade",
        "--binary",
        &new_binary.display().to_string(),
        "--meta",
        &meta_url,
        "--settle-timeout-s",
        "180",
        "--json",
    ]);
    let took = t0.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    done.store(true, Ordering::Release);
    let w = rt.block_on(io).expect("host I/O task");
    assert!(ok, "upgrade failed:\n{out}{err}\n{}", logs(&daemons));
    eprintln!("{err}");
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let upgraded: Vec<&str> = report["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["node"].as_str().expect("name"))
        .collect();
    assert_eq!(upgraded, ["n1", "n2", "n3", "p1", "p2"], "{report:#}");
    println!(
        "{}",
        serde_json::json!({
            "bench": "rolling_upgrade",
            "upgrade_ms": took.as_millis() as u64,
            "host_writes": w.writes,
            "host_reads": w.reads,
            "host_errors": w.errors.len(),
            "verify_mismatches": w.mismatches.len(),
            "max_io_pause_ms": w.max_pause.as_millis() as u64,
            "nodes": report["nodes"],
        })
    );
    assert!(
        w.errors.is_empty(),
        "host I/O failed: {:?}\n{}",
        w.errors,
        logs(&daemons)
    );
    assert!(
        w.mismatches.is_empty(),
        "read back wrong: {:?}",
        w.mismatches
    );
    assert!(w.writes > 100, "the host barely wrote: {w:?}");

    // Every node runs again, from the new binary, in the same process.
    let after = node_records(&rt, &meta_url);
    for (name, was) in started(&before) {
        let now = after[&name]["started_unix_ms"].as_u64().expect("started");
        assert!(now > was, "{name} did not restart");
    }
    for (d, pid) in daemons.iter_mut().zip(&pids) {
        assert!(
            matches!(d.child.try_wait(), Ok(None)),
            "{} exited:\n{}",
            d.name,
            d.log()
        );
        assert_eq!(d.pid(), *pid);
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe");
        assert_eq!(exe, new_binary, "{} runs {}", d.name, exe.display());
        assert!(d.log().contains("started by an upgrade"), "{}", d.log());
    }
    // Every block the host wrote reads back as last written, through the upgraded nodes.
    rt.block_on(async {
        for (&offset, &seq) in &w.model {
            let back = dev
                .read(offset, IoBuf::new_zeroed(BLOCK_BYTES))
                .await
                .unwrap_or_else(|e| panic!("read at {offset} after the upgrade: {e}"));
            assert!(
                back.as_slice() == block(offset, seq).as_slice(),
                "block at {offset}"
            );
        }
    });
    drop(dev);
    for d in daemons.iter_mut().rev() {
        if d.terminate(STOP_TIMEOUT).is_none() {
            d.kill9();
            panic!("{} did not stop after SIGTERM:\n{}", d.name, d.log());
        }
    }
}
