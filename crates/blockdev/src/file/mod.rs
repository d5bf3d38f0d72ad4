//! Regular files and kernel block devices, with O_DIRECT and io_uring.

mod op;
mod open;
mod pool;
mod sys;
mod uring;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use op::Op;
use pool::Pool;
use uring::Uring;

use crate::{
    BlockDevice, BlockError, DeviceInfo, DeviceStats, IoBuf, IoFuture, StatsCounters, WriteFlags,
    check_range,
};

/// Which I/O engine a [`FileDevice`] uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IoEngine {
    /// io_uring; opening fails if the kernel refuses it.
    Uring,
    /// A bounded pool of threads doing pread/pwrite.
    ThreadPool,
    /// io_uring if it works here, else the thread pool (with a warning).
    #[default]
    Auto,
}

/// How to open a [`FileDevice`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    /// Regular files only: create a sparse file of this size if missing; grow a smaller
    /// existing file to it; an existing larger file is an error (never shrink).
    pub create_size_bytes: Option<u64>,
    pub read_only: bool,
    /// O_DIRECT (default). Falls back to buffered I/O with a warning if the filesystem
    /// refuses O_DIRECT (e.g. tmpfs); see [`FileDevice::is_direct`].
    pub direct: bool,
    pub engine: IoEngine,
    /// Maximum I/Os in flight in the engine; further submissions wait (bounded queue).
    pub queue_depth: u32,
    /// Override the logical block size (512 or 4096); default: the device's / filesystem's
    /// direct-I/O alignment.
    pub logical_block_bytes: Option<u32>,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions {
            create_size_bytes: None,
            read_only: false,
            direct: true,
            engine: IoEngine::Auto,
            queue_depth: 128,
            logical_block_bytes: None,
        }
    }
}

/// A regular file or kernel block device, read and written with O_DIRECT through io_uring
/// (or a thread pool). See [`OpenOptions`] for how files are created and sized.
///
/// Discard punches a hole in a regular file (reads return zeroes); on a block device it is
/// BLKDISCARD and the content afterwards is up to the device. `write_zeroes` always reads
/// back as zeroes. Kernel EIO is reported as [`BlockError::Media`] and counted.
pub struct FileDevice {
    info: DeviceInfo,
    path: PathBuf,
    direct: bool,
    read_only: bool,
    engine: Engine,
    stats: StatsCounters,
}

enum Engine {
    /// Reads, writes and flushes go through the ring; zeroing/discard (no io_uring op for
    /// block devices) through a small pool.
    Uring {
        ring: Uring,
        admin: Pool,
    },
    Pool(Pool),
}

/// Threads of the admin pool next to an io_uring engine.
const ADMIN_THREADS: usize = 2;
/// Upper bound on thread-pool threads (each blocks in one syscall at a time).
const MAX_POOL_THREADS: usize = 16;

impl FileDevice {
    /// Opens (and, for `create_size_bytes`, creates or grows) a file or block device.
    /// Blocking: call from a blocking context or accept a short stall.
    pub fn open(path: impl AsRef<Path>, opts: OpenOptions) -> Result<FileDevice, BlockError> {
        let path = path.as_ref();
        let opened = open::open(path, &opts)?;
        let file = Arc::new(opened.file);
        let depth = opts.queue_depth.clamp(1, 4096);
        let thread_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let pool = |threads: usize, queue: usize| {
            Pool::start(file.clone(), opened.target, threads, queue, &thread_name)
        };
        let pool_threads = (depth as usize).min(MAX_POOL_THREADS);
        let engine = match opts.engine {
            IoEngine::ThreadPool => Engine::Pool(pool(pool_threads, depth as usize)?),
            IoEngine::Uring => Engine::Uring {
                ring: Uring::start(file.clone(), depth, &thread_name)?,
                admin: pool(ADMIN_THREADS, depth as usize)?,
            },
            IoEngine::Auto => match Uring::start(file.clone(), depth, &thread_name) {
                Ok(ring) => Engine::Uring {
                    ring,
                    admin: pool(ADMIN_THREADS, depth as usize)?,
                },
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "io_uring unavailable; using a thread pool");
                    Engine::Pool(pool(pool_threads, depth as usize)?)
                }
            },
        };
        let uring = matches!(engine, Engine::Uring { .. });
        tracing::debug!(path = %path.display(), direct = opened.direct, uring, "opened");
        Ok(FileDevice {
            info: opened.info,
            path: path.to_path_buf(),
            direct: opened.direct,
            read_only: opts.read_only,
            engine,
            stats: StatsCounters::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// False when O_DIRECT was not asked for or the filesystem refused it (buffered I/O).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// The engine in use: [`IoEngine::Uring`] or [`IoEngine::ThreadPool`], never `Auto`.
    pub fn engine(&self) -> IoEngine {
        match self.engine {
            Engine::Uring { .. } => IoEngine::Uring,
            Engine::Pool(_) => IoEngine::ThreadPool,
        }
    }

    async fn run(&self, op: Op) -> Result<Option<IoBuf>, BlockError> {
        let done = match (&self.engine, &op) {
            (Engine::Uring { admin, .. }, Op::Zero { .. }) => admin.submit(op).await?,
            (Engine::Uring { ring, .. }, _) => ring.submit(op).await?,
            (Engine::Pool(pool), _) => pool.submit(op).await?,
        };
        done.map_err(|(e, at)| self.stats.note_error(BlockError::from_os(e, at)))
    }

    fn check_write(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), BlockError> {
        check_range(&self.info, offset_bytes, len_bytes)?;
        if self.read_only {
            return Err(BlockError::ReadOnly);
        }
        Ok(())
    }
}

impl BlockDevice for FileDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            let len_bytes = buf.len() as u64;
            check_range(&self.info, offset_bytes, len_bytes)?;
            if len_bytes == 0 {
                return Ok(buf);
            }
            let buf = self
                .run(Op::Read { offset_bytes, buf })
                .await?
                .ok_or(BlockError::Closed)?;
            self.stats.record_read(len_bytes);
            Ok(buf)
        })
    }

    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            let len_bytes = buf.len() as u64;
            self.check_write(offset_bytes, len_bytes)?;
            if len_bytes == 0 {
                return Ok(buf);
            }
            let op = Op::Write {
                offset_bytes,
                buf,
                fua: flags.fua,
            };
            let buf = self.run(op).await?.ok_or(BlockError::Closed)?;
            self.stats.record_write(len_bytes);
            Ok(buf)
        })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            if !self.read_only {
                self.run(Op::Flush).await?;
            }
            self.stats.record_flush();
            Ok(())
        })
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check_write(offset_bytes, len_bytes)?;
            if len_bytes > 0 {
                self.run(Op::Zero {
                    offset_bytes,
                    len_bytes,
                    discard: false,
                })
                .await?;
            }
            Ok(())
        })
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check_write(offset_bytes, len_bytes)?;
            if len_bytes > 0 {
                self.run(Op::Zero {
                    offset_bytes,
                    len_bytes,
                    discard: true,
                })
                .await?;
            }
            Ok(())
        })
    }

    fn stats(&self) -> DeviceStats {
        self.stats.snapshot()
    }
}
