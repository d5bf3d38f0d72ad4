//! Which I/O commands a reservation restricts: the read and write command groups of the
//! NVM command set (NVMe base 2.0 section 8.19, "Command Behavior in the Presence of a
//! Reservation"). Everything else, including the reservation commands themselves, is never
//! refused by a reservation.

use nvme_proto::opcode::io;

/// Zone Management Send / Receive and Zone Append (Zoned Namespace command set).
const ZONE_MGMT_SEND: u8 = 0x79;
const ZONE_MGMT_RECV: u8 = 0x7A;
const ZONE_APPEND: u8 = 0x7D;
/// Copy (NVM command set 1.0).
const COPY: u8 = 0x19;

/// How a reservation sees an I/O command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AccessKind {
    Read,
    Write,
    /// Not restricted by any reservation.
    Unrestricted,
}

pub(crate) const fn classify(opcode: u8) -> AccessKind {
    match opcode {
        io::READ | io::COMPARE | io::VERIFY | ZONE_MGMT_RECV => AccessKind::Read,
        io::FLUSH
        | io::WRITE
        | io::WRITE_UNCORRECTABLE
        | io::WRITE_ZEROES
        | io::DATASET_MANAGEMENT
        | COPY
        | ZONE_MGMT_SEND
        | ZONE_APPEND => AccessKind::Write,
        _ => AccessKind::Unrestricted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups() {
        for op in [io::READ, io::COMPARE, io::VERIFY] {
            assert_eq!(classify(op), AccessKind::Read, "{op:#x}");
        }
        for op in [
            io::FLUSH,
            io::WRITE,
            io::WRITE_UNCORRECTABLE,
            io::WRITE_ZEROES,
            io::DATASET_MANAGEMENT,
        ] {
            assert_eq!(classify(op), AccessKind::Write, "{op:#x}");
        }
        for op in [
            io::RESERVATION_REGISTER,
            io::RESERVATION_REPORT,
            io::RESERVATION_ACQUIRE,
            io::RESERVATION_RELEASE,
            io::FABRICS,
        ] {
            assert_eq!(classify(op), AccessKind::Unrestricted, "{op:#x}");
        }
    }
}
