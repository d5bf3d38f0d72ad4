use std::sync::Arc;

use rand::{Rng, SeedableRng};

use super::*;
use crate::shard::{Faults, FaultyShardStore, MemShardStore, ShardKey};

struct Rig {
    dp: DataPath,
    faults: Vec<Arc<Faults>>,
    mems: Vec<Arc<MemShardStore>>,
}

fn rig(stores: usize, shard_bytes: u32) -> Rig {
    let mut faults = Vec::new();
    let mut mems = Vec::new();
    let mut set: Vec<Arc<dyn ShardStore>> = Vec::new();
    for i in 0..stores {
        let mem = Arc::new(MemShardStore::new(format!("s{i}"), format!("n{i}")));
        let f = FaultyShardStore::new(mem.clone());
        faults.push(f.faults());
        mems.push(mem);
        set.push(Arc::new(f));
    }
    let dp = DataPath::new(
        StoreSet::new(set).expect("stores"),
        DataPathConfig {
            shard_bytes,
            shard_timeout: Duration::from_secs(5),
        },
    );
    Rig { dp, faults, mems }
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random()).collect()
}

async fn write(dp: &DataPath, g: Geometry, data: &[u8]) -> Result<(Piece, bool), DataError> {
    let mut w = dp.writer(g)?;
    let step = w.stripe_data_bytes();
    for chunk in data.chunks(step) {
        w.write_stripe(chunk).await?;
    }
    Ok(w.finish())
}

async fn read_all(dp: &DataPath, p: &Piece) -> Result<(Vec<u8>, StripeHealth), DataError> {
    let mut out = Vec::new();
    let mut health = StripeHealth::default();
    for s in 0..p.stripes() {
        let (d, h) = dp.read_stripe(p, s).await?;
        out.extend_from_slice(&d);
        health.add(h);
    }
    Ok((out, health))
}

fn index_of(p: &Piece, store: &str) -> usize {
    p.stores.iter().position(|s| s == store).expect("placed")
}

const G21: Geometry = Geometry { data: 2, parity: 1 };
const G42: Geometry = Geometry { data: 4, parity: 2 };

#[tokio::test]
async fn round_trip_for_many_sizes() {
    let r = rig(6, 64);
    for (seed, len) in [1usize, 63, 64, 127, 128, 129, 1000, 4096]
        .into_iter()
        .enumerate()
    {
        let data = random_bytes(len, seed as u64);
        for g in [G21, G42] {
            let (p, degraded) = write(&r.dp, g, &data).await.expect("write");
            assert!(!degraded);
            assert_eq!(p.size, len as u64);
            assert_eq!(
                read_all(&r.dp, &p).await.expect("read").0,
                data,
                "{g} {len}"
            );
        }
    }
}

#[tokio::test]
async fn a_healthy_read_asks_only_the_data_shards_and_chunks_are_the_stripe() {
    let r = rig(6, 100);
    let data = random_bytes(650, 3);
    let (p, _) = write(&r.dp, G42, &data).await.expect("write");
    let calls = |r: &Rig| -> Vec<u64> { r.faults.iter().map(|f| f.calls()).collect() };
    let before = calls(&r);
    let mut out = Vec::new();
    for s in 0..p.stripes() {
        let (chunks, h) =
            r.dp.read_stripe_chunks(&p, s, 0..p.stripe_len(s))
                .await
                .expect("read");
        assert_eq!(h, StripeHealth::default());
        assert!(chunks.len() <= 4 && chunks.iter().all(|c| !c.is_empty()));
        out.extend(chunks.iter().flat_map(|c| c.iter().copied()));
    }
    assert_eq!(out, data);
    let after = calls(&r);
    for (i, id) in p.stores.iter().enumerate() {
        let s: usize = id[1..].parse().expect("id");
        let asked = after[s] - before[s];
        // 650 bytes in stripes of 400: two stripes, each asks every data shard once.
        assert_eq!(asked, if i < 4 { 2 } else { 0 }, "shard {i} on {id}");
    }
}

#[tokio::test]
async fn m_stores_down_reads_and_writes_go_on_and_heal_completes() {
    let r = rig(6, 128);
    let data = random_bytes(5000, 1);
    let (p, _) = write(&r.dp, G42, &data).await.expect("write");
    // Take down two stores of this piece, one of them holding a data shard.
    let down: Vec<usize> = p.stores[..2]
        .iter()
        .map(|id| id[1..].parse::<usize>().expect("id"))
        .collect();
    for &d in &down {
        r.faults[d].set_down(true);
    }
    let (got, health) = read_all(&r.dp, &p).await.expect("degraded read");
    assert_eq!(got, data);
    assert!(health.unreachable > 0);

    // A write with the same two stores down (placed anywhere) still succeeds.
    let data2 = random_bytes(3000, 2);
    let (p2, degraded) = write(&r.dp, G42, &data2).await.expect("degraded write");
    let lost_shards = p2
        .stores
        .iter()
        .filter(|s| down.contains(&s[1..].parse::<usize>().expect("id")))
        .count();
    assert_eq!(degraded, lost_shards > 0);
    assert_eq!(read_all(&r.dp, &p2).await.expect("read").0, data2);

    // A third store down: more than m, reads fail as unavailable.
    let third = p.stores[2][1..].parse::<usize>().expect("id");
    r.faults[third].set_down(true);
    let err = read_all(&r.dp, &p).await.expect_err("k-1 shards");
    assert!(err.is_unavailable(), "{err}");
    r.faults[third].set_down(false);

    // The stores return: the healer writes the shards they missed.
    for &d in &down {
        r.faults[d].set_down(false);
    }
    let h = r.dp.heal_piece(&p2, false).await.expect("heal");
    assert_eq!(h.repaired, lost_shards * p2.stripes() as usize);
    assert_eq!(h.unreachable, 0);
    // Now every shard is in place: any m stores may go.
    for i in 0..2 {
        let s = p2.stores[p2.stores.len() - 1 - i][1..]
            .parse::<usize>()
            .expect("id");
        r.faults[s].set_down(true);
    }
    assert_eq!(read_all(&r.dp, &p2).await.expect("read").0, data2);
}

#[tokio::test]
async fn more_than_m_down_fails_the_write_with_unavailable() {
    let r = rig(3, 64);
    r.faults[0].set_down(true);
    r.faults[1].set_down(true);
    let err = write(&r.dp, G21, &random_bytes(300, 3))
        .await
        .expect_err("one store left");
    assert!(err.is_unavailable(), "{err}");
    assert!(err.to_string().contains("only 1 of 3 shards"), "{err}");
}

#[tokio::test]
async fn corrupt_and_missing_shards_heal_on_read() {
    let r = rig(3, 64);
    let data = random_bytes(1000, 4);
    let (p, _) = write(&r.dp, G21, &data).await.expect("write");
    // Flip a byte of data shard 0 of stripe 1 in its store, delete data shard 1 of stripe 2.
    let s0 = index_of(&p, &p.stores[0]);
    let key = p.address(1, s0).key();
    let store0 = &r.mems[p.stores[0][1..].parse::<usize>().expect("id")];
    let mut buf = vec![0u8; 200];
    let n = store0.retrieve(key, &mut buf).await.expect("retrieve");
    buf[n - 1] ^= 1;
    store0
        .store(key, Bytes::copy_from_slice(&buf[..n]), StoreMode::Upsert)
        .await
        .expect("damage");
    let store1 = &r.mems[p.stores[1][1..].parse::<usize>().expect("id")];
    store1.delete(p.address(2, 1).key()).await.expect("delete");

    let (got, health) = read_all(&r.dp, &p).await.expect("read");
    assert_eq!(got, data);
    assert_eq!(health.repaired, 2);
    // Repaired in place: the next read finds nothing to fix, even with the parity
    // store gone.
    let parity = p.stores[2][1..].parse::<usize>().expect("id");
    r.faults[parity].set_down(true);
    let (got, health) = read_all(&r.dp, &p).await.expect("read");
    assert_eq!(got, data);
    assert_eq!(health, StripeHealth::default());
}

#[tokio::test]
async fn deep_scan_finds_corruption_that_existence_checks_miss() {
    let r = rig(3, 64);
    let data = random_bytes(500, 5);
    let (p, _) = write(&r.dp, G21, &data).await.expect("write");
    let parity_store = p.stores[2][1..].parse::<usize>().expect("id");
    let key = p.address(0, 2).key();
    let mem = &r.mems[parity_store];
    mem.store(key, Bytes::from_static(b"garbage"), StoreMode::Upsert)
        .await
        .expect("damage");
    assert_eq!(
        r.dp.heal_piece(&p, false).await.expect("shallow").repaired,
        0
    );
    assert_eq!(r.dp.heal_piece(&p, true).await.expect("deep").repaired, 1);
    assert_eq!(r.dp.heal_piece(&p, true).await.expect("deep").repaired, 0);
}

#[tokio::test]
async fn delete_removes_every_shard_and_reports_unreachable_stores() {
    let r = rig(3, 64);
    let (p, _) = write(&r.dp, G21, &random_bytes(700, 6))
        .await
        .expect("write");
    r.faults[0].set_down(true);
    assert!(matches!(
        r.dp.delete_piece(&p).await,
        Err(DataError::DeleteIncomplete(n)) if n == p.stripes() as usize
    ));
    r.faults[0].set_down(false);
    r.dp.delete_piece(&p).await.expect("delete again");
    for m in &r.mems {
        assert_eq!(m.list(ShardKey::MIN, 10).await.expect("list"), vec![]);
    }
}

#[test]
fn cut_takes_exactly_the_range_across_chunks() {
    let data: Vec<u8> = (0..30).collect();
    let chunks = || {
        vec![
            Bytes::copy_from_slice(&data[..12]),
            Bytes::copy_from_slice(&data[12..24]),
            Bytes::copy_from_slice(&data[24..]),
        ]
    };
    for start in 0..30 {
        for end in start + 1..=30 {
            let got: Vec<u8> = cut(chunks(), start..end).concat();
            assert_eq!(got, &data[start..end], "{start}..{end}");
        }
    }
}
