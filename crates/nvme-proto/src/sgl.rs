//! SGL descriptors (16 bytes) as used by NVMe over Fabrics.
//!
//! Byte 15 is the SGL identifier: descriptor type in bits 7:4, subtype in bits 3:0.

use crate::bytes::{le32, le64, put32, put64};

/// SGL descriptor types (identifier bits 7:4).
pub mod sgl_type {
    pub const DATA_BLOCK: u8 = 0x0;
    pub const BIT_BUCKET: u8 = 0x1;
    pub const SEGMENT: u8 = 0x2;
    pub const LAST_SEGMENT: u8 = 0x3;
    pub const KEYED_DATA_BLOCK: u8 = 0x4;
    pub const TRANSPORT_DATA_BLOCK: u8 = 0x5;
}

/// SGL descriptor subtypes (identifier bits 3:0).
pub mod sgl_subtype {
    pub const ADDRESS: u8 = 0x0;
    pub const OFFSET: u8 = 0x1;
    pub const TRANSPORT_SPECIFIC: u8 = 0xA;
}

/// A decoded SGL descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SglDescriptor {
    pub address: u64,
    pub length: u32,
    pub desc_type: u8,
    pub subtype: u8,
}

/// What a descriptor in SQE DPTR means for an NVMe/TCP target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpDataLocation {
    /// Data travels in the command capsule at `offset` from the start of in-capsule data.
    InCapsule { offset: u64, length: u32 },
    /// Data travels in H2CData/C2HData PDUs (Transport SGL data block, subtype 0xA).
    Transport { length: u32 },
}

impl SglDescriptor {
    pub const BYTES: usize = 16;

    pub fn decode(b: &[u8; 16]) -> Self {
        SglDescriptor {
            address: le64(b, 0),
            length: le32(b, 8),
            desc_type: b[15] >> 4,
            subtype: b[15] & 0xF,
        }
    }

    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        put64(&mut b, 0, self.address);
        put32(&mut b, 8, self.length);
        b[15] = (self.desc_type << 4) | (self.subtype & 0xF);
        b
    }

    /// An in-capsule data block (offset subtype) as the Linux host sends for small writes.
    pub const fn in_capsule(offset: u64, length: u32) -> Self {
        SglDescriptor {
            address: offset,
            length,
            desc_type: sgl_type::DATA_BLOCK,
            subtype: sgl_subtype::OFFSET,
        }
    }

    /// A transport data block: data moves in H2CData/C2HData PDUs.
    pub const fn transport(length: u32) -> Self {
        SglDescriptor {
            address: 0,
            length,
            desc_type: sgl_type::TRANSPORT_DATA_BLOCK,
            subtype: sgl_subtype::TRANSPORT_SPECIFIC,
        }
    }

    /// Interprets the descriptor for NVMe/TCP. `None` means the descriptor type is not
    /// valid for this transport (the command gets SGL Descriptor Type Invalid).
    pub fn tcp_location(&self) -> Option<TcpDataLocation> {
        match (self.desc_type, self.subtype) {
            (sgl_type::DATA_BLOCK, sgl_subtype::OFFSET) => Some(TcpDataLocation::InCapsule {
                offset: self.address,
                length: self.length,
            }),
            (sgl_type::TRANSPORT_DATA_BLOCK, sgl_subtype::TRANSPORT_SPECIFIC) => {
                Some(TcpDataLocation::Transport {
                    length: self.length,
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn linux_in_capsule_identifier_is_0x01() {
        assert_eq!(SglDescriptor::in_capsule(0, 4096).encode()[15], 0x01);
        assert_eq!(SglDescriptor::transport(4096).encode()[15], 0x5A);
    }

    proptest! {
        #[test]
        fn roundtrip(address: u64, length: u32, t in 0u8..16, s in 0u8..16) {
            let d = SglDescriptor { address, length, desc_type: t, subtype: s };
            prop_assert_eq!(SglDescriptor::decode(&d.encode()), d);
        }
    }
}
