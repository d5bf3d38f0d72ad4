//! Command execution: fabrics and admin commands, I/O commands by the namespace's command
//! set (`io` looks the namespace up, `nvm` is the NVM command set, `kv` the Key Value
//! command set).
//!
//! Commands run on a [`context::QueueContext`] (what a command sees of its queue). A command
//! either completes at once ([`Dispatch::Now`]) or becomes a future polled by the
//! connection's task ([`Dispatch::Later`]); both yield an [`Outcome`] that the connection
//! turns into C2HData and CapsuleResp PDUs.

pub(crate) mod admin;
pub(crate) mod context;
pub(crate) mod dsm;
pub(crate) mod fabrics;
pub(crate) mod features;
pub(crate) mod identify;
pub(crate) mod io;
pub(crate) mod kv;
pub(crate) mod logpage;
pub(crate) mod nvm;
pub(crate) mod resv;

use std::future::Future;
use std::pin::Pin;

use blockdev::{BlockError, IoBuf};
use nvme_proto::Status;

use crate::stats::OpKind;

pub(crate) type CmdFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// Accounting of a finished I/O for the connection's counters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Acct {
    pub kind: OpKind,
    pub bytes: u64,
}

/// The result of a command.
pub(crate) struct Outcome {
    pub status: Status,
    pub dw0: u32,
    pub dw1: u32,
    /// Controller-to-host data (sent only on success), padded with zeros or cut to the
    /// host's transfer length.
    pub data: Option<IoBuf>,
    /// A buffer to give back to the pool (write data).
    pub spare: Option<IoBuf>,
    pub acct: Option<Acct>,
    /// For the error log: namespace and LBA of a failed command.
    pub err_nsid: u32,
    pub err_lba: u64,
    /// Parameter error location for the error log (byte offset in the SQE), 0xFFFF if none.
    pub err_loc: u16,
    /// Close the connection once this completion is sent (Disconnect).
    pub close_after: bool,
}

impl Outcome {
    pub fn status(status: Status) -> Self {
        Outcome {
            status,
            dw0: 0,
            dw1: 0,
            data: None,
            spare: None,
            acct: None,
            err_nsid: 0,
            err_lba: 0,
            err_loc: 0xFFFF,
            close_after: false,
        }
    }
    pub fn ok() -> Self {
        Outcome::status(Status::SUCCESS)
    }
    pub fn dw0(dw0: u32) -> Self {
        Outcome {
            dw0,
            ..Outcome::ok()
        }
    }
    pub fn data(buf: IoBuf) -> Self {
        Outcome {
            data: Some(buf),
            ..Outcome::ok()
        }
    }
    pub fn with_loc(mut self, loc: u16) -> Self {
        self.err_loc = loc;
        self
    }
}

pub(crate) enum Dispatch {
    Now(Outcome),
    Later(CmdFuture),
    /// Abort command `cid` of this same queue if it has not started (Abort with SQID 0):
    /// only the connection holds its commands. Completes with DW0 bit 0 clear if it was
    /// aborted.
    AbortOnThisQueue {
        cid: u16,
    },
    /// Over a QoS limit: wait in the connection's throttle queue until `start_ns` (QoS
    /// clock), then run again without being charged again. Nothing was done yet.
    Throttled {
        data: Option<IoBuf>,
        start_ns: u64,
        gate: std::sync::Arc<crate::qos::gate::QosGate>,
    },
}

impl From<Outcome> for Dispatch {
    fn from(o: Outcome) -> Self {
        Dispatch::Now(o)
    }
}

impl From<Status> for Dispatch {
    fn from(s: Status) -> Self {
        Dispatch::Now(Outcome::status(s))
    }
}

/// Maps a backend error to the NVMe status of a read (`is_read`) or write-like command.
///
/// `Unavailable` (the namespace is not served from this node now: fenced, handed over,
/// not owned) is the path error ANA Inaccessible, without DNR: a multipath host (Linux
/// native multipath, nvmf-host's `MultipathNamespace`) sends the I/O down another path
/// instead of failing it. A backend's `ReservationConflict` (this node was fenced off
/// a device behind the namespace) is passed on as Reservation Conflict.
pub(crate) fn block_error_status(e: &BlockError, is_read: bool) -> Status {
    match e {
        BlockError::Media { .. } if is_read => Status::UNRECOVERED_READ_ERROR,
        BlockError::Media { .. } => Status::WRITE_FAULT,
        BlockError::OutOfRange { .. } => Status::LBA_OUT_OF_RANGE.dnr(),
        BlockError::Misaligned { .. } => Status::INVALID_FIELD.dnr(),
        BlockError::ReadOnly => Status::NS_WRITE_PROTECTED.dnr(),
        BlockError::Timeout | BlockError::Closed => Status::NAMESPACE_NOT_READY,
        BlockError::ReservationConflict => Status::RESERVATION_CONFLICT.dnr(),
        BlockError::Unavailable(_) => Status::ANA_INACCESSIBLE,
        BlockError::Io(_) => Status::INTERNAL_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_proto::status::sct;

    #[test]
    fn fencing_errors_map_to_path_and_conflict_statuses() {
        for is_read in [true, false] {
            let st = block_error_status(&BlockError::Unavailable("handed over".into()), is_read);
            assert_eq!((st.sct, st.sc), (sct::PATH, 0x02), "ANA inaccessible");
            assert!(!st.dnr, "a path error must stay retryable on another path");
            assert_eq!(st, Status::ANA_INACCESSIBLE);
            let st = block_error_status(&BlockError::ReservationConflict, is_read);
            assert_eq!((st.sct, st.sc), (sct::GENERIC, 0x83));
            assert!(st.dnr, "a conflict is final");
        }
        // The others stay as they were.
        assert_eq!(
            block_error_status(&BlockError::Media { offset_bytes: 0 }, true),
            Status::UNRECOVERED_READ_ERROR
        );
        assert_eq!(
            block_error_status(&BlockError::Closed, false),
            Status::NAMESPACE_NOT_READY
        );
        assert_eq!(
            block_error_status(&BlockError::Io(std::io::Error::other("x")), false),
            Status::INTERNAL_ERROR
        );
    }
}
