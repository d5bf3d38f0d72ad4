//! Command execution: fabrics, admin and I/O command sets.
//!
//! A command either completes at once ([`Dispatch::Now`]) or becomes a future polled by the
//! connection's task ([`Dispatch::Later`]); both yield an [`Outcome`] that the connection
//! turns into C2HData and CapsuleResp PDUs.

pub(crate) mod admin;
pub(crate) mod dsm;
pub(crate) mod fabrics;
pub(crate) mod features;
pub(crate) mod identify;
pub(crate) mod io;
pub(crate) mod logpage;
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
    /// Controller-to-host data (sent only on success).
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
pub(crate) fn block_error_status(e: &BlockError, is_read: bool) -> Status {
    match e {
        BlockError::Media { .. } if is_read => Status::UNRECOVERED_READ_ERROR,
        BlockError::Media { .. } => Status::WRITE_FAULT,
        BlockError::OutOfRange { .. } => Status::LBA_OUT_OF_RANGE.dnr(),
        BlockError::Misaligned { .. } => Status::INVALID_FIELD.dnr(),
        BlockError::ReadOnly => Status::NS_WRITE_PROTECTED.dnr(),
        BlockError::Timeout | BlockError::Closed => Status::NAMESPACE_NOT_READY,
        BlockError::Io(_) => Status::INTERNAL_ERROR,
    }
}
