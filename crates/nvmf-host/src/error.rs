//! Errors of the initiator. Every variant names what failed and where, and keeps the NVMe
//! status visible for callers that act on it (reservation conflicts, ANA states, ...).

use std::net::SocketAddr;

use nvme_proto::Status;
use nvme_proto::tcp::FatalError;

use crate::status_text::{command_name, connect_status_text, status_text};

/// Why a queue's TCP connection is unusable. Cloneable: one fatal error fails every
/// command outstanding on the queue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("{op}: {message}")]
    Io {
        op: &'static str,
        kind: std::io::ErrorKind,
        message: String,
    },
    #[error("target closed the connection")]
    Closed,
    #[error("target closed the connection in the middle of a PDU (type {pdu_type:#04x})")]
    ClosedMidPdu { pdu_type: u8 },
    /// The target ended the connection with a C2HTermReq.
    #[error("target terminated the connection: {} (FES {fes:#x}, FEI {fei:#x})", fes_text(*fes))]
    TargetTerminated { fes: u16, fei: u32 },
    /// The target sent something this host cannot accept; the host answers with an
    /// H2CTermReq carrying `fes` and `fei`.
    #[error("bad PDU from target: {reason} (FES {fes:#x}, FEI {fei})")]
    BadPdu { reason: String, fes: u16, fei: u32 },
    /// The queue was shut down by this host.
    #[error("queue shut down")]
    Shutdown,
    /// The queue has no connection now (its controller is reconnecting).
    #[error("not connected (reconnecting)")]
    NotConnected,
    /// This host closed the connection to reset the controller.
    #[error("controller reset: {reason}")]
    Reset { reason: String },
}

impl From<FatalError> for TransportError {
    fn from(f: FatalError) -> Self {
        TransportError::BadPdu {
            reason: f.reason.to_string(),
            fes: f.fes,
            fei: f.fei,
        }
    }
}

impl TransportError {
    pub(crate) fn bad(fes: u16, fei: u32, reason: impl Into<String>) -> Self {
        TransportError::BadPdu {
            reason: reason.into(),
            fes,
            fei,
        }
    }

    pub(crate) fn io(op: &'static str, e: &std::io::Error) -> Self {
        TransportError::Io {
            op,
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

/// Text for the fatal error status of a termination request.
pub fn fes_text(fes: u16) -> &'static str {
    use nvme_proto::tcp::fes;
    match fes {
        fes::INVALID_HEADER_FIELD => "invalid PDU header field",
        fes::PDU_SEQUENCE_ERROR => "PDU sequence error",
        fes::HEADER_DIGEST_ERROR => "header digest error",
        fes::DATA_OUT_OF_RANGE => "data transfer out of range",
        fes::R2T_LIMIT_EXCEEDED => "R2T limit exceeded",
        fes::UNSUPPORTED_PARAMETER => "unsupported parameter",
        _ => "unknown fatal error",
    }
}

/// An opcode with its fabrics command type, to name a command in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandKind {
    pub admin: bool,
    pub opcode: u8,
    pub fctype: u8,
}

impl std::fmt::Display for CommandKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&command_name(*self))
    }
}

/// Everything the initiator can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HostError {
    /// TCP connect or the ICReq/ICResp exchange failed.
    #[error("connect to {addr}: {reason}")]
    Connect { addr: SocketAddr, reason: String },
    /// The target answered Connect with an error status.
    #[error("Connect rejected{}: {} (SCT {} SC {:#x}){}", qid_text(*qid), connect_status_text(*status), status.sct, status.sc, detail)]
    ConnectRejected {
        qid: u16,
        status: Status,
        /// Which parameter was invalid, for Connect Invalid Parameters; else empty.
        detail: String,
    },
    /// DH-HMAC-CHAP authentication of a queue failed (or could not start).
    #[error("DH-HMAC-CHAP authentication{} failed: {reason}", qid_text(*qid))]
    Authentication { qid: u16, reason: String },
    /// A command completed with an error status.
    #[error("{command} failed: {} (SCT {} SC {:#x}{})", status_text(*status), status.sct, status.sc, if status.dnr { ", DNR" } else { "" })]
    Status {
        command: CommandKind,
        status: Status,
    },
    /// No completion arrived in time.
    #[error("{command} (CID {cid}) on queue {qid} of {addr} timed out after {timeout_ms} ms")]
    Timeout {
        addr: SocketAddr,
        qid: u16,
        cid: u16,
        command: CommandKind,
        timeout_ms: u64,
    },
    /// The queue's connection failed; every command on it fails with this.
    #[error("queue {qid} to {addr}: {reason}")]
    Transport {
        addr: SocketAddr,
        qid: u16,
        reason: TransportError,
    },
    /// Every command slot stayed busy for the whole timeout; the command was never sent.
    #[error("{command} on queue {qid} of {addr}: no free command slot after {timeout_ms} ms")]
    SubmitTimeout {
        addr: SocketAddr,
        qid: u16,
        command: CommandKind,
        timeout_ms: u64,
    },
    /// A C2HData PDU's data digest did not match (the connection stays up).
    #[error("{command} (CID {cid}) on queue {qid} of {addr}: data digest mismatch")]
    DataDigest {
        addr: SocketAddr,
        qid: u16,
        cid: u16,
        command: CommandKind,
    },
    /// The target's answer is well-formed but not what the host can work with
    /// (an Identify field out of range, a transfer shorter than asked, ...).
    #[error("{context}: {reason}")]
    Invalid { context: String, reason: String },
    /// The controller's connection was lost and not re-established within the
    /// controller-loss timeout; commands that waited for the reconnect fail with this.
    #[error(
        "controller of {subnqn} at {addr} lost: no reconnect within {ctrl_loss_tmo_ms} ms ({attempts} attempts); last error: {last_error}"
    )]
    ControllerLost {
        addr: SocketAddr,
        subnqn: String,
        ctrl_loss_tmo_ms: u64,
        attempts: u32,
        last_error: String,
    },
    /// No path of a multipath namespace could take the I/O in time.
    #[error("{name}: no usable path after {waited_ms} ms ({detail})")]
    NoPath {
        name: String,
        waited_ms: u64,
        detail: String,
    },
    /// No path of a multipath namespace connected when it was opened: each address with
    /// why it failed.
    #[error("no path to {what} connects: {}", causes_text(causes))]
    NoPathConnects {
        /// "namespace NSID of SUBNQN" (or the NQN when the NSID was left to the target).
        what: String,
        /// (address, cause), one per address in the order given.
        causes: Vec<(String, String)>,
    },
    /// The caller asked for something impossible (bad NQN, I/O too large, ...).
    #[error("{0}")]
    Usage(String),
}

fn causes_text(causes: &[(String, String)]) -> String {
    causes
        .iter()
        .map(|(addr, why)| format!("{addr}: {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}

fn qid_text(qid: u16) -> String {
    if qid == 0 {
        String::new()
    } else {
        format!(" on I/O queue {qid}")
    }
}

impl HostError {
    /// The NVMe status of a command that completed with an error, if that is what happened.
    pub fn nvme_status(&self) -> Option<Status> {
        match self {
            HostError::Status { status, .. } | HostError::ConnectRejected { status, .. } => {
                Some(*status)
            }
            _ => None,
        }
    }

    /// True when a command was refused because another host holds the namespace's
    /// reservation: Reservation Conflict, or Command Aborted due to Preempt and Abort
    /// (another host preempted this one's registration). This host is fenced: such a
    /// command is never re-sent, neither after a reconnect nor on another path.
    pub fn is_reservation_conflict(&self) -> bool {
        match self {
            HostError::Status { status, .. } => {
                status.sct == nvme_proto::status::sct::GENERIC
                    && (status.sc == Status::RESERVATION_CONFLICT.sc
                        || status.sc == Status::ABORTED_PREEMPT_ABORT.sc)
            }
            _ => false,
        }
    }

    /// True for "Asymmetric Access Transition" (SCT 3h, SC 03h): the path is changing
    /// its ANA state; the command may succeed if sent again within ANATT.
    pub fn is_ana_transition(&self) -> bool {
        matches!(self, HostError::Status { status, .. }
            if status.sct == Status::ANA_TRANSITION.sct && status.sc == Status::ANA_TRANSITION.sc)
    }

    /// True when the queue's connection is gone (reconnect needed), as opposed to a
    /// command-level failure.
    pub fn is_transport(&self) -> bool {
        matches!(
            self,
            HostError::Transport { .. } | HostError::ControllerLost { .. }
        )
    }

    /// True for errors another path to the same namespace may not have: the connection
    /// is gone or reconnecting, the command timed out, or the controller answered with a
    /// path-related status (SCT 3: ANA inaccessible, persistent loss, transition, ...).
    pub fn is_path_error(&self) -> bool {
        match self {
            HostError::Transport { .. }
            | HostError::ControllerLost { .. }
            | HostError::Timeout { .. }
            | HostError::SubmitTimeout { .. }
            | HostError::Connect { .. } => true,
            HostError::Status { status, .. } => status.sct == nvme_proto::status::sct::PATH,
            _ => false,
        }
    }

    pub(crate) fn invalid(context: impl Into<String>, reason: impl Into<String>) -> Self {
        HostError::Invalid {
            context: context.into(),
            reason: reason.into(),
        }
    }
}

pub type Result<T, E = HostError> = std::result::Result<T, E>;
