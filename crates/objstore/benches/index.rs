//! Listing speed of the embedded index (SQLite): a bucket of a million objects
//! (`dirNNNN/objNNNN`, 1,000 directories of 1,000 keys), then
//! - `prefix_1000`: ListObjects of one directory's prefix (1,000 keys, one page);
//! - `prefix_delimiter_1000`: the same with delimiter `/`;
//! - `root_delimiter_1000_prefixes`: the bucket root with delimiter `/` (1,000 common
//!   prefixes, each skipping 1,000 keys);
//! - `head_latest`: one current-version lookup.
//!
//! The target (issue 11): a prefix listing of 1,000 keys in a bucket of a million objects
//! takes <= 10 ms. Output: JSON on stdout and in `<target>/bench/index.json`, a table on
//! stderr. `OBJSTORE_BENCH_OBJECTS=N` changes the bucket size (N rounded to 1,000s).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use objstore::index::{
    Index, ListParams, NewVersion, ObjectAttrs, ObjectData, WriteCondition, ops,
};
use objstore::layout::Geometry;
use serde_json::json;

const RUNS: usize = 200;
const BATCH: usize = 10_000;

fn stats(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() * 99 / 100]),
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let objects: usize = std::env::var("OBJSTORE_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
        .max(1000);
    let dirs = objects / 1000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite:{}", dir.path().join("index.db").display());
    rt.block_on(async {
        let index = Index::open(&url).await?;
        index
            .write(|tx| ops::create_bucket(tx, "bench", Geometry { data: 2, parity: 1 }, 0))
            .await?;
        let bucket = index.bucket("bench").await?.ok_or("bucket vanished")?;
        let started = Instant::now();
        let total = dirs * 1000;
        for batch_start in (0..total).step_by(BATCH) {
            let end = (batch_start + BATCH).min(total);
            index
                .write(move |tx| {
                    for i in batch_start..end {
                        let v = NewVersion {
                            key: format!("dir{:04}/obj{:04}", i / 1000, i % 1000),
                            size: 1000,
                            etag: "d41d8cd98f00b204e9800998ecf8427e".into(),
                            mtime_ms: 0,
                            attrs: ObjectAttrs::default(),
                            data: ObjectData::Inline(Vec::new()),
                        };
                        ops::put_version(tx, bucket.id, &v, &WriteCondition::default(), "v", 0)?;
                    }
                    Ok(())
                })
                .await?;
            eprint!("\rindex bench: loading {end}/{total} objects");
        }
        eprintln!(" in {:.1} s", started.elapsed().as_secs_f64());

        let mut results = Vec::new();
        let middle = format!("dir{:04}/", dirs / 2);
        let cases: [(&str, &str, Option<&'static str>, usize, usize); 3] = [
            ("prefix_1000", &middle, None, 1000, 1000),
            ("prefix_delimiter_1000", &middle, Some("/"), 1000, 1000),
            ("root_delimiter_1000_prefixes", "", Some("/"), 1000, dirs.min(1000)),
        ];
        for (name, prefix, delimiter, max, expect) in cases {
            let mut samples = Vec::with_capacity(RUNS);
            for _ in 0..RUNS {
                let p = prefix.to_string();
                let t = Instant::now();
                let page = index
                    .read(move |tx| {
                        ops::list_objects(tx, bucket.id, &ListParams { prefix: &p, delimiter, after: None, max })
                    })
                    .await?;
                samples.push(t.elapsed());
                let got = page.entries.len() + page.common_prefixes.len();
                if got != expect {
                    return Err(format!("{name}: {got} entries, expected {expect}").into());
                }
            }
            let (median_ms, p99_ms) = stats(samples);
            results.push(json!({"case": name, "objects": total, "entries": expect,
                "median_ms": median_ms, "p99_ms": p99_ms, "runs": RUNS}));
        }
        let mut samples = Vec::with_capacity(RUNS);
        for i in 0..RUNS {
            let key = format!("dir{:04}/obj{:04}", (i * 7) % dirs, (i * 13) % 1000);
            let t = Instant::now();
            let v = index.read(move |tx| ops::latest(tx, bucket.id, &key)).await?;
            samples.push(t.elapsed());
            if v.is_none() {
                return Err("head: key missing".into());
            }
        }
        let (median_ms, p99_ms) = stats(samples);
        results.push(json!({"case": "head_latest", "objects": total, "entries": 1,
            "median_ms": median_ms, "p99_ms": p99_ms, "runs": RUNS}));

        eprintln!("{:<32} {:>10} {:>10} {:>10}", "case", "objects", "median ms", "p99 ms");
        for r in &results {
            eprintln!(
                "{:<32} {:>10} {:>10.3} {:>10.3}",
                r["case"].as_str().unwrap_or("?"),
                r["objects"],
                r["median_ms"].as_f64().unwrap_or(f64::NAN),
                r["p99_ms"].as_f64().unwrap_or(f64::NAN)
            );
        }
        let report = json!({"bench": "objstore-index", "engine": "sqlite", "target_ms": 10.0, "results": results});
        let text = serde_json::to_string_pretty(&report)?;
        println!("{text}");
        // <target>/bench, next to the erasure bench's report.
        let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let out = tmp.parent().map_or_else(|| tmp.clone(), PathBuf::from).join("bench");
        std::fs::create_dir_all(&out)?;
        std::fs::write(out.join("index.json"), text)?;
        Ok(())
    })
}
