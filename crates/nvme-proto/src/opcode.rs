//! Command opcodes (NVMe base 2.0, NVM command set 1.0, Key Value command set 1.0,
//! NVMe-oF 1.1).

/// Admin command set opcodes.
pub mod admin {
    pub const DELETE_IO_SQ: u8 = 0x00;
    pub const CREATE_IO_SQ: u8 = 0x01;
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const DELETE_IO_CQ: u8 = 0x04;
    pub const CREATE_IO_CQ: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    pub const NAMESPACE_MANAGEMENT: u8 = 0x0D;
    pub const FIRMWARE_COMMIT: u8 = 0x10;
    pub const FIRMWARE_DOWNLOAD: u8 = 0x11;
    pub const DEVICE_SELF_TEST: u8 = 0x14;
    pub const NAMESPACE_ATTACHMENT: u8 = 0x15;
    pub const KEEP_ALIVE: u8 = 0x18;
    pub const DIRECTIVE_SEND: u8 = 0x19;
    pub const DIRECTIVE_RECEIVE: u8 = 0x1A;
    pub const FABRICS: u8 = 0x7F;
    pub const FORMAT_NVM: u8 = 0x80;
    pub const SANITIZE: u8 = 0x84;
}

/// NVM command set (I/O queue) opcodes.
pub mod io {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_UNCORRECTABLE: u8 = 0x04;
    pub const COMPARE: u8 = 0x05;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    pub const VERIFY: u8 = 0x0C;
    pub const RESERVATION_REGISTER: u8 = 0x0D;
    pub const RESERVATION_REPORT: u8 = 0x0E;
    pub const RESERVATION_ACQUIRE: u8 = 0x11;
    pub const RESERVATION_RELEASE: u8 = 0x15;
    /// Fabrics commands may also arrive on I/O queues (Connect).
    pub const FABRICS: u8 = 0x7F;
}

/// Key Value command set (CSI 01h) I/O opcodes (KV Command Set 1.0 "Opcodes for Key Value
/// Commands"; libnvme `enum nvme_kv_opcode`). Flush and the reservation commands share
/// the NVM opcodes ([`io::FLUSH`], [`io::RESERVATION_REGISTER`], ...).
pub mod kv {
    pub const FLUSH: u8 = 0x00;
    /// Store a value under a key (host to controller).
    pub const STORE: u8 = 0x01;
    /// Read a value back (controller to host).
    pub const RETRIEVE: u8 = 0x02;
    /// List keys from a starting key (controller to host).
    pub const LIST: u8 = 0x06;
    /// Remove a key and its value (no data).
    pub const DELETE: u8 = 0x10;
    /// Ask whether a key exists (no data).
    pub const EXIST: u8 = 0x14;
}

/// Fabrics command types (FCTYPE, SQE byte 4) of opcode 0x7F.
pub mod fctype {
    pub const PROPERTY_SET: u8 = 0x00;
    pub const CONNECT: u8 = 0x01;
    pub const PROPERTY_GET: u8 = 0x04;
    pub const AUTH_SEND: u8 = 0x05;
    pub const AUTH_RECEIVE: u8 = 0x06;
    pub const DISCONNECT: u8 = 0x08;
}

/// Data transfer direction encoded in the low two bits of an opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataDirection {
    None,
    HostToController,
    ControllerToHost,
    Bidirectional,
}

/// The direction implied by an opcode (bits 1:0). Fabrics commands carry their own
/// direction in FCTYPE bits 1:0, use [`fabrics_direction`] for them.
pub const fn direction(opcode: u8) -> DataDirection {
    match opcode & 0x3 {
        0 => DataDirection::None,
        1 => DataDirection::HostToController,
        2 => DataDirection::ControllerToHost,
        _ => DataDirection::Bidirectional,
    }
}

/// The direction of a fabrics command, from its FCTYPE.
pub const fn fabrics_direction(fctype: u8) -> DataDirection {
    direction(fctype)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_opcode_directions() {
        // The low two bits give the data direction, as for every NVMe opcode.
        assert_eq!(direction(kv::STORE), DataDirection::HostToController);
        assert_eq!(direction(kv::RETRIEVE), DataDirection::ControllerToHost);
        assert_eq!(direction(kv::LIST), DataDirection::ControllerToHost);
        assert_eq!(direction(kv::DELETE), DataDirection::None);
        assert_eq!(direction(kv::EXIST), DataDirection::None);
    }
}
