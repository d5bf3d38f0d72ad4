//! Member devices for one case: O_DIRECT files (io_uring) in a directory on disk, or RAM
//! disks; written once in full so every later I/O overwrites allocated blocks.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bench::{BenchConfig, Pattern, Progress};
use blockdev::{BlockDevice, FileDevice, IoEngine, OpenOptions, RamDevice};

use crate::Error;

/// Where members live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Media {
    File,
    Ram,
}

impl Media {
    pub fn name(self) -> &'static str {
        match self {
            Media::File => "file",
            Media::Ram => "ram",
        }
    }

    pub fn parse(s: &str) -> Option<Media> {
        match s.trim() {
            "file" => Some(Media::File),
            "ram" => Some(Media::Ram),
            _ => None,
        }
    }
}

/// The devices of one case and the files behind them (removed on drop).
pub struct Members {
    pub devs: Vec<Arc<dyn BlockDevice>>,
    /// File members: O_DIRECT honoured by the filesystem on every file.
    pub direct: bool,
    /// File members: io_uring on every file (else the thread-pool fallback).
    pub uring: bool,
    paths: Vec<PathBuf>,
}

impl Drop for Members {
    fn drop(&mut self) {
        self.devs.clear();
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Opens `count` members of `size_bytes` named `<prefix>-<i>` and fills each once.
pub async fn make(
    media: Media,
    dir: &Path,
    prefix: &str,
    count: usize,
    size_bytes: u64,
) -> Result<Members, Error> {
    let mut m = Members {
        devs: Vec::with_capacity(count),
        direct: true,
        uring: true,
        paths: Vec::new(),
    };
    for i in 0..count {
        let name = format!("{prefix}-{i}");
        let dev: Arc<dyn BlockDevice> = match media {
            Media::Ram => Arc::new(RamDevice::new(name, size_bytes)),
            Media::File => {
                let path = dir.join(format!("{name}.img"));
                // A previous interrupted run may have left a larger file behind.
                let _ = std::fs::remove_file(&path);
                m.paths.push(path.clone());
                let opts = OpenOptions {
                    create_size_bytes: Some(size_bytes),
                    engine: IoEngine::Auto,
                    ..OpenOptions::default()
                };
                let f = FileDevice::open(&path, opts)
                    .map_err(|e| format!("open {}: {e}", path.display()))?;
                m.direct &= f.is_direct();
                m.uring &= f.engine() == IoEngine::Uring;
                Arc::new(f)
            }
        };
        m.devs.push(dev);
    }
    // Fill (zeroes, so a volume created with `assume_clean` has consistent parity).
    let fill = BenchConfig {
        pattern: Pattern::Write,
        block_size_bytes: 1 << 20,
        iodepth: 4,
        runtime_ms: 0,
        ..BenchConfig::default()
    };
    let runs = m
        .devs
        .iter()
        .map(|d| bench::run(d.clone(), &fill, "fill", &Progress::Silent));
    for r in futures::future::join_all(runs).await {
        let r = r?;
        if r.errors > 0 {
            return Err(format!("filling members: {:?}", r.first_error).into());
        }
    }
    for d in &m.devs {
        d.flush().await?;
    }
    Ok(m)
}
