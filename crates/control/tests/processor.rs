//! Processor nodes end to end on loopback: export from both nodes, clean handoff on
//! shutdown with I/O running, takeover from a dead owner, fencing of a cut-off owner.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod processor_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use control::processor::Processor;
use control::records::{cntlid_range, volume_nqn};
use nvme_proto::identify::controller::bits as cbits;
use nvmf_host::{Controller, HostIdentity};
use nvmf_target::AnaState;

use processor_common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_on_both_and_hands_over_on_shutdown_without_io_errors() {
    let c = cluster().await;
    let p1 = Processor::start(c.store.clone(), pcfg("p1")).await.unwrap();
    let p2 = Processor::start(c.store.clone(), pcfg("p2")).await.unwrap();
    assert_ne!(p1.slot(), p2.slot());
    wait_owner(&p1, Duration::from_secs(15)).await;
    assert_eq!(p1.ana_states(GROUP), vec![AnaState::Optimized]);
    assert_eq!(p2.ana_states(GROUP), vec![AnaState::Inaccessible]);
    assert!(p2.owned_volumes().is_empty());

    let addrs = [p1.nvme_addrs()[0], p2.nvme_addrs()[0]];
    let host = Arc::new(multipath_host(&addrs, "nqn.2026-01.io.ferrobay:test:host-a").await);
    assert_eq!(host.info().size_bytes, c.rec.size_bytes);
    let paths = host.paths();
    assert_eq!(paths.len(), 2, "{paths:?}");

    // What Linux native multipath needs, identical through both processor nodes.
    let probe = HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:test:probe").unwrap();
    let mut seen = Vec::new();
    for p in [&p1, &p2] {
        let ctrl =
            Controller::connect(p.nvme_addrs()[0], &volume_nqn(VOLUME), &probe, &host_opts())
                .await
                .unwrap();
        let id = ctrl.id();
        assert_ne!(id.cmic & cbits::CMIC_MULTI_CTRL, 0, "CMIC multi-controller");
        assert_ne!(id.cmic & cbits::CMIC_ANA, 0, "CMIC ANA");
        assert_ne!(id.anacap & cbits::ANACAP_INACCESSIBLE, 0);
        let (lo, hi) = cntlid_range(p.slot());
        assert!(
            (lo..=hi).contains(&ctrl.cntlid()),
            "cntlid {} of {}",
            ctrl.cntlid(),
            p.name()
        );
        let ns = ctrl.namespace(1).await.unwrap();
        assert!(ns.is_shared(), "NMIC shared");
        assert_eq!(ns.id().anagrpid, GROUP);
        seen.push((ns.id().nguid, ns.id().eui64, id.sn.clone(), id.mn.clone()));
        ctrl.disconnect().await;
    }
    assert_eq!(
        seen[0], seen[1],
        "namespace IDs, serial and model differ between processors"
    );
    assert_eq!(
        seen[0].0,
        *c.rec.uuid.as_bytes(),
        "NGUID is the volume UUID"
    );

    // The owner publishes its view of the volume.
    let t0 = Instant::now();
    loop {
        if let Some(st) = status_record(&c.store).await {
            assert_eq!(st.owner, "p1");
            assert_eq!(st.status.uuid, c.rec.uuid);
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "no status record");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    write_round(host.as_ref(), 64, 1).await;
    // I/O keeps running while p1 hands the volume over: whole rounds until told to stop.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (host, stop) = (host.clone(), stop.clone());
        tokio::spawn(async move {
            let mut round = 1;
            let mut max_gap = Duration::ZERO;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                round += 1;
                for b in 0..64u64 {
                    let t = Instant::now();
                    host.write(
                        b * 4 * BLOCK as u64,
                        IoBuf::from_slice(&pattern(b, round)),
                        WriteFlags { fua: true },
                    )
                    .await
                    .unwrap_or_else(|e| panic!("write of block {b} round {round}: {e}"));
                    max_gap = max_gap.max(t.elapsed());
                }
            }
            (round, max_gap)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t0 = Instant::now();
    p1.shutdown().await.unwrap();
    let took = t0.elapsed() + wait_owner(&p2, Duration::from_secs(15)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    let (last_round, max_gap) = writer.await.expect("writer saw an I/O error");
    eprintln!(
        "clean handoff p1 -> p2: {took:?}; longest host write meanwhile {max_gap:?}; {last_round} rounds"
    );
    assert!(last_round >= 3, "the writer did not run across the handoff");
    assert_eq!(p2.ana_states(GROUP), vec![AnaState::Optimized]);
    let report = p2.takeover_report(VOLUME).unwrap();
    assert_eq!(
        report.resync_regions, 0,
        "a clean handoff needs no resync: {report:?}"
    );
    assert_eq!(report.members_fenced, 3);
    verify(host.as_ref(), &all_at(64, last_round)).await;
    p2.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_a_dead_owner_with_partial_resync() {
    let c = cluster().await;
    let p1 = Processor::start(c.store.clone(), pcfg("p1")).await.unwrap();
    wait_owner(&p1, Duration::from_secs(15)).await;
    let first_generation = p1.takeover_report(VOLUME).unwrap().generation;
    let p2 = Processor::start(c.store.clone(), pcfg("p2")).await.unwrap();
    let addrs = [p1.nvme_addrs()[0], p2.nvme_addrs()[0]];
    let host = multipath_host(&addrs, "nqn.2026-01.io.ferrobay:test:host-b").await;
    write_round(&host, 64, 1).await;

    let t0 = Instant::now();
    p1.kill();
    let took = wait_owner(&p2, Duration::from_millis(LEASE_TTL_MS * 4 + 5000)).await;
    eprintln!("takeover after owner death: {took:?} (lease TTL {LEASE_TTL_MS} ms)");
    assert!(t0.elapsed() >= Duration::from_millis(LEASE_TTL_MS / 2));
    let report = p2.takeover_report(VOLUME).unwrap();
    eprintln!("takeover report: {report:?}");
    // Only what was being written was resynced: some regions, far from all of them.
    assert!(report.resync_regions >= 1, "{report:?}");
    assert!(report.resync_regions <= 4, "{report:?}");
    assert!(report.epoch >= 2);
    assert!(
        report.generation > first_generation,
        "the takeover bumps the generation: {report:?}"
    );
    assert!(report.resync_bytes > 0, "{report:?}");
    verify(&host, &all_at(64, 1)).await;
    // The resync ran behind the serving volume; its final figures reach the report.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = p2.takeover_report(VOLUME).unwrap();
        if r.resync_member_bytes_read > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "resync figures never arrived: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    write_round(&host, 64, 2).await;
    verify(&host, &all_at(64, 2)).await;
    assert_eq!(p2.ana_states(GROUP), vec![AnaState::Optimized]);

    // The old owner comes back as a standby and stays one.
    let p1 = Processor::start(c.store.clone(), pcfg("p1")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(p1.owned_volumes().is_empty());
    assert_eq!(p1.ana_states(GROUP), vec![AnaState::Inaccessible]);
    assert_eq!(p2.owned_volumes(), vec![VOLUME.to_string()]);
    p1.shutdown().await.unwrap();
    p2.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_cut_off_from_the_store_is_fenced_by_the_members() {
    let c = cluster().await;
    let mut cfg = pcfg("p1");
    cfg.ignore_ownership_loss = true;
    let p1 = Processor::start(c.store.clone(), cfg).await.unwrap();
    wait_owner(&p1, Duration::from_secs(15)).await;
    let p2 = Processor::start(c.store.clone(), pcfg("p2")).await.unwrap();

    // One host that only knows p1, one that only knows p2.
    let via_p1 = multipath_host_with(
        &p1.nvme_addrs(),
        "nqn.2026-01.io.ferrobay:test:host-c",
        1000,
    )
    .await;
    write_round(&via_p1, 16, 1).await;

    // p1's lease ends in the store; p1 is not told (the seam) and still thinks it owns.
    c.store.revoke_lease(p1.lease_id().unwrap()).await.unwrap();
    let took = wait_owner(&p2, Duration::from_secs(15)).await;
    eprintln!("takeover from a cut-off owner: {took:?}");
    assert_eq!(p1.owned_volumes(), vec![VOLUME.to_string()]);

    // p1's next write is refused by the members: p1 is fenced and steps down (its path
    // turns inaccessible, so this host, which knows no other path, gives up).
    let t_write = Instant::now();
    let r = via_p1
        .write(
            0,
            IoBuf::from_slice(&pattern(0, 99)),
            WriteFlags { fua: true },
        )
        .await;
    eprintln!("fenced write after {:?}: {r:?}", t_write.elapsed());
    assert!(r.is_err(), "a fenced owner write succeeded");
    let t0 = Instant::now();
    while !p1.owned_volumes().is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "p1 did not step down"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(p1.ana_states(GROUP), vec![AnaState::Inaccessible]);

    let via_p2 = multipath_host(&p2.nvme_addrs(), "nqn.2026-01.io.ferrobay:test:host-d").await;
    verify(&via_p2, &all_at(16, 1)).await;
    write_round(&via_p2, 16, 2).await;
    verify(&via_p2, &all_at(16, 2)).await;
    p1.kill();
    p2.shutdown().await.unwrap();
}
