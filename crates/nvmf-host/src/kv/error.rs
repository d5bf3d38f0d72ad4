//! What a KV command can fail with: the Key Value command set's statuses as their own
//! variants, what this host refuses before sending, and everything the transport can do
//! (through [`HostError`]).

use nvme_proto::Status;
use nvme_proto::status::sct;

use crate::error::HostError;
use crate::status_text::status_text;

/// Which limit a value or buffer size broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeLimit {
    /// The namespace's largest value (KV format KVVML).
    Kvvml,
    /// The controller's largest transfer of one command (MDTS): a value travels in one
    /// Store or Retrieve, so it cannot be larger.
    Mdts,
    /// KV values are 1 byte or more: a Store of 0 bytes is Invalid Value Size.
    Empty,
    /// The namespace answered Invalid Value Size (its limit is not known here).
    Target,
}

impl std::fmt::Display for SizeLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SizeLimit::Kvvml => "the namespace's largest value (KVVML)",
            SizeLimit::Mdts => "the controller's largest transfer (MDTS)",
            SizeLimit::Empty => "KV values of at least 1 byte",
            SizeLimit::Target => "what the namespace accepts",
        })
    }
}

/// Why a KV command failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KvError {
    /// KV Key Does Not Exist (SCT 0h, SC 87h): Retrieve of an absent key, an
    /// overwrite-only Store of one, or Delete of one when the namespace's EDNEK is set.
    #[error("key does not exist")]
    KeyNotFound,
    /// Key Exists (SCT 0h, SC 89h): a create-only Store of a present key.
    #[error("key exists")]
    KeyExists,
    /// A create-only Store was sent again (its connection was lost, or it was aborted,
    /// while it was outstanding, or it failed over to another path) and the re-send found
    /// the key: the first attempt may have stored the value, or another host did. Read the
    /// value to know.
    #[error(
        "create-only Store was re-sent after a lost connection and found the key: the first attempt may have stored it"
    )]
    CreateOutcomeUnknown,
    /// Invalid Key Size (SCT 0h, SC 86h) or refused here: keys are 1 to `max_bytes`
    /// bytes (KVKML, at most 16).
    #[error("invalid key size: {len_bytes} bytes (keys are 1 to {max_bytes} bytes)")]
    InvalidKeySize { len_bytes: usize, max_bytes: usize },
    /// Invalid Value Size (SCT 0h, SC 85h) or refused here before sending.
    #[error("invalid value size: {bytes} bytes is outside {limit} ({max_bytes} bytes)")]
    InvalidValueSize {
        bytes: u64,
        max_bytes: u64,
        limit: SizeLimit,
    },
    /// A Retrieve or List buffer this host refuses to send: larger than one transfer
    /// (MDTS), or a List buffer below the 4-byte key count.
    #[error("{what} buffer of {bytes} bytes: must be {min_bytes} to {max_bytes} bytes")]
    InvalidBufferSize {
        what: &'static str,
        bytes: u64,
        min_bytes: u64,
        max_bytes: u64,
    },
    /// Capacity Exceeded (SCT 0h, SC 81h): no room for the value or no more keys.
    #[error("capacity exceeded")]
    CapacityExceeded,
    /// Unrecovered Error (SCT 0h, SC 88h), or a media error (Unrecovered Read Error, SCT
    /// 2h SC 81h): the stored value cannot be read back intact (a checksum caught it).
    #[error("unrecovered error: the value cannot be read back ({})", status_text_kv(*status))]
    Unrecovered { status: Status },
    /// Namespace Not Ready (SCT 0h, SC 82h): the namespace's store is not serving.
    #[error("namespace not ready")]
    NotReady,
    /// Another NVMe status the command completed with.
    #[error("{command} failed: {} (SCT {} SC {:#x}{})", status_text_kv(*status), status.sct, status.sc, if status.dnr { ", DNR" } else { "" })]
    Status {
        command: &'static str,
        status: Status,
    },
    /// The List data the target returned does not parse.
    #[error("List data: {0}")]
    BadListData(String),
    /// The command did not complete: connection lost for good, timeout, no usable path,
    /// ANA state, ... (see [`HostError`]).
    #[error(transparent)]
    Host(#[from] HostError),
}

/// The opcode of a KV command named as in [`KvError::Status`].
fn kv_opcode(command: &str) -> u8 {
    use nvme_proto::opcode::kv;
    match command {
        "Store" => kv::STORE,
        "Retrieve" => kv::RETRIEVE,
        "List" => kv::LIST,
        "Delete" => kv::DELETE,
        "Exist" => kv::EXIST,
        _ => 0,
    }
}

/// The KV command set's name of its own statuses (85h..89h), else the generic text.
fn status_text_kv(s: Status) -> &'static str {
    match (s.sct, s.sc) {
        (sct::GENERIC, 0x85..=0x89) => nvme_proto::kv::status_name(s).unwrap_or("KV error"),
        _ => status_text(s),
    }
}

impl KvError {
    /// Whether the namespace cannot be reached now, through any path this handle has:
    /// the connection is gone (reconnecting or lost), the command timed out, no path is
    /// usable, the namespace is not served here (ANA) or not ready. Another copy of the
    /// data elsewhere may serve; this one may come back.
    pub fn is_unavailable(&self) -> bool {
        match self {
            KvError::NotReady => true,
            KvError::Status { status, .. } => status.sct == sct::PATH,
            KvError::Host(e) => {
                e.is_path_error()
                    || matches!(
                        e,
                        HostError::NoPath { .. }
                            | HostError::NoPathConnects { .. }
                            | HostError::ControllerLost { .. }
                    )
            }
            _ => false,
        }
    }

    /// True for "Asymmetric Access Transition" (SCT 3h, SC 03h): the path is changing
    /// its ANA state; the command may succeed if sent again within ANATT.
    pub fn is_ana_transition(&self) -> bool {
        self.nvme_status().is_some_and(|s| {
            s.sct == Status::ANA_TRANSITION.sct && s.sc == Status::ANA_TRANSITION.sc
        })
    }

    /// The failure as the multipath layer judges paths by: the transport error, or the
    /// status as a [`HostError::Status`] of the KV opcode.
    pub(crate) fn as_host_error(&self) -> Option<HostError> {
        match self {
            KvError::Host(e) => Some(e.clone()),
            KvError::Status { command, status } => Some(HostError::Status {
                command: crate::error::CommandKind {
                    admin: false,
                    opcode: kv_opcode(command),
                    fctype: 0,
                },
                status: *status,
            }),
            _ => None,
        }
    }

    /// The NVMe status the command completed with, if it completed.
    pub fn nvme_status(&self) -> Option<Status> {
        match self {
            KvError::KeyNotFound => Some(Status::KV_KEY_DOES_NOT_EXIST),
            KvError::KeyExists | KvError::CreateOutcomeUnknown => Some(Status::KV_KEY_EXISTS),
            KvError::CapacityExceeded => Some(Status::CAPACITY_EXCEEDED),
            KvError::NotReady => Some(Status::NAMESPACE_NOT_READY),
            KvError::Unrecovered { status } | KvError::Status { status, .. } => Some(*status),
            KvError::Host(e) => e.nvme_status(),
            _ => None,
        }
    }
}

/// What a completion status means for a KV command; `None` for success. `command` names
/// the command in messages; `key_bytes` and `value_bytes` are what was sent (for the
/// size errors); `max_key_bytes` the namespace's KVKML.
pub(crate) fn from_status(
    status: Status,
    command: &'static str,
    key_bytes: usize,
    max_key_bytes: usize,
    value_bytes: u64,
) -> Option<KvError> {
    if status.is_success() {
        return None;
    }
    Some(match (status.sct, status.sc) {
        (sct::GENERIC, 0x87) => KvError::KeyNotFound,
        (sct::GENERIC, 0x89) => KvError::KeyExists,
        (sct::GENERIC, 0x86) => KvError::InvalidKeySize {
            len_bytes: key_bytes,
            max_bytes: max_key_bytes,
        },
        (sct::GENERIC, 0x85) => KvError::InvalidValueSize {
            bytes: value_bytes,
            max_bytes: 0,
            limit: SizeLimit::Target,
        },
        (sct::GENERIC, 0x81) => KvError::CapacityExceeded,
        (sct::GENERIC, 0x82) => KvError::NotReady,
        (sct::GENERIC, 0x88) | (sct::MEDIA, 0x81) => KvError::Unrecovered { status },
        _ => KvError::Status { command, status },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CommandKind;

    fn map(s: Status) -> Option<KvError> {
        from_status(s, "Store", 3, 16, 4096)
    }

    #[test]
    fn kv_statuses_map_to_their_variants() {
        assert!(map(Status::SUCCESS).is_none());
        assert!(matches!(
            map(Status::KV_KEY_DOES_NOT_EXIST.dnr()),
            Some(KvError::KeyNotFound)
        ));
        assert!(matches!(
            map(Status::KV_KEY_EXISTS.dnr()),
            Some(KvError::KeyExists)
        ));
        assert!(matches!(
            map(Status::KV_INVALID_KEY_SIZE.dnr()),
            Some(KvError::InvalidKeySize {
                len_bytes: 3,
                max_bytes: 16
            })
        ));
        let e = map(Status::KV_INVALID_VALUE_SIZE.dnr()).expect("error");
        assert!(
            matches!(
                e,
                KvError::InvalidValueSize {
                    bytes: 4096,
                    limit: SizeLimit::Target,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(matches!(
            map(Status::CAPACITY_EXCEEDED.dnr()),
            Some(KvError::CapacityExceeded)
        ));
        assert!(matches!(
            map(Status::NAMESPACE_NOT_READY),
            Some(KvError::NotReady)
        ));
        for s in [
            Status::KV_UNRECOVERED_ERROR.dnr(),
            Status::UNRECOVERED_READ_ERROR,
        ] {
            assert!(matches!(map(s), Some(KvError::Unrecovered { .. })), "{s:?}");
        }
        let other = map(Status::INVALID_FIELD.dnr()).expect("error");
        assert_eq!(
            other.to_string(),
            "Store failed: invalid field in command (SCT 0 SC 0x2, DNR)"
        );
        let unrec = map(Status::KV_UNRECOVERED_ERROR.dnr()).expect("error");
        assert_eq!(
            unrec.to_string(),
            "unrecovered error: the value cannot be read back (Unrecovered Error)"
        );
    }

    #[test]
    fn unavailable_means_the_namespace_cannot_be_reached() {
        let addr = "127.0.0.1:4420".parse().expect("addr");
        let transport = KvError::Host(HostError::Transport {
            addr,
            qid: 1,
            reason: crate::TransportError::Closed,
        });
        assert!(transport.is_unavailable());
        assert!(KvError::NotReady.is_unavailable());
        let ana = KvError::Host(HostError::Status {
            command: CommandKind {
                admin: false,
                opcode: 1,
                fctype: 0,
            },
            status: Status::ANA_INACCESSIBLE,
        });
        assert!(ana.is_unavailable());
        let ana = map(Status::ANA_INACCESSIBLE).expect("error");
        assert!(ana.is_unavailable());
        assert!(!ana.is_ana_transition());
        let h = ana.as_host_error().expect("a status");
        assert!(h.is_path_error());
        assert!(
            map(Status::ANA_TRANSITION)
                .expect("error")
                .is_ana_transition()
        );
        assert!(!KvError::KeyNotFound.is_unavailable());
        assert!(
            !KvError::Unrecovered {
                status: Status::KV_UNRECOVERED_ERROR
            }
            .is_unavailable()
        );
    }
}
