//! Regular files and kernel block devices, with O_DIRECT and io_uring.

use std::path::{Path, PathBuf};

use crate::{BlockDevice, BlockError, DeviceInfo, DeviceStats, IoBuf, IoFuture, WriteFlags};

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

/// A regular file or kernel block device.
pub struct FileDevice {
    info: DeviceInfo,
    path: PathBuf,
}

impl FileDevice {
    pub fn open(path: impl AsRef<Path>, opts: OpenOptions) -> Result<FileDevice, BlockError> {
        let _ = (path, opts);
        Err(BlockError::Io(std::io::Error::other("FileDevice not implemented yet")))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl BlockDevice for FileDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn read(&self, _offset_bytes: u64, _buf: IoBuf) -> IoFuture<'_, IoBuf> {
        Box::pin(async { Err(BlockError::Closed) })
    }
    fn write(&self, _offset_bytes: u64, _buf: IoBuf, _flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        Box::pin(async { Err(BlockError::Closed) })
    }
    fn flush(&self) -> IoFuture<'_, ()> {
        Box::pin(async { Err(BlockError::Closed) })
    }
    fn write_zeroes(&self, _offset_bytes: u64, _len_bytes: u64) -> IoFuture<'_, ()> {
        Box::pin(async { Err(BlockError::Closed) })
    }
    fn discard(&self, _offset_bytes: u64, _len_bytes: u64) -> IoFuture<'_, ()> {
        Box::pin(async { Err(BlockError::Closed) })
    }
    fn stats(&self) -> DeviceStats {
        DeviceStats::default()
    }
}
