//! Mapping initiator errors to `BlockError`, keeping the NVMe status reachable.

use blockdev::BlockError;
use nvme_proto::status::sct;

use crate::error::{HostError, TransportError};

/// What range an I/O covered, for `OutOfRange` and `Media` errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoRange {
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub size_bytes: u64,
}

/// Maps `e` to the `BlockError` callers of `BlockDevice` act on. Errors without a
/// dedicated variant become `BlockError::Io` wrapping the `HostError`; get it back with
/// [`host_error`] (e.g. for the NVMe status of a reservation conflict).
pub fn to_block_error(e: HostError, r: IoRange) -> BlockError {
    if let Some(s) = e.nvme_status() {
        match (s.sct, s.sc) {
            (sct::GENERIC, 0x80) | (sct::GENERIC, 0x81) => {
                return BlockError::OutOfRange {
                    offset_bytes: r.offset_bytes,
                    len_bytes: r.len_bytes,
                    size_bytes: r.size_bytes,
                };
            }
            (sct::GENERIC, 0x20) => return BlockError::ReadOnly,
            (sct::MEDIA, 0x80) | (sct::MEDIA, 0x81) => {
                return BlockError::Media {
                    offset_bytes: r.offset_bytes,
                };
            }
            _ => {}
        }
    }
    let kind = match &e {
        HostError::Timeout { .. } | HostError::SubmitTimeout { .. } => {
            return BlockError::Timeout;
        }
        HostError::Transport {
            reason: TransportError::Shutdown,
            ..
        } => return BlockError::Closed,
        HostError::Transport { .. } => std::io::ErrorKind::ConnectionAborted,
        HostError::Status { status, .. } if (status.sct, status.sc) == (sct::GENERIC, 0x83) => {
            std::io::ErrorKind::PermissionDenied
        }
        HostError::Usage(_) => std::io::ErrorKind::InvalidInput,
        _ => std::io::ErrorKind::Other,
    };
    BlockError::Io(std::io::Error::new(kind, e))
}

/// The `HostError` inside a `BlockError` produced by a remote namespace, if any.
pub fn host_error(e: &BlockError) -> Option<&HostError> {
    match e {
        BlockError::Io(io) => io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<HostError>()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CommandKind;
    use nvme_proto::Status;

    fn st(status: Status) -> HostError {
        HostError::Status {
            command: CommandKind {
                admin: false,
                opcode: 1,
                fctype: 0,
            },
            status,
        }
    }

    #[test]
    fn mapping() {
        let r = IoRange {
            offset_bytes: 4096,
            len_bytes: 512,
            size_bytes: 8192,
        };
        assert!(matches!(
            to_block_error(st(Status::LBA_OUT_OF_RANGE), r),
            BlockError::OutOfRange {
                offset_bytes: 4096,
                ..
            }
        ));
        assert!(matches!(
            to_block_error(st(Status::UNRECOVERED_READ_ERROR), r),
            BlockError::Media { offset_bytes: 4096 }
        ));
        assert!(matches!(
            to_block_error(st(Status::NS_WRITE_PROTECTED), r),
            BlockError::ReadOnly
        ));
        let e = to_block_error(st(Status::RESERVATION_CONFLICT.dnr()), r);
        let BlockError::Io(io) = &e else {
            panic!("expected Io, got {e:?}");
        };
        assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied);
        let inner = host_error(&e).and_then(HostError::nvme_status);
        assert_eq!(inner, Some(Status::RESERVATION_CONFLICT.dnr()));
        assert!(e.to_string().contains("reservation conflict"), "{e}");
    }
}
