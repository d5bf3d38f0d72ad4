//! The Key Value command set (I/O Command Set Identifier 01h; NVM Express Key Value
//! Command Set Specification 1.0): a namespace addressed by keys of 1 to 16 bytes
//! instead of logical blocks.
//!
//! - [`key`]: the key and where it sits in the SQE (CDW2-3, CDW14-15; length in CDW11).
//! - [`command`]: Store, Retrieve, List, Delete and Exist, typed decode/encode of the SQE
//!   with the checks a controller makes, each mapped to its completion status.
//! - [`list`]: the List command's data (count, then padded key entries).
//! - [`identify`]: the KV Identify Namespace (CNS 05h) with its KV formats and the KV
//!   Identify Controller (CNS 06h).
//! - [`create`]: Namespace Management create of a KV namespace.
//!
//! How a controller offers the command set (NVMe Base 2.0): CAP.CSS bit 6 set, the host
//! enables with CC.CSS = 110b ([`crate::fabrics::Cc::enabled_io_command_sets`]), Identify
//! CNS 1Ch lists the command set combinations ([`crate::identify::IoCommandSetCombinations`]),
//! Set Features 19h selects one ([`crate::features::IoCommandSetProfile`]), each namespace
//! names its command set in a CSI descriptor (NIDT 04h) and answers Identify CNS 08h
//! ([`crate::identify::IdentifyNsIndependent`]), which is what Linux reads for namespaces
//! that are neither NVM nor zoned. The KV status codes are in [`crate::status::Status`]
//! (`KV_*`); [`status_name`] names them. Byte layouts: `docs/wire/kv.md`.

pub mod command;
pub mod create;
pub mod identify;
pub mod key;
pub mod list;

pub use command::{KvCommand, KvCommandError, StoreMode, retrieve_completion};
pub use create::KvNsCreate;
pub use identify::{KvFormat, KvIdentifyController, KvIdentifyNamespace};
pub use key::{KvKey, KvKeyLengthError};
pub use list::{KvListData, KvListIter, KvListWriter, encode_list};

use crate::status::{Status, sct};

/// The specification's name of a status a KV command completes with: the KV specific
/// values (85h..89h), Capacity Exceeded, and the generic ones a KV command may get.
/// `None` for statuses a KV namespace does not define. DNR and More are ignored.
pub const fn status_name(s: Status) -> Option<&'static str> {
    Some(match (s.sct, s.sc) {
        (sct::GENERIC, 0x00) => "Successful Completion",
        (sct::GENERIC, 0x01) => "Invalid Command Opcode",
        (sct::GENERIC, 0x02) => "Invalid Field in Command",
        (sct::GENERIC, 0x04) => "Data Transfer Error",
        (sct::GENERIC, 0x06) => "Internal Error",
        (sct::GENERIC, 0x0B) => "Invalid Namespace or Format",
        (sct::GENERIC, 0x81) => "Capacity Exceeded",
        (sct::GENERIC, 0x82) => "Namespace Not Ready",
        (sct::GENERIC, 0x83) => "Reservation Conflict",
        (sct::GENERIC, 0x84) => "Format In Progress",
        (sct::GENERIC, 0x85) => "Invalid Value Size",
        (sct::GENERIC, 0x86) => "Invalid Key Size",
        (sct::GENERIC, 0x87) => "KV Key Does Not Exist",
        (sct::GENERIC, 0x88) => "Unrecovered Error",
        (sct::GENERIC, 0x89) => "Key Exists",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            status_name(Status::KV_KEY_DOES_NOT_EXIST.dnr()),
            Some("KV Key Does Not Exist")
        );
        assert_eq!(status_name(Status::KV_KEY_EXISTS), Some("Key Exists"));
        assert_eq!(
            status_name(Status::KV_INVALID_KEY_SIZE),
            Some("Invalid Key Size")
        );
        assert_eq!(
            status_name(Status::KV_INVALID_VALUE_SIZE),
            Some("Invalid Value Size")
        );
        assert_eq!(
            status_name(Status::KV_UNRECOVERED_ERROR),
            Some("Unrecovered Error")
        );
        assert_eq!(
            status_name(Status::CAPACITY_EXCEEDED),
            Some("Capacity Exceeded")
        );
        // LBA Out of Range is NVM's 80h: not a KV status.
        assert_eq!(status_name(Status::LBA_OUT_OF_RANGE), None);
        assert_eq!(status_name(Status::new(sct::COMMAND_SPECIFIC, 0x87)), None);
    }
}
