//! Errors. Every error about a guest carries the run so far, and its message
//! quotes the FAIL lines and the tail of the serial log.

use std::io;
use std::time::Duration;

use crate::record::GuestRun;

/// What went wrong while building, booting or talking to a guest.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// QEMU is not installed.
    #[error(
        "qemu-system-x86_64 not found in PATH: run scripts/install-deps.sh (as root) to install \
         the packages the Linux guest tests need (qemu-system-x86, busybox-static, cpio, kmod, file)"
    )]
    QemuMissing,

    /// `scripts/guest/build.sh` failed.
    #[error("building the test guest failed: `{command}` {status}\n{output}")]
    Build {
        /// The command line that was run.
        command: String,
        /// Its exit status.
        status: String,
        /// The tail of its output.
        output: String,
    },

    /// An I/O error on the host side.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A [`crate::GuestConfig`] that cannot work (bad names, ...).
    #[error("invalid guest configuration: {0}")]
    Config(String),

    /// A wait ran out of time while the guest was still running.
    #[error("timed out after {after:?} waiting for {what}\n{}", .run.diagnostics())]
    Timeout {
        /// What was awaited.
        what: String,
        /// The timeout.
        after: Duration,
        /// The run so far.
        run: Box<GuestRun>,
    },

    /// The guest's job ended, or QEMU exited, before what was awaited happened.
    #[error("the guest ended while waiting for {what}\n{}", .run.diagnostics())]
    Ended {
        /// What was awaited.
        what: String,
        /// The whole run.
        run: Box<GuestRun>,
    },

    /// The job finished with a non-zero status, printed FAIL lines, or never
    /// finished.
    #[error("guest job failed\n{}", .run.diagnostics())]
    JobFailed {
        /// The whole run.
        run: Box<GuestRun>,
    },
}

impl GuestError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        GuestError::Io {
            context: context.into(),
            source,
        }
    }

    /// The run this error is about, if any.
    pub fn run(&self) -> Option<&GuestRun> {
        match self {
            GuestError::Timeout { run, .. }
            | GuestError::Ended { run, .. }
            | GuestError::JobFailed { run } => Some(run),
            _ => None,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = GuestError> = std::result::Result<T, E>;
