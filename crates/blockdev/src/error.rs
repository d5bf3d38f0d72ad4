//! The error type every backend returns.

/// Why a block I/O failed.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    #[error(
        "I/O out of range: offset {offset_bytes} + length {len_bytes} > device size {size_bytes} bytes"
    )]
    OutOfRange {
        offset_bytes: u64,
        len_bytes: u64,
        size_bytes: u64,
    },
    #[error(
        "misaligned I/O: offset {offset_bytes} / length {len_bytes} not multiples of {align_bytes} bytes"
    )]
    Misaligned {
        offset_bytes: u64,
        len_bytes: u64,
        align_bytes: u64,
    },
    /// A real I/O error from the backing device (or an open/setup failure). The message
    /// carries the OS error; it is not also handed out as `source()`, so a printer of
    /// the error chain does not repeat it.
    #[error("I/O error: {0}")]
    Io(std::io::Error),
    /// Unrecovered read/write error at this offset (maps to an NVMe media error).
    #[error("media error at offset {offset_bytes}")]
    Media { offset_bytes: u64 },
    #[error("I/O timed out")]
    Timeout,
    #[error("device is read-only")]
    ReadOnly,
    #[error("device is closed")]
    Closed,
    /// The device (or a member behind it) says another host holds its reservation: this
    /// host was fenced off it. Final: never retried on another path or after a reconnect.
    #[error("reservation conflict: another host holds the reservation (fenced)")]
    ReservationConflict,
    /// The device is not served from here now (fenced, handed over, not owned); another
    /// path or node may serve it. Says why.
    #[error("unavailable here: {0}")]
    Unavailable(String),
}

impl From<std::io::Error> for BlockError {
    fn from(e: std::io::Error) -> Self {
        BlockError::Io(e)
    }
}

impl BlockError {
    /// Maps an OS error at `offset_bytes`: EIO (and EILSEQ/EBADMSG, used by some drivers for
    /// unreadable sectors) is a media error, anything else stays an I/O error.
    pub fn from_os(err: std::io::Error, offset_bytes: u64) -> BlockError {
        match err.raw_os_error() {
            Some(libc::EIO) | Some(libc::EILSEQ) | Some(libc::EBADMSG) => {
                BlockError::Media { offset_bytes }
            }
            Some(libc::EROFS) => BlockError::ReadOnly,
            _ => BlockError::Io(err),
        }
    }

    /// True for errors that a SMART-style counter should count as media errors.
    pub fn is_media(&self) -> bool {
        matches!(self, BlockError::Media { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_error_mapping() {
        let eio = std::io::Error::from_raw_os_error(libc::EIO);
        assert!(matches!(
            BlockError::from_os(eio, 4096),
            BlockError::Media { offset_bytes: 4096 }
        ));
        let erofs = std::io::Error::from_raw_os_error(libc::EROFS);
        assert!(matches!(
            BlockError::from_os(erofs, 0),
            BlockError::ReadOnly
        ));
        let enospc = std::io::Error::from_raw_os_error(libc::ENOSPC);
        match BlockError::from_os(enospc, 0) {
            BlockError::Io(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOSPC)),
            other => panic!("unexpected {other}"),
        }
        assert!(BlockError::Media { offset_bytes: 0 }.is_media());
        assert!(!BlockError::Timeout.is_media());
        assert!(!BlockError::ReservationConflict.is_media());
        assert!(!BlockError::Unavailable("handed over".into()).is_media());
        assert!(
            BlockError::Unavailable("volume fenced: x".into())
                .to_string()
                .contains("volume fenced: x")
        );
    }
}
