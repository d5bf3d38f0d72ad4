//! DH-HMAC-CHAP between the Linux kernel's NVMe/TCP host and a storage node: the
//! trixie guest (kernel 6.12 with CONFIG_NVME_HOST_AUTH, nvme-cli 2.13) against
//! `ferrobay node`, configured with `ferrobay gen-dhchap-key` and `ferrobay node host
//! allow --dhchap-secret FILE [--dhchap-ctrl-secret FILE]`. One boot runs every case
//! (tests/guest/dhchap.sh): no secret and the old secret after a rotation are refused
//! (quickly, and the node logs one line naming the host); the right secret connects,
//! its data reads back, and re-authentication keeps it connected; a key made by
//! `nvme gen-dhchap-key` with a controller secret authenticates both ways; a wrong
//! controller secret makes the host refuse the controller. SHA-256/384/512 and the
//! null, ffdhe2048 and ffdhe4096 groups are each negotiated once. Then a processor node
//! (`ferrobay processor run --dhchap-secret FILE`, authenticating to the storage node's
//! drives it uses as RAID-1 members) exports a volume that host C must authenticate to
//! (`ferrobay volume auth set`): refused without or with a wrong secret, I/O with it.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{NodeProcess, cluster, ferrobay_bin, scratch_dir};
use control::records::processor_hostnqn;
use test_guest::{Flavour, GuestConfig, spawn};

const NQN: &str = "nqn.2026-01.io.ferrobay:n1:d0";
const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:6a6a6a6a-0000-4000-8000-00000000000a";
const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:6a6a6a6a-0000-4000-8000-00000000000b";
const HOST_C: &str = "nqn.2014-08.org.nvmexpress:uuid:6a6a6a6a-0000-4000-8000-00000000000c";
/// A refused connect must end this fast: the controller answers with AUTH_Failure1
/// (a host waiting for a reply that never comes would take the kernel's 60 s timeout).
const REFUSAL_MAX_SECS: f64 = 20.0;

fn ferrobay(args: &[&str]) -> String {
    common::ferrobay_stdout(args).trim().to_string()
}

fn key_file(dir: &Path, name: &str, key: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, format!("{key}\n")).unwrap();
    p.to_str().unwrap().to_string()
}

fn allow(data: &Path, host: &str, secret: &str, extra: &[&str]) {
    let mut args = vec![
        "node",
        "host",
        "allow",
        "--data-dir",
        data.to_str().unwrap(),
        NQN,
        host,
        "--dhchap-secret",
        secret,
    ];
    args.extend_from_slice(extra);
    ferrobay(&args);
}

/// Waits (5 s) for the node log to hold `needle`, and returns the log.
fn wait_log(node: &NodeProcess, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = node.log();
        if log.contains(needle) {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the node log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn linux_host_authenticates_to_a_storage_node() {
    if let Some(why) = test_guest::unavailable_flavour(Flavour::Trixie) {
        testkit::prereq::missing(why);
        return;
    }
    let dir = scratch_dir("linux-dhchap");
    let data = dir.path().join("n1");
    let drives: Vec<String> = (0..3)
        .map(|d| {
            format!(
                "d{d}=file:{}:64M",
                dir.path().join(format!("d{d}.img")).display()
            )
        })
        .collect();
    let node = NodeProcess::start("n1", &data, &drives, (0, 0, 0));
    let key_a = ferrobay(&["gen-dhchap-key", "--hmac", "1"]);
    let key_a2 = ferrobay(&["gen-dhchap-key", "--hmac", "3"]);
    let ctrl_b = ferrobay(&["gen-dhchap-key", "--hmac", "2"]);
    // A: the defaults (SHA-256 first, ffdhe2048 first).
    allow(&data, HOST_A, &key_file(dir.path(), "a.key", &key_a), &[]);

    // A processor node exporting a RAID-1 volume over drives d1 and d2 of the same
    // storage node, which require the processor node to authenticate; host C must
    // authenticate to the volume.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let etcd = rt
        .block_on(meta::testing::EtcdServer::start())
        .expect("etcd server");
    let meta_url = etcd.endpoint().replacen("http://", "etcd://", 1);
    let addr = &node.endpoints.nvme_tcp[0];
    let members = [1, 2].map(|d| format!("nvme+tcp://{addr}/nqn.2026-01.io.ferrobay:n1:d{d}/1"));
    ferrobay(&[
        "volume",
        "create",
        "vol1",
        "--level",
        "raid1",
        "--size",
        "32M",
        "--members",
        &members.join(","),
        "--preferred-owner",
        "p1",
        "--meta",
        &meta_url,
    ]);
    let key_p1 = ferrobay(&["gen-dhchap-key", "--hmac", "1"]);
    let p1_file = key_file(dir.path(), "p1.key", &key_p1);
    for d in [1, 2] {
        ferrobay(&[
            "node",
            "host",
            "allow",
            "--data-dir",
            data.to_str().unwrap(),
            &format!("nqn.2026-01.io.ferrobay:n1:d{d}"),
            &processor_hostnqn("p1"),
            "--dhchap-secret",
            &p1_file,
        ]);
    }
    let pdir = dir.path().join("p1");
    let ep = pdir.join("endpoints.json");
    let mut args = cluster::processor_run_args("p1", &meta_url, "2000", &ep);
    args.extend(["--dhchap-secret".to_string(), p1_file.clone()]);
    let mut p1 = cluster::Daemon::spawn(
        Path::new(ferrobay_bin()),
        "p1",
        &pdir,
        &args,
        "info",
        |_| {},
    )
    .expect("spawn processor node");
    let pe = p1
        .wait_json(&ep, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}:\n{}", p1.log()));
    let pport = common::Endpoints::port(pe["nvme"][0].as_str().unwrap());
    cluster::wait_owner(
        Path::new(ferrobay_bin()),
        &meta_url,
        "vol1",
        "p1",
        None,
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}\nnode log:\n{}", p1.log(), node.log()));
    let key_c = ferrobay(&["gen-dhchap-key", "--hmac", "1"]);
    ferrobay(&[
        "volume",
        "auth",
        "set",
        "vol1",
        HOST_C,
        "--dhchap-secret",
        &key_file(dir.path(), "c.key", &key_c),
        "--meta",
        &meta_url,
    ]);
    assert_eq!(
        ferrobay(&["volume", "auth", "list", "vol1", "--meta", &meta_url])
            .split_whitespace()
            .collect::<Vec<_>>(),
        [HOST_C, "dh-hmac-chap"]
    );

    let cfg = GuestConfig::new("linux-dhchap", include_str!("guest/dhchap.sh"))
        .trixie()
        .env("PORT", node.endpoints.nvme_port())
        .env("NQN", NQN)
        .env("HOST_A", HOST_A)
        .env("HOST_B", HOST_B)
        .env("KEY_A", &key_a)
        .env("KEY_A2", &key_a2)
        .env("HOST_C", HOST_C)
        .env("KEY_C", &key_c)
        .env("PPORT", pport)
        .env("VNQN", "nqn.2026-01.io.ferrobay:vol:vol1")
        .timeout(Duration::from_secs(420));
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}\nnode log:\n{}", node.log()));
    let fail = |e: test_guest::GuestError| -> ! { panic!("{e}\nnode log:\n{}", node.log()) };

    // Rotation: A's secret becomes key_a2, with SHA-384 and no DH (null group).
    guest
        .wait_for("rotate", Duration::from_secs(300))
        .unwrap_or_else(|e| fail(e));
    allow(
        &data,
        HOST_A,
        &key_file(dir.path(), "a2.key", &key_a2),
        &["--dhchap-hash", "sha384", "--dhchap-dhgroup", "null"],
    );
    guest.release("rotate").unwrap();

    // B's secret comes from nvme-cli in the guest; the controller secret from us.
    let key_b = guest
        .wait_for("key-b", Duration::from_secs(300))
        .unwrap_or_else(|e| fail(e));
    assert!(
        key_b.starts_with("DHHC-1:02:"),
        "nvme gen-dhchap-key gave {key_b:?}"
    );
    allow(
        &data,
        HOST_B,
        &key_file(dir.path(), "b.key", &key_b),
        &[
            "--dhchap-ctrl-secret",
            &key_file(dir.path(), "b-ctrl.key", &ctrl_b),
            "--dhchap-hash",
            "sha512",
            "--dhchap-dhgroup",
            "ffdhe4096",
        ],
    );
    guest.release_with("key-b", &ctrl_b).unwrap();

    let run = guest
        .finish(Duration::from_secs(300))
        .unwrap_or_else(|e| fail(e));
    for want in [
        "a_no_secret",
        "a_connect",
        "a_io",
        "a_io_small",
        "a_reauthenticated",
        "a_io_after_reauth",
        "a_reauth_io_queues",
        "a_disconnect",
        "a_old_secret_refused",
        "a2_connect",
        "a2_io",
        "b_connect",
        "b_io",
        "b_controller_authenticated",
        "b_wrong_ctrl_refused",
        "b_again_io",
        "c_no_secret",
        "c_connect",
        "c_io",
        "c_io_small",
        "c_disconnect",
        "c_wrong_secret",
    ] {
        assert!(
            run.passed(want).is_some(),
            "missing PASS {want}\n{}",
            run.diagnostics()
        );
    }
    for refusal in [
        "a_no_secret",
        "a_old_secret_refused",
        "b_wrong_ctrl_refused",
        "c_no_secret",
        "c_wrong_secret",
    ] {
        let secs: f64 = run
            .passed(refusal)
            .unwrap()
            .get("secs")
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            secs < REFUSAL_MAX_SECS,
            "{refusal} took {secs} s\n{}",
            run.diagnostics()
        );
        eprintln!("{refusal}: refused in {secs:.2} s");
    }
    // What the kernel negotiated, as each host's configuration on the node asks.
    for (case, hash, group) in [
        ("a", "hmac(sha256)", "ffdhe2048"),
        ("a2", "hmac(sha384)", "null"),
        ("b", "hmac(sha512)", "ffdhe4096"),
    ] {
        assert_eq!(
            run.result(&format!("{case}_hash")),
            Some(hash),
            "{}",
            run.diagnostics()
        );
        assert_eq!(
            run.result(&format!("{case}_dhgroup")),
            Some(group),
            "{}",
            run.diagnostics()
        );
    }

    // The node logged the refusals, naming the host, and never a secret.
    let log = wait_log(
        &node,
        &format!("DH-HMAC-CHAP authentication of host {HOST_A} failed"),
    );
    let log = if log.contains(&format!("host {HOST_B} refused the controller")) {
        log
    } else {
        wait_log(&node, &format!("host {HOST_B} refused the controller"))
    };
    let failures = log
        .lines()
        .filter(|l| {
            l.contains(&format!(
                "DH-HMAC-CHAP authentication of host {HOST_A} failed"
            ))
        })
        .count();
    assert_eq!(
        failures, 1,
        "one line for the one refused old secret:\n{log}"
    );
    for k in [&key_a, &key_a2, &key_b, &ctrl_b, &key_p1] {
        let b64 = k.split(':').nth(2).unwrap();
        assert!(!log.contains(b64), "a secret reached the node log:\n{log}");
    }
    // The processor node: its secret loaded, the host's refusal logged, no secret shown.
    let plog = p1.log();
    assert!(plog.contains("DH-HMAC-CHAP secret loaded"), "{plog}");
    assert!(
        plog.contains(&format!(
            "DH-HMAC-CHAP authentication of host {HOST_C} failed"
        )),
        "{plog}"
    );
    for k in [&key_p1, &key_c] {
        let b64 = k.split(':').nth(2).unwrap();
        assert!(
            !plog.contains(b64),
            "a secret reached the processor node's log:\n{plog}"
        );
    }
    let _ = p1.terminate(Duration::from_secs(20));
    drop(etcd);
}
