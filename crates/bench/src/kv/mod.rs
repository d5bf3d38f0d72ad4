//! The KV mode of `ferrobay bench`: Stores and Retrieves of stamped values under keys
//! derived from an index, `iodepth` commands in flight per job, with the same report
//! (IOPS, MB/s, latency percentiles, CPU per command, JSON) as the block mode.
//!
//! - [`KvTarget`]: what the load runs against (a remote NVMe KV namespace,
//!   `nvmf_host::AnyKvNamespace`, in [`nvme`]; tests use stores that inject faults).
//! - [`stamp`]: keys and the verification stamp of values (docs/bench.md, "KV mode").
//! - `job.rs`: one job's load and read-back; `run.rs`: the jobs and the report.

mod config;
mod job;
mod nvme;
mod run;
pub mod stamp;

use std::future::Future;

use blockdev::IoBuf;

pub use config::{KvBenchConfig, KvPattern, MAX_KEYS, MAX_KV_BUFFER_BYTES};
pub use run::run_kv;

/// Why a KV command failed, as the bench counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvOpError {
    /// The key has no value (Retrieve of a key never stored).
    NotFound,
    /// Anything else, for the report's first error.
    Failed(String),
}

impl std::fmt::Display for KvOpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KvOpError::NotFound => f.write_str("key does not exist"),
            KvOpError::Failed(why) => f.write_str(why),
        }
    }
}

/// A KV store the bench can load: keys of 16 bytes, values moved as owned buffers that
/// come back with the result (so that the load allocates nothing per command).
pub trait KvTarget: Send + Sync + 'static {
    /// The largest value it takes.
    fn max_value_bytes(&self) -> u64;
    /// Stores all of `value` under `key` (create or replace).
    fn store(
        &self,
        key: &[u8],
        value: IoBuf,
    ) -> impl Future<Output = (Result<(), KvOpError>, IoBuf)> + Send;
    /// Retrieves `key` into `buf`; the result is the whole value's size.
    fn retrieve(
        &self,
        key: &[u8],
        buf: IoBuf,
    ) -> impl Future<Output = (Result<u32, KvOpError>, IoBuf)> + Send;
}

#[cfg(test)]
mod tests;
