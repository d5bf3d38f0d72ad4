//! Commands Supported and Effects log page (LID 0x05), 4096 bytes (NVMe Base 2.0
//! "Commands Supported and Effects"; Linux `struct nvme_effects_log`): 256 u32 entries for admin opcodes at 0, 256 for I/O opcodes at 1024.
//!
//! The page is per I/O command set: Get Log Page CDW14 bits 31:24 (CSI) choose whose
//! I/O opcodes the second half describes ([`io_effects_nvm`], [`io_effects_kv`]); the
//! admin half is the same for every CSI.

use crate::bytes::{le32, put32};
use crate::error::DecodeError;
use crate::identify::csi;
use crate::opcode::{io, kv};

/// Bits of one Commands Supported and Effects entry.
pub mod effect {
    /// Command supported.
    pub const CSUPP: u32 = 1 << 0;
    /// Logical block content change.
    pub const LBCC: u32 = 1 << 1;
    /// Namespace capability change.
    pub const NCC: u32 = 1 << 2;
    /// Namespace inventory change.
    pub const NIC: u32 = 1 << 3;
    /// Controller capability change.
    pub const CCC: u32 = 1 << 4;
    /// Command submission and execution (bits 18:16): 0 no restriction, 1 no other command
    /// to the same namespace, 2 no other command to any namespace.
    pub const CSE_SHIFT: u32 = 16;
    pub const CSE_MASK: u32 = 0x7 << CSE_SHIFT;
    pub const CSE_SINGLE_NS: u32 = 1 << CSE_SHIFT;
    pub const CSE_SINGLE_CMD: u32 = 2 << CSE_SHIFT;
}

/// The commands supported and effects log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandEffectsLog {
    /// Indexed by admin opcode.
    pub admin: [u32; 256],
    /// Indexed by I/O opcode.
    pub io: [u32; 256],
}

impl Default for CommandEffectsLog {
    fn default() -> Self {
        CommandEffectsLog {
            admin: [0; 256],
            io: [0; 256],
        }
    }
}

/// ONCS bits [`io_effects_nvm`] reads (Identify Controller ONCS, NVMe Base 2.0).
const ONCS_COMPARE: u16 = 1 << 0;
const ONCS_WRITE_UNCORRECTABLE: u16 = 1 << 1;
const ONCS_DSM: u16 = 1 << 2;
const ONCS_WRITE_ZEROES: u16 = 1 << 3;
const ONCS_RESERVATIONS: u16 = 1 << 5;

/// I/O entries for the NVM command set: Read, Write and Flush always; Compare, Write
/// Uncorrectable, Dataset Management, Write Zeroes and the reservation commands when the
/// controller's ONCS says so. Commands that change data carry LBCC.
pub fn io_effects_nvm(oncs: u16) -> [u32; 256] {
    let mut e = [0u32; 256];
    let mut set = |op: u8, v: u32| e[usize::from(op)] = v;
    set(io::READ, effect::CSUPP);
    set(io::FLUSH, effect::CSUPP);
    set(io::WRITE, effect::CSUPP | effect::LBCC);
    let optional = [
        (ONCS_COMPARE, io::COMPARE, effect::CSUPP),
        (
            ONCS_WRITE_UNCORRECTABLE,
            io::WRITE_UNCORRECTABLE,
            effect::CSUPP | effect::LBCC,
        ),
        (
            ONCS_DSM,
            io::DATASET_MANAGEMENT,
            effect::CSUPP | effect::LBCC,
        ),
        (
            ONCS_WRITE_ZEROES,
            io::WRITE_ZEROES,
            effect::CSUPP | effect::LBCC,
        ),
    ];
    for (bit, op, v) in optional {
        if oncs & bit != 0 {
            set(op, v);
        }
    }
    if oncs & ONCS_RESERVATIONS != 0 {
        set_reservations(&mut e);
    }
    e
}

/// I/O entries for the Key Value command set: Store and Delete change what the namespace
/// holds (LBCC, the nearest the entry format has to "content change"); Retrieve, List,
/// Exist and Flush do not. Reservation commands when `reservations`.
pub fn io_effects_kv(reservations: bool) -> [u32; 256] {
    let mut e = [0u32; 256];
    for op in [kv::RETRIEVE, kv::LIST, kv::EXIST, kv::FLUSH] {
        e[usize::from(op)] = effect::CSUPP;
    }
    for op in [kv::STORE, kv::DELETE] {
        e[usize::from(op)] = effect::CSUPP | effect::LBCC;
    }
    if reservations {
        set_reservations(&mut e);
    }
    e
}

fn set_reservations(e: &mut [u32; 256]) {
    for op in [
        io::RESERVATION_REGISTER,
        io::RESERVATION_REPORT,
        io::RESERVATION_ACQUIRE,
        io::RESERVATION_RELEASE,
    ] {
        e[usize::from(op)] = effect::CSUPP;
    }
}

impl CommandEffectsLog {
    pub const BYTES: usize = 4096;
    const IO_OFFSET: usize = 1024;

    /// The page for Get Log Page with `csi_value`: `admin` in the admin half and the I/O
    /// entries of that command set in the other. A CSI the controller does not offer
    /// gets an empty I/O half.
    pub fn for_csi(
        admin: &[u32; 256],
        csi_value: u8,
        nvm_io: &[u32; 256],
        kv_io: &[u32; 256],
    ) -> Self {
        CommandEffectsLog {
            admin: *admin,
            io: match csi_value {
                csi::NVM => *nvm_io,
                csi::KEY_VALUE => *kv_io,
                _ => [0; 256],
            },
        }
    }

    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        out[..n].fill(0);
        for (i, v) in self.admin.iter().enumerate() {
            put32(out, 4 * i, *v);
        }
        for (i, v) in self.io.iter().enumerate() {
            put32(out, Self::IO_OFFSET + 4 * i, *v);
        }
    }

    pub fn to_bytes(&self) -> Box<[u8; Self::BYTES]> {
        let mut b = Box::new([0u8; Self::BYTES]);
        self.encode(&mut b[..]);
        b
    }

    /// Decodes the 2048 bytes of entries (the reserved rest may be absent).
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let need = Self::IO_OFFSET + 1024;
        if b.len() < need {
            return Err(DecodeError::Short {
                what: "commands supported and effects log",
                needed_bytes: need,
                got_bytes: b.len(),
            });
        }
        Ok(CommandEffectsLog {
            admin: std::array::from_fn(|i| le32(b, 4 * i)),
            io: std::array::from_fn(|i| le32(b, Self::IO_OFFSET + 4 * i)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::{admin, io};
    use proptest::prelude::*;

    #[test]
    fn layout() {
        let mut l = CommandEffectsLog::default();
        l.admin[admin::IDENTIFY as usize] = effect::CSUPP;
        l.admin[admin::NAMESPACE_MANAGEMENT as usize] =
            effect::CSUPP | effect::NIC | effect::NCC | effect::CSE_SINGLE_CMD;
        l.io[io::WRITE as usize] = effect::CSUPP | effect::LBCC;
        let b = l.to_bytes();
        assert_eq!(&b[24..28], &[1, 0, 0, 0]);
        assert_eq!(&b[52..56], &[0x0D, 0, 0x02, 0]);
        assert_eq!(&b[1028..1032], &[3, 0, 0, 0]);
        assert!(b[2048..].iter().all(|&x| x == 0));
        assert_eq!(CommandEffectsLog::decode(&b[..]).unwrap(), l);
        assert!(CommandEffectsLog::decode(&b[..2047]).is_err());
    }

    #[test]
    fn per_command_set_io_halves() {
        let mut admin = [0u32; 256];
        admin[admin::IDENTIFY as usize] = effect::CSUPP;
        let nvm = io_effects_nvm(0x2D); // Compare, DSM, Write Zeroes, Reservations
        let kvio = io_effects_kv(false);
        let l = CommandEffectsLog::for_csi(&admin, csi::KEY_VALUE, &nvm, &kvio);
        let b = l.to_bytes();
        // Admin half as given; Identify (06h) at byte 24.
        assert_eq!(&b[24..28], &[1, 0, 0, 0]);
        // KV I/O half at 1024 + 4 * opcode: Store 01h = CSUPP | LBCC, Retrieve 02h CSUPP,
        // List 06h CSUPP, Delete 10h CSUPP | LBCC, Exist 14h CSUPP.
        let at = |op: u8| u32::from_le_bytes(b[1024 + 4 * op as usize..][..4].try_into().unwrap());
        assert_eq!(
            [at(0x00), at(0x01), at(0x02), at(0x06), at(0x10), at(0x14)],
            [1, 3, 1, 1, 3, 1]
        );
        assert_eq!(at(io::RESERVATION_REGISTER), 0);
        assert_eq!(
            (0..=255u8).filter(|&op| at(op) != 0).count(),
            6,
            "only the KV opcodes and Flush"
        );
        // The NVM half for the same admin entries.
        let l = CommandEffectsLog::for_csi(&admin, csi::NVM, &nvm, &kvio);
        assert_eq!(l.io[io::WRITE as usize], effect::CSUPP | effect::LBCC);
        assert_eq!(l.io[io::COMPARE as usize], effect::CSUPP);
        assert_eq!(l.io[io::WRITE_UNCORRECTABLE as usize], 0);
        assert_eq!(l.io[io::RESERVATION_ACQUIRE as usize], effect::CSUPP);
        assert_eq!(l.admin, admin);
        // Zoned (02h) is not offered: empty I/O half.
        assert_eq!(
            CommandEffectsLog::for_csi(&admin, csi::ZONED, &nvm, &kvio).io,
            [0; 256]
        );
        assert_eq!(
            io_effects_kv(true)[io::RESERVATION_REPORT as usize],
            effect::CSUPP
        );
    }

    proptest! {
        #[test]
        fn stable(b in proptest::collection::vec(any::<u8>(), 2048..4097)) {
            let l = CommandEffectsLog::decode(&b).unwrap();
            let e = l.to_bytes();
            prop_assert_eq!(&e[..2048], &b[..2048]);
            prop_assert_eq!(CommandEffectsLog::decode(&e[..]).unwrap(), l);
        }
    }
}
