//! DH-HMAC-CHAP between Ferrobay's own initiator (nvmf-host) and target over real TCP,
//! and bad input from a raw host: the right secret connects and does I/O, a wrong one is
//! refused with a clear error, malformed or replayed messages get Failure1 and the
//! connection ends, and the target keeps serving everyone else.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use common::{Client, Event, HOSTNQN, OTHER_HOST, SUBNQN, host, round_trip, start_target};
use nvme_proto::Status;
use nvme_proto::auth::{
    AuthReceive, AuthSend, DhGroup, DhchapSecret, Failure, FailureReason, HashId, Negotiate,
    ProtocolDescriptor, Reply,
};
use nvme_proto::fabrics::ConnectResponse;
use nvme_proto::identify::IdentifyCommand;
use nvmf_host::{ConnectOptions, Controller, DhchapCredentials, HostError};
use nvmf_target::{DhchapHostConfig, TargetConfig};

fn secret(b: u8) -> DhchapSecret {
    DhchapSecret::new(1, &[b; 32]).unwrap()
}

fn ctrl_secret(b: u8) -> DhchapSecret {
    DhchapSecret::new(2, &[b; 48]).unwrap()
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

fn config(groups: &[DhGroup], hashes: &[HashId], ctrl: Option<DhchapSecret>) -> DhchapHostConfig {
    DhchapHostConfig {
        hashes: hashes.to_vec(),
        dhgroups: groups.to_vec(),
        ..DhchapHostConfig::new(secret(1), ctrl)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_secret_connects_and_does_io_with_each_hash_and_group() {
    let t = start_target(TargetConfig::default()).await;
    let cases = [
        (DhGroup::Null, HashId::Sha256),
        (DhGroup::Ffdhe2048, HashId::Sha256),
        (DhGroup::Ffdhe3072, HashId::Sha384),
        (DhGroup::Ffdhe4096, HashId::Sha512),
    ];
    for (i, (g, h)) in cases.into_iter().enumerate() {
        t.target
            .set_host_dhchap(SUBNQN, HOSTNQN, Some(config(&[g], &[h], None)))
            .unwrap();
        let ctrl = Controller::connect(
            t.addr,
            SUBNQN,
            &host(HOSTNQN),
            &opts(Some(DhchapCredentials::new(secret(1)))),
        )
        .await
        .unwrap_or_else(|e| panic!("{g}/{h}: {e}"));
        round_trip(&ctrl, 4096, 65536, i as u8).await;
        ctrl.disconnect().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidirectional_authentication_checks_the_controller_too() {
    let t = start_target(TargetConfig::default()).await;
    t.target
        .set_host_dhchap(
            SUBNQN,
            HOSTNQN,
            Some(config(
                &[DhGroup::Ffdhe2048],
                &[HashId::Sha256],
                Some(ctrl_secret(2)),
            )),
        )
        .unwrap();
    let good = DhchapCredentials {
        secret: secret(1),
        ctrl_secret: Some(ctrl_secret(2)),
    };
    let ctrl = Controller::connect(t.addr, SUBNQN, &host(HOSTNQN), &opts(Some(good)))
        .await
        .unwrap();
    round_trip(&ctrl, 4096, 65536, 7).await;
    ctrl.disconnect().await;

    // A host expecting another controller secret refuses this controller.
    let wrong_ctrl = DhchapCredentials {
        secret: secret(1),
        ctrl_secret: Some(ctrl_secret(3)),
    };
    let e = Controller::connect(t.addr, SUBNQN, &host(HOSTNQN), &opts(Some(wrong_ctrl)))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, HostError::Authentication { reason, .. } if reason.contains("controller's response is wrong")),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_secret_is_refused_and_other_hosts_keep_working() {
    let t = start_target(TargetConfig::default()).await;
    t.target
        .set_host_dhchap(
            SUBNQN,
            HOSTNQN,
            Some(DhchapHostConfig::new(secret(1), None)),
        )
        .unwrap();
    // Another host, not asked to authenticate, works throughout.
    let other = Controller::connect(t.addr, SUBNQN, &host(OTHER_HOST), &opts(None))
        .await
        .unwrap();
    round_trip(&other, 4096, 65536, 1).await;

    let e = Controller::connect(
        t.addr,
        SUBNQN,
        &host(HOSTNQN),
        &opts(Some(DhchapCredentials::new(secret(9)))),
    )
    .await
    .unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, HostError::Authentication { qid: 0, .. })
            && text.contains("authentication failed (0x01)"),
        "{text}"
    );
    let e = Controller::connect(t.addr, SUBNQN, &host(HOSTNQN), &opts(None))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no host secret"), "{e}");
    round_trip(&other, 4096, 65536, 2).await;

    // The right secret still works after the failures.
    let ctrl = Controller::connect(
        t.addr,
        SUBNQN,
        &host(HOSTNQN),
        &opts(Some(DhchapCredentials::new(secret(1)))),
    )
    .await
    .unwrap();
    round_trip(&ctrl, 4096, 65536, 3).await;
    ctrl.disconnect().await;
    other.disconnect().await;
}

async fn auth_send(c: &mut Client, msg: &[u8]) -> Status {
    c.expect_status(
        AuthSend::dhchap(msg.len() as u32).to_command(0),
        Some(msg),
        0,
    )
    .await
}

async fn auth_receive(c: &mut Client) -> (Status, Vec<u8>) {
    let (cqe, data) = c
        .exec(AuthReceive::dhchap(4096).to_command(0), None, 4096)
        .await;
    (cqe.status, data)
}

/// TCP + ICReq + admin Connect as HOSTNQN; checks AUTHREQ.ATR.
async fn connect_unauthenticated(t: &common::TestTarget) -> Client {
    let mut c = Client::tcp(t.addr).await;
    c.icreq(false, false).await;
    let r = c.fabrics_connect(0, 31, 0, SUBNQN, HOSTNQN, 0xFFFF).await;
    assert_eq!(r.status, Status::SUCCESS);
    assert_eq!(
        ConnectResponse::from_dw0(r.dw0).authreq,
        ConnectResponse::AUTHREQ_ATR
    );
    c
}

async fn expect_closed(c: &mut Client) {
    let e = tokio::time::timeout(std::time::Duration::from_secs(5), c.next_event())
        .await
        .expect("the target should close the connection");
    assert!(matches!(e, Event::Closed | Event::Term(_)), "{e:?}");
}

fn negotiate(t_id: u16) -> Vec<u8> {
    Negotiate {
        t_id,
        sc_c: 0,
        protocols: vec![ProtocolDescriptor::dhchap(&[1], &[0])],
    }
    .to_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_get_failure1_and_the_connection_ends_cleanly() {
    let t = start_target(TargetConfig::default()).await;
    t.target
        .set_host_dhchap(
            SUBNQN,
            HOSTNQN,
            Some(DhchapHostConfig::new(secret(1), None)),
        )
        .unwrap();

    // Before authenticating: nothing but authentication runs.
    let mut c = connect_unauthenticated(&t).await;
    let st = c
        .expect_status(
            IdentifyCommand {
                nsid: 0,
                cns: 1,
                cntid: 0,
                cnssid: 0,
                csi: 0,
                uuid_index: 0,
            }
            .to_command(0),
            None,
            4096,
        )
        .await;
    assert_eq!((st.sct, st.sc), (1, 0x91), "Authentication Required");
    let (st, _) = c
        .prop_get(
            nvme_proto::fabrics::reg::CAP,
            nvme_proto::fabrics::PropertySize::Eight,
        )
        .await;
    assert_eq!((st.sct, st.sc), (1, 0x91));
    // A wrong SECP is Invalid Field.
    let mut cmd = AuthSend::dhchap(4).to_command(0);
    cmd.0[43] = 0xEA;
    let st = c.expect_status(cmd, Some(&[0; 4]), 0).await;
    assert_eq!(st, Status::INVALID_FIELD.dnr());

    // Garbage: Failure1 (incorrect message), then the connection ends.
    assert_eq!(auth_send(&mut c, &[0x42; 20]).await, Status::SUCCESS);
    let (st, data) = auth_receive(&mut c).await;
    assert_eq!(st, Status::SUCCESS);
    let f = Failure::decode(&data).unwrap();
    assert!(!f.failure2);
    assert_eq!(f.reason(), Some(FailureReason::IncorrectMessage));
    expect_closed(&mut c).await;

    // Truncated Negotiate: incorrect payload.
    let mut c = connect_unauthenticated(&t).await;
    assert_eq!(
        auth_send(&mut c, &negotiate(5)[..40]).await,
        Status::SUCCESS
    );
    let (_, data) = auth_receive(&mut c).await;
    assert_eq!(
        Failure::decode(&data).unwrap().reason(),
        Some(FailureReason::IncorrectPayload)
    );
    expect_closed(&mut c).await;

    // A reply with a made-up response, and one replayed into a new transaction.
    for replay in [false, true] {
        let mut c = connect_unauthenticated(&t).await;
        assert_eq!(auth_send(&mut c, &negotiate(5)).await, Status::SUCCESS);
        let (_, ch) = auth_receive(&mut c).await;
        let ch = nvme_proto::auth::Challenge::decode(&ch).unwrap();
        let reply = Reply {
            t_id: 5,
            seqnum: 0,
            rval: vec![0xAB; ch.cval.len()],
            c2: None,
            dhv: vec![],
        };
        if replay {
            // Out of order: a second Reply before a new challenge.
            assert_eq!(auth_send(&mut c, &negotiate(6)).await, Status::SUCCESS);
            let _ = auth_receive(&mut c).await;
        }
        assert_eq!(auth_send(&mut c, &reply.to_bytes()).await, Status::SUCCESS);
        let (_, data) = auth_receive(&mut c).await;
        let want = if replay {
            FailureReason::IncorrectPayload // T_ID 5 in transaction 6
        } else {
            FailureReason::Failed
        };
        assert_eq!(Failure::decode(&data).unwrap().reason(), Some(want));
        expect_closed(&mut c).await;
    }

    // Through all that the target serves a good host.
    let ctrl = Controller::connect(
        t.addr,
        SUBNQN,
        &host(HOSTNQN),
        &opts(Some(DhchapCredentials::new(secret(1)))),
    )
    .await
    .unwrap();
    round_trip(&ctrl, 4096, 65536, 9).await;
    ctrl.disconnect().await;
}
