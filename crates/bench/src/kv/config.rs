//! What a KV bench run does.

use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, check_queues};
use crate::kv::stamp::HEADER_BYTES;

/// Which commands a KV run sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvPattern {
    /// Stores (upserts), the job's keys in order.
    Store,
    /// Retrieves of the job's keys, each once per pass in a scrambled order.
    Retrieve,
    /// Random keys; `retrieve_percent` of the commands are Retrieves, the rest Stores.
    Mixed { retrieve_percent: u8 },
}

impl KvPattern {
    /// `store`, `retrieve` or `mixed` (with `mix`% Retrieves).
    pub fn parse(s: &str, mix_retrieve_percent: u8) -> Result<KvPattern, ConfigError> {
        Ok(match s {
            "store" => KvPattern::Store,
            "retrieve" => KvPattern::Retrieve,
            "mixed" => KvPattern::Mixed {
                retrieve_percent: mix_retrieve_percent.min(100),
            },
            other => {
                return Err(ConfigError(format!(
                    "unknown --rw {other:?} with --kv (expected store, retrieve or mixed)"
                )));
            }
        })
    }
    pub fn name(&self) -> &'static str {
        match self {
            KvPattern::Store => "store",
            KvPattern::Retrieve => "retrieve",
            KvPattern::Mixed { .. } => "mixed",
        }
    }
    pub fn does_stores(&self) -> bool {
        !matches!(self, KvPattern::Retrieve)
    }
}

/// Everything a KV run needs to know.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KvBenchConfig {
    pub pattern: KvPattern,
    pub value_size_bytes: u64,
    /// Keys `key_base..key_base + keys` (each job its own contiguous share).
    pub keys: u64,
    /// Index of the first key (lets runs on one namespace use disjoint keys).
    #[serde(default)]
    pub key_base: u64,
    /// Commands in flight per job.
    pub iodepth: u32,
    pub jobs: u32,
    /// Stop after this long (0 = no time limit: one pass, one command per key).
    pub runtime_ms: u64,
    /// Stamp stored values, check every retrieved one, and retrieve every key stored
    /// before reporting.
    pub verify: bool,
    pub seed: u64,
    /// Generation stamped into stored values.
    pub generation: u32,
}

impl Default for KvBenchConfig {
    fn default() -> Self {
        KvBenchConfig {
            pattern: KvPattern::Store,
            value_size_bytes: 4096,
            keys: 10_000,
            key_base: 0,
            iodepth: 32,
            jobs: 1,
            runtime_ms: 0,
            verify: false,
            seed: 0x00f3_2202_6b1e_55ed,
            generation: 1,
        }
    }
}

/// Most memory the value buffers of a run (`--value-size` x `--iodepth` x `--jobs`) may take.
pub const MAX_KV_BUFFER_BYTES: u64 = 4 << 30;
/// Most keys a run may use (`--verify` remembers 4 bytes per key).
pub const MAX_KEYS: u64 = 1 << 30;

impl KvBenchConfig {
    /// Checks the configuration against the namespace's largest value.
    pub fn validate(&self, max_value_bytes: u64) -> Result<(), ConfigError> {
        if self.value_size_bytes == 0 || self.value_size_bytes > max_value_bytes {
            return Err(ConfigError(format!(
                "--value-size {} is outside 1..={max_value_bytes} bytes (the namespace's largest value)",
                self.value_size_bytes
            )));
        }
        if self.verify && self.value_size_bytes < HEADER_BYTES as u64 {
            return Err(ConfigError(format!(
                "--verify needs values of at least {HEADER_BYTES} bytes (the stamp's header)"
            )));
        }
        check_queues(self.iodepth, self.jobs)?;
        if self.key_base.checked_add(self.keys).is_none() {
            return Err(ConfigError(format!(
                "--keys {} from key {} overflows the key index",
                self.keys, self.key_base
            )));
        }
        if self.keys < u64::from(self.jobs) || self.keys > MAX_KEYS {
            return Err(ConfigError(format!(
                "--keys {} out of range {}..={MAX_KEYS} (at least one per job)",
                self.keys, self.jobs
            )));
        }
        let buffers =
            u128::from(self.value_size_bytes) * u128::from(self.iodepth) * u128::from(self.jobs);
        if buffers > u128::from(MAX_KV_BUFFER_BYTES) {
            return Err(ConfigError(format!(
                "--value-size {} x --iodepth {} x --jobs {} needs {buffers} bytes of buffers, \
                 more than the {MAX_KV_BUFFER_BYTES}-byte limit",
                self.value_size_bytes, self.iodepth, self.jobs
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_configurations_name_the_flag() {
        let ok = KvBenchConfig::default();
        assert!(ok.validate(1 << 20).is_ok());
        let cases: [(KvBenchConfig, &str); 6] = [
            (
                KvBenchConfig {
                    value_size_bytes: 0,
                    ..ok.clone()
                },
                "--value-size 0",
            ),
            (
                KvBenchConfig {
                    value_size_bytes: 2 << 20,
                    ..ok.clone()
                },
                "largest value",
            ),
            (
                KvBenchConfig {
                    value_size_bytes: 16,
                    verify: true,
                    ..ok.clone()
                },
                "at least 32",
            ),
            (
                KvBenchConfig {
                    iodepth: 0,
                    ..ok.clone()
                },
                "--iodepth",
            ),
            (
                KvBenchConfig {
                    keys: 0,
                    ..ok.clone()
                },
                "--keys 0",
            ),
            (
                KvBenchConfig {
                    value_size_bytes: 1 << 20,
                    iodepth: 4096,
                    jobs: 2,
                    ..ok.clone()
                },
                "bytes of buffers",
            ),
        ];
        for (c, want) in cases {
            let e = c.validate(1 << 20).expect_err(want);
            assert!(e.0.contains(want) && !e.0.contains('\n'), "{e}");
        }
        assert_eq!(
            KvPattern::parse("mixed", 120).unwrap(),
            KvPattern::Mixed {
                retrieve_percent: 100
            }
        );
        assert!(
            KvPattern::parse("randread", 0)
                .unwrap_err()
                .0
                .contains("store, retrieve or mixed")
        );
    }
}
