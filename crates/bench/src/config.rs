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

/// Most memory the I/O buffers of a run (`--bs` x `--iodepth` x `--jobs`) may take.
pub const MAX_BUFFER_BYTES: u64 = 4 << 30;
/// Most memory `--verify` may take to remember the last write of every block (4 bytes
/// per block of the range).
pub const MAX_VERIFY_TRACK_BYTES: u64 = 4 << 30;

/// Checks `--iodepth` and `--jobs` (the block and the KV mode take the same ranges).
pub(crate) fn check_queues(iodepth: u32, jobs: u32) -> Result<(), ConfigError> {
    if iodepth == 0 || iodepth > 4096 {
        return Err(ConfigError(format!(
            "--iodepth {iodepth} out of range 1..=4096"
        )));
    }
    if jobs == 0 || jobs > 256 {
        return Err(ConfigError(format!("--jobs {jobs} out of range 1..=256")));
    }
    Ok(())
}

impl BenchConfig {
    /// Checks the configuration against a device and returns the effective region. Any
    /// sizes are accepted here: what a run could not allocate is refused, not aborted on.
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
        check_queues(self.iodepth, self.jobs)?;
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
                u128::from(self.offset_bytes) + u128::from(range)
            )));
        }
        let buffer_bytes =
            u128::from(self.block_size_bytes) * u128::from(self.iodepth) * u128::from(self.jobs);
        if buffer_bytes > u128::from(MAX_BUFFER_BYTES) {
            return Err(ConfigError(format!(
                "--bs {} x --iodepth {} x --jobs {} needs {buffer_bytes} bytes of I/O buffers, \
                 more than the {MAX_BUFFER_BYTES}-byte limit",
                self.block_size_bytes, self.iodepth, self.jobs
            )));
        }
        let tracked_bytes = range / self.block_size_bytes * 4;
        if self.verify && !self.verify_only && tracked_bytes > MAX_VERIFY_TRACK_BYTES {
            return Err(ConfigError(format!(
                "--verify remembers 4 bytes per block: {range} bytes in blocks of --bs {} \
                 need {tracked_bytes} bytes, more than the {MAX_VERIFY_TRACK_BYTES}-byte \
                 limit (use a larger --bs or a smaller --range)",
                self.block_size_bytes
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

#[cfg(test)]
mod tests {
    use super::*;

    const EXTREMES: [u64; 9] = [
        0,
        1,
        511,
        512,
        4096,
        1 << 40,
        1 << 63,
        u64::MAX - 4095,
        u64::MAX,
    ];

    /// Every combination of extreme sizes is a configuration or a one-line reason, and
    /// what passes can be allocated.
    #[test]
    fn extreme_sizes_are_checked_not_trusted() {
        for device in [4096, 1 << 30, 16383 << 50, u64::MAX - 511] {
            for bs in EXTREMES {
                for offset in EXTREMES {
                    for range in EXTREMES {
                        for verify in [false, true] {
                            let cfg = BenchConfig {
                                block_size_bytes: bs,
                                offset_bytes: offset,
                                range_bytes: range,
                                size_bytes: range,
                                verify,
                                ..BenchConfig::default()
                            };
                            match cfg.validate(device, 512) {
                                Ok((start, len)) => {
                                    assert!(u128::from(start) + u128::from(len) <= device.into());
                                    let buffers = bs * u64::from(cfg.iodepth);
                                    assert!(buffers <= MAX_BUFFER_BYTES);
                                    assert!(!verify || len / bs * 4 <= MAX_VERIFY_TRACK_BYTES);
                                }
                                Err(e) => assert!(!e.0.contains('\n'), "{e}"),
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn oversized_runs_name_the_limit() {
        let huge_bs = BenchConfig {
            block_size_bytes: 1 << 40,
            ..BenchConfig::default()
        };
        let e = huge_bs
            .validate(16383 << 50, 512)
            .expect_err("1 TiB blocks");
        assert!(e.0.contains("bytes of I/O buffers"), "{e}");
        let verify_everything = BenchConfig {
            block_size_bytes: 512,
            verify: true,
            ..BenchConfig::default()
        };
        let e = verify_everything
            .validate(1 << 50, 512)
            .expect_err("2^41 blocks");
        assert!(e.0.contains("--verify remembers 4 bytes per block"), "{e}");
        // The same range read without --verify needs no tracking.
        let read = BenchConfig {
            verify: false,
            ..verify_everything
        };
        assert!(read.validate(1 << 50, 512).is_ok());
        // An end past the device is reported without overflowing.
        let past = BenchConfig {
            offset_bytes: 512,
            range_bytes: u64::MAX,
            ..BenchConfig::default()
        };
        let e = past.validate(1 << 30, 512).expect_err("past the end");
        assert!(e.0.contains("end at 18446744073709552127 bytes"), "{e}");
    }
}
