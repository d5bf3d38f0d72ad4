//! NVMe/TCP over TLS on a storage node as a user configures it: `ferrobay gen-tls-key`,
//! `ferrobay node run --tls-listen ADDR`, `ferrobay node host allow ... --tls-psk FILE`,
//! then Ferrobay's initiator connects over real TCP with TLS: the configured PSK connects
//! and its data reads back; a wrong PSK, plain NVMe/TCP on the TLS listener, and the TLS
//! host over the plain listener are refused (the node logs why, never the key); other
//! hosts keep working; the requirement survives a node restart (node state format 5).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use blockdev::IoBuf;
use common::{NodeProcess, scratch_dir};
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

async fn round_trip(ctrl: &Controller, seed: u8) {
    let ns = ctrl.namespace(1).await.expect("namespace 1");
    let want: Vec<u8> = (0..262_144u32)
        .map(|i| (i as u8).wrapping_mul(7) ^ seed)
        .collect();
    ns.write_at(0, IoBuf::from_slice(&want), false)
        .await
        .expect("write");
    let got = ns
        .read_at(0, IoBuf::new_zeroed(want.len()))
        .await
        .expect("read");
    assert!(got[..] == want[..], "data read back over TLS differs");
}

fn start(data: &std::path::Path) -> (NodeProcess, SocketAddr, SocketAddr) {
    let node = NodeProcess::start_with(
        "n1",
        data,
        &["d0=ram:64M".to_string()],
        (0, 0, 0),
        &["--tls-listen", "127.0.0.1:0"],
        &[],
    );
    let plain: SocketAddr = node.endpoints.nvme_tcp[0].parse().unwrap();
    let tls: SocketAddr = node.endpoints.nvme_tcp[1].parse().unwrap();
    (node, plain, tls)
}

#[test]
fn a_storage_node_requires_tls_with_the_configured_psk() {
    let dir = scratch_dir("tls-node");
    let data = dir.path().join("n1");
    let (mut node, plain, tls) = start(&data);
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
        round_trip(&other, 1).await;

        let ctrl = Controller::connect(tls, nqn, &identity(HOST, 0x71), &opts(Some(&key)))
            .await
            .expect("TLS connects");
        round_trip(&ctrl, 2).await;
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
            matches!(e, HostError::Connect { .. }),
            "plain NVMe/TCP on the TLS listener: {e}"
        );

        let e = Controller::connect(plain, nqn, &identity(HOST, 0x71), &opts(None))
            .await
            .unwrap_err();
        assert!(!e.to_string().is_empty());

        round_trip(&other, 3).await;
        other.disconnect().await;
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let log = node.log();
        if log.contains("TLS handshake refused")
            && log.contains("must connect through a TLS listener")
        {
            let b64 = key.split(':').nth(2).unwrap();
            assert!(!log.contains(b64), "a PSK reached the log");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no refusal lines in the node log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    node.stop();
    let (_node, _plain, tls) = start(&data);
    rt.block_on(async {
        let ctrl = Controller::connect(tls, nqn, &identity(HOST, 0x71), &opts(Some(&key)))
            .await
            .expect("the PSK connects after a restart");
        round_trip(&ctrl, 4).await;
        ctrl.disconnect().await;
    });
}
