//! Completion status: status code type (SCT) and status code (SC).

/// Status code types.
pub mod sct {
    pub const GENERIC: u8 = 0x0;
    pub const COMMAND_SPECIFIC: u8 = 0x1;
    pub const MEDIA: u8 = 0x2;
    pub const PATH: u8 = 0x3;
    pub const VENDOR: u8 = 0x7;
}

/// A completion status: SCT, SC and the Do Not Retry / More bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status {
    pub sct: u8,
    pub sc: u8,
    pub dnr: bool,
    pub more: bool,
}

impl Status {
    pub const fn new(sct: u8, sc: u8) -> Self {
        Status {
            sct,
            sc,
            dnr: false,
            more: false,
        }
    }
    /// The same status with Do Not Retry set (the host will not retry the command).
    pub const fn dnr(self) -> Self {
        Status { dnr: true, ..self }
    }
    pub const fn is_success(&self) -> bool {
        self.sct == 0 && self.sc == 0
    }

    /// The 15-bit status field as it sits in CQE bits 31:17 (i.e. the u16 at byte 14 shifted
    /// right by one, without the phase tag).
    pub const fn to_field(self) -> u16 {
        (self.sc as u16)
            | (((self.sct & 0x7) as u16) << 8)
            | ((self.more as u16) << 13)
            | ((self.dnr as u16) << 14)
    }

    /// Decodes the 15-bit status field (CQE u16 at byte 14, shifted right by one).
    pub const fn from_field(f: u16) -> Self {
        Status {
            sc: (f & 0xFF) as u8,
            sct: ((f >> 8) & 0x7) as u8,
            more: (f >> 13) & 1 == 1,
            dnr: (f >> 14) & 1 == 1,
        }
    }

    // Generic command status (SCT 0).
    pub const SUCCESS: Status = Status::new(sct::GENERIC, 0x00);
    pub const INVALID_OPCODE: Status = Status::new(sct::GENERIC, 0x01);
    pub const INVALID_FIELD: Status = Status::new(sct::GENERIC, 0x02);
    pub const COMMAND_ID_CONFLICT: Status = Status::new(sct::GENERIC, 0x03);
    pub const DATA_TRANSFER_ERROR: Status = Status::new(sct::GENERIC, 0x04);
    pub const ABORTED_POWER_LOSS: Status = Status::new(sct::GENERIC, 0x05);
    pub const INTERNAL_ERROR: Status = Status::new(sct::GENERIC, 0x06);
    pub const ABORT_REQUESTED: Status = Status::new(sct::GENERIC, 0x07);
    pub const ABORTED_SQ_DELETION: Status = Status::new(sct::GENERIC, 0x08);
    pub const INVALID_NAMESPACE: Status = Status::new(sct::GENERIC, 0x0B);
    pub const COMMAND_SEQUENCE_ERROR: Status = Status::new(sct::GENERIC, 0x0C);
    pub const INVALID_SGL_SEGMENT_DESCRIPTOR: Status = Status::new(sct::GENERIC, 0x0D);
    pub const INVALID_SGL_DESCRIPTOR_COUNT: Status = Status::new(sct::GENERIC, 0x0E);
    pub const DATA_SGL_LENGTH_INVALID: Status = Status::new(sct::GENERIC, 0x0F);
    pub const SGL_DESCRIPTOR_TYPE_INVALID: Status = Status::new(sct::GENERIC, 0x11);
    pub const SGL_OFFSET_INVALID: Status = Status::new(sct::GENERIC, 0x16);
    pub const HOST_ID_INCONSISTENT_FORMAT: Status = Status::new(sct::GENERIC, 0x18);
    pub const KEEP_ALIVE_TIMER_EXPIRED: Status = Status::new(sct::GENERIC, 0x19);
    pub const KEEP_ALIVE_TIMEOUT_INVALID: Status = Status::new(sct::GENERIC, 0x1A);
    pub const ABORTED_PREEMPT_ABORT: Status = Status::new(sct::GENERIC, 0x1B);
    pub const NS_WRITE_PROTECTED: Status = Status::new(sct::GENERIC, 0x20);
    pub const TRANSIENT_TRANSPORT_ERROR: Status = Status::new(sct::GENERIC, 0x22);
    pub const LBA_OUT_OF_RANGE: Status = Status::new(sct::GENERIC, 0x80);
    pub const CAPACITY_EXCEEDED: Status = Status::new(sct::GENERIC, 0x81);
    pub const NAMESPACE_NOT_READY: Status = Status::new(sct::GENERIC, 0x82);
    pub const RESERVATION_CONFLICT: Status = Status::new(sct::GENERIC, 0x83);
    pub const FORMAT_IN_PROGRESS: Status = Status::new(sct::GENERIC, 0x84);

    // Key Value command set (SCT 0, values 80h..BFh are I/O command set specific; KV
    // Command Set 1.0 "Generic Command Status Values"; libnvme NVME_SC_INVALID_VALUE_SIZE
    // ..NVME_SC_KEY_EXISTS). Capacity Exceeded (81h) is shared with the NVM command set.
    /// Invalid Value Size: the value size of a Store exceeds the namespace's maximum
    /// value length (KVVML), or is otherwise not valid.
    pub const KV_INVALID_VALUE_SIZE: Status = Status::new(sct::GENERIC, 0x85);
    /// Invalid Key Size: the key length is 0 (where a key is required) or exceeds the
    /// namespace's maximum key length (KVKML).
    pub const KV_INVALID_KEY_SIZE: Status = Status::new(sct::GENERIC, 0x86);
    /// KV Key Does Not Exist: Retrieve, Exist or Delete of an absent key, or a Store
    /// with "only if the key exists" (SIKE) of an absent key.
    pub const KV_KEY_DOES_NOT_EXIST: Status = Status::new(sct::GENERIC, 0x87);
    /// Unrecovered Error: the value could not be read back from the medium.
    pub const KV_UNRECOVERED_ERROR: Status = Status::new(sct::GENERIC, 0x88);
    /// Key Exists: a Store with "only if the key does not exist" (SINKE) of a present key.
    pub const KV_KEY_EXISTS: Status = Status::new(sct::GENERIC, 0x89);

    // Command specific status (SCT 1).
    pub const INVALID_QUEUE_IDENTIFIER: Status = Status::new(sct::COMMAND_SPECIFIC, 0x01);
    pub const INVALID_QUEUE_SIZE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x02);
    pub const ABORT_LIMIT_EXCEEDED: Status = Status::new(sct::COMMAND_SPECIFIC, 0x03);
    pub const ASYNC_EVENT_LIMIT_EXCEEDED: Status = Status::new(sct::COMMAND_SPECIFIC, 0x05);
    pub const INVALID_FIRMWARE_SLOT: Status = Status::new(sct::COMMAND_SPECIFIC, 0x06);
    pub const INVALID_LOG_PAGE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x09);
    pub const INVALID_FORMAT: Status = Status::new(sct::COMMAND_SPECIFIC, 0x0A);
    pub const FEATURE_NOT_SAVEABLE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x0D);
    pub const FEATURE_NOT_CHANGEABLE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x0E);
    pub const FEATURE_NOT_NS_SPECIFIC: Status = Status::new(sct::COMMAND_SPECIFIC, 0x0F);
    pub const NS_INSUFFICIENT_CAPACITY: Status = Status::new(sct::COMMAND_SPECIFIC, 0x15);
    pub const NS_ID_UNAVAILABLE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x16);
    pub const NS_ALREADY_ATTACHED: Status = Status::new(sct::COMMAND_SPECIFIC, 0x18);
    pub const NS_IS_PRIVATE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x19);
    pub const NS_NOT_ATTACHED: Status = Status::new(sct::COMMAND_SPECIFIC, 0x1A);
    pub const CONTROLLER_LIST_INVALID: Status = Status::new(sct::COMMAND_SPECIFIC, 0x1C);
    /// I/O Command Set Not Supported: the CSI of an Identify, Get Log Page or Namespace
    /// Management command names a command set the controller does not implement.
    pub const IO_COMMAND_SET_NOT_SUPPORTED: Status = Status::new(sct::COMMAND_SPECIFIC, 0x29);
    /// I/O Command Set Not Enabled: the command set is implemented but not enabled by
    /// CC.CSS and the I/O Command Set Profile.
    pub const IO_COMMAND_SET_NOT_ENABLED: Status = Status::new(sct::COMMAND_SPECIFIC, 0x2A);
    /// I/O Command Set Combination Rejected: Set Features I/O Command Set Profile named an
    /// index the controller does not offer.
    pub const IO_COMMAND_SET_COMBINATION_REJECTED: Status =
        Status::new(sct::COMMAND_SPECIFIC, 0x2B);
    /// Invalid I/O Command Set: the command does not apply to the namespace's command set
    /// (e.g. an NVM-only Identify of a KV namespace).
    pub const INVALID_IO_COMMAND_SET: Status = Status::new(sct::COMMAND_SPECIFIC, 0x2C);
    /// Identifier Unavailable.
    pub const IDENTIFIER_UNAVAILABLE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x2D);
    pub const CONFLICTING_ATTRIBUTES: Status = Status::new(sct::COMMAND_SPECIFIC, 0x80);
    pub const INVALID_PROTECTION_INFO: Status = Status::new(sct::COMMAND_SPECIFIC, 0x81);
    pub const WRITE_TO_READ_ONLY_RANGE: Status = Status::new(sct::COMMAND_SPECIFIC, 0x82);

    // Fabrics Connect status (SCT 1).
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status::new(sct::COMMAND_SPECIFIC, 0x80);
    pub const CONNECT_CONTROLLER_BUSY: Status = Status::new(sct::COMMAND_SPECIFIC, 0x81);
    pub const CONNECT_INVALID_PARAMETERS: Status = Status::new(sct::COMMAND_SPECIFIC, 0x82);
    pub const CONNECT_RESTART_DISCOVERY: Status = Status::new(sct::COMMAND_SPECIFIC, 0x83);
    /// Authentication Required (fabrics, 91h): a command other than Authentication
    /// Send/Receive on a queue that has not authenticated yet (Linux NVME_SC_AUTH_REQUIRED).
    pub const AUTH_REQUIRED: Status = Status::new(sct::COMMAND_SPECIFIC, 0x91);
    pub const CONNECT_INVALID_HOST: Status = Status::new(sct::COMMAND_SPECIFIC, 0x84);

    // Media and data integrity errors (SCT 2).
    pub const WRITE_FAULT: Status = Status::new(sct::MEDIA, 0x80);
    pub const UNRECOVERED_READ_ERROR: Status = Status::new(sct::MEDIA, 0x81);
    pub const COMPARE_FAILURE: Status = Status::new(sct::MEDIA, 0x85);
    pub const ACCESS_DENIED: Status = Status::new(sct::MEDIA, 0x86);

    // Path related status (SCT 3).
    pub const INTERNAL_PATH_ERROR: Status = Status::new(sct::PATH, 0x00);
    pub const ANA_PERSISTENT_LOSS: Status = Status::new(sct::PATH, 0x01);
    pub const ANA_INACCESSIBLE: Status = Status::new(sct::PATH, 0x02);
    pub const ANA_TRANSITION: Status = Status::new(sct::PATH, 0x03);
}

impl Default for Status {
    /// Success.
    fn default() -> Self {
        Status::SUCCESS
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sct={:#x} sc={:#04x}{}",
            self.sct,
            self.sc,
            if self.dnr { " dnr" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lba_out_of_range_field() {
        // SC 0x80 in bits 7:0 of the field, SCT 0: CQE word = 0x80 << 1 = 0x100.
        assert_eq!(Status::LBA_OUT_OF_RANGE.to_field() << 1, 0x0100);
        // Connect invalid host: SCT 1, SC 0x84, DNR: 0x4000 | 0x100 | 0x84.
        assert_eq!(Status::CONNECT_INVALID_HOST.dnr().to_field(), 0x4184);
    }

    #[test]
    fn kv_and_command_set_values() {
        // KV Command Set 1.0 generic status values 85h..89h (libnvme, smartmontools).
        let kv = [
            (Status::KV_INVALID_VALUE_SIZE, 0x85),
            (Status::KV_INVALID_KEY_SIZE, 0x86),
            (Status::KV_KEY_DOES_NOT_EXIST, 0x87),
            (Status::KV_UNRECOVERED_ERROR, 0x88),
            (Status::KV_KEY_EXISTS, 0x89),
        ];
        for (s, sc) in kv {
            assert_eq!((s.sct, s.sc), (sct::GENERIC, sc));
        }
        // Key Exists with DNR in the CQE status word: DNR (bit 15) | SC 0x89 << 1.
        assert_eq!(
            Status::KV_KEY_EXISTS.dnr().to_field() << 1,
            0x8000 | (0x89 << 1)
        );
        assert_eq!(Status::CAPACITY_EXCEEDED.to_field(), 0x0081);
        // Base 2.0 command specific 29h..2Dh (libnvme NVME_SC_IOCS_*).
        assert_eq!(
            Status::IO_COMMAND_SET_COMBINATION_REJECTED.to_field(),
            0x012B
        );
        assert_eq!(Status::INVALID_IO_COMMAND_SET.to_field(), 0x012C);
    }

    proptest! {
        #[test]
        fn field_roundtrip(sc: u8, sct in 0u8..8, dnr: bool, more: bool) {
            let s = Status { sc, sct, dnr, more };
            prop_assert_eq!(Status::from_field(s.to_field()), s);
        }
    }
}
