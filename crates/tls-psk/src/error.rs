//! Errors and TLS alerts (RFC 8446 section 6).

use std::fmt;

/// An alert description (RFC 8446 section 6). In TLS 1.3 every alert but `close_notify` and
/// `user_canceled` ends the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertDescription {
    CloseNotify,
    UnexpectedMessage,
    BadRecordMac,
    RecordOverflow,
    HandshakeFailure,
    IllegalParameter,
    DecodeError,
    DecryptError,
    ProtocolVersion,
    InsufficientSecurity,
    InternalError,
    UserCanceled,
    MissingExtension,
    UnsupportedExtension,
    UnknownPskIdentity,
    /// A code this implementation has no name for.
    Other(u8),
}

impl AlertDescription {
    pub fn code(self) -> u8 {
        match self {
            Self::CloseNotify => 0,
            Self::UnexpectedMessage => 10,
            Self::BadRecordMac => 20,
            Self::RecordOverflow => 22,
            Self::HandshakeFailure => 40,
            Self::IllegalParameter => 47,
            Self::DecodeError => 50,
            Self::DecryptError => 51,
            Self::ProtocolVersion => 70,
            Self::InsufficientSecurity => 71,
            Self::InternalError => 80,
            Self::UserCanceled => 90,
            Self::MissingExtension => 109,
            Self::UnsupportedExtension => 110,
            Self::UnknownPskIdentity => 115,
            Self::Other(c) => c,
        }
    }

    pub fn from_code(code: u8) -> Self {
        match code {
            0 => Self::CloseNotify,
            10 => Self::UnexpectedMessage,
            20 => Self::BadRecordMac,
            22 => Self::RecordOverflow,
            40 => Self::HandshakeFailure,
            47 => Self::IllegalParameter,
            50 => Self::DecodeError,
            51 => Self::DecryptError,
            70 => Self::ProtocolVersion,
            71 => Self::InsufficientSecurity,
            80 => Self::InternalError,
            90 => Self::UserCanceled,
            109 => Self::MissingExtension,
            110 => Self::UnsupportedExtension,
            115 => Self::UnknownPskIdentity,
            c => Self::Other(c),
        }
    }
}

impl fmt::Display for AlertDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::CloseNotify => "close_notify",
            Self::UnexpectedMessage => "unexpected_message",
            Self::BadRecordMac => "bad_record_mac",
            Self::RecordOverflow => "record_overflow",
            Self::HandshakeFailure => "handshake_failure",
            Self::IllegalParameter => "illegal_parameter",
            Self::DecodeError => "decode_error",
            Self::DecryptError => "decrypt_error",
            Self::ProtocolVersion => "protocol_version",
            Self::InsufficientSecurity => "insufficient_security",
            Self::InternalError => "internal_error",
            Self::UserCanceled => "user_canceled",
            Self::MissingExtension => "missing_extension",
            Self::UnsupportedExtension => "unsupported_extension",
            Self::UnknownPskIdentity => "unknown_psk_identity",
            Self::Other(c) => return write!(f, "alert {c}"),
        };
        f.write_str(name)
    }
}

/// Why a TLS connection failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TlsError {
    /// The peer broke the protocol (or failed authentication); this side sent `alert`.
    #[error("{reason} (sent alert {alert})")]
    Protocol {
        alert: AlertDescription,
        reason: String,
    },
    /// The peer ended the connection with a fatal alert.
    #[error("peer sent alert {0}")]
    PeerAlert(AlertDescription),
    /// The transport ended before the TLS connection was closed (no close_notify).
    #[error("connection closed by peer during the TLS handshake or without close_notify")]
    UnexpectedEof,
    /// A configuration this implementation cannot use.
    #[error("TLS configuration: {0}")]
    Config(String),
}

impl TlsError {
    pub(crate) fn proto(alert: AlertDescription, reason: impl Into<String>) -> Self {
        Self::Protocol {
            alert,
            reason: reason.into(),
        }
    }

    pub(crate) fn decode(what: &str) -> Self {
        Self::proto(AlertDescription::DecodeError, format!("malformed {what}"))
    }

    /// The alert this side sends for this error, if any.
    pub(crate) fn alert_to_send(&self) -> Option<AlertDescription> {
        match self {
            Self::Protocol { alert, .. } => Some(*alert),
            _ => None,
        }
    }
}
