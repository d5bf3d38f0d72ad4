//! NVMe, NVMe-oF and NVMe/TCP wire formats.
//!
//! Every decoder takes untrusted bytes and returns a typed error instead of panicking;
//! every encoder writes into a caller-provided buffer. No I/O happens here.
//! Byte layouts are specified in `docs/wire/`.

// Tests may unwrap: a panic there is a failed test, not a crash on input.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod auth;
pub mod bytes;
pub mod command;
pub mod completion;
pub mod dsm;
pub mod error;
pub mod fabrics;
pub mod features;
pub mod identify;
pub mod kv;
pub mod log;
pub mod opcode;
pub mod reservation;
pub mod sgl;
pub mod status;
pub mod tcp;
pub mod tls_key;

pub use command::Command;
pub use completion::Completion;
pub use error::DecodeError;
pub use sgl::SglDescriptor;
pub use status::Status;

/// Size of a submission queue entry (SQE) in bytes.
pub const SQE_BYTES: usize = 64;
/// Size of a completion queue entry (CQE) in bytes.
pub const CQE_BYTES: usize = 16;
