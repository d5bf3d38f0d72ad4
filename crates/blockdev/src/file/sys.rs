//! Thin, checked wrappers around the Linux calls the file backend needs.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use crate::IoBuf;

// <linux/fs.h> ioctls that the libc crate does not define (x86_64/aarch64 encodings).
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272; // _IOR(0x12, 114, size_t)
const BLKDISCARD: libc::c_ulong = 0x1277; // _IO(0x12, 119)
const BLKZEROOUT: libc::c_ulong = 0x127f; // _IO(0x12, 127)

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Size in bytes of a block device.
pub(crate) fn blk_size_bytes(file: &File) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which is valid and aligned.
    #[allow(unsafe_code)]
    cvt(unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) })?;
    Ok(size)
}

/// An `int`-valued block ioctl (BLKSSZGET, BLKIOOPT, ...).
fn blk_int(file: &File, request: libc::Ioctl) -> io::Result<u32> {
    let mut value: libc::c_int = 0;
    // SAFETY: these ioctls write one int through the pointer, which is valid and aligned.
    #[allow(unsafe_code)]
    cvt(unsafe { libc::ioctl(file.as_raw_fd(), request, &mut value as *mut libc::c_int) })?;
    u32::try_from(value).map_err(|_| io::Error::other("negative block ioctl result"))
}

pub(crate) fn blk_logical_block_bytes(file: &File) -> io::Result<u32> {
    blk_int(file, libc::BLKSSZGET)
}

pub(crate) fn blk_optimal_io_bytes(file: &File) -> io::Result<u32> {
    blk_int(file, libc::BLKIOOPT)
}

fn blk_range(
    file: &File,
    request: libc::c_ulong,
    offset_bytes: u64,
    len_bytes: u64,
) -> io::Result<()> {
    let range: [u64; 2] = [offset_bytes, len_bytes];
    // SAFETY: BLKDISCARD/BLKZEROOUT read a u64[2] {start, len} through the pointer.
    #[allow(unsafe_code)]
    cvt(unsafe { libc::ioctl(file.as_raw_fd(), request as _, range.as_ptr()) })?;
    Ok(())
}

pub(crate) fn blk_discard(file: &File, offset_bytes: u64, len_bytes: u64) -> io::Result<()> {
    blk_range(file, BLKDISCARD, offset_bytes, len_bytes)
}

pub(crate) fn blk_zeroout(file: &File, offset_bytes: u64, len_bytes: u64) -> io::Result<()> {
    blk_range(file, BLKZEROOUT, offset_bytes, len_bytes)
}

pub(crate) fn fallocate(
    file: &File,
    mode: libc::c_int,
    offset_bytes: u64,
    len_bytes: u64,
) -> io::Result<()> {
    let offset = libc::off_t::try_from(offset_bytes).map_err(io::Error::other)?;
    let len = libc::off_t::try_from(len_bytes).map_err(io::Error::other)?;
    loop {
        // SAFETY: plain syscall on an fd we own; no pointers.
        #[allow(unsafe_code)]
        let ret = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset, len) };
        match cvt(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other.map(|_| ()),
        }
    }
}

/// Direct-I/O offset alignment the filesystem asks for (statx STATX_DIOALIGN, Linux 6.1+);
/// None if unknown or if the file does not support direct I/O.
pub(crate) fn dio_offset_align_bytes(file: &File) -> Option<u32> {
    // SAFETY: statx is plain old data; all-zero is a valid value.
    #[allow(unsafe_code)]
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: the empty path with AT_EMPTY_PATH refers to the fd itself; stx is a valid
    // out-pointer for one statx.
    #[allow(unsafe_code)]
    let ret = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if ret != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return None;
    }
    Some(stx.stx_dio_offset_align)
}

/// pwrite of the whole buffer at `offset_bytes`, with RWF_DSYNC if `dsync` (FUA).
pub(crate) fn write_all_at(
    file: &File,
    buf: &[u8],
    offset_bytes: u64,
    dsync: bool,
) -> io::Result<()> {
    if !dsync {
        return file.write_all_at(buf, offset_bytes);
    }
    let mut done = 0usize;
    while done < buf.len() {
        let chunk = &buf[done..];
        let iov = libc::iovec {
            iov_base: chunk.as_ptr() as *mut libc::c_void,
            iov_len: chunk.len(),
        };
        let offset = libc::off_t::try_from(offset_bytes + done as u64).map_err(io::Error::other)?;
        // SAFETY: iov points to `chunk`, valid for reads for its length for the whole call.
        #[allow(unsafe_code)]
        let ret = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_DSYNC) };
        match ret {
            n if n < 0 => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => done += n as usize,
        }
    }
    Ok(())
}

/// Writes zeroes over a range with ordinary writes (fallback when fallocate is refused).
/// The buffer is an aligned IoBuf and the range is block-aligned, so this works with O_DIRECT.
pub(crate) fn write_zero_blocks(file: &File, offset_bytes: u64, len_bytes: u64) -> io::Result<()> {
    const ZERO_CHUNK_BYTES: u64 = 1 << 20;
    let zeroes = IoBuf::new_zeroed(len_bytes.min(ZERO_CHUNK_BYTES) as usize);
    let mut pos = offset_bytes;
    let end = offset_bytes + len_bytes;
    while pos < end {
        let n = (end - pos).min(ZERO_CHUNK_BYTES) as usize;
        file.write_all_at(&zeroes[..n], pos)?;
        pos += n as u64;
    }
    Ok(())
}

/// A non-blocking, close-on-exec eventfd, used to wake the io_uring thread.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; on success we own the returned fd.
    #[allow(unsafe_code)]
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: fd is a fresh descriptor nobody else owns.
    #[allow(unsafe_code)]
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn eventfd_signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64. A full counter (EAGAIN) already means
    // "wake up", so the result is ignored.
    #[allow(unsafe_code)]
    unsafe {
        libc::write(fd.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8);
    }
}

/// Reads a small sysfs attribute of the block device `file` (or of its parent disk for a
/// partition), e.g. "queue/rotational".
pub(crate) fn blk_sysfs(meta: &std::fs::Metadata, attr: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let base = format!("/sys/dev/block/{major}:{minor}");
    [format!("{base}/{attr}"), format!("{base}/../{attr}")]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
}
