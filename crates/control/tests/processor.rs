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
    // No heartbeat: the lease alone decides (the arbiter of last resort).
    let mut cfg2 = pcfg("p2");
    cfg2.heartbeat_misses = 0;
    let p2 = Processor::start(c.store.clone(), cfg2).await.unwrap();
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

/// The owner dies (its connections end, as with kill -9) while its lease still runs for
/// seconds: the standby's heartbeat declares it dead at once, the standby seizes the
/// owner record (next epoch), fences the members and serves: a host reads its data back
/// through the standby well within a second, long before the lease would have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owner_is_declared_dead_by_heartbeat_and_its_volume_seized() {
    const LONG_LEASE_MS: u64 = 10_000;
    let c = cluster().await;
    let mut cfg1 = pcfg("p1");
    cfg1.lease_ttl_ms = LONG_LEASE_MS;
    let p1 = Processor::start(c.store.clone(), cfg1).await.unwrap();
    wait_owner(&p1, Duration::from_secs(15)).await;
    let epoch1 = p1.takeover_report(VOLUME).unwrap().epoch;
    let mut cfg2 = pcfg("p2");
    cfg2.lease_ttl_ms = LONG_LEASE_MS;
    // Polling the store slowly: what moves the standby is its heartbeat.
    cfg2.poll_ms = 200;
    let p2 = Processor::start(c.store.clone(), cfg2).await.unwrap();
    let addrs = [p1.nvme_addrs()[0], p2.nvme_addrs()[0]];
    let host = multipath_host(&addrs, "nqn.2026-01.io.ferrobay:test:host-hb").await;
    write_round(&host, 16, 1).await;
    // Let the standby's heartbeat see the owner alive first.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let t0 = Instant::now();
    p1.kill();
    // The first verified read through the multipath host after the kill.
    verify(&host, &all_at(1, 1)).await;
    let gap = t0.elapsed();
    let owned = wait_owner(&p2, Duration::from_secs(5)).await + gap;
    eprintln!(
        "owner killed: verified read through the standby after {gap:?}; standby owns it {owned:?} after the kill (lease TTL {LONG_LEASE_MS} ms)"
    );
    assert!(gap < Duration::from_secs(3), "gap {gap:?}");
    let report = p2.takeover_report(VOLUME).unwrap();
    assert!(report.epoch > epoch1, "{report:?}");
    assert_eq!(report.members_fenced, 3, "{report:?}");
    verify(&host, &all_at(16, 1)).await;
    write_round(&host, 16, 2).await;
    verify(&host, &all_at(16, 2)).await;

    // The event log names the dead owner and why.
    let page = meta::schema::list_events(c.store.as_ref(), meta::schema::EventQuery::default())
        .await
        .unwrap();
    let dead = page
        .events
        .iter()
        .find(|e| e.event.kind == "owner_dead")
        .unwrap_or_else(|| panic!("no owner_dead event: {page:#?}"));
    assert_eq!(dead.event.fields["owner"], "p1", "{dead:?}");
    assert_eq!(dead.event.fields["node"], "p2", "{dead:?}");
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

/// A compressed log-layout volume (zstd:3, 16 KiB blocks) made by provisioning: filled
/// and overwritten through a multipath host until garbage collection runs, then its owner
/// is killed mid-GC. The standby assembles the log from the members alone (map replay)
/// and serves every acknowledged block intact. `/metrics` and the API's volume view show
/// the log's figures on both owners, and they move with the writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_assembles_a_compressed_log_volume_killed_during_gc() {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    const CHUNK: usize = 64 << 10;
    const WRITERS: u64 = 4;
    let c = log_cluster(24 << 20, "zstd:3", 16 << 10).await;
    let group = c.rec.ana_group;
    let chunks = c.rec.size_bytes / CHUNK as u64;
    assert!(chunks >= 64, "{} bytes", c.rec.size_bytes);
    let with_api = |name: &str| {
        let mut cfg = pcfg(name);
        cfg.api_listen = Some("127.0.0.1:0".parse().unwrap());
        cfg
    };
    let p1 = Processor::start(c.store.clone(), with_api("p1"))
        .await
        .unwrap();
    wait_owner(&p1, Duration::from_secs(15)).await;
    let p2 = Processor::start(c.store.clone(), with_api("p2"))
        .await
        .unwrap();
    let token = control::auth::cluster_token(c.store.as_ref())
        .await
        .unwrap();
    let api = |p: &Processor| {
        control::api::ApiClient::new(p.api_addr().unwrap().to_string())
            .with_token(Some(token.as_str().to_string()))
    };
    let fresh = api(&p1).metrics().await.unwrap();
    assert_eq!(
        metric(&fresh, "ferrobay_volume_log_logical_bytes"),
        0.0,
        "{fresh}"
    );
    assert_eq!(metric(&fresh, "ferrobay_volume_log_compression_ratio"), 1.0);

    let addrs = [p1.nvme_addrs()[0], p2.nvme_addrs()[0]];
    let host = Arc::new(multipath_host(&addrs, "nqn.2026-01.io.ferrobay:test:host-l").await);
    // Chunk -> the rounds it may hold: the last acknowledged one, plus the one in flight
    // when a write failed (either is then right).
    let acked: Arc<Mutex<Acked>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    // Writer w owns the chunks ≡ w (mod WRITERS): one write per chunk at a time.
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (host, acked, stop) = (host.clone(), acked.clone(), stop.clone());
            tokio::spawn(async move {
                let mine: Vec<u64> = (w..chunks).step_by(WRITERS as usize).collect();
                let mut rng = w * 0x9E37_79B9 + 1;
                let mut round = 0u64;
                let mut n = 0u64;
                while !stop.load(Ordering::Acquire) {
                    // Round 1 fills every chunk once; then random overwrites.
                    let chunk = if n < mine.len() as u64 {
                        round = 1;
                        mine[n as usize]
                    } else {
                        round += 1;
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        mine[(rng % mine.len() as u64) as usize]
                    };
                    n += 1;
                    let r = host
                        .write(
                            chunk * CHUNK as u64,
                            IoBuf::from_slice(&half_compressible(chunk, round)),
                            WriteFlags { fua: true },
                        )
                        .await;
                    let mut a = acked.lock().unwrap();
                    match r {
                        Ok(_) => {
                            a.insert(chunk, (round, None));
                        }
                        Err(e) => {
                            eprintln!("write of chunk {chunk} round {round}: {e}");
                            let before = a.get(&chunk).map_or(0, |x| x.0);
                            a.insert(chunk, (before, Some(round)));
                        }
                    }
                }
                n
            })
        })
        .collect();

    // Until every chunk is written and the collector has emptied segments (the owner
    // publishes every second); the overwrites keep it busy from then on.
    let t0 = Instant::now();
    let before_kill = loop {
        let st = status_record(&c.store).await;
        let filled = acked.lock().unwrap().len() as u64 == chunks;
        if let Some(l) = st.as_ref().and_then(|s| s.status.log.clone())
            && l.gc_segments >= 1
            && filled
        {
            break l;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no garbage collection after {:?}: {:?}",
            t0.elapsed(),
            st.map(|s| s.status.log)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("GC running after {:?}: {before_kill:?}", t0.elapsed());
    assert!(before_kill.compression_ratio > 1.5, "{before_kill:?}");
    let scraped = api(&p1).metrics().await.unwrap();
    let logical = metric(&scraped, "ferrobay_volume_log_logical_bytes");
    let stored = metric(&scraped, "ferrobay_volume_log_stored_bytes");
    assert!(
        logical > 0.0 && stored > 0.0 && stored < logical,
        "{scraped}"
    );
    assert!(metric(&scraped, "ferrobay_volume_log_compression_ratio") > 1.5);
    assert!(metric(&scraped, "ferrobay_volume_log_gc_segments_total") >= 1.0);
    assert!(metric(&scraped, "ferrobay_volume_log_gc_write_amplification") > 1.0);
    assert!(metric(&scraped, "ferrobay_volume_log_map_entries") > 0.0);
    assert!(
        metric(&scraped, "ferrobay_volume_log_segments_free")
            < metric(&scraped, "ferrobay_volume_log_segments")
    );
    let view = api(&p1).volume(VOLUME).await.unwrap().unwrap();
    assert!(view.record.log.is_some(), "{:?}", view.record);
    let l = view.status.unwrap().status.log.unwrap();
    assert!(l.logical_bytes > 0 && l.gc_segments >= 1, "{l:?}");

    // The owner dies while the collector works and the writers keep writing.
    p1.kill();
    let took = wait_owner(&p2, Duration::from_millis(LEASE_TTL_MS * 4 + 10_000)).await;
    eprintln!("log volume taken over in {took:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Release);
    let mut writes = 0;
    for w in writers {
        writes += w.await.unwrap();
    }
    assert_eq!(p2.ana_states(group), vec![AnaState::Optimized]);
    let acked = acked.lock().unwrap().clone();
    assert_eq!(
        acked.len() as u64,
        chunks,
        "every chunk written once at least"
    );
    eprintln!("{writes} writes of {CHUNK} bytes; verifying {chunks} chunks through p2");
    for (&chunk, &(round, maybe)) in &acked {
        let got = host
            .read(chunk * CHUNK as u64, IoBuf::new_zeroed(CHUNK))
            .await
            .unwrap_or_else(|e| panic!("read of chunk {chunk}: {e}"));
        let ok = got[..] == half_compressible(chunk, round)[..]
            || maybe.is_some_and(|m| got[..] == half_compressible(chunk, m)[..]);
        assert!(
            ok,
            "chunk {chunk}: expected round {round} (or {maybe:?}), found chunk {} round {}",
            u64::from_le_bytes(got[..8].try_into().unwrap()),
            u64::from_le_bytes(got[8..16].try_into().unwrap())
        );
    }
    // The new owner's map came from the members: every block is mapped.
    let scraped = api(&p2).metrics().await.unwrap();
    assert_eq!(
        metric(&scraped, "ferrobay_volume_log_logical_bytes") as u64,
        chunks * CHUNK as u64,
        "{scraped}"
    );
    assert!(metric(&scraped, "ferrobay_volume_log_compression_ratio") > 1.5);
    p2.shutdown().await.unwrap();
}

/// Chunk -> (last acknowledged round, round of a write that failed after it).
type Acked = std::collections::BTreeMap<u64, (u64, Option<u64>)>;

/// The value of the first sample of `family` in a Prometheus text page (panics if none).
fn metric(page: &str, family: &str) -> f64 {
    page.lines()
        .find(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' ']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {family} in\n{page}"))
}

/// 64 KiB tagged with (chunk, round), of which each 4 KiB holds 2 KiB of noise and 2 KiB
/// of a repeated byte: about 2:1 for any codec.
fn half_compressible(chunk: u64, round: u64) -> Vec<u8> {
    let mut v = vec![0u8; 64 << 10];
    let mut x =
        chunk.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1;
    for (i, page) in v.chunks_mut(4096).enumerate() {
        for b in page[..2048].iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        page[2048..].fill(
            (chunk as u8)
                .wrapping_add(round as u8)
                .wrapping_add(i as u8),
        );
    }
    v[..8].copy_from_slice(&chunk.to_le_bytes());
    v[8..16].copy_from_slice(&round.to_le_bytes());
    v
}
