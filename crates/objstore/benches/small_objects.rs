//! The small-object policy, measured: PUT and GET latency of objects kept inline in the
//! index row vs erasure-coded 2+1 over three directory shard stores (each shard a synced
//! file, as durable as the inline row), on the embedded SQLite index, through the object
//! layer (no HTTP). The inline limit (`ObjectConfig::inline_max_bytes`, 16 KiB) is chosen
//! from this table; docs/object.md ("Small objects") records the figures.
//!
//! Output: JSON on stdout and in `<target>/bench/small_objects.json`, a table on stderr.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use objstore::clock::SystemClock;
use objstore::index::{Index, NewVersion, ObjectAttrs, WriteCondition, ops};
use objstore::layout::Geometry;
use objstore::objects::ingest::IngestRequest;
use objstore::objects::{ObjectConfig, ObjectLayer};
use objstore::placement::StoreSet;
use objstore::shard::{DirShardStore, ShardStore};
use serde_json::json;

const SIZES: [usize; 6] = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
const RUNS: usize = 60;
const G: Geometry = Geometry { data: 2, parity: 1 };

fn median_ms(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

async fn layer(
    dir: &std::path::Path,
    inline_max_bytes: usize,
) -> Result<Arc<ObjectLayer>, Box<dyn std::error::Error>> {
    let index = Index::open(&format!("sqlite:{}", dir.join("index.db").display())).await?;
    index.write(|tx| ops::create_bucket(tx, "b", G, 0)).await?;
    let stores: Vec<Arc<dyn ShardStore>> = (0..3)
        .map(|i| -> Result<Arc<dyn ShardStore>, std::io::Error> {
            Ok(Arc::new(DirShardStore::open(
                dir.join(format!("s{i}")),
                format!("s{i}"),
                format!("n{i}"),
                None,
            )?))
        })
        .collect::<Result<_, _>>()?;
    let config = ObjectConfig {
        inline_max_bytes,
        ..ObjectConfig::default()
    };
    Ok(Arc::new(ObjectLayer::new(
        index,
        StoreSet::new(stores)?,
        config,
        Arc::new(SystemClock),
    )))
}

async fn measure(
    l: &Arc<ObjectLayer>,
    size: usize,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let bucket = l.index().bucket("b").await?.ok_or("bucket")?;
    let body = vec![0x5au8; size];
    let mut puts = Vec::new();
    let mut gets = Vec::new();
    for i in 0..RUNS {
        let key = format!("k{size}-{i}");
        let t = Instant::now();
        let chunk: Result<bytes::Bytes, std::io::Error> = Ok(bytes::Bytes::from(body.clone()));
        let ing = l
            .ingest(
                futures::stream::iter([chunk]),
                IngestRequest {
                    geometry: G,
                    checksum: None,
                    size_hint: Some(size as u64),
                    max_bytes: u64::MAX,
                    allow_inline: true,
                },
            )
            .await?;
        let v = NewVersion {
            key: key.clone(),
            size: ing.size,
            etag: hex::encode(ing.md5),
            mtime_ms: 0,
            attrs: ObjectAttrs::default(),
            data: ing.data,
        };
        l.index()
            .write(move |tx| {
                ops::put_version(tx, bucket.id, &v, &WriteCondition::default(), "v", 0)
            })
            .await?;
        puts.push(t.elapsed());
        let t = Instant::now();
        let k = key.clone();
        let v = l
            .index()
            .read(move |tx| ops::latest(tx, bucket.id, &k))
            .await?
            .ok_or("missing")?;
        let mut s = l.read_range(v.data, 0..v.size);
        let mut n = 0;
        while let Some(b) = s.next().await {
            n += b?.len();
        }
        gets.push(t.elapsed());
        if n != size {
            return Err(format!("read {n} of {size} bytes").into());
        }
    }
    Ok((median_ms(puts), median_ms(gets)))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut rows = Vec::new();
        // Warm-up (first file creations, SQLite page cache), not reported.
        {
            let (w1, w2) = (tempfile::tempdir()?, tempfile::tempdir()?);
            measure(&layer(w1.path(), 0).await?, 1 << 10).await?;
            measure(&layer(w2.path(), usize::MAX).await?, 1 << 10).await?;
        }
        eprintln!("{:>9} {:>12} {:>12} {:>12} {:>12}", "size", "inline PUT", "EC PUT", "inline GET", "EC GET");
        for size in SIZES {
            let a = tempfile::tempdir()?;
            let b = tempfile::tempdir()?;
            let inline = layer(a.path(), usize::MAX).await?;
            let coded = layer(b.path(), 0).await?;
            let (ip, ig) = measure(&inline, size).await?;
            let (cp, cg) = measure(&coded, size).await?;
            eprintln!("{size:>9} {ip:>10.3}ms {cp:>10.3}ms {ig:>10.3}ms {cg:>10.3}ms");
            rows.push(json!({"size_bytes": size, "inline_put_ms": ip, "ec_put_ms": cp, "inline_get_ms": ig, "ec_get_ms": cg,
                "ec_vs_inline_put": cp / ip, "ec_vs_inline_get": cg / ig}));
        }
        let report = json!({"bench": "objstore-small-objects", "geometry": "2+1", "stores": "directory (synced files)", "index": "sqlite", "runs": RUNS, "results": rows});
        let text = serde_json::to_string_pretty(&report)?;
        println!("{text}");
        let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let out = tmp.parent().map_or_else(|| tmp.clone(), PathBuf::from).join("bench");
        std::fs::create_dir_all(&out)?;
        std::fs::write(out.join("small_objects.json"), text)?;
        Ok(())
    })
}
