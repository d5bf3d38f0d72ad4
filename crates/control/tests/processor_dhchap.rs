//! A processor node authenticating to its members with DH-HMAC-CHAP: the members'
//! targets require the processor node's host NQN to authenticate (as `ferrobay node host
//! allow NQN nqn.2026-01.io.ferrobay:processor:p1 --dhchap-secret` does on a storage
//! node). A processor node given the secret (`ferrobay processor run --dhchap-secret
//! FILE`, here `ProcessorConfig::member_connect.dhchap`) assembles the volume and serves
//! I/O; one without it, or with a wrong one, cannot open the members and never owns the
//! volume.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod processor_common;

use std::sync::Arc;
use std::time::Duration;

use blockdev::{BlockDevice, IoBuf};
use control::processor::Processor;
use control::records::{processor_hostnqn, volume_nqn};
use control::volume_auth;
use nvme_proto::auth::DhchapSecret;
use nvmf_host::{Controller, DhchapCredentials, HostError, HostIdentity};
use nvmf_target::DhchapHostConfig;
use storage_node::state::DhchapHostRecord;

use processor_common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processor_nodes_authenticate_to_their_members() {
    let c = cluster().await;
    let p1_secret = DhchapSecret::new(1, &[0x31; 32]).unwrap();
    let ctrl_secret = DhchapSecret::new(2, &[0x52; 48]).unwrap();
    for st in &c.storage {
        for (node, secret) in [("p1", &p1_secret), ("p2", &p1_secret)] {
            st.target
                .set_host_dhchap(
                    &st.nqn,
                    &processor_hostnqn(node),
                    Some(DhchapHostConfig::new(
                        secret.clone(),
                        Some(ctrl_secret.clone()),
                    )),
                )
                .unwrap();
        }
    }
    // p2 first, without a secret and then with a wrong one: it must not get the volume
    // (with the right secret it would own it well within this wait).
    for creds in [
        None,
        Some(DhchapCredentials::new(
            DhchapSecret::new(1, &[0x99; 32]).unwrap(),
        )),
    ] {
        let mut bad = pcfg("p2");
        let what = if creds.is_some() {
            "a wrong secret"
        } else {
            "no secret"
        };
        bad.member_connect.dhchap = creds;
        let p2 = Processor::start(c.store.clone(), bad).await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            p2.owned_volumes().is_empty(),
            "a processor node with {what} assembled the volume"
        );
        p2.shutdown().await.unwrap();
    }

    // p1 with the right secret, authenticating the members too (bidirectional).
    let mut good = pcfg("p1");
    good.member_connect.dhchap = Some(DhchapCredentials {
        secret: p1_secret.clone(),
        ctrl_secret: Some(ctrl_secret.clone()),
    });
    let p1 = Processor::start(c.store.clone(), good).await.unwrap();
    wait_owner(&p1, Duration::from_secs(20)).await;
    let host =
        Arc::new(multipath_host(&p1.nvme_addrs(), "nqn.2026-01.io.ferrobay:test:host-a").await);
    let blocks = 64;
    write_round(host.as_ref() as &dyn BlockDevice, blocks, 1).await;
    verify(host.as_ref() as &dyn BlockDevice, &all_at(blocks, 1)).await;
    // What the members saw: every one has an authenticated controller of p1 (a member
    // without one would be degraded, not serving).
    for st in &c.storage {
        let ctrls = st.target.controllers(&st.nqn);
        assert!(
            ctrls.iter().any(|(_, h)| h == &processor_hostnqn("p1")),
            "{}: controllers {ctrls:?}",
            st.nqn
        );
    }
    drop(host);
    p1.shutdown().await.unwrap();
}

fn host_record(host: &str, secret: &DhchapSecret, ctrl: Option<&DhchapSecret>) -> DhchapHostRecord {
    DhchapHostRecord {
        host_nqn: host.to_string(),
        secret: secret.to_dhhc1().to_string(),
        ctrl_secret: ctrl.map(|c| c.to_dhhc1().to_string()),
        hashes: vec![],
        dhgroups: vec![],
        concat: false,
    }
}

fn host_auth_opts(creds: Option<DhchapCredentials>) -> nvmf_host::ConnectOptions {
    nvmf_host::ConnectOptions {
        ctrl_loss_tmo_ms: Some(0),
        dhchap: creds,
        ..host_opts()
    }
}

/// `ferrobay volume auth set` (here `control::volume_auth::set_host`) on a volume: every
/// processor node exporting it requires the host to authenticate, the owner and the
/// standby alike; other hosts are not affected; removing the host lifts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_exports_require_the_hosts_secret() {
    let c = cluster().await;
    let p1 = Processor::start(c.store.clone(), pcfg("p1")).await.unwrap();
    let p2 = Processor::start(c.store.clone(), pcfg("p2")).await.unwrap();
    wait_owner(&p1, Duration::from_secs(15)).await;
    const HOST: &str = "nqn.2026-01.io.ferrobay:test:auth-host";
    const OTHER: &str = "nqn.2026-01.io.ferrobay:test:other-host";
    let secret = DhchapSecret::new(1, &[0x41; 32]).unwrap();
    let ctrl = DhchapSecret::new(3, &[0x42; 64]).unwrap();
    let store = c.store.as_ref();
    // Checked before it is stored: an unknown volume, a bad host NQN.
    let e = volume_auth::set_host(store, "nope", host_record(HOST, &secret, None))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no volume named"), "{e}");
    let e = volume_auth::auth_hosts(store, "nope").await.unwrap_err();
    assert!(e.to_string().contains("no volume named"), "{e}");
    assert!(
        volume_auth::auth_hosts(store, VOLUME)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        volume_auth::set_host(store, VOLUME, host_record("not an nqn", &secret, None))
            .await
            .is_err()
    );
    volume_auth::set_host(store, VOLUME, host_record(HOST, &secret, Some(&ctrl)))
        .await
        .unwrap();
    assert_eq!(
        volume_auth::auth_hosts(store, VOLUME).await.unwrap(),
        vec![HOST]
    );

    let nqn = volume_nqn(VOLUME);
    let id = |h: &str| HostIdentity::from_hostnqn(h).unwrap();
    for p in [&p1, &p2] {
        let addr = p.nvme_addrs()[0];
        // Both processor nodes apply it within a few polls.
        let mut refused = None;
        for _ in 0..100 {
            match Controller::connect(addr, &nqn, &id(HOST), &host_auth_opts(None)).await {
                Ok(c) => {
                    c.disconnect().await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let e =
            refused.unwrap_or_else(|| panic!("{}: a host without its secret connected", p.name()));
        assert!(
            e.to_string().contains("requires DH-HMAC-CHAP"),
            "{}: {e}",
            p.name()
        );
        let wrong = DhchapCredentials::new(DhchapSecret::new(1, &[0x66; 32]).unwrap());
        let e = Controller::connect(addr, &nqn, &id(HOST), &host_auth_opts(Some(wrong)))
            .await
            .unwrap_err();
        assert!(
            matches!(e, HostError::Authentication { .. }),
            "{}: {e}",
            p.name()
        );
        let right = DhchapCredentials {
            secret: secret.clone(),
            ctrl_secret: Some(ctrl.clone()),
        };
        let ctrl_conn = Controller::connect(addr, &nqn, &id(HOST), &host_auth_opts(Some(right)))
            .await
            .unwrap_or_else(|e| panic!("{}: the right secret: {e}", p.name()));
        if p.name() == "p1" {
            // The owner serves I/O to the authenticated host.
            let ns = ctrl_conn.namespace(1).await.unwrap();
            let data = pattern(3, 9);
            ns.write_at(3 * BLOCK as u64, IoBuf::from_slice(&data), false)
                .await
                .unwrap();
            let back = ns
                .read_at(3 * BLOCK as u64, IoBuf::new_zeroed(data.len()))
                .await
                .unwrap();
            assert_eq!(&back[..], &data[..]);
        }
        ctrl_conn.disconnect().await;
        // Another host is not affected.
        let other = Controller::connect(addr, &nqn, &id(OTHER), &host_auth_opts(None))
            .await
            .unwrap_or_else(|e| panic!("{}: another host: {e}", p.name()));
        other.disconnect().await;
    }

    // Removed: the host connects without a secret again.
    assert!(volume_auth::remove_host(store, VOLUME, HOST).await.unwrap());
    assert!(!volume_auth::remove_host(store, VOLUME, HOST).await.unwrap());
    let addr = p1.nvme_addrs()[0];
    let mut ok = false;
    for _ in 0..100 {
        if let Ok(c) = Controller::connect(addr, &nqn, &id(HOST), &host_auth_opts(None)).await {
            c.disconnect().await;
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "the host still has to authenticate after its removal");
    p2.shutdown().await.unwrap();
    p1.shutdown().await.unwrap();
}
