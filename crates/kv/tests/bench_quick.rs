//! The benchmark in quick mode, so it cannot rot: small drive, short loads, both media
//! and the reference engine; checks that every figure is there and plausible.
#![allow(clippy::unwrap_used)]

#[path = "../benches/kv/loads.rs"]
mod loads;
#[path = "../benches/kv/reference.rs"]
mod reference;
#[path = "../benches/kv/run.rs"]
mod run;

use std::time::Duration;

#[test]
fn quick_bench_reports_every_figure() {
    let dir = tempfile::tempdir().unwrap();
    let settings = run::Settings {
        quick: true,
        media: vec!["file".into(), "ram".into()],
        dir: dir.path().to_path_buf(),
        drive_bytes: 128 << 20,
        runtime: Duration::from_millis(150),
        reference: true,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = rt.block_on(run::run(&settings)).unwrap();
    let media = report["media"].as_array().unwrap();
    assert_eq!(media.len(), 2);
    for m in media {
        for (step, field) in [
            ("store_1m_qd8", "ratio"),
            ("store_1m_qd8", "raw_flush_each_vs_raw"),
            ("store_1m_qd8", "kv_vs_raw_flush_each"),
            ("retrieve_4k_qd32", "ratio"),
            ("store_4k_qd32", "ratio"),
            ("store_4k_qd32", "mean_batch_records"),
            ("compaction_50pct", "write_amplification"),
        ] {
            let v = m[step][field].as_f64().unwrap();
            assert!(v.is_finite() && v > 0.0, "{step}.{field} = {v} in {m}");
        }
        let wa = m["compaction_50pct"]["write_amplification"]
            .as_f64()
            .unwrap();
        assert!(wa >= 1.0, "write amplification {wa} below 1");
        assert!(
            m["compaction_50pct"]["compaction_bytes_reclaimed"]
                .as_u64()
                .unwrap()
                > 0
        );
    }
    let r = &media[0]["reference"];
    assert!(
        r["kv_vs_reference"]["store_4k"].as_f64().unwrap() > 0.0,
        "{r}"
    );
    assert!(run::table(&report).contains("ratio"));
}
