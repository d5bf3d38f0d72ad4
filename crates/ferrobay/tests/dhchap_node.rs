//! DH-HMAC-CHAP on a storage node as a user configures it: `ferrobay gen-dhchap-key`,
//! `ferrobay node host allow ... --dhchap-secret FILE [--dhchap-ctrl-secret FILE]`, then
//! Ferrobay's initiator connects over real TCP: the right secret connects and its data
//! reads back, a wrong one is refused and the node logs a line naming the host (never the
//! secret), other hosts keep working, and the requirement survives a node restart.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use common::{NodeProcess, round_trip, scratch_dir};
use nvme_proto::auth::DhchapSecret;
use nvmf_host::{ConnectOptions, Controller, DhchapCredentials, HostError, HostIdentity};

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0d0c0b0a-0000-4000-8000-00000000dddd";
const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:0d0c0b0a-0000-4000-8000-00000000eeee";

fn ferrobay(args: &[&str]) -> String {
    common::ferrobay_stdout(args)
}

fn gen_key(hmac: &str) -> String {
    let k = ferrobay(&["gen-dhchap-key", "--hmac", hmac]);
    let k = k.trim().to_string();
    DhchapSecret::parse(&k).expect("gen-dhchap-key prints a valid secret");
    k
}

fn opts(creds: Option<DhchapCredentials>) -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 32,
        connect_timeout_ms: 5000,
        ctrl_loss_tmo_ms: Some(0),
        dhchap: creds,
        ..ConnectOptions::default()
    }
}

fn identity(nqn: &str, b: u8) -> HostIdentity {
    HostIdentity {
        hostnqn: nqn.into(),
        hostid: [b; 16],
    }
}

fn creds(secret: &str, ctrl: Option<&str>) -> DhchapCredentials {
    DhchapCredentials {
        secret: DhchapSecret::parse(secret).unwrap(),
        ctrl_secret: ctrl.map(|c| DhchapSecret::parse(c).unwrap()),
    }
}

#[test]
fn a_storage_node_requires_the_configured_secret() {
    let dir = scratch_dir("dhchap-node");
    let data = dir.path().join("n1");
    let mut node = NodeProcess::start("n1", &data, &["d0=ram:64M".to_string()], (0, 0, 0));
    let addr: std::net::SocketAddr = node.endpoints.nvme_tcp[0].parse().unwrap();
    let nqn = "nqn.2026-01.io.ferrobay:n1:d0";
    let host_key = gen_key("1");
    let ctrl_key = gen_key("2");
    let host_file = dir.path().join("host.key");
    let ctrl_file = dir.path().join("ctrl.key");
    std::fs::write(&host_file, format!("{host_key}\n")).unwrap();
    std::fs::write(&ctrl_file, &ctrl_key).unwrap();
    let data_s = data.to_str().unwrap();
    ferrobay(&[
        "node",
        "host",
        "allow",
        "--data-dir",
        data_s,
        nqn,
        HOST,
        "--dhchap-secret",
        host_file.to_str().unwrap(),
        "--dhchap-ctrl-secret",
        ctrl_file.to_str().unwrap(),
    ]);
    ferrobay(&["node", "host", "allow", "--data-dir", data_s, nqn, OTHER]);
    let listing = ferrobay(&["node", "host", "list", "--data-dir", data_s, "--json"]);
    assert!(listing.contains("dhchap_hosts"), "{listing}");
    assert!(
        !listing.contains("DHHC-1"),
        "the API shows no secret: {listing}"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // Another host, not required to authenticate, keeps working throughout.
        let other = Controller::connect(addr, nqn, &identity(OTHER, 0xee), &opts(None))
            .await
            .expect("other host");
        round_trip(&other, 32768, 1).await;

        // The right secrets (bidirectional): connect and do I/O.
        let ctrl = Controller::connect(
            addr,
            nqn,
            &identity(HOST, 0xdd),
            &opts(Some(creds(&host_key, Some(&ctrl_key)))),
        )
        .await
        .expect("the right secret connects");
        round_trip(&ctrl, 32768, 2).await;
        ctrl.disconnect().await;

        // A wrong host secret is refused.
        let wrong = gen_key("1");
        let e = Controller::connect(
            addr,
            nqn,
            &identity(HOST, 0xdd),
            &opts(Some(creds(&wrong, None))),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, HostError::Authentication { .. }), "{e}");
        round_trip(&other, 32768, 3).await;
        other.disconnect().await;
    });
    // The node logged the failure, naming the host and never a secret.
    let log = node.wait_for_log("failure line", |log| {
        log.contains(&format!(
            "DH-HMAC-CHAP authentication of host {HOST} failed"
        ))
    });
    for k in [&host_key, &ctrl_key] {
        let b64 = k.split(':').nth(2).unwrap();
        assert!(!log.contains(b64), "a secret reached the log");
    }

    // The requirement is in the node state: after a restart, no secret, no connect.
    node.stop();
    let node = NodeProcess::start("n1", &data, &["d0=ram:64M".to_string()], (0, 0, 0));
    let addr: std::net::SocketAddr = node.endpoints.nvme_tcp[0].parse().unwrap();
    rt.block_on(async {
        let e = Controller::connect(addr, nqn, &identity(HOST, 0xdd), &opts(None))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("requires DH-HMAC-CHAP"), "{e}");
        let ctrl = Controller::connect(
            addr,
            nqn,
            &identity(HOST, 0xdd),
            &opts(Some(creds(&host_key, None))),
        )
        .await
        .expect("the right secret connects after a restart");
        round_trip(&ctrl, 32768, 4).await;
        ctrl.disconnect().await;
    });
}
