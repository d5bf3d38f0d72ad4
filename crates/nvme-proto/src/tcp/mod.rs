//! NVMe/TCP transport (NVMe/TCP Transport Specification 1.0): PDU headers, framing,
//! digests and the fatal-error codes of termination requests.

pub mod digest;
pub mod pdu;

pub use digest::crc32c;
pub use pdu::*;
