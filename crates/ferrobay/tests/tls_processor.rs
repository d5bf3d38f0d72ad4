//! NVMe/TCP over TLS through processor nodes, as a user configures it, all as separate
//! processes on 127.0.0.1 with etcd: two storage nodes (`node run --tls-listen`) require
//! TLS of both processor nodes' host NQNs (`node host allow ... --tls-psk FILE`); the
//! processor nodes run with `processor run --tls-psk FILE --tls-listen ADDR`, so they reach
//! the RAID-1 members through the storage nodes' TLS listeners (found in the node records);
//! `volume auth set VOL HOSTNQN --tls-psk FILE` makes the volume require TLS of a host.
//! Ferrobay's initiator writes and reads back through the owner's TLS listener; the same
//! host in plain TCP, and with a wrong key, is refused (the processor node logs why, never
//! a key) while other hosts keep working; after `kill -9` of the owner the other processor
//! node takes over with the requirement in force and serves the data over TLS. A host set
//! with `volume auth set VOL HOSTNQN --dhchap-secret FILE --concat` must use secure channel
//! concatenation: it authenticates on a processor node's plain listener and reaches the
//! volume over its TLS listener with the generated PSK, on the owner and after the
//! takeover; without concatenation it is refused.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use blockdev::IoBuf;
use common::cluster::{Daemon, node_run_args, processor_run_args, wait_owner};
use common::{ferrobay_bin, ferrobay_stdout, scratch_dir};
use nvme_proto::auth::DhchapSecret;
use nvme_proto::tls_key::ConfiguredPsk;
use nvmf_host::{
    ConcatOptions, ConnectOptions, Controller, DhchapCredentials, HostIdentity, TlsCredentials,
};
use serde_json::Value;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0d0c0b0a-0000-4000-8000-0000000071b6";
const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:0d0c0b0a-0000-4000-8000-00000000eeef";
const CONCAT_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0d0c0b0a-0000-4000-8000-0000000c0ca7";
const NQN: &str = "nqn.2026-01.io.ferrobay:vol:vol1";
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const LEASE_TTL_MS: &str = "2000";

fn spawn(name: &str, dir: &Path, args: &[String]) -> Daemon {
    Daemon::spawn(Path::new(ferrobay_bin()), name, dir, args, "info", |_| {})
        .expect("spawn ferrobay")
}

fn wait_json(d: &mut Daemon, path: &Path) -> Value {
    d.wait_json(path, READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}:\n{}", d.log()))
}

/// A new configured PSK (SHA-256) in FILE; returns the key.
fn key_file(path: &Path) -> String {
    let k = ferrobay_stdout(&["gen-tls-key", "--hmac", "1"])
        .trim()
        .to_string();
    ConfiguredPsk::parse(&k).expect("gen-tls-key prints a valid key");
    std::fs::write(path, format!("{k}\n")).unwrap();
    k
}

fn opts(tls: Option<&str>) -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 32,
        connect_timeout_ms: 5000,
        ctrl_loss_tmo_ms: Some(0),
        tls: tls.map(|k| TlsCredentials::new(ConfiguredPsk::parse(k).unwrap())),
        ..ConnectOptions::default()
    }
}

/// DH-HMAC-CHAP with `secret`, concatenating onto `tls_addr` if given.
fn concat_opts(secret: &str, tls_addr: Option<SocketAddr>) -> ConnectOptions {
    ConnectOptions {
        dhchap: Some(DhchapCredentials::new(DhchapSecret::parse(secret).unwrap())),
        concat: tls_addr.map(|tls_addr| ConcatOptions { tls_addr }),
        ..opts(None)
    }
}

/// Concatenates `host` through `plain` onto `tls` until it works (the record applies at
/// the processor node's next poll).
async fn concat_within(
    plain: SocketAddr,
    tls: SocketAddr,
    host: &HostIdentity,
    secret: &str,
) -> Controller {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match Controller::connect(plain, NQN, host, &concat_opts(secret, Some(tls))).await {
            Ok(c) => {
                assert!(c.admin().addr() == tls, "the admin queue runs over TLS");
                return c;
            }
            Err(e) if Instant::now() > deadline => panic!("concatenate via {plain}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Without concatenation the processor node insists on it.
async fn refused_without_concat(plain: SocketAddr, host: &HostIdentity, secret: &str) {
    let e = Controller::connect(plain, NQN, host, &concat_opts(secret, None))
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("requires secure channel concatenation"),
        "no concatenation: {e}"
    );
}

fn identity(nqn: &str, b: u8) -> HostIdentity {
    HostIdentity {
        hostnqn: nqn.into(),
        hostid: [b; 16],
    }
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..262_144u32)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

async fn write_at(ctrl: &Controller, offset: u64, seed: u8) {
    let ns = ctrl.namespace(1).await.expect("namespace 1");
    ns.write_at(offset, IoBuf::from_slice(&pattern(seed)), false)
        .await
        .expect("write");
}

async fn check_at(ctrl: &Controller, offset: u64, seed: u8, when: &str) {
    let want = pattern(seed);
    let ns = ctrl.namespace(1).await.expect("namespace 1");
    let got = ns
        .read_at(offset, IoBuf::new_zeroed(want.len()))
        .await
        .expect("read");
    assert!(
        got[..] == want[..],
        "data read back over TLS differs ({when})"
    );
}

/// Connects `host` with `tls` until it works (the processor node applies the volume's
/// authentication record at its next poll).
async fn connect_within(addr: SocketAddr, host: &HostIdentity, tls: Option<&str>) -> Controller {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match Controller::connect(addr, NQN, host, &opts(tls)).await {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("connect to {addr}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Waits until `log()` has every line in `want`.
fn wait_log(log: &dyn Fn() -> String, want: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let l = log();
        if want.iter().all(|w| l.contains(w)) {
            return l;
        }
        assert!(Instant::now() < deadline, "no {want:?} in the log:\n{l}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A runtime, an etcd server on it and its `etcd://` URL.
fn runtime_and_etcd() -> (tokio::runtime::Runtime, meta::testing::EtcdServer, String) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let etcd = rt
        .block_on(meta::testing::EtcdServer::start())
        .expect("etcd server");
    let meta_url = etcd.endpoint().replacen("http://", "etcd://", 1);
    (rt, etcd, meta_url)
}

/// Storage nodes n1 and n2 with a plain and a TLS listener each and drive d0 (`drive`);
/// `allow(data_dir, subsystem)` sets up the hosts they require, and any other host (the
/// CLI provisioning the volume) may connect in plain TCP as before.
fn start_tls_storage_nodes(
    dir: &Path,
    meta_url: &str,
    drive: &str,
    allow: impl Fn(&str, &str),
) -> Vec<Daemon> {
    let mut nodes = Vec::new();
    for name in ["n1", "n2"] {
        let d = dir.join(name);
        let mut args = node_run_args(name, meta_url, Some(LEASE_TTL_MS), drive, &d);
        args.extend(["--tls-listen".to_string(), "127.0.0.1:0".to_string()]);
        let mut n = spawn(name, &d, &args);
        let e = wait_json(&mut n, &d.join("endpoints.json"));
        assert_eq!(e["nvme_tcp"].as_array().unwrap().len(), 2, "{e}");
        let data = d.display().to_string();
        let subsys = format!("nqn.2026-01.io.ferrobay:{name}:d0");
        allow(&data, &subsys);
        ferrobay_stdout(&[
            "node",
            "host",
            "allow-any",
            "--data-dir",
            &data,
            &subsys,
            "on",
        ]);
        nodes.push(n);
    }
    nodes
}

/// `node host allow --data-dir DATA SUBSYS HOST EXTRA..`.
fn allow_host(data: &str, subsys: &str, host: &str, extra: &[&str]) {
    let mut args = vec!["node", "host", "allow", "--data-dir", data, subsys, host];
    args.extend_from_slice(extra);
    ferrobay_stdout(&args);
}

/// The daemons' names and log files (read later, when some may be gone).
fn log_files<'a>(daemons: impl Iterator<Item = &'a Daemon>) -> Vec<(String, PathBuf)> {
    daemons.map(|d| (d.name.clone(), d.log.clone())).collect()
}

/// Every log of `files`, each under its daemon's name.
fn read_logs(files: &[(String, PathBuf)]) -> String {
    files
        .iter()
        .map(|(n, p)| {
            format!(
                "--- {n} ---\n{}",
                std::fs::read_to_string(p).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `volume create vol1 --level raid1` of `size` on n1 and n2, preferred owner p1.
fn create_raid1(meta_url: &str, size: &str) -> String {
    ferrobay_stdout(&[
        "volume",
        "create",
        "vol1",
        "--level",
        "raid1",
        "--size",
        size,
        "--storage-nodes",
        "n1,n2",
        "--preferred-owner",
        "p1",
        "--meta",
        meta_url,
    ])
}

#[test]
fn processor_nodes_use_tls_towards_members_and_hosts() {
    let dir = scratch_dir("tls-processor");
    let (rt, _etcd, meta_url) = runtime_and_etcd();
    let member_psk = dir.path().join("processor.psk");
    let member_key = key_file(&member_psk);
    let host_psk = dir.path().join("host.psk");
    let host_key = key_file(&host_psk);

    // Storage nodes: a TLS listener each; the processor nodes' host NQNs must use it.
    let nodes = start_tls_storage_nodes(dir.path(), &meta_url, "d0=ram:128M", |data, subsys| {
        for p in ["p1", "p2"] {
            let hostnqn = format!("nqn.2026-01.io.ferrobay:processor:{p}");
            allow_host(
                data,
                subsys,
                &hostnqn,
                &["--tls-psk", member_psk.to_str().unwrap()],
            );
        }
    });
    let mut procs = Vec::new();
    let mut plain_addrs: Vec<SocketAddr> = Vec::new();
    let mut tls_addrs: Vec<SocketAddr> = Vec::new();
    for name in ["p1", "p2"] {
        let d = dir.path().join(name);
        let ep = d.join("endpoints.json");
        let mut args = processor_run_args(name, &meta_url, LEASE_TTL_MS, &ep);
        args.extend(
            [
                "--tls-listen",
                "127.0.0.1:0",
                "--tls-psk",
                member_psk.to_str().unwrap(),
            ]
            .map(String::from),
        );
        let mut p = spawn(name, &d, &args);
        let e = wait_json(&mut p, &ep);
        plain_addrs.push(e["nvme"][0].as_str().unwrap().parse().unwrap());
        tls_addrs.push(e["nvme_tls"][0].as_str().unwrap().parse().unwrap());
        procs.push(p);
    }
    let files = log_files(nodes.iter().chain(procs.iter()));
    let logs = || read_logs(&files);
    let out = create_raid1(&meta_url, "32M");
    assert!(out.contains(NQN), "{out}");
    let bin = Path::new(ferrobay_bin());
    let view = wait_owner(bin, &meta_url, "vol1", "p1", None, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    let epoch1 = view["owner"]["epoch"].as_u64().unwrap();
    // p1 reached both members: over TLS, the only way the storage nodes let it in.
    let l = logs();
    assert!(
        !l.contains("must connect through a TLS listener"),
        "a processor node connected a member in plain TCP:\n{l}"
    );

    let out = ferrobay_stdout(&[
        "volume",
        "auth",
        "set",
        "vol1",
        HOST,
        "--tls-psk",
        host_psk.to_str().unwrap(),
        "--meta",
        &meta_url,
    ]);
    assert!(out.contains("must connect over TLS"), "{out}");
    let list = ferrobay_stdout(&["volume", "auth", "list", "vol1", "--meta", &meta_url]);
    assert_eq!(
        list.split_whitespace().collect::<Vec<_>>(),
        [HOST, "tls"],
        "{list}"
    );
    let dh_key = ferrobay_stdout(&["gen-dhchap-key", "--hmac", "1"])
        .trim()
        .to_string();
    let dh_file = dir.path().join("concat.key");
    std::fs::write(&dh_file, format!("{dh_key}\n")).unwrap();
    let out = ferrobay_stdout(&[
        "volume",
        "auth",
        "set",
        "vol1",
        CONCAT_HOST,
        "--dhchap-secret",
        dh_file.to_str().unwrap(),
        "--concat",
        "--meta",
        &meta_url,
    ]);
    assert!(out.contains("secure channel concatenation"), "{out}");
    let list = ferrobay_stdout(&["volume", "auth", "list", "vol1", "--meta", &meta_url]);
    assert_eq!(
        list.split_whitespace().collect::<Vec<_>>(),
        [HOST, "tls", CONCAT_HOST, "dh-hmac-chap,concat"],
        "{list}"
    );
    let concat_host = identity(CONCAT_HOST, 0xca);

    let host = identity(HOST, 0x71);
    rt.block_on(async {
        let other = connect_within(plain_addrs[0], &identity(OTHER, 0xee), None).await;
        write_at(&other, 1 << 20, 9).await;

        let ctrl = connect_within(tls_addrs[0], &host, Some(&host_key)).await;
        write_at(&ctrl, 0, 1).await;
        check_at(&ctrl, 0, 1, "through p1").await;

        // The TLS host in plain TCP: refused (and not only once the record is applied:
        // connect_within above waited for that).
        let e = Controller::connect(plain_addrs[0], NQN, &host, &opts(None))
            .await
            .unwrap_err();
        assert!(!e.to_string().is_empty());
        let wrong = ConfiguredPsk::new(1, &[0x5a; 32])
            .unwrap()
            .to_interchange()
            .to_string();
        let e = Controller::connect(tls_addrs[0], NQN, &host, &opts(Some(&wrong)))
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("does not accept this host's PSK"),
            "{e}"
        );
        // Concatenation: authenticated on the plain listener, I/O over TLS.
        let cc = concat_within(plain_addrs[0], tls_addrs[0], &concat_host, &dh_key).await;
        write_at(&cc, 2 << 20, 3).await;
        check_at(&cc, 2 << 20, 3, "concatenated through p1").await;
        cc.disconnect().await;
        refused_without_concat(plain_addrs[0], &concat_host, &dh_key).await;
        // The node keeps serving: the TLS host and the other one.
        check_at(&ctrl, 0, 1, "after the refusals").await;
        check_at(&other, 1 << 20, 9, "other host").await;
        ctrl.disconnect().await;
        other.disconnect().await;
    });
    let p1_log = || std::fs::read_to_string(&procs[0].log).unwrap_or_default();
    let l = wait_log(
        &p1_log,
        &[
            "must connect through a TLS listener",
            "TLS handshake refused",
            "processor: host must connect to the volume over TLS",
        ],
    );
    assert!(l.contains(HOST), "the refusal names the host:\n{l}");
    let all = logs();
    for k in [&member_key, &host_key, &dh_key] {
        let b64 = k.split(':').nth(2).unwrap();
        assert!(!all.contains(b64), "a PSK reached a log");
    }

    // Takeover: p2 applied the requirement as a standby and reaches the members over TLS.
    procs[0].kill9();
    wait_owner(
        bin,
        &meta_url,
        "vol1",
        "p2",
        Some(epoch1),
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    rt.block_on(async {
        let e = Controller::connect(plain_addrs[1], NQN, &host, &opts(None))
            .await
            .unwrap_err();
        assert!(!e.to_string().is_empty());
        let ctrl = connect_within(tls_addrs[1], &host, Some(&host_key)).await;
        check_at(&ctrl, 0, 1, "through p2 after the takeover").await;
        ctrl.disconnect().await;
        let cc = concat_within(plain_addrs[1], tls_addrs[1], &concat_host, &dh_key).await;
        check_at(
            &cc,
            2 << 20,
            3,
            "concatenated through p2 after the takeover",
        )
        .await;
        cc.disconnect().await;
        refused_without_concat(plain_addrs[1], &concat_host, &dh_key).await;
    });
    let l = std::fs::read_to_string(&procs[1].log).unwrap_or_default();
    assert!(
        l.contains("must connect through a TLS listener"),
        "p2 refused the plain host:\n{l}"
    );
    for n in &nodes {
        let l = std::fs::read_to_string(&n.log).unwrap_or_default();
        assert!(
            !l.contains("must connect through a TLS listener"),
            "{}: a processor node connected in plain TCP:\n{l}",
            n.name
        );
    }
}

/// `processor run --dhchap-secret FILE --concat` towards storage nodes that require it of
/// the processor node (`node host allow ... --dhchap-secret FILE --concat`, `--tls-listen`):
/// every member is reached by secure channel concatenation (authenticated on the node's
/// plain listener, queues over its TLS listener with the generated PSK), and a host's data
/// goes through the volume and back.
#[test]
fn a_processor_node_concatenates_towards_its_members() {
    let dir = scratch_dir("concat-members");
    let (rt, _etcd, meta_url) = runtime_and_etcd();
    let secret = ferrobay_stdout(&["gen-dhchap-key", "--hmac", "1"])
        .trim()
        .to_string();
    let secret_file = dir.path().join("p1.key");
    std::fs::write(&secret_file, format!("{secret}\n")).unwrap();
    let p1_host = "nqn.2026-01.io.ferrobay:processor:p1";

    let secret_arg = secret_file.to_str().unwrap();
    let nodes = start_tls_storage_nodes(dir.path(), &meta_url, "d0=ram:64M", |data, subsys| {
        allow_host(
            data,
            subsys,
            p1_host,
            &["--dhchap-secret", secret_arg, "--concat"],
        );
    });
    let d = dir.path().join("p1");
    let ep = d.join("endpoints.json");
    let mut args = processor_run_args("p1", &meta_url, LEASE_TTL_MS, &ep);
    args.extend(["--dhchap-secret", secret_file.to_str().unwrap(), "--concat"].map(String::from));
    let mut p1 = spawn("p1", &d, &args);
    let e = wait_json(&mut p1, &ep);
    let plain: SocketAddr = e["nvme"][0].as_str().unwrap().parse().unwrap();
    let files = log_files(nodes.iter().chain(std::iter::once(&p1)));
    let logs = || read_logs(&files);
    create_raid1(&meta_url, "16M");
    let bin = Path::new(ferrobay_bin());
    wait_owner(bin, &meta_url, "vol1", "p1", None, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    rt.block_on(async {
        let ctrl = connect_within(plain, &identity(OTHER, 0xee), None).await;
        write_at(&ctrl, 0, 4).await;
        check_at(&ctrl, 0, 4, "through concatenated members").await;
        ctrl.disconnect().await;
    });
    // Both storage nodes retained a generated PSK for p1 and refused nothing.
    for n in &nodes {
        let l = std::fs::read_to_string(&n.log).unwrap_or_default();
        assert!(
            l.contains("generated TLS PSK retained") && l.contains(p1_host),
            "{}: no concatenation by p1:\n{}",
            n.name,
            logs()
        );
        let refused: Vec<&str> = l
            .lines()
            .filter(|x| x.contains(p1_host) && (x.contains("failed") || x.contains("refused")))
            .collect();
        assert!(refused.is_empty(), "{}: p1 refused: {refused:#?}", n.name);
    }
    let b64 = secret.split(':').nth(2).unwrap();
    assert!(!logs().contains(b64), "a secret reached a log");
}
