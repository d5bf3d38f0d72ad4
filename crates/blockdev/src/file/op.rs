//! The operations the file engines execute, and how one is executed synchronously.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use tokio::sync::oneshot;

use super::sys;
use crate::IoBuf;

/// What the backing file is; decides how zeroing and discard are done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Regular,
    Block,
}

pub(crate) enum Op {
    Read {
        offset_bytes: u64,
        buf: IoBuf,
    },
    Write {
        offset_bytes: u64,
        buf: IoBuf,
        fua: bool,
    },
    Flush,
    Zero {
        offset_bytes: u64,
        len_bytes: u64,
        discard: bool,
    },
}

/// The outcome of an [`Op`]: the buffer comes back on success; on failure the error and the
/// byte offset it happened at.
pub(crate) type Done = Result<Option<IoBuf>, (io::Error, u64)>;

pub(crate) struct Request {
    pub op: Op,
    pub reply: oneshot::Sender<Done>,
}

/// Runs one operation with blocking syscalls (the thread-pool engine and admin ops).
pub(crate) fn execute(file: &File, target: Target, op: Op) -> Done {
    match op {
        Op::Read {
            offset_bytes,
            mut buf,
        } => match file.read_exact_at(&mut buf, offset_bytes) {
            Ok(()) => Ok(Some(buf)),
            Err(e) => Err((e, offset_bytes)),
        },
        Op::Write {
            offset_bytes,
            buf,
            fua,
        } => match sys::write_all_at(file, &buf, offset_bytes, fua) {
            Ok(()) => Ok(Some(buf)),
            Err(e) => Err((e, offset_bytes)),
        },
        Op::Flush => file.sync_data().map(|()| None).map_err(|e| (e, 0)),
        Op::Zero {
            offset_bytes,
            len_bytes,
            discard,
        } => zero_range(file, target, offset_bytes, len_bytes, discard)
            .map(|()| None)
            .map_err(|e| (e, offset_bytes)),
    }
}

fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)
    )
}

/// Zeroes (`discard == false`) or deallocates a range. Files: ZERO_RANGE / PUNCH_HOLE,
/// falling back to punching and then to writing zeroes, so reads return zeroes afterwards
/// in every case. Block devices: BLKZEROOUT / BLKDISCARD; a device without discard
/// support ignores the discard (it is advisory).
fn zero_range(
    file: &File,
    target: Target,
    offset_bytes: u64,
    len_bytes: u64,
    discard: bool,
) -> io::Result<()> {
    const KEEP: libc::c_int = libc::FALLOC_FL_KEEP_SIZE;
    match (target, discard) {
        (Target::Block, false) => sys::blk_zeroout(file, offset_bytes, len_bytes),
        (Target::Block, true) => match sys::blk_discard(file, offset_bytes, len_bytes) {
            Err(e) if unsupported(&e) => Ok(()),
            other => other,
        },
        (Target::Regular, _) => {
            let first = if discard {
                libc::FALLOC_FL_PUNCH_HOLE
            } else {
                libc::FALLOC_FL_ZERO_RANGE
            };
            let mut result = sys::fallocate(file, first | KEEP, offset_bytes, len_bytes);
            if !discard && result.as_ref().is_err_and(unsupported) {
                result = sys::fallocate(
                    file,
                    libc::FALLOC_FL_PUNCH_HOLE | KEEP,
                    offset_bytes,
                    len_bytes,
                );
            }
            match result {
                Err(e) if unsupported(&e) => sys::write_zero_blocks(file, offset_bytes, len_bytes),
                other => other,
            }
        }
    }
}
