//! Human names for NVMe statuses and commands, for error messages.

use nvme_proto::Status;
use nvme_proto::opcode::{admin, fctype, io};
use nvme_proto::status::sct;

use crate::error::CommandKind;

/// A short lower-case description of `s`, as `nvme-cli` would print it.
pub fn status_text(s: Status) -> &'static str {
    match (s.sct, s.sc) {
        (sct::GENERIC, sc) => match sc {
            0x00 => "success",
            0x01 => "invalid command opcode",
            0x02 => "invalid field in command",
            0x03 => "command ID conflict",
            0x04 => "data transfer error",
            0x05 => "aborted due to power loss",
            0x06 => "internal error",
            0x07 => "command abort requested",
            0x08 => "aborted due to SQ deletion",
            0x0B => "invalid namespace or format",
            0x0C => "command sequence error",
            0x0D => "invalid SGL segment descriptor",
            0x0F => "data SGL length invalid",
            0x11 => "SGL descriptor type invalid",
            0x16 => "SGL offset invalid",
            0x18 => "host identifier inconsistent format",
            0x19 => "keep alive timer expired",
            0x1A => "keep alive timeout invalid",
            0x1B => "aborted due to preempt and abort",
            0x20 => "namespace is write protected",
            0x22 => "transient transport error",
            0x80 => "LBA out of range",
            0x81 => "capacity exceeded",
            0x82 => "namespace not ready",
            0x83 => "reservation conflict",
            _ => "generic error",
        },
        (sct::COMMAND_SPECIFIC, sc) => match sc {
            0x01 => "invalid queue identifier",
            0x02 => "invalid queue size",
            0x03 => "abort limit exceeded",
            0x05 => "asynchronous event request limit exceeded",
            0x09 => "invalid log page",
            0x0A => "invalid format",
            0x0D => "feature not saveable",
            0x0E => "feature not changeable",
            0x0F => "feature not namespace specific",
            0x80 => "incompatible format / conflicting attributes",
            0x81 => "controller busy / invalid protection information",
            0x82 => "invalid parameters / write to read-only range",
            0x83 => "restart discovery",
            0x84 => "invalid host",
            _ => "command specific error",
        },
        (sct::MEDIA, sc) => match sc {
            0x80 => "write fault",
            0x81 => "unrecovered read error",
            0x85 => "compare failure",
            0x86 => "access denied",
            _ => "media or data integrity error",
        },
        (sct::PATH, sc) => match sc {
            0x00 => "internal path error",
            0x01 => "asymmetric access persistent loss",
            0x02 => "asymmetric access inaccessible",
            0x03 => "asymmetric access transition",
            _ => "path error",
        },
        _ => "vendor specific error",
    }
}

/// The text of a Connect rejection: the generic table above mixes Connect and non-Connect
/// meanings of SCT 1, so Connect gets its own.
pub fn connect_status_text(s: Status) -> &'static str {
    match (s.sct, s.sc) {
        (sct::COMMAND_SPECIFIC, 0x80) => "incompatible format",
        (sct::COMMAND_SPECIFIC, 0x81) => "controller busy",
        (sct::COMMAND_SPECIFIC, 0x82) => "invalid parameters",
        (sct::COMMAND_SPECIFIC, 0x83) => "restart discovery",
        (sct::COMMAND_SPECIFIC, 0x84) => "invalid host",
        _ => status_text(s),
    }
}

/// The name of a command, e.g. "Identify", "Read", "Property Get".
pub fn command_name(k: CommandKind) -> String {
    if k.opcode == admin::FABRICS {
        return match k.fctype {
            fctype::PROPERTY_SET => "Property Set",
            fctype::CONNECT => "Connect",
            fctype::PROPERTY_GET => "Property Get",
            fctype::AUTH_SEND => "Authentication Send",
            fctype::AUTH_RECEIVE => "Authentication Receive",
            fctype::DISCONNECT => "Disconnect",
            _ => "Fabrics command",
        }
        .to_string();
    }
    let name = if k.admin {
        match k.opcode {
            admin::GET_LOG_PAGE => "Get Log Page",
            admin::IDENTIFY => "Identify",
            admin::ABORT => "Abort",
            admin::SET_FEATURES => "Set Features",
            admin::GET_FEATURES => "Get Features",
            admin::ASYNC_EVENT_REQUEST => "Asynchronous Event Request",
            admin::NAMESPACE_MANAGEMENT => "Namespace Management",
            admin::NAMESPACE_ATTACHMENT => "Namespace Attachment",
            admin::KEEP_ALIVE => "Keep Alive",
            admin::FORMAT_NVM => "Format NVM",
            _ => "",
        }
    } else {
        match k.opcode {
            io::FLUSH => "Flush",
            io::WRITE => "Write",
            io::READ => "Read",
            io::COMPARE => "Compare",
            io::WRITE_ZEROES => "Write Zeroes",
            io::DATASET_MANAGEMENT => "Dataset Management",
            io::VERIFY => "Verify",
            io::RESERVATION_REGISTER => "Reservation Register",
            io::RESERVATION_REPORT => "Reservation Report",
            io::RESERVATION_ACQUIRE => "Reservation Acquire",
            io::RESERVATION_RELEASE => "Reservation Release",
            _ => "",
        }
    };
    if name.is_empty() {
        let set = if k.admin { "admin" } else { "I/O" };
        format!("{set} command {:#04x}", k.opcode)
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            connect_status_text(Status::CONNECT_INVALID_HOST),
            "invalid host"
        );
        assert_eq!(
            status_text(Status::RESERVATION_CONFLICT),
            "reservation conflict"
        );
        let k = CommandKind {
            admin: true,
            opcode: 0x7F,
            fctype: 0x04,
        };
        assert_eq!(command_name(k), "Property Get");
        let k = CommandKind {
            admin: false,
            opcode: 0x02,
            fctype: 0,
        };
        assert_eq!(command_name(k), "Read");
        let k = CommandKind {
            admin: false,
            opcode: 0x99,
            fctype: 0,
        };
        assert_eq!(command_name(k), "I/O command 0x99");
    }
}
