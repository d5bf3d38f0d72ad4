//! Commands Supported and Effects log page (LID 0x05), 4096 bytes (NVMe Base 2.0
//! "Commands Supported and Effects"; Linux `struct nvme_effects_log`): 256 u32 entries for admin opcodes at 0, 256 for I/O opcodes at 1024.

use crate::bytes::{le32, put32};
use crate::error::DecodeError;

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

impl CommandEffectsLog {
    pub const BYTES: usize = 4096;
    const IO_OFFSET: usize = 1024;

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
