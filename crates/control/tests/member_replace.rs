//! Replacing a member of a cluster volume on a real dev cluster in this process (the
//! embedded store, three storage nodes on sparse files, processor p1 owning vol0): bad
//! requests are refused with what is wrong and leave nothing behind; a good one is
//! carried out by the owner (the record names the new member, the volume rebuilds onto
//! it and is healthy, the old namespace is deleted, `member_replaced` is logged).
//! A restart then assembles the volume from the new member.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use control::ControlError;
use control::devcluster::{DevCluster, DevClusterConfig};
use control::provision::replace::{ReplaceMember, member_replace_key, request_replace};
use control::provision::volume_view;
use control::registration::get_node;
use meta::schema::{EventQuery, list_events};
use nvmf_host::HostIdentity;

const TIMEOUT: Duration = Duration::from_secs(30);

/// As the processor node's API does it: `ferrobay up`'s drives serve its host NQN.
fn host() -> HostIdentity {
    HostIdentity::from_hostnqn(&control::records::processor_hostnqn("p1")).unwrap()
}

/// The dev cluster in `dir` on free ports: NVMe/TCP and S3 (the default 9000 may be
/// taken by another `ferrobay up` or test on the machine).
fn config(dir: &std::path::Path) -> DevClusterConfig {
    let mut cfg = DevClusterConfig::new(dir.join("data"));
    let ports = testkit::net::free_ports(2).unwrap();
    (cfg.port, cfg.s3_port) = (ports[0], ports[1]);
    cfg
}

fn to(node: &str) -> ReplaceMember {
    ReplaceMember {
        storage_node: node.to_string(),
    }
}

fn assert_refused(r: Result<impl std::fmt::Debug, ControlError>, status: u16, needle: &str) {
    let e = r.expect_err("refused");
    assert_eq!(e.http_status(), status, "{e}");
    assert!(e.to_string().contains(needle), "{e:?} lacks {needle:?}");
}

/// Namespaces (subsystem, nsid) on storage node `node`.
async fn namespaces(store: &dyn meta::MetaStore, node: &str) -> Vec<(String, u32)> {
    let rec = get_node(store, node)
        .await
        .unwrap()
        .expect("node registered");
    control::auth::node_client(store, &rec)
        .await
        .unwrap()
        .list_namespaces()
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.subsystem_nqn, n.nsid))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_is_replaced_through_the_owner() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.volume_size_bytes = 64 << 20;
    let cluster = DevCluster::start(cfg, &|_| {}).await.expect("dev cluster");
    let store = cluster.store().clone();
    let s = store.as_ref();
    let before = volume_view(s, "vol0").await.unwrap().unwrap();
    let n1_before = namespaces(s, "n1").await;

    assert_refused(
        request_replace(s, "nope", 0, &to("n1"), &host()).await,
        404,
        "no volume named \"nope\"",
    );
    assert_refused(
        request_replace(s, "vol0", 3, &to("n1"), &host()).await,
        400,
        "has no member 3 (its members are 0..2)",
    );
    assert_refused(
        request_replace(s, "vol0", 0, &to("n2"), &host()).await,
        400,
        "n2 holds member 1 of volume vol0 already",
    );
    assert_refused(
        request_replace(s, "vol0", 0, &to("n9"), &host()).await,
        400,
        "\"n9\" is not registered",
    );
    assert_eq!(
        namespaces(s, "n1").await,
        n1_before,
        "a refusal left a namespace"
    );

    let req = request_replace(s, "vol0", 0, &to("n1"), &host())
        .await
        .expect("replace member 0");
    assert_eq!(req.old_member, before.record.members[0].url);
    assert_ne!(req.member, req.old_member);

    // Done: the record names the new member, the request is gone, and the rebuild onto
    // it has ended (a status published before the swap still says healthy).
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let v = volume_view(s, "vol0").await.unwrap().unwrap();
        let pending = s.get(&member_replace_key("vol0").unwrap()).await.unwrap();
        let events = list_events(s, EventQuery::default()).await.unwrap().events;
        let replaced = events.iter().find(|e| e.event.kind == "member_replaced");
        let rebuilt = events.iter().find(|e| {
            e.event.kind == "rebuild_done"
                && e.event.fields["member"] == 0
                && replaced.is_some_and(|r| e.id > r.id)
        });
        if let Some(rebuilt) = rebuilt
            && v.record.members[0].url == req.member
            && pending.is_none()
        {
            assert_eq!(rebuilt.event.fields["outcome"], "done", "{rebuilt:#?}");
            let m = &v.record.members[0];
            assert_eq!(m.storage_node.as_deref(), Some("n1"));
            assert_eq!(m.failure_domain, "n1");
            assert_eq!(v.record.members[1..], before.record.members[1..]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not replaced: {v:#?}\n{events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The old namespace goes, the new one stays: as many namespaces as before.
    let old_nsid: u32 = req.old_member.rsplit('/').next().unwrap().parse().unwrap();
    let new_nsid: u32 = req.member.rsplit('/').next().unwrap().parse().unwrap();
    loop {
        let now = namespaces(s, "n1").await;
        if now.len() == n1_before.len() && now.iter().all(|(_, n)| *n != old_nsid) {
            assert!(now.iter().any(|(_, n)| *n == new_nsid), "{now:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "old namespace {old_nsid} still on n1: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = list_events(s, EventQuery::default()).await.unwrap();
    let e = page
        .events
        .iter()
        .find(|e| e.event.kind == "member_replaced")
        .unwrap_or_else(|| panic!("no member_replaced event: {:#?}", page.events));
    assert_eq!(e.event.subject.name, "vol0");
    assert_eq!(e.event.fields["member"], 0);
    assert_eq!(e.event.fields["url"], req.member.as_str());

    // The embedded store is this process's until every handle is gone.
    drop(store);
    cluster.shutdown(&|_| {}).await.expect("clean stop");

    // Started again: assembled from the new member, healthy, nothing to rebuild.
    let cluster = DevCluster::start(config(dir.path()), &|_| {})
        .await
        .expect("restart");
    let v = volume_view(cluster.store().as_ref(), "vol0")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v.record.members[0].url, req.member);
    let st = &v.status.as_ref().expect("status").status;
    assert_eq!(st.state, volume::VolumeState::Healthy, "{st:#?}");
    assert!(
        st.members
            .iter()
            .all(|m| m.state == volume::MemberState::Active),
        "{st:#?}"
    );
    cluster.shutdown(&|_| {}).await.expect("clean stop");
}
