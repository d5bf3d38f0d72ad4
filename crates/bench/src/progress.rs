//! Live progress: an indicatif line on a terminal, a structured log line otherwise.

use std::io::IsTerminal;
use std::time::Duration;

/// Where progress goes.
pub enum Progress {
    Bar(indicatif::ProgressBar),
    Log { every: Duration },
    Silent,
}

impl Progress {
    /// A bar when stderr is a terminal, log lines every 5 s otherwise.
    pub fn auto(total_ms: u64) -> Progress {
        if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total_ms.max(1));
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            Progress::Bar(bar)
        } else {
            Progress::Log {
                every: Duration::from_secs(5),
            }
        }
    }

    /// `read_back_blocks`: blocks read back and checked after the load so far.
    pub(crate) fn update(&self, elapsed: Duration, ios: u64, bytes: u64, read_back_blocks: u64) {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let mut msg = format!(
            "{:.0} IOPS {:.1} MB/s",
            ios as f64 / secs,
            bytes as f64 / secs / 1e6
        );
        if read_back_blocks > 0 {
            msg += &format!(", verifying: {read_back_blocks} blocks read back");
        }
        match self {
            Progress::Bar(b) => {
                b.set_position(elapsed.as_millis() as u64);
                b.set_message(msg);
            }
            Progress::Log { .. } => {
                tracing::info!(
                    elapsed_s = secs,
                    ios,
                    bytes,
                    read_back_blocks,
                    "bench progress: {msg}"
                );
            }
            Progress::Silent => {}
        }
    }

    pub(crate) fn interval(&self) -> Duration {
        match self {
            Progress::Bar(_) => Duration::from_millis(200),
            Progress::Log { every } => *every,
            Progress::Silent => Duration::from_secs(3600),
        }
    }

    pub(crate) fn finish(&self) {
        if let Progress::Bar(b) = self {
            b.finish_and_clear();
        }
    }
}
