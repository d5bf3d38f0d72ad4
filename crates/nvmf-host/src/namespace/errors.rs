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

/// A failed `BlockDevice` operation of a device of `size_bytes`: the mapped error, counted
/// in the device's error statistics (single- and multipath devices alike).
pub(crate) fn device_error(
    stats: &blockdev::StatsCounters,
    size_bytes: u64,
    e: HostError,
    offset_bytes: u64,
    len_bytes: u64,
) -> BlockError {
    stats.note_error(to_block_error(
        e,
        IoRange {
            offset_bytes,
            len_bytes,
            size_bytes,
        },
    ))
}

/// Maps `e` to the `BlockError` callers of `BlockDevice` act on:
/// - Reservation Conflict, and Command Aborted due to Preempt and Abort (another host
///   took the reservation over), become `BlockError::ReservationConflict`: this host is
///   fenced (neither status is retried, see [`HostError::is_reservation_conflict`]);
/// - ANA Inaccessible and ANA Persistent Loss (the namespace is not served through this
///   controller now) become `BlockError::Unavailable` with the message;
/// - errors without a dedicated variant become `BlockError::Io` wrapping the
///   `HostError`; get it back with [`host_error`].
pub fn to_block_error(e: HostError, r: IoRange) -> BlockError {
    if e.is_reservation_conflict() {
        return BlockError::ReservationConflict;
    }
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
            (sct::PATH, 0x01) | (sct::PATH, 0x02) => {
                return BlockError::Unavailable(e.to_string());
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
        for conflict in [
            Status::RESERVATION_CONFLICT.dnr(),
            Status::RESERVATION_CONFLICT,
            Status::ABORTED_PREEMPT_ABORT.dnr(),
        ] {
            let e = to_block_error(st(conflict), r);
            assert!(matches!(e, BlockError::ReservationConflict), "{e:?}");
            assert!(!e.is_media());
        }
        // A Connect refused with the same numbers (SCT 1 there) is not a conflict.
        let refused = HostError::ConnectRejected {
            qid: 0,
            status: Status::CONNECT_RESTART_DISCOVERY,
            detail: String::new(),
        };
        assert!(!matches!(
            to_block_error(refused, r),
            BlockError::ReservationConflict
        ));
        for path in [Status::ANA_INACCESSIBLE, Status::ANA_PERSISTENT_LOSS] {
            match to_block_error(st(path), r) {
                BlockError::Unavailable(msg) => assert!(msg.contains("SCT 3"), "{msg}"),
                other => panic!("expected Unavailable, got {other:?}"),
            }
        }
        // ANA transition stays an I/O error with the status reachable (retry later).
        let e = to_block_error(st(Status::ANA_TRANSITION), r);
        let inner = host_error(&e).and_then(HostError::nvme_status);
        assert_eq!(inner, Some(Status::ANA_TRANSITION));
        let e = to_block_error(st(Status::INTERNAL_ERROR), r);
        let inner = host_error(&e).and_then(HostError::nvme_status);
        assert_eq!(inner, Some(Status::INTERNAL_ERROR));
    }
}
