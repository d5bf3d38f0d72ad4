//! Processor nodes in operation: `volume move` (a handoff record), an owner whose lease
//! ends goes standby and registers again, a storage node that goes down and comes back
//! is put back with a partial rebuild.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod processor_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use blockdev::BlockDevice;
use control::processor::Processor;
use control::records::{HandoffRecord, handoff_key};
use meta::schema::{get_json, put_json};
use nvmf_target::AnaState;
use volume::{MemberState, VolumeState};

use processor_common::*;

async fn request_move(c: &Cluster, to: &str) {
    let rec = HandoffRecord {
        to: to.to_string(),
        requested_unix_ms: 0,
    };
    put_json(c.store.as_ref(), &handoff_key(VOLUME).unwrap(), &rec, None)
        .await
        .unwrap();
}

async fn handoff_pending(c: &Cluster) -> bool {
    get_json::<HandoffRecord, _>(c.store.as_ref(), &handoff_key(VOLUME).unwrap())
        .await
        .unwrap()
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_move_hands_over_to_the_named_node_and_back() {
    let c = cluster().await;
    let p1 = Processor::start(c.store.clone(), pcfg("p1")).await.unwrap();
    let p2 = Processor::start(c.store.clone(), pcfg("p2")).await.unwrap();
    wait_owner(&p1, Duration::from_secs(15)).await;
    let host = Arc::new(
        multipath_host(
            &[p1.nvme_addrs()[0], p2.nvme_addrs()[0]],
            "nqn.2026-01.io.ferrobay:test:host-m",
        )
        .await,
    );
    write_round(host.as_ref(), 32, 1).await;

    let t0 = Instant::now();
    request_move(&c, "p2").await;
    let moved = {
        let host = host.clone();
        tokio::spawn(async move { write_round(host.as_ref(), 32, 2).await })
    };
    wait_owner(&p2, Duration::from_secs(10)).await;
    eprintln!("volume move p1 -> p2: {:?}", t0.elapsed());
    moved.await.expect("I/O error during the move");
    assert!(p1.owned_volumes().is_empty());
    assert_eq!(p1.ana_states(GROUP), vec![AnaState::Inaccessible]);
    assert_eq!(p2.ana_states(GROUP), vec![AnaState::Optimized]);
    assert_eq!(p2.takeover_report(VOLUME).unwrap().resync_regions, 0);
    let t1 = Instant::now();
    while handoff_pending(&c).await {
        assert!(
            t1.elapsed() < Duration::from_secs(5),
            "handoff record not deleted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    verify(host.as_ref(), &all_at(32, 2)).await;

    // And back.
    request_move(&c, "p1").await;
    wait_owner(&p1, Duration::from_secs(10)).await;
    assert!(p2.owned_volumes().is_empty());
    write_round(host.as_ref(), 32, 3).await;
    verify(host.as_ref(), &all_at(32, 3)).await;
    p2.shutdown().await.unwrap();
    p1.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_loses_its_lease_goes_standby_and_registers_again() {
    let c = cluster().await;
    let p1 = Processor::start(c.store.clone(), pcfg("p1")).await.unwrap();
    wait_owner(&p1, Duration::from_secs(15)).await;
    let p2 = Processor::start(c.store.clone(), pcfg("p2")).await.unwrap();
    let host = multipath_host(
        &[p1.nvme_addrs()[0], p2.nvme_addrs()[0]],
        "nqn.2026-01.io.ferrobay:test:host-l",
    )
    .await;
    write_round(&host, 32, 1).await;

    let old = p1.lease_id().unwrap();
    c.store.revoke_lease(old).await.unwrap();
    let took = wait_owner(&p2, Duration::from_secs(10)).await;
    eprintln!("takeover after the owner's lease was revoked: {took:?}");
    wait_for("p1 standby", Duration::from_secs(5), || {
        p1.owned_volumes().is_empty()
    })
    .await;
    assert_eq!(p1.ana_states(GROUP), vec![AnaState::Inaccessible]);
    wait_for("p1 registered again", Duration::from_secs(5), || {
        p1.lease_id().is_some_and(|l| l != old)
    })
    .await;
    verify(&host, &all_at(32, 1)).await;
    write_round(&host, 32, 2).await;
    verify(&host, &all_at(32, 2)).await;
    p1.shutdown().await.unwrap();
    p2.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_node_that_comes_back_gets_a_partial_rebuild() {
    let mut c = cluster().await;
    let p1 = Processor::start(c.store.clone(), pcfg("p1")).await.unwrap();
    wait_owner(&p1, Duration::from_secs(15)).await;
    let host = multipath_host(&p1.nvme_addrs(), "nqn.2026-01.io.ferrobay:test:host-s").await;
    write_round(&host, 64, 1).await;

    c.storage[2].down();
    let t0 = Instant::now();
    write_round(&host, 64, 2).await;
    eprintln!("writes with a storage node gone took {:?}", t0.elapsed());
    let t0 = Instant::now();
    loop {
        let st = status_record(&c.store).await.map(|s| s.status);
        if let Some(st) = st
            && st.members[2].state == MemberState::Failed
        {
            assert_eq!(st.state, VolumeState::Degraded);
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "member 2 not failed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    verify(&host, &all_at(64, 2)).await;

    c.storage[2].up().await;
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = status_record(&c.store).await.map(|s| s.status)
            && st.state == VolumeState::Healthy
            && st.members.iter().all(|m| m.state == MemberState::Active)
        {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "member 2 not rebuilt: {:?}",
            status_record(&c.store).await.map(|s| s.status.members)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("member back and rebuilt in {:?}", t0.elapsed());
    assert!(
        st.notes.iter().any(|n| n.contains("partial")),
        "expected a partial rebuild: {:?}",
        st.notes
    );
    if let Some(r) = &st.rebuild {
        assert!(r.partial, "{r:?}");
        assert!(r.bytes_total < MEMBER_BYTES / 2, "{r:?}");
    }
    // The event log tells the story: taken over, member 2 failed, back, rebuilt.
    let t0 = Instant::now();
    let kinds = loop {
        let page = meta::schema::list_events(c.store.as_ref(), Default::default())
            .await
            .unwrap();
        let kinds: Vec<(String, Option<u64>)> = page
            .events
            .iter()
            .rev()
            .map(|e| {
                (
                    e.event.kind.clone(),
                    e.event.fields.get("member").and_then(|v| v.as_u64()),
                )
            })
            .collect();
        let want = [
            ("takeover", None),
            ("member_failed", Some(2)),
            ("member_returned", Some(2)),
            ("rebuild_started", Some(2)),
            ("rebuild_done", Some(2)),
        ];
        let mut rest = kinds.iter();
        if want
            .iter()
            .all(|(k, m)| rest.any(|(kk, mm)| kk == k && (m.is_none() || mm == m)))
        {
            break page;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "events: {kinds:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let failed = kinds
        .events
        .iter()
        .find(|e| e.event.kind == "member_failed")
        .unwrap();
    assert_eq!(failed.event.severity, meta::schema::Severity::Error);
    assert_eq!(failed.event.subject.name, VOLUME);
    assert!(
        failed.event.message.contains("member 2"),
        "{}",
        failed.event.message
    );

    write_round(&host, 64, 3).await;
    // Reads now need member 2 again (it is active): the rebuilt data must be right.
    c.storage[0].down();
    verify(&host, &all_at(64, 3)).await;
    let _ = host.info();
    p1.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_with_a_member_away_and_one_without_reservations() {
    let mut c = cluster_with(&[0]).await;
    let p1 = Processor::start(c.store.clone(), pcfg("p1")).await.unwrap();
    wait_owner(&p1, Duration::from_secs(15)).await;
    let r1 = p1.takeover_report(VOLUME).unwrap();
    assert_eq!(
        (r1.members_fenced, r1.members_unfenceable),
        (3, 1),
        "{r1:?}"
    );
    let p2 = Processor::start(c.store.clone(), pcfg("p2")).await.unwrap();
    let host = multipath_host(
        &[p1.nvme_addrs()[0], p2.nvme_addrs()[0]],
        "nqn.2026-01.io.ferrobay:test:host-t",
    )
    .await;
    write_round(&host, 32, 1).await;

    // The owner dies while a storage node is away: the standby assembles degraded.
    c.storage[1].down();
    p1.kill();
    wait_owner(&p2, Duration::from_secs(10)).await;
    let r2 = p2.takeover_report(VOLUME).unwrap();
    assert_eq!((r2.members_fenced, r2.members_total), (2, 3), "{r2:?}");
    verify(&host, &all_at(32, 1)).await;
    write_round(&host, 32, 2).await;
    let t0 = Instant::now();
    loop {
        if let Some(st) = status_record(&c.store).await.map(|s| s.status)
            && st.members[1].state == MemberState::Failed
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "member 1 not failed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // It comes back into its own slot.
    c.storage[1].up().await;
    let t0 = Instant::now();
    loop {
        if let Some(st) = status_record(&c.store).await.map(|s| s.status)
            && st.state == VolumeState::Healthy
            && st.members.iter().all(|m| m.state == MemberState::Active)
        {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "member 1 not back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.storage[2].down();
    verify(&host, &all_at(32, 2)).await;
    p2.kill();
}

/// A standby that finds more members away than the layout survives does not take the
/// volume over: it says which members answer and which do not, keeps trying, and takes it
/// over degraded (the member still away marked failed) once enough of them answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_waits_while_too_few_members_answer() {
    let mut c = cluster().await;
    let p1 = Processor::start(c.store.clone(), pcfg("p1")).await.unwrap();
    wait_owner(&p1, Duration::from_secs(15)).await;
    let host = multipath_host(&p1.nvme_addrs(), "nqn.2026-01.io.ferrobay:test:host-f").await;
    write_round(&host, 32, 1).await;
    drop(host);

    // The owner dies, then two of the three storage nodes go away.
    p1.kill();
    c.storage[1].down();
    c.storage[2].down();
    let p2 = Processor::start(c.store.clone(), pcfg("p2")).await.unwrap();
    let t0 = Instant::now();
    let why = loop {
        if let Some(why) = p2.takeover_failure(VOLUME) {
            break why;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no takeover attempt"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("takeover refused: {why}");
    let url = |i: usize| c.storage[i].url();
    assert!(
        why.contains("2 of 3 members are missing or out of date, raid5 survives 1")
            && why.contains(&format!("present: 0 {}", url(0)))
            && why.contains(&format!("1 {} (unreachable: ", url(1)))
            && why.contains(&format!("2 {} (unreachable: ", url(2)))
            && why.contains("retried until enough members answer"),
        "{why}"
    );
    assert!(p2.owned_volumes().is_empty());
    assert!(
        p2.ana_states(GROUP)
            .iter()
            .all(|s| *s == AnaState::Inaccessible),
        "{:?}",
        p2.ana_states(GROUP)
    );

    // One comes back: the volume starts degraded, the other marked failed.
    c.storage[1].up().await;
    wait_owner(&p2, Duration::from_secs(20)).await;
    assert_eq!(p2.takeover_failure(VOLUME), None);
    let r = p2.takeover_report(VOLUME).unwrap();
    assert_eq!((r.members_fenced, r.members_total), (2, 3), "{r:?}");
    let host = multipath_host(&p2.nvme_addrs(), "nqn.2026-01.io.ferrobay:test:host-f2").await;
    verify(&host, &all_at(32, 1)).await;
    let t0 = Instant::now();
    loop {
        if let Some(st) = status_record(&c.store).await.map(|s| s.status)
            && st.members[2].state == MemberState::Failed
        {
            assert_eq!(st.state, VolumeState::Degraded);
            assert!(!st.members[2].failed_by_operator);
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "member 2 not marked failed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    p2.kill();
}

/// The holder's key and the reservation type on member `i`, as another host sees them.
async fn reservation_of(c: &Cluster, i: usize) -> (Option<u64>, u8) {
    let probe =
        nvmf_host::HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:test:resv-probe").unwrap();
    let ns = nvmf_host::NvmeTcpUrl::parse(&c.storage[i].url())
        .unwrap()
        .open(&probe, &host_opts())
        .await
        .unwrap();
    let r = ns.reservation_report().await.unwrap();
    let holder = r
        .registrants
        .iter()
        .find(|g| g.rcsts & 1 != 0)
        .map(|g| g.rkey);
    ns.controller().disconnect().await;
    (holder, r.rtype)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_target_that_restarts_is_fenced_again() {
    let mut c = cluster().await;
    let p1 = Processor::start(c.store.clone(), pcfg("p1")).await.unwrap();
    wait_owner(&p1, Duration::from_secs(15)).await;
    let key = control::records::reservation_key("p1");
    assert_eq!(reservation_of(&c, 0).await, (Some(key), 1));

    // A quick restart (within the controller-loss timeout): reservations are gone on
    // the target, the member connection comes back by itself.
    c.storage[0].down();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The target comes back with no reservation at all (a fresh reservation state):
    // only the monitor's re-fencing makes p1 the holder again.
    c.storage[0].up().await;
    let t0 = Instant::now();
    loop {
        if reservation_of(&c, 0).await == (Some(key), 1) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "member 0 not fenced again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("restarted member fenced again after {:?}", t0.elapsed());
    let host = multipath_host(&p1.nvme_addrs(), "nqn.2026-01.io.ferrobay:test:host-r").await;
    write_round(&host, 16, 1).await;
    verify(&host, &all_at(16, 1)).await;
    assert_eq!(p1.owned_volumes(), vec![VOLUME.to_string()]);
    p1.shutdown().await.unwrap();
}
