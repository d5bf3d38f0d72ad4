use crate::kernel::Kernel;
use crate::matrix::{MAX_DATA_SHARDS, MAX_PARITY_SHARDS};

/// Why an erasure-coding call was refused. No call modifies any buffer before it has
/// validated all of its arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErasureError {
    #[error(
        "unsupported geometry {data}+{parity}: need 1..={MAX_DATA_SHARDS} data and \
         1..={MAX_PARITY_SHARDS} parity shards"
    )]
    UnsupportedGeometry { data: usize, parity: usize },
    #[error("kernel {0} is not supported by this CPU")]
    KernelUnavailable(Kernel),
    #[error("{what}: expected {expected} entries, got {actual}")]
    ShardCount {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("shard {index} is {actual_bytes} bytes, expected {expected_bytes}")]
    ShardLength {
        index: usize,
        expected_bytes: usize,
        actual_bytes: usize,
    },
    #[error("{missing} shards missing, at most {max} can be rebuilt")]
    TooManyMissing { missing: usize, max: usize },
    #[error("shard index {index} out of range (shards: {shards})")]
    IndexOutOfRange { index: usize, shards: usize },
}
