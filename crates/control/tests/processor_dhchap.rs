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

use blockdev::BlockDevice;
use control::processor::Processor;
use control::records::processor_hostnqn;
use nvme_proto::auth::DhchapSecret;
use nvmf_host::DhchapCredentials;
use nvmf_target::DhchapHostConfig;

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
