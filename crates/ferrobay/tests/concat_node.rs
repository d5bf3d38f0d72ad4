//! Secure channel concatenation on a storage node as a user configures it: `ferrobay
//! gen-dhchap-key`, `ferrobay node run --tls-listen ADDR`, `ferrobay node host allow ...
//! --dhchap-secret FILE --concat`, then Ferrobay's initiator with `ConnectOptions.concat`:
//! it authenticates on the plain listener, connects over TLS with the generated PSK and
//! its data reads back; a wrong secret and a host that does not concatenate are refused
//! (the node logs why, never a secret); the requirement survives a node restart (node
//! state format 6).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::net::SocketAddr;

use common::{NodeProcess, round_trip, scratch_dir};
use nvme_proto::auth::DhchapSecret;
use nvmf_host::{
    ConcatOptions, ConnectOptions, Controller, DhchapCredentials, HostError, HostIdentity,
};

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0d0c0b0a-0000-4000-8000-0000000c0ca7";

fn ferrobay(args: &[&str]) -> String {
    common::ferrobay_stdout(args)
}

fn gen_key() -> String {
    let k = ferrobay(&["gen-dhchap-key", "--hmac", "1"])
        .trim()
        .to_string();
    DhchapSecret::parse(&k).expect("gen-dhchap-key prints a valid secret");
    k
}

fn opts(secret: &str, concat: Option<SocketAddr>) -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 32,
        connect_timeout_ms: 5000,
        ctrl_loss_tmo_ms: Some(0),
        dhchap: Some(DhchapCredentials::new(DhchapSecret::parse(secret).unwrap())),
        concat: concat.map(|tls_addr| ConcatOptions { tls_addr }),
        ..ConnectOptions::default()
    }
}

fn identity() -> HostIdentity {
    HostIdentity {
        hostnqn: HOST.into(),
        hostid: [0xc0; 16],
    }
}

#[test]
fn a_storage_node_requires_secure_channel_concatenation() {
    let dir = scratch_dir("concat-node");
    let data = dir.path().join("n1");
    let (mut node, plain, tls) = NodeProcess::start_with_tls_listener("n1", &data);
    let nqn = "nqn.2026-01.io.ferrobay:n1:d0";
    let key = gen_key();
    let key_file = dir.path().join("host.key");
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
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
        key_file.to_str().unwrap(),
        "--concat",
    ]);

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ctrl = Controller::connect(plain, nqn, &identity(), &opts(&key, Some(tls)))
            .await
            .expect("concatenation connects");
        assert!(ctrl.admin().addr() == tls, "the admin queue runs over TLS");
        round_trip(&ctrl, 262_144, 1).await;
        ctrl.disconnect().await;

        let wrong = gen_key();
        let e = Controller::connect(plain, nqn, &identity(), &opts(&wrong, Some(tls)))
            .await
            .unwrap_err();
        assert!(matches!(e, HostError::Authentication { .. }), "{e}");

        // The right secret without concatenation: the node insists on it.
        let e = Controller::connect(plain, nqn, &identity(), &opts(&key, None))
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("requires secure channel concatenation"),
            "no concatenation: {e}"
        );
    });
    let log = node.wait_for_log("concatenation lines", |log| {
        log.contains("generated TLS PSK retained")
            && log.contains(&format!(
                "DH-HMAC-CHAP authentication of host {HOST} failed"
            ))
    });
    let b64 = key.split(':').nth(2).unwrap();
    assert!(!log.contains(b64), "a secret reached the log");

    // After a restart the requirement is still there (the generated PSK is not: the host
    // concatenates again).
    node.stop();
    let (_node, plain, tls) = NodeProcess::start_with_tls_listener("n1", &data);
    rt.block_on(async {
        let e = Controller::connect(plain, nqn, &identity(), &opts(&key, None))
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("requires secure channel concatenation"),
            "{e}"
        );
        let ctrl = Controller::connect(plain, nqn, &identity(), &opts(&key, Some(tls)))
            .await
            .expect("concatenation connects after a restart");
        round_trip(&ctrl, 262_144, 2).await;
        ctrl.disconnect().await;
    });
}
