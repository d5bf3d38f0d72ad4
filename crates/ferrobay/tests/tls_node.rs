//! NVMe/TCP over TLS on a storage node as a user configures it: `ferrobay gen-tls-key`,
//! `ferrobay node run --tls-listen ADDR`, `ferrobay node host allow ... --tls-psk FILE`,
//! then Ferrobay's initiator connects over real TCP with TLS: the configured PSK connects
//! and its data reads back; a wrong PSK, plain NVMe/TCP on the TLS listener, and the TLS
//! host over the plain listener are refused (the node logs why, never the key); other
//! hosts keep working; the requirement survives a node restart (node state format 5).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use common::{NodeProcess, round_trip, scratch_dir};
use nvme_proto::tls_key::ConfiguredPsk;
use nvmf_host::{ConnectOptions, Controller, HostError, HostIdentity, TlsCredentials};

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0d0c0b0a-0000-4000-8000-0000000071a5";
const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:0d0c0b0a-0000-4000-8000-00000000eeee";

fn ferrobay(args: &[&str]) -> String {
    common::ferrobay_stdout(args)
}

fn gen_key(hmac: &str) -> String {
    let k = ferrobay(&["gen-tls-key", "--hmac", hmac])
        .trim()
        .to_string();
    ConfiguredPsk::parse(&k).expect("gen-tls-key prints a valid key");
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

fn identity(nqn: &str, b: u8) -> HostIdentity {
    HostIdentity {
        hostnqn: nqn.into(),
        hostid: [b; 16],
    }
}

#[test]
fn a_storage_node_requires_tls_with_the_configured_psk() {
    let dir = scratch_dir("tls-node");
    let data = dir.path().join("n1");
    let (mut node, plain, tls) = NodeProcess::start_with_tls_listener("n1", &data);
    let nqn = "nqn.2026-01.io.ferrobay:n1:d0";
    let key = gen_key("1");
    let key_file = dir.path().join("host.psk");
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
        "--tls-psk",
        key_file.to_str().unwrap(),
    ]);
    ferrobay(&["node", "host", "allow", "--data-dir", data_s, nqn, OTHER]);
    let listing = ferrobay(&["node", "host", "list", "--data-dir", data_s, "--json"]);
    assert!(
        !listing.contains("NVMeTLSkey"),
        "the API shows no PSK: {listing}"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let other = Controller::connect(plain, nqn, &identity(OTHER, 0xee), &opts(None))
            .await
            .expect("other host");
        round_trip(&other, 262_144, 1).await;

        let ctrl = Controller::connect(tls, nqn, &identity(HOST, 0x71), &opts(Some(&key)))
            .await
            .expect("TLS connects");
        round_trip(&ctrl, 262_144, 2).await;
        ctrl.disconnect().await;

        let wrong = gen_key("1");
        let e = Controller::connect(tls, nqn, &identity(HOST, 0x71), &opts(Some(&wrong)))
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("does not accept this host's PSK"),
            "{e}"
        );

        let e = Controller::connect(tls, nqn, &identity(HOST, 0x71), &opts(None))
            .await
            .unwrap_err();
        assert!(
            matches!(e, HostError::Connect { .. })
                && e.to_string().contains("this listener requires TLS"),
            "plain NVMe/TCP on the TLS listener: {e}"
        );

        let e = Controller::connect(plain, nqn, &identity(HOST, 0x71), &opts(None))
            .await
            .unwrap_err();
        assert!(!e.to_string().is_empty());

        round_trip(&other, 262_144, 3).await;
        other.disconnect().await;
    });
    let log = node.wait_for_log("refusal lines", |log| {
        log.contains("TLS handshake refused") && log.contains("must connect through a TLS listener")
    });
    let b64 = key.split(':').nth(2).unwrap();
    assert!(!log.contains(b64), "a PSK reached the log");

    node.stop();
    let (_node, _plain, tls) = NodeProcess::start_with_tls_listener("n1", &data);
    rt.block_on(async {
        let ctrl = Controller::connect(tls, nqn, &identity(HOST, 0x71), &opts(Some(&key)))
            .await
            .expect("the PSK connects after a restart");
        round_trip(&ctrl, 262_144, 4).await;
        ctrl.disconnect().await;
    });
}
