//! MD5 throughput, side by side in one run (what an S3 gateway pays per GiB for ETags):
//!
//! 1. one stream, scalar: the `md-5` crate (what the gateway used before) and `md5x::Md5`;
//! 2. eight streams at once in AVX2 lanes (`md5x::digest8`; on a CPU without AVX2 this
//!    is eight scalar runs, and the summary says so);
//! 3. an upload load: `MD5X_BENCH_STREAMS` (16) tasks on a 2-thread tokio runtime, each
//!    hashing 1 MiB objects arriving in 64 KiB pieces, through `StreamMd5` (the lanes)
//!    against hashing each piece in place: process CPU seconds per GiB (getrusage).
//!
//! Medians of `MD5X_BENCH_ROUNDS` rounds (5); JSON on stdout and in
//! `<target>/bench/md5x.json` (`MD5X_BENCH_OUT`), a summary on stderr. Without `--bench`
//! (`cargo test`) it runs one small round as a smoke test and writes no file.

use std::time::Instant;

use bytes::Bytes;
use md5::Digest;
use md5x::{Md5, Md5Lanes, StreamMd5};
use serde_json::json;
use testkit::stats::median;

const MIB: usize = 1 << 20;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn data(len: usize) -> Vec<u8> {
    testkit::data::pattern(len, 31)
}

fn mib_per_s(bytes: usize, start: Instant) -> f64 {
    bytes as f64 / MIB as f64 / start.elapsed().as_secs_f64()
}

/// Process CPU time (user + system), seconds.
fn cpu_s() -> f64 {
    bench::CpuTime::now().total().as_secs_f64()
}

/// CPU seconds per GiB of `streams` tasks hashing `objects` objects of 1 MiB each, in
/// 64 KiB pieces, through the lanes or in place.
fn upload_load(rt: &tokio::runtime::Runtime, streams: usize, objects: usize, lanes: bool) -> f64 {
    let piece = Bytes::from(data(64 << 10));
    let shared = if lanes { Md5Lanes::start() } else { None };
    let cpu0 = cpu_s();
    rt.block_on(async {
        let tasks: Vec<_> = (0..streams)
            .map(|_| {
                let piece = piece.clone();
                let shared = shared.clone();
                tokio::spawn(async move {
                    let mut digests = 0u8;
                    for _ in 0..objects {
                        let mut h = StreamMd5::with_lanes(shared.clone());
                        for _ in 0..MIB / piece.len() {
                            h.update(piece.clone()).await;
                        }
                        digests ^= h.finalize()[0];
                    }
                    digests
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    });
    let gib = (streams * objects * MIB) as f64 / (1u64 << 30) as f64;
    (cpu_s() - cpu0) / gib
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rounds = if full {
        env_usize("MD5X_BENCH_ROUNDS", 5).max(1)
    } else {
        1
    };
    let one_mib = if full { 64 } else { 2 };
    let streams = env_usize("MD5X_BENCH_STREAMS", 16);
    let objects = if full { 16 } else { 1 };
    let buf = data(MIB);
    let avx2 = md5x::lanes_supported();
    if !avx2 {
        testkit::prereq::missing_cpu_feature("AVX2: the eight lanes are eight scalar runs");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("tokio runtime");
    let (mut crate_s, mut ours_s, mut lanes8) = (Vec::new(), Vec::new(), Vec::new());
    let (mut load_lanes, mut load_inplace) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        eprintln!("md5x bench: round {}/{rounds}", round + 1);
        let t = Instant::now();
        for _ in 0..one_mib {
            std::hint::black_box(md5::Md5::digest(&buf));
        }
        crate_s.push(mib_per_s(one_mib * MIB, t));
        let t = Instant::now();
        for _ in 0..one_mib {
            std::hint::black_box(Md5::digest(&buf));
        }
        ours_s.push(mib_per_s(one_mib * MIB, t));
        let t = Instant::now();
        for _ in 0..one_mib.div_ceil(8) {
            std::hint::black_box(md5x::digest8([buf.as_slice(); 8]));
        }
        lanes8.push(mib_per_s(one_mib.div_ceil(8) * 8 * MIB, t));
        // Alternate which load goes first.
        if round % 2 == 0 {
            load_lanes.push(upload_load(&rt, streams, objects, true));
            load_inplace.push(upload_load(&rt, streams, objects, false));
        } else {
            load_inplace.push(upload_load(&rt, streams, objects, false));
            load_lanes.push(upload_load(&rt, streams, objects, true));
        }
    }
    let (c, o, l) = (median(crate_s), median(ours_s), median(lanes8));
    let (ll, li) = (median(load_lanes), median(load_inplace));
    let report = json!({
        "schema": "ferrobay.bench.md5x/1",
        "command": "cargo bench -p md5x",
        "avx2": avx2,
        "rounds": rounds,
        "one_stream_mib_per_s": { "md5_crate": c, "md5x_scalar": o },
        "eight_lanes_mib_per_s": l,
        "eight_lanes_vs_md5_crate": l / c,
        "upload_load": {
            "streams": streams,
            "object_bytes": MIB,
            "piece_bytes": 64 << 10,
            "cpu_s_per_gib_lanes": ll,
            "cpu_s_per_gib_in_place": li,
            "lanes_vs_in_place": ll / li,
        },
    });
    eprintln!(
        "one stream: md-5 crate {c:.0} MiB/s, md5x scalar {o:.0} MiB/s; eight lanes {l:.0} MiB/s ({:.2}x the crate{})",
        l / c,
        if avx2 {
            ""
        } else {
            "; no AVX2 here: eight scalar runs"
        }
    );
    eprintln!(
        "{streams} uploads of 1 MiB objects: {ll:.2} CPU s/GiB through the lanes, {li:.2} in place ({:.2}x)",
        ll / li
    );
    let text = serde_json::to_string_pretty(&report).unwrap_or_default();
    println!("{text}");
    if full {
        let out =
            testkit::bench::output_path("MD5X_BENCH_OUT", env!("CARGO_TARGET_TMPDIR"), "md5x.json");
        if let Err(e) = testkit::bench::write_report(&out, &text) {
            eprintln!("md5x bench: cannot write {}: {e}", out.display());
        }
    }
}
