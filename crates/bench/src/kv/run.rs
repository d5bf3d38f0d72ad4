//! A KV run: `jobs` workers, each on its own contiguous share of the keys, progress while
//! they run, and their results merged into one report.

use std::sync::Arc;
use std::time::Instant;

use super::KvTarget;
use super::config::KvBenchConfig;
use super::job::kv_job;
use crate::cpu::CpuTime;
use crate::job::{LoadResult, Shared};
use crate::progress::Progress;
use crate::report::{KvReport, KvVerifyReport, Report};
use crate::run::{BenchError, wait_for_jobs};
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
    let results = wait_for_jobs(handles, &shared, progress, t0, cfg.runtime_ms).await;
    let cpu = CpuTime::now().since(&cpu0);
    progress.finish();

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
    let mut load = LoadResult::new();
    let mut verify = KvVerifyReport::default();
    for r in results {
        let r = r.map_err(|_| BenchError::Worker("a KV job ended without a result".into()))?;
        load.merge(r.load)?;
        kv.retrieves_not_found += r.not_found;
        verify.merge(r.verify, MAX_FIRST_ERRORS);
    }
    load.fill(&mut rep, &cpu);
    if cfg.verify {
        kv.verify = Some(verify);
    }
    rep.kv = Some(kv);
    Ok(rep)
}
