//! The gateway under shard-store faults, through S3: up to m stores down, more than m,
//! a store dying under load, a gateway dying mid-write, corrupt shards.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Rig, bytes, md5_hex};
use objstore::index::{ObjectData, ops};
use objstore::layout::Geometry;
use objstore::objects::ingest::IngestRequest;
use testkit::data::assert_same;

const G21: Geometry = Geometry { data: 2, parity: 1 };
const G42: Geometry = Geometry { data: 4, parity: 2 };
/// Small shards: objects of a few hundred KiB span many stripes.
const SHARD: u32 = 32 << 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_to_m_stores_down_put_and_get_work_and_the_healer_completes() {
    let rig = Rig::start(6, G42, SHARD).await;
    let c = &rig.client;
    assert_eq!(c.create_bucket("bkt").await.status, 200);
    let sizes = [10usize, 100_000, 300_001, 1 << 20];
    for (i, n) in sizes.iter().enumerate() {
        assert_eq!(
            c.put("bkt", &format!("before{i}"), &bytes(*n, i as u64))
                .await
                .status,
            200
        );
    }
    rig.faults[0].set_down(true);
    rig.faults[3].set_down(true);
    for (i, n) in sizes.iter().enumerate() {
        let r = c.get("bkt", &format!("before{i}")).await;
        assert_eq!((r.status, r.body.len()), (200, *n), "before{i}");
        assert_same(&r.body, &bytes(*n, i as u64), &format!("before{i}"));
        let w = c
            .put("bkt", &format!("during{i}"), &bytes(*n, 100 + i as u64))
            .await;
        assert_eq!(
            w.status,
            200,
            "PUT with 2 of 6 stores down: {}",
            String::from_utf8_lossy(&w.body)
        );
        assert_eq!(w.etag(), Some(md5_hex(&bytes(*n, 100 + i as u64))));
    }
    // The stores return; the healer writes what they missed.
    rig.faults[0].set_down(false);
    rig.faults[3].set_down(false);
    let layer = rig.gateway.layer();
    let healed = layer.heal_degraded().await.expect("heal");
    assert!(healed.shards_repaired > 0, "{healed:?}");
    assert_eq!(healed.pieces_degraded, 0);
    let scan = layer.scan(true).await.expect("scan");
    assert_eq!(
        (
            scan.shards_repaired,
            scan.pieces_degraded,
            scan.pieces_unreadable
        ),
        (0, 0, 0),
        "{scan:?}"
    );
    // Every shard is in place: any two other stores may go now.
    rig.faults[1].set_down(true);
    rig.faults[5].set_down(true);
    for (i, n) in sizes.iter().enumerate() {
        let r = c.get("bkt", &format!("during{i}")).await;
        assert_same(&r.body, &bytes(*n, 100 + i as u64), &format!("during{i}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_m_down_is_503_and_leaves_nothing() {
    let rig = Rig::start(3, G21, SHARD).await;
    let c = &rig.client;
    assert_eq!(c.create_bucket("bkt").await.status, 200);
    assert_eq!(c.put("bkt", "kept", &bytes(200_000, 1)).await.status, 200);
    let shards_before = rig.shard_count().await;
    rig.faults[0].set_down(true);
    rig.faults[1].set_down(true);
    let r = c.put("bkt", "new", &bytes(200_000, 2)).await;
    assert_eq!(
        (r.status, r.code().as_deref()),
        (503, Some("ServiceUnavailable"))
    );
    let text = String::from_utf8_lossy(&r.body);
    assert!(text.contains("shard stores are unavailable"), "{text}");
    let g = c.get("bkt", "kept").await;
    assert_eq!(
        (g.status, g.code().as_deref()),
        (503, Some("ServiceUnavailable"))
    );
    // Small objects live in the index and stay readable.
    rig.faults[0].set_down(false);
    rig.faults[1].set_down(false);
    assert_eq!(c.get("bkt", "new").await.status, 404);
    assert_same(&c.get("bkt", "kept").await.body, &bytes(200_000, 1), "kept");
    // The failed PUT's shard on the store that stayed up could not be deleted with
    // the others at once; it was queued, and the reaper removes it.
    rig.gateway.layer().reap().await.expect("reap");
    assert_eq!(
        rig.shard_count().await,
        shards_before,
        "no shard of the failed PUT is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_killed_under_load_loses_no_acknowledged_put() {
    let rig = Arc::new(Rig::start(3, G21, SHARD).await);
    assert_eq!(rig.client.create_bucket("load").await.status, 200);
    let workers: Vec<_> = (0..4u64)
        .map(|w| {
            let rig = rig.clone();
            tokio::spawn(async move {
                let mut acked = Vec::new();
                let mut failed = Vec::new();
                for i in 0..25u64 {
                    let key = format!("w{w}/k{i}");
                    let data = bytes(((i * 37_003) % 250_000) as usize + 1, w * 1000 + i);
                    let r = rig.client.put("load", &key, &data).await;
                    if r.status == 200 {
                        assert_eq!(r.etag(), Some(md5_hex(&data)));
                        acked.push((key, data));
                    } else {
                        assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
                        failed.push(key);
                    }
                    // Reads of earlier writes run alongside.
                    if let Some((k, d)) = acked.get(acked.len() / 2) {
                        let g = rig.client.get("load", k).await;
                        // While more than m stores are down a read may fail (503, or
                        // a body cut short after the first stripe); what it returns is
                        // never wrong.
                        if g.status == 200 && g.complete {
                            assert_same(&g.body, d, k);
                        }
                    }
                }
                (acked, failed)
            })
        })
        .collect();
    // One store dies (<= m: nothing may fail), later a second (> m: writes fail).
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.faults[2].set_down(true);
    tokio::time::sleep(Duration::from_millis(700)).await;
    rig.faults[0].set_down(true);
    tokio::time::sleep(Duration::from_millis(500)).await;
    rig.faults[0].set_down(false);
    let mut acked = Vec::new();
    let mut failed = Vec::new();
    for w in workers {
        let (a, f) = w.await.expect("worker");
        acked.extend(a);
        failed.extend(f);
    }
    rig.faults[2].set_down(false);
    assert!(!acked.is_empty());
    for (key, data) in &acked {
        let g = rig.client.get("load", key).await;
        assert_eq!((g.status, g.complete), (200, true), "{key}");
        assert_same(&g.body, data, key);
        assert_eq!(g.etag(), Some(md5_hex(data)), "{key}");
    }
    for key in &failed {
        assert_eq!(
            rig.client.get("load", key).await.status,
            404,
            "{key}: a failed PUT is not visible"
        );
    }
    // After the healer and the reaper: every shard left belongs to a live object, and
    // every live object's shards are all there.
    let layer = rig.gateway.layer();
    layer.heal_degraded().await.expect("heal");
    rig.clock.advance_ms(3_600_000);
    layer.reap().await.expect("reap");
    let scan = layer.scan(true).await.expect("scan");
    assert_eq!(
        (scan.pieces_degraded, scan.pieces_unreadable),
        (0, 0),
        "{scan:?}"
    );
    let live_shards = live_shard_count(&rig).await;
    assert_eq!(rig.shard_count().await, live_shards, "orphan shards left");
    println!(
        "acknowledged {} PUTs, {} failed (503)",
        acked.len(),
        failed.len()
    );
}

/// Shards the index references (every stripe of every piece, k+m each).
async fn live_shard_count(rig: &Rig) -> usize {
    let pieces = rig
        .gateway
        .layer()
        .index()
        .read(|tx| ops::object_pieces_after(tx, 0, usize::MAX >> 1))
        .await
        .expect("pieces");
    pieces
        .iter()
        .flat_map(|(_, p)| p)
        .map(|p| p.stripes() as usize * p.geometry.total())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_of_a_write_that_never_committed_are_reaped() {
    let rig = Rig::start(3, G21, SHARD).await;
    let layer = rig.gateway.layer();
    // A gateway that dies after writing shards and before its commit: the write intent
    // stays in the index, no object refers to the piece.
    let data = bytes(500_000, 9);
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = data
        .chunks(70_000)
        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
        .collect();
    let ingested = layer
        .ingest(
            futures::stream::iter(chunks),
            IngestRequest {
                geometry: G21,
                checksum: None,
                size_hint: None,
                max_bytes: u64::MAX,
                allow_inline: true,
            },
        )
        .await
        .expect("ingest");
    assert!(matches!(ingested.data, ObjectData::Pieces(_)));
    assert!(rig.shard_count().await > 0);
    // Within the grace period the shards stay (the write may still commit).
    assert_eq!(layer.reap().await.expect("reap").pieces_deleted, 0);
    rig.clock.advance_ms(61_000);
    let r = layer.reap().await.expect("reap");
    assert_eq!(r.pieces_deleted, 1);
    assert_eq!(rig.shard_count().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_shards_are_healed_on_read() {
    let rig = Rig::start(3, G21, SHARD).await;
    let c = &rig.client;
    assert_eq!(c.create_bucket("bkt").await.status, 200);
    let data = bytes(400_000, 5);
    assert_eq!(c.put("bkt", "k", &data).await.status, 200);
    rig.faults[1].set_corrupt_reads(true);
    let r = c.get("bkt", "k").await;
    assert_same(
        &r.body,
        &data,
        "bytes rebuilt around a store returning garbage",
    );
    rig.faults[1].set_corrupt_reads(false);
    // Deleting an object queues its shards; after the grace period they are gone.
    assert_eq!(c.delete("bkt", "k").await.status, 204);
    rig.clock.advance_ms(61_000);
    rig.gateway.layer().reap().await.expect("reap");
    assert_eq!(rig.shard_count().await, 0);
}
