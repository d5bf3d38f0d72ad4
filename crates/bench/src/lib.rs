//! `ferrobay bench`: a fio-like load generator over any [`blockdev::BlockDevice`], with
//! block verification, HDR latency histograms, CPU accounting and a JSON report; and its
//! KV mode ([`kv`]) over a Key Value namespace, with the same report.

mod config;
mod cpu;
mod job;
pub mod kv;
mod progress;
mod report;
mod run;
mod slots;
mod stamp;
mod verify;

pub use config::{BenchConfig, ConfigError, MAX_BUFFER_BYTES, MAX_VERIFY_TRACK_BYTES, Pattern};
pub use cpu::CpuTime;
pub use progress::Progress;
pub use report::{KvReport, KvVerifyReport, LatencyReport, Report, VerifyReport};
pub use run::{BenchError, run};
pub use stamp::{Extent, StampCheck, check_sector, stamp_block};
pub use verify::check_read_block;
