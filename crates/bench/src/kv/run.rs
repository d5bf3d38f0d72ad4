//! A KV run: `jobs` workers, each on its own contiguous share of the keys, progress while
//! they run, and their results merged into one report.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::KvTarget;
use super::config::KvBenchConfig;
use super::job::kv_job;
use crate::cpu::CpuTime;
use crate::job::{Shared, new_histogram};
use crate::progress::Progress;
use crate::report::{KvReport, KvVerifyReport, LatencyReport, Report};
use crate::run::BenchError;
use crate::verify::MAX_FIRST_ERRORS;

/// Runs the configured KV load against `target` and reports what happened. With
/// `verify` and Stores, every key stored is retrieved and checked after the load; the
/// load's figures do not include that read-back.
pub async fn run_kv<T: KvTarget>(
    target: Arc<T>,
    cfg: &KvBenchConfig,
    target_name: &str,
    progress: &Progress,
) -> Result<Report, BenchError> {
    cfg.validate(target.max_value_bytes())?;
    let shared = Arc::new(Shared::default());
    let per_job = cfg.keys / u64::from(cfg.jobs);
    let cpu0 = CpuTime::now();
    let t0 = Instant::now();
    let handles: Vec<_> = (0..cfg.jobs)
        .map(|j| {
            // Jobs are tasks on the caller's runtime, beside the client's socket tasks
            // (see the block mode's run.rs for why not threads of their own).
            tokio::spawn(kv_job(
                target.clone(),
                cfg.clone(),
                j,
                cfg.key_base + u64::from(j) * per_job,
                per_job,
                shared.clone(),
                t0,
            ))
        })
        .collect();
    let deadline = (cfg.runtime_ms > 0).then(|| t0 + Duration::from_millis(cfg.runtime_ms));
    let mut tick = tokio::time::interval(progress.interval());
    tick.tick().await;
    let all = futures::future::join_all(handles);
    tokio::pin!(all);
    let results = loop {
        tokio::select! {
            r = &mut all => break r,
            _ = tick.tick() => {
                progress.update(
                    t0.elapsed(),
                    shared.ios.load(Ordering::Relaxed),
                    shared.bytes.load(Ordering::Relaxed),
                    shared.read_back.load(Ordering::Relaxed),
                );
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    shared.stop.store(true, Ordering::Relaxed);
                }
            }
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            } => shared.stop.store(true, Ordering::Relaxed),
        }
    };
    let cpu = CpuTime::now().since(&cpu0);
    progress.finish();

    let mut retrieve_hist = new_histogram();
    let mut store_hist = new_histogram();
    let mut rep = Report {
        target: target_name.to_string(),
        pattern: cfg.pattern.name().into(),
        block_size_bytes: cfg.value_size_bytes,
        iodepth: cfg.iodepth,
        jobs: cfg.jobs,
        ..Report::default()
    };
    let mut kv = KvReport {
        keys: per_job * u64::from(cfg.jobs),
        value_size_bytes: cfg.value_size_bytes,
        ..KvReport::default()
    };
    let mut verify = KvVerifyReport::default();
    let mut load_elapsed = Duration::ZERO;
    for r in results {
        let r = r.map_err(|_| BenchError::Worker("a KV job ended without a result".into()))?;
        retrieve_hist
            .add(&r.retrieve_hist)
            .map_err(|e| BenchError::Worker(e.to_string()))?;
        store_hist
            .add(&r.store_hist)
            .map_err(|e| BenchError::Worker(e.to_string()))?;
        rep.read_ios += r.retrieves;
        rep.write_ios += r.stores;
        rep.read_bytes += r.retrieve_bytes;
        rep.write_bytes += r.store_bytes;
        rep.errors += r.errors;
        if rep.first_error.is_none() {
            rep.first_error = r.first_error;
        }
        kv.retrieves_not_found += r.not_found;
        load_elapsed = load_elapsed.max(r.load_elapsed);
        verify.merge(r.verify, MAX_FIRST_ERRORS);
    }
    rep.elapsed_s = load_elapsed.as_secs_f64();
    let ios = rep.read_ios + rep.write_ios;
    let secs = rep.elapsed_s.max(1e-9);
    rep.iops = ios as f64 / secs;
    rep.mb_per_s = (rep.read_bytes + rep.write_bytes) as f64 / secs / 1e6;
    rep.read_latency = LatencyReport::from_histogram(&retrieve_hist);
    rep.write_latency = LatencyReport::from_histogram(&store_hist);
    rep.cpu_s = cpu.total().as_secs_f64();
    rep.cpu_s_per_million_ios = if ios > 0 {
        rep.cpu_s / ios as f64 * 1e6
    } else {
        0.0
    };
    if cfg.verify {
        kv.verify = Some(verify);
    }
    rep.kv = Some(kv);
    Ok(rep)
}
