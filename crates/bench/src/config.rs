//! What a bench run does.

use serde::{Deserialize, Serialize};

/// Access pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    RandRead,
    RandWrite,
    Read,
    Write,
    /// Random mix; `read_percent` of the I/Os are reads.
    RandRw {
        read_percent: u8,
    },
}

impl Pattern {
    /// Parses fio's names: randread, randwrite, read, write, randrw (with `mix`% reads).
    pub fn parse(s: &str, mix_read_percent: u8) -> Result<Pattern, ConfigError> {
        Ok(match s {
            "randread" => Pattern::RandRead,
            "randwrite" => Pattern::RandWrite,
            "read" => Pattern::Read,
            "write" => Pattern::Write,
            "randrw" => Pattern::RandRw {
                read_percent: mix_read_percent.min(100),
            },
            other => {
                return Err(ConfigError(format!(
                    "unknown --rw {other:?} (expected randread, randwrite, read, write or randrw)"
                )));
            }
        })
    }
    pub fn is_random(&self) -> bool {
        !matches!(self, Pattern::Read | Pattern::Write)
    }
    pub fn name(&self) -> &'static str {
        match self {
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
            Pattern::Read => "read",
            Pattern::Write => "write",
            Pattern::RandRw { .. } => "randrw",
        }
    }
}

/// A bad bench configuration, with a one-line reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Everything a run needs to know.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchConfig {
    pub pattern: Pattern,
    pub block_size_bytes: u64,
    /// I/Os in flight per job.
    pub iodepth: u32,
    /// Independent workers, each with its own slice of the range and its own queue.
    pub jobs: u32,
    /// Stop after this long (0 = no time limit).
    pub runtime_ms: u64,
    /// Stop after this many bytes per job have been transferred (0 = no byte limit; the
    /// default for a run without a runtime is one pass over the range).
    pub size_bytes: u64,
    /// Start of the region exercised.
    pub offset_bytes: u64,
    /// Length of the region exercised (0 = to the end of the device).
    pub range_bytes: u64,
    /// Stamp written blocks and check every block read.
    pub verify: bool,
    /// Only read and check what an earlier run wrote (implies verify, no writes).
    pub verify_only: bool,
    /// Seed for offsets and data.
    pub seed: u64,
    /// Generation stamped into written blocks (an earlier run's generation for verify-only).
    pub generation: u32,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            pattern: Pattern::RandRead,
            block_size_bytes: 4096,
            iodepth: 32,
            jobs: 1,
            runtime_ms: 10_000,
            size_bytes: 0,
            offset_bytes: 0,
            range_bytes: 0,
            verify: false,
            verify_only: false,
            seed: 0x00f3_2202_6b1e_55ed,
            generation: 1,
        }
    }
}

impl BenchConfig {
    /// Checks the configuration against a device and returns the effective region.
    pub fn validate(
        &self,
        device_size_bytes: u64,
        logical_block_bytes: u32,
    ) -> Result<(u64, u64), ConfigError> {
        let lb = u64::from(logical_block_bytes.max(1));
        if self.block_size_bytes == 0 || !self.block_size_bytes.is_multiple_of(lb) {
            return Err(ConfigError(format!(
                "--bs {} is not a multiple of the device's {lb}-byte logical block",
                self.block_size_bytes
            )));
        }
        if self.verify && !self.block_size_bytes.is_multiple_of(512) {
            return Err(ConfigError(
                "--verify needs --bs to be a multiple of 512".into(),
            ));
        }
        if self.iodepth == 0 || self.iodepth > 4096 {
            return Err(ConfigError(format!(
                "--iodepth {} out of range 1..=4096",
                self.iodepth
            )));
        }
        if self.jobs == 0 || self.jobs > 256 {
            return Err(ConfigError(format!(
                "--jobs {} out of range 1..=256",
                self.jobs
            )));
        }
        if !self.offset_bytes.is_multiple_of(lb) {
            return Err(ConfigError(format!(
                "--offset {} is not block aligned",
                self.offset_bytes
            )));
        }
        if self.offset_bytes >= device_size_bytes {
            return Err(ConfigError(format!(
                "--offset {} is beyond the device's {device_size_bytes} bytes",
                self.offset_bytes
            )));
        }
        let max_range = device_size_bytes - self.offset_bytes;
        let range = if self.range_bytes == 0 {
            max_range
        } else {
            self.range_bytes
        };
        if range > max_range {
            return Err(ConfigError(format!(
                "--offset + --range end at {} bytes, beyond the device's {device_size_bytes}",
                self.offset_bytes + range
            )));
        }
        let per_job = range / u64::from(self.jobs);
        if per_job < self.block_size_bytes {
            return Err(ConfigError(format!(
                "range of {range} bytes is too small for {} jobs of --bs {}",
                self.jobs, self.block_size_bytes
            )));
        }
        Ok((self.offset_bytes, range))
    }

    pub fn does_writes(&self) -> bool {
        !self.verify_only
            && matches!(
                self.pattern,
                Pattern::RandWrite | Pattern::Write | Pattern::RandRw { .. }
            )
    }
}
