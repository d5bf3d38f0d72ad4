//! The S3 gateway on a cluster's KV namespaces, as separate processes (etcd, three
//! `ferrobay node run --meta` storage nodes, `ferrobay s3 pool create`, `ferrobay s3 run
//! --meta`): a storage node killed (`kill -9`) under PUT/GET load loses no acknowledged
//! object, shows nothing unacknowledged, and once it is back the healer completes every
//! shard it missed (`ferrobay s3 check`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::object_cluster::{ACCESS_KEY, ObjectCluster, SECRET_KEY};
use md5::{Digest, Md5};
use testkit::data::{assert_same, pattern};
use testkit::s3::S3Client;

const BUCKET: &str = "load";

fn md5_hex(data: &[u8]) -> String {
    hex_lower(&Md5::digest(data))
}

fn hex_lower(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One object a worker wrote: key, size, seed, the ETag the PUT returned.
struct Written {
    key: String,
    len: usize,
    seed: u64,
    etag: String,
}

#[derive(Default)]
struct WorkerLog {
    acked: Vec<Written>,
    /// Keys whose PUT failed (503): must not be visible.
    failed: Vec<String>,
    /// Reads of acknowledged objects that did not come back whole (status, key).
    bad_reads: Vec<(u16, String)>,
    reads: usize,
    /// PUTs acknowledged while the node was down.
    acked_while_down: usize,
}

async fn worker(
    client: Arc<S3Client>,
    w: u64,
    stop: Arc<AtomicBool>,
    down: Arc<AtomicBool>,
) -> WorkerLog {
    let mut log = WorkerLog::default();
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) {
        // 20 KiB .. 2.5 MiB: above the inline limit, single- and multi-stripe pieces
        // (stripes of 2 MiB).
        let len = 20 * 1024 + ((i * 774_413 + w * 91_127) % (2_540 * 1024)) as usize;
        let seed = w * 1_000_000 + i;
        let key = format!("w{w}/o{i}");
        let data = pattern(len, seed);
        let was_down = down.load(Ordering::SeqCst);
        let r = client.put(BUCKET, &key, &data).await;
        if r.status == 200 {
            let etag = r.etag().unwrap_or_default();
            assert_eq!(etag, md5_hex(&data), "{key}: ETag of the PUT");
            if was_down && down.load(Ordering::SeqCst) {
                log.acked_while_down += 1;
            }
            log.acked.push(Written {
                key,
                len,
                seed,
                etag,
            });
        } else {
            assert_eq!(r.status, 503, "{key}: {}", String::from_utf8_lossy(&r.body));
            log.failed.push(key);
        }
        // A read of an earlier object alongside each write.
        if let Some(o) = log.acked.get((i as usize * 7) % log.acked.len().max(1)) {
            let g = client.get(BUCKET, &o.key).await;
            log.reads += 1;
            if g.status == 200 && g.complete {
                assert_same(&g.body, &pattern(o.len, o.seed), &o.key);
            } else {
                log.bad_reads.push((g.status, o.key.clone()));
            }
        }
        i += 1;
    }
    log
}

/// `ferrobay s3 check --json` (exit code 1 = some piece incomplete: still a report).
fn check_json(c: &ObjectCluster) -> serde_json::Value {
    let out = std::process::Command::new(&c.binary)
        .args([
            "s3",
            "check",
            "--index",
            &c.index_url,
            "--meta",
            &c.meta_url,
            "--json",
        ])
        .env("RUST_LOG", "error")
        .output()
        .expect("ferrobay s3 check");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "s3 check: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("check JSON")
}

#[test]
fn a_storage_node_killed_under_load_loses_no_acknowledged_object() {
    if let Err(why) = meta::testing::EtcdServer::find_binary() {
        testkit::prereq::missing(why);
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let base = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&base).expect("tmp");
    let dir = tempfile::Builder::new()
        .prefix("s3-cluster")
        .tempdir_in(base)
        .expect("tempdir");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_ferrobay"));
    let mut c = rt
        .block_on(ObjectCluster::start(bin, dir.path(), 1 << 30))
        .expect("cluster");
    let pool = c
        .create_pool("256M")
        .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    assert!(pool.contains("3 KV namespaces"), "{pool}");
    c.start_gateway(&[])
        .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    let client =
        Arc::new(S3Client::for_endpoint(&c.s3_endpoint, ACCESS_KEY, SECRET_KEY).expect("endpoint"));
    let made = rt.block_on(client.create_bucket(BUCKET));
    assert_eq!(made.status, 200, "{}", String::from_utf8_lossy(&made.body));

    let stop = Arc::new(AtomicBool::new(false));
    let down = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4u64)
        .map(|w| rt.spawn(worker(client.clone(), w, stop.clone(), down.clone())))
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    eprintln!("kill -9 n2");
    c.kill_node(1);
    down.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(2));
    // `s3 check` sees the shards on n2 as unreachable meanwhile.
    let during = check_json(&c);
    assert!(
        during["shards"]["unreachable"].as_u64().expect("count") > 0
            && during["pieces_incomplete"].as_u64().expect("count") > 0,
        "{during}"
    );
    eprintln!("n2 starts again");
    down.store(false, Ordering::SeqCst);
    c.start_node(1)
        .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::SeqCst);
    let mut logs = Vec::new();
    for w in workers {
        logs.push(rt.block_on(w).expect("worker"));
    }

    let acked: Vec<&Written> = logs.iter().flat_map(|l| &l.acked).collect();
    let failed: Vec<&String> = logs.iter().flat_map(|l| &l.failed).collect();
    let bad_reads: Vec<&(u16, String)> = logs.iter().flat_map(|l| &l.bad_reads).collect();
    let while_down: usize = logs.iter().map(|l| l.acked_while_down).sum();
    let reads: usize = logs.iter().map(|l| l.reads).sum();
    eprintln!(
        "{} PUTs acknowledged ({while_down} while n2 was down), {} failed; {reads} GETs, {} not whole",
        acked.len(),
        failed.len(),
        bad_reads.len()
    );
    // With one of three nodes down a 2+1 pool keeps working: writes and reads go on.
    assert!(
        while_down > 0,
        "no PUT succeeded while n2 was down\n{}",
        c.logs()
    );
    assert!(
        failed.is_empty(),
        "PUTs failed with one node down: {failed:?}"
    );
    assert!(
        bad_reads.is_empty(),
        "GETs failed: {bad_reads:?}\n{}",
        c.logs()
    );

    // Every acknowledged object reads back with its bytes and ETag.
    for o in &acked {
        let g = rt.block_on(client.get(BUCKET, &o.key));
        assert_eq!((g.status, g.complete), (200, true), "{}", o.key);
        assert_same(&g.body, &pattern(o.len, o.seed), &o.key);
        assert_eq!(g.etag().as_deref(), Some(o.etag.as_str()), "{}", o.key);
    }
    for key in &failed {
        assert_eq!(rt.block_on(client.get(BUCKET, key)).status, 404, "{key}");
    }

    // The healer completes the shards n2 missed.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = check_json(&c);
        let incomplete = r["pieces_incomplete"].as_u64().expect("count");
        if incomplete == 0 && r["shards"]["unreachable"].as_u64() == Some(0) {
            assert!(r["pieces"].as_u64().expect("pieces") as usize >= acked.len());
            eprintln!("every piece whole again: {r}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pieces still incomplete after 60 s: {r}\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    c.stop();
}
