//! The one error type for decoding untrusted bytes.

use thiserror::Error;

/// Why a byte sequence is not a valid structure.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Fewer bytes than the structure needs.
    #[error("{what}: need {needed_bytes} bytes, got {got_bytes}")]
    Short {
        what: &'static str,
        needed_bytes: usize,
        got_bytes: usize,
    },
    /// A field holds a value the spec forbids. `offset` is the byte offset of the field.
    #[error("{what}: invalid field at byte {offset}: {reason}")]
    InvalidField {
        what: &'static str,
        offset: usize,
        reason: &'static str,
    },
    /// A type code this implementation does not know.
    #[error("unknown {what} {value:#04x}")]
    Unknown { what: &'static str, value: u32 },
}
