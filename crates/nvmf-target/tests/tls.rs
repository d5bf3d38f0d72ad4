//! NVMe/TCP over TLS 1.3 between Ferrobay's own initiator (nvmf-host) and target on real
//! TCP: the configured PSK's derived TLS PSK connects and moves data (identity versions 0
//! and 1, SHA-256 and SHA-384 keys); a wrong PSK, a host without one, a plain NVMe/TCP host
//! on the TLS listener and a TLS host whose identity names another host are refused, with
//! clear errors, while the target keeps serving everyone else. Discovery log entries tell
//! TLS listeners apart.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use common::{HOSTNQN, OTHER_HOST, SUBNQN, host, round_trip, start_target};
use nvme_proto::log::discovery::{sectype, treq};
use nvme_proto::tls_key::ConfiguredPsk;
use nvmf_host::{ConnectOptions, Controller, HostError, TlsCredentials};
use nvmf_target::TargetConfig;

fn key(hmac: u8, b: u8) -> ConfiguredPsk {
    let len = if hmac == 2 { 48 } else { 32 };
    ConfiguredPsk::new(hmac, &vec![b; len]).unwrap()
}

fn opts(tls: Option<TlsCredentials>) -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 32,
        connect_timeout_ms: 5000,
        ctrl_loss_tmo_ms: Some(0),
        tls,
        ..ConnectOptions::default()
    }
}

fn connect_reason(e: &HostError) -> String {
    match e {
        HostError::Connect { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_psk_connects_and_moves_data() {
    let t = start_target(TargetConfig::default()).await;
    let addr = t.tls_listener().await;
    for (hmac, version) in [(1u8, 0u8), (1, 1), (2, 0), (2, 1), (0, 0)] {
        let psk = key(hmac, 0x40 + hmac);
        t.target
            .set_host_tls_psk(SUBNQN, HOSTNQN, Some(psk.clone()))
            .unwrap();
        let creds = TlsCredentials {
            psk,
            identity_version: version,
        };
        let ctrl = Controller::connect(addr, SUBNQN, &host(HOSTNQN), &opts(Some(creds)))
            .await
            .unwrap();
        round_trip(&ctrl, 8192, 1 << 20, hmac ^ version).await;
        ctrl.disconnect().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_clear_and_others_keep_being_served() {
    let t = start_target(TargetConfig::default()).await;
    let tls_addr = t.tls_listener().await;
    let plain_addr = t.addr;
    let good = TlsCredentials::new(key(1, 7));
    t.target
        .set_host_tls_psk(SUBNQN, HOSTNQN, Some(good.psk.clone()))
        .unwrap();
    // A host that keeps working over TLS the whole time.
    let steady = Controller::connect(tls_addr, SUBNQN, &host(HOSTNQN), &opts(Some(good.clone())))
        .await
        .unwrap();

    // A wrong key.
    let wrong = TlsCredentials::new(key(1, 8));
    let e = Controller::connect(tls_addr, SUBNQN, &host(HOSTNQN), &opts(Some(wrong)))
        .await
        .unwrap_err();
    let reason = connect_reason(&e);
    assert!(
        reason.contains("does not accept this host's PSK"),
        "{reason}"
    );

    // A host that has no PSK on this target.
    let e = Controller::connect(
        tls_addr,
        SUBNQN,
        &host(OTHER_HOST),
        &opts(Some(good.clone())),
    )
    .await
    .unwrap_err();
    assert!(
        connect_reason(&e).contains("does not accept this host's PSK"),
        "{e}"
    );

    // Plain NVMe/TCP against the TLS listener: the target answers the ICReq bytes with a
    // TLS alert and closes.
    let e = Controller::connect(tls_addr, SUBNQN, &host(HOSTNQN), &opts(None))
        .await
        .unwrap_err();
    assert!(matches!(e, HostError::Connect { .. }), "{e}");

    // The host with a PSK over the plain listener: refused at Connect (it must use TLS).
    let e = Controller::connect(plain_addr, SUBNQN, &host(HOSTNQN), &opts(None))
        .await
        .unwrap_err();
    assert!(e.to_string().to_lowercase().contains("host"), "{e}");

    // Everyone else is still served: the steady TLS host, and a host without TLS
    // requirements over the plain listener.
    round_trip(&steady, 8192, 1 << 20, 3).await;
    let other = Controller::connect(plain_addr, SUBNQN, &host(OTHER_HOST), &opts(None))
        .await
        .unwrap();
    round_trip(&other, 8192, 1 << 20, 4).await;
    other.disconnect().await;
    steady.disconnect().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_entries_mark_tls_listeners() {
    let t = start_target(TargetConfig::default()).await;
    let tls_addr = t.tls_listener().await;
    let entries = nvmf_host::discover(t.addr, &host(HOSTNQN)).await.unwrap();
    let for_port = |port: u16| {
        entries
            .iter()
            .find(|e| e.subnqn == SUBNQN && e.trsvcid == port.to_string())
            .unwrap_or_else(|| panic!("no entry for port {port}: {entries:?}"))
            .clone()
    };
    let tls = for_port(tls_addr.port());
    assert_eq!(tls.treq & 3, treq::SECURE_CHANNEL_REQUIRED);
    assert_eq!(tls.sectype, sectype::TLS13);
    let plain = for_port(t.addr.port());
    assert_eq!(plain.treq & 3, treq::SECURE_CHANNEL_NOT_SPECIFIED);
    assert_eq!(plain.sectype, sectype::NONE);
}
