//! Secure channel concatenation between Ferrobay's own initiator (nvmf-host) and target on
//! real TCP: DH-HMAC-CHAP with SC_C = NEWTLSPSK on a plain admin queue generates the TLS
//! PSK with which admin and I/O queues then connect to the TLS listener, move data and
//! reconnect (with a fresh key); a wrong secret, a generated-PSK identity the target never
//! generated, a plain I/O queue of such a host and SC_C values that do not fit the queue
//! are refused.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::net::SocketAddr;

use common::{Client, Event, HOSTNQN, OTHER_HOST, SUBNQN, host, round_trip, start_target};
use nvme_proto::Status;
use nvme_proto::auth::msg::{SC_C_NEWTLSPSK, SC_C_NONE, SC_C_REPLACETLSPSK};
use nvme_proto::auth::{
    AuthReceive, AuthSend, DhGroup, DhchapSecret, Failure, FailureReason, HashId, Negotiate,
    ProtocolDescriptor,
};
use nvme_proto::fabrics::ConnectResponse;
use nvme_proto::tls_key::{GeneratedPsk, PskHash};
use nvmf_host::{
    ConcatOptions, ConnectOptions, Controller, DhchapCredentials, HostError, QueueOptions,
    QueuePair,
};
use nvmf_target::{DhchapHostConfig, TargetConfig};

fn secret(b: u8) -> DhchapSecret {
    DhchapSecret::new(1, &[b; 32]).unwrap()
}

fn concat_config(hashes: &[HashId]) -> DhchapHostConfig {
    DhchapHostConfig {
        hashes: hashes.to_vec(),
        concat: true,
        ..DhchapHostConfig::new(secret(1), None)
    }
}

fn opts(s: DhchapSecret, tls_addr: SocketAddr) -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 32,
        connect_timeout_ms: 5000,
        ctrl_loss_tmo_ms: Some(0),
        dhchap: Some(DhchapCredentials::new(s)),
        concat: Some(ConcatOptions { tls_addr }),
        ..ConnectOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concatenation_connects_over_tls_moves_data_and_reconnects() {
    let t = start_target(TargetConfig::default()).await;
    let tls_addr = t.tls_listener().await;
    for (i, hash) in [HashId::Sha256, HashId::Sha384].into_iter().enumerate() {
        t.target
            .set_host_dhchap(SUBNQN, HOSTNQN, Some(concat_config(&[hash])))
            .unwrap();
        let o = ConnectOptions {
            ctrl_loss_tmo_ms: Some(20_000),
            reconnect_delay_ms: 100,
            ..opts(secret(1), tls_addr)
        };
        let ctrl = Controller::connect(t.addr, SUBNQN, &host(HOSTNQN), &o)
            .await
            .unwrap();
        // Every queue runs over the TLS listener.
        assert!(ctrl.admin().addr() == tls_addr);
        assert!(ctrl.io_queues().iter().all(|q| q.addr() == tls_addr));
        round_trip(&ctrl, 4096, 256 << 10, i as u8).await;
        // A reset reconnects: a new concatenation, a new generated PSK, TLS again.
        let generation = ctrl.status().generation;
        ctrl.reset("test: reconnect with a fresh generated PSK");
        tokio::time::timeout(std::time::Duration::from_secs(20), async {
            while ctrl.status().generation == generation || !ctrl.wait_live().await {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the controller reconnects");
        round_trip(&ctrl, 4096, 256 << 10, 0x80 | i as u8).await;
        ctrl.disconnect().await;
    }
}

/// How an admin queue to `tls_addr` offering the TLS PSK of `generated` for `hostnqn`
/// fails (it must).
async fn connect_with_generated(
    tls_addr: SocketAddr,
    generated: &GeneratedPsk,
    hostnqn: &str,
) -> HostError {
    let (identity, key) = generated.tls_psk(hostnqn, SUBNQN);
    let psk = tls_psk::Psk::new(identity, &key, generated.hash().tls_alg()).unwrap();
    QueuePair::connect(
        tls_addr,
        &QueueOptions {
            connect_timeout_ms: 5000,
            tls: Some(psk),
            ..QueueOptions::admin(Default::default())
        },
    )
    .await
    .unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals() {
    let t = start_target(TargetConfig::default()).await;
    let tls_addr = t.tls_listener().await;
    t.target
        .set_host_dhchap(SUBNQN, HOSTNQN, Some(concat_config(&HashId::ALL)))
        .unwrap();

    // A wrong DH-HMAC-CHAP secret: no PSK, no connection.
    let e = Controller::connect(t.addr, SUBNQN, &host(HOSTNQN), &opts(secret(2), tls_addr))
        .await
        .unwrap_err();
    assert!(matches!(e, HostError::Authentication { .. }), "{e}");

    // A generated-PSK identity the target never generated: the handshake ends with an
    // alert. (This host has never concatenated, the key is made up.)
    let fake = GeneratedPsk::generate(PskHash::Sha256, &[7; 256], &[1; 32], &[2; 32]).unwrap();
    let e = connect_with_generated(tls_addr, &fake, OTHER_HOST).await;
    assert!(matches!(e, HostError::Connect { .. }), "{e}");

    // The right secret works, and then a plain-TCP I/O queue of that controller is
    // refused: concatenating hosts do I/O over TLS only.
    let ctrl = Controller::connect(t.addr, SUBNQN, &host(HOSTNQN), &opts(secret(1), tls_addr))
        .await
        .unwrap();
    let mut c = Client::tcp(t.addr).await;
    c.icreq(false, false).await;
    let r = c
        .fabrics_connect(3, 31, 0, SUBNQN, HOSTNQN, ctrl.cntlid())
        .await;
    assert_eq!(r.status, Status::CONNECT_INVALID_HOST.dnr());
    // A generated identity of this host with a key it does not hold: refused too.
    let e = connect_with_generated(tls_addr, &fake, HOSTNQN).await;
    assert!(matches!(e, HostError::Connect { .. }), "{e}");
    // The concatenated controller kept working through all of it.
    round_trip(&ctrl, 4096, 256 << 10, 9).await;
    ctrl.disconnect().await;

    // Our initiator without concatenation: the Connect response's ASCR stops it.
    let plain = ConnectOptions {
        concat: None,
        ..opts(secret(1), tls_addr)
    };
    let e = Controller::connect(t.addr, SUBNQN, &host(HOSTNQN), &plain)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("AUTHREQ.ASCR"), "{e}");

    // Options that cannot work are refused before any traffic.
    let no_secret = ConnectOptions {
        dhchap: None,
        ..opts(secret(1), tls_addr)
    };
    let e = Controller::connect(t.addr, SUBNQN, &host(HOSTNQN), &no_secret)
        .await
        .unwrap_err();
    assert!(matches!(e, HostError::Usage(_)), "{e}");
}

async fn auth_send(c: &mut Client, msg: &[u8]) -> Status {
    c.expect_status(
        AuthSend::dhchap(msg.len() as u32).to_command(0),
        Some(msg),
        0,
    )
    .await
}

/// The Failure1 reason the target answers a Negotiate with SC_C `sc_c` offering `groups`
/// from `hostnqn` on a plain admin queue (None: it went on with a Challenge).
async fn negotiate_reason(
    t: &common::TestTarget,
    hostnqn: &str,
    sc_c: u8,
    groups: &[u8],
) -> Option<FailureReason> {
    let mut c = Client::tcp(t.addr).await;
    c.hostnqn = hostnqn.to_string();
    c.hostid = host(hostnqn).hostid;
    c.icreq(false, false).await;
    let r = c.fabrics_connect(0, 31, 0, SUBNQN, hostnqn, 0xFFFF).await;
    assert_eq!(r.status, Status::SUCCESS);
    // ATR, and ASCR for the host that must concatenate.
    let ascr = if hostnqn == HOSTNQN {
        ConnectResponse::AUTHREQ_ASCR
    } else {
        0
    };
    assert_eq!(
        ConnectResponse::from_dw0(r.dw0).authreq,
        ConnectResponse::AUTHREQ_ATR | ascr
    );
    let neg = Negotiate {
        t_id: 1,
        sc_c,
        protocols: vec![ProtocolDescriptor::dhchap(&[1, 2], groups)],
    };
    assert_eq!(auth_send(&mut c, &neg.to_bytes()).await, Status::SUCCESS);
    let (cqe, data) = c
        .exec(AuthReceive::dhchap(4096).to_command(0), None, 4096)
        .await;
    assert_eq!(cqe.status, Status::SUCCESS);
    let reason = Failure::decode(&data).ok().and_then(|f| f.reason());
    if reason.is_some() {
        let e = tokio::time::timeout(std::time::Duration::from_secs(5), c.next_event())
            .await
            .expect("the target closes the connection after Failure1");
        assert!(matches!(e, Event::Closed | Event::Term(_)), "{e:?}");
    }
    reason
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sc_c_that_does_not_fit_gets_concatenation_mismatch() {
    let t = start_target(TargetConfig::default()).await;
    t.target
        .set_host_dhchap(SUBNQN, HOSTNQN, Some(concat_config(&HashId::ALL)))
        .unwrap();
    t.target
        .set_host_dhchap(
            SUBNQN,
            OTHER_HOST,
            Some(DhchapHostConfig::new(secret(3), None)),
        )
        .unwrap();
    let ffdhe = [DhGroup::Ffdhe2048 as u8, DhGroup::Null as u8];
    let mismatch = Some(FailureReason::ConcatMismatch);
    // The concatenating host: NEWTLSPSK on plain TCP is what it must send.
    assert_eq!(
        negotiate_reason(&t, HOSTNQN, SC_C_NEWTLSPSK, &ffdhe).await,
        None
    );
    assert_eq!(
        negotiate_reason(&t, HOSTNQN, SC_C_NONE, &ffdhe).await,
        mismatch
    );
    assert_eq!(
        negotiate_reason(&t, HOSTNQN, SC_C_REPLACETLSPSK, &ffdhe).await,
        mismatch
    );
    assert_eq!(negotiate_reason(&t, HOSTNQN, 0x07, &ffdhe).await, mismatch);
    // Only the null group: no session key to generate a PSK from.
    assert_eq!(
        negotiate_reason(&t, HOSTNQN, SC_C_NEWTLSPSK, &[DhGroup::Null as u8]).await,
        mismatch
    );
    // A host not set up for concatenation.
    assert_eq!(
        negotiate_reason(&t, OTHER_HOST, SC_C_NEWTLSPSK, &ffdhe).await,
        mismatch
    );
    assert_eq!(
        negotiate_reason(&t, OTHER_HOST, SC_C_NONE, &ffdhe).await,
        None
    );
}
