//! Opening a file or block device and working out its geometry.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use super::OpenOptions;
use super::op::Target;
use super::sys;
use crate::{BlockError, DEFAULT_MAX_IO_BYTES, DeviceInfo, DeviceKind, SECTOR_SIZE_BYTES};

pub(crate) struct Opened {
    pub file: File,
    pub direct: bool,
    pub target: Target,
    pub info: DeviceInfo,
}

fn invalid(path: &Path, msg: impl std::fmt::Display) -> BlockError {
    BlockError::Io(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: {msg}", path.display()),
    ))
}

fn with_path(path: &Path, e: io::Error) -> BlockError {
    BlockError::Io(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

pub(crate) fn open(path: &Path, opts: &OpenOptions) -> Result<Opened, BlockError> {
    if let Some(size) = opts.create_size_bytes {
        if size == 0 || !size.is_multiple_of(SECTOR_SIZE_BYTES) {
            return Err(invalid(
                path,
                format!("size {size} is not a non-zero multiple of 512"),
            ));
        }
        // Linux file sizes are signed 64-bit (off_t).
        if i64::try_from(size).is_err() {
            return Err(invalid(
                path,
                format!(
                    "size {size} bytes is more than a file can hold ({} bytes)",
                    i64::MAX
                ),
            ));
        }
        create_sparse_if_missing(path, size, opts.read_only)?;
    }
    let (file, direct) = open_flags(path, opts)?;
    let meta = file.metadata().map_err(|e| with_path(path, e))?;
    let target = if meta.file_type().is_block_device() {
        Target::Block
    } else if meta.is_file() {
        Target::Regular
    } else {
        return Err(invalid(path, "not a regular file or block device"));
    };

    let raw_size_bytes = match target {
        Target::Block => {
            let size = sys::blk_size_bytes(&file).map_err(|e| with_path(path, e))?;
            if opts.create_size_bytes.is_some_and(|want| want > size) {
                return Err(invalid(path, format!("block device has only {size} bytes")));
            }
            size
        }
        Target::Regular => grow_or_check(path, &file, meta.len(), opts)?,
    };

    let required_align = match target {
        Target::Block => sys::blk_logical_block_bytes(&file).map_err(|e| with_path(path, e))?,
        // Unknown direct-I/O alignment: 4096 works on every filesystem we know of.
        Target::Regular if direct => sys::dio_offset_align_bytes(&file).unwrap_or(4096),
        Target::Regular => SECTOR_SIZE_BYTES as u32,
    }
    .max(SECTOR_SIZE_BYTES as u32);
    let logical_block_bytes = match opts.logical_block_bytes {
        None => required_align,
        Some(lb) if lb.is_power_of_two() && (512..=4096).contains(&lb) && lb >= required_align => {
            lb
        }
        Some(lb) => {
            return Err(invalid(
                path,
                format!("logical block {lb} not a power of two in {required_align}..=4096"),
            ));
        }
    };
    if !logical_block_bytes.is_power_of_two() || logical_block_bytes > crate::IO_ALIGN_BYTES as u32
    {
        return Err(invalid(
            path,
            format!("unsupported logical block size {logical_block_bytes}"),
        ));
    }
    let size_bytes = raw_size_bytes - raw_size_bytes % u64::from(logical_block_bytes);
    if size_bytes == 0 {
        return Err(invalid(path, "device is empty"));
    }

    let info = match target {
        Target::Block => {
            let devmeta: Metadata = std::fs::metadata(path).map_err(|e| with_path(path, e))?;
            let sysfs = |attr: &str| sys::blk_sysfs(&devmeta, attr);
            DeviceInfo {
                name: path.display().to_string(),
                kind: DeviceKind::BlockDevice,
                size_bytes,
                logical_block_bytes,
                optimal_io_bytes: sys::blk_optimal_io_bytes(&file).unwrap_or(0),
                max_io_bytes: DEFAULT_MAX_IO_BYTES,
                volatile_write_cache: sysfs("queue/write_cache")
                    .is_none_or(|s| s != "write through"),
                supports_discard: sysfs("queue/discard_max_bytes")
                    .and_then(|s| s.parse::<u64>().ok())
                    .is_some_and(|n| n > 0),
                supports_write_zeroes: true,
                rotational: sysfs("queue/rotational").is_some_and(|s| s == "1"),
            }
        }
        Target::Regular => DeviceInfo {
            name: path.display().to_string(),
            kind: DeviceKind::File,
            size_bytes,
            logical_block_bytes,
            optimal_io_bytes: 0,
            max_io_bytes: DEFAULT_MAX_IO_BYTES,
            // Page cache (buffered) or the disk's cache (direct): flush is needed either way.
            volatile_write_cache: true,
            supports_discard: true,
            supports_write_zeroes: true,
            rotational: false,
        },
    };
    Ok(Opened {
        file,
        direct,
        target,
        info,
    })
}

fn create_sparse_if_missing(
    path: &Path,
    size_bytes: u64,
    read_only: bool,
) -> Result<(), BlockError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(with_path(path, e)),
    }
    if read_only {
        return Err(invalid(
            path,
            "does not exist and read_only forbids creating it",
        ));
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(f) => f.set_len(size_bytes).map_err(|e| {
            // Do not leave an empty image behind (EFBIG: more than the filesystem allows).
            let _ = std::fs::remove_file(path);
            with_path(path, e)
        }),
        // Someone created it meanwhile: treat it as existing.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(with_path(path, e)),
    }
}

/// Existing regular file vs requested size: grow (sparsely) if smaller, refuse if larger.
fn grow_or_check(
    path: &Path,
    file: &File,
    len_bytes: u64,
    opts: &OpenOptions,
) -> Result<u64, BlockError> {
    match opts.create_size_bytes {
        Some(want) if want > len_bytes => {
            if opts.read_only {
                return Err(invalid(
                    path,
                    format!("is {len_bytes} bytes, {want} requested, and read_only"),
                ));
            }
            tracing::info!(path = %path.display(), from = len_bytes, to = want, "growing image file");
            file.set_len(want).map_err(|e| with_path(path, e))?;
            Ok(want)
        }
        Some(want) if want < len_bytes => Err(invalid(
            path,
            format!("is {len_bytes} bytes, larger than the requested {want}; refusing to shrink"),
        )),
        _ => Ok(len_bytes),
    }
}

/// Opens with O_DIRECT if asked; a filesystem that refuses it (EINVAL) gets buffered I/O
/// and a warning.
fn open_flags(path: &Path, opts: &OpenOptions) -> Result<(File, bool), BlockError> {
    let open = |direct: bool| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(!opts.read_only)
            .custom_flags(if direct { libc::O_DIRECT } else { 0 })
            .open(path)
    };
    if !opts.direct {
        return Ok((open(false).map_err(|e| with_path(path, e))?, false));
    }
    match open(true) {
        Ok(file) => Ok((file, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            tracing::warn!(path = %path.display(), "filesystem refuses O_DIRECT; using buffered I/O");
            Ok((open(false).map_err(|e| with_path(path, e))?, false))
        }
        Err(e) => Err(with_path(path, e)),
    }
}
