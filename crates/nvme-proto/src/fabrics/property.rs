//! Property Get and Property Set (NVMe Base 2.0, Fabrics Command Set:
//! "Property Get", "Property Set"; Linux `struct nvmf_property_{get,set}_command`).
//!
//! SQE: 40 ATTRIB (bits 2:0 size: 0 = 4 bytes, 1 = 8 bytes), 44..48 OFST,
//! 48..56 VALUE (Property Set only). Property Get returns the value in CQE DW0 (and DW1
//! for 8-byte properties).

use crate::bytes::{le32, le64, put32, put64};
use crate::command::Command;
use crate::completion::Completion;
use crate::error::DecodeError;
use crate::opcode::{admin, fctype};

/// Width of a property access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PropertySize {
    #[default]
    Four,
    Eight,
}

impl PropertySize {
    pub const fn bytes(self) -> usize {
        match self {
            PropertySize::Four => 4,
            PropertySize::Eight => 8,
        }
    }
    const fn attrib(self) -> u8 {
        match self {
            PropertySize::Four => 0,
            PropertySize::Eight => 1,
        }
    }
    fn from_attrib(a: u8) -> Result<Self, DecodeError> {
        match a & 0x7 {
            0 => Ok(PropertySize::Four),
            1 => Ok(PropertySize::Eight),
            _ => Err(DecodeError::InvalidField {
                what: "property ATTRIB",
                offset: 40,
                reason: "size is neither 4 nor 8 bytes",
            }),
        }
    }
}

/// A Property Get command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PropertyGet {
    pub size: PropertySize,
    /// Register offset, see [`super::reg`].
    pub ofst: u32,
}

impl PropertyGet {
    /// Reads the fields; a reserved size gives `InvalidField` at byte 40.
    pub fn from_command(c: &Command) -> Result<Self, DecodeError> {
        Ok(PropertyGet {
            size: PropertySize::from_attrib(c.0[40])?,
            ofst: le32(&c.0, 44),
        })
    }
    pub fn to_command(&self, cid: u16) -> Command {
        let mut c = Command::new(admin::FABRICS, cid, 0);
        c.set_fctype(fctype::PROPERTY_GET);
        c.0[40] = self.size.attrib();
        put32(&mut c.0, 44, self.ofst);
        c
    }
    /// The successful completion carrying `value` (truncated to 4 bytes for 4-byte reads).
    pub const fn completion(&self, cid: u16, value: u64) -> Completion {
        let mut c = Completion::success(cid);
        c.dw0 = value as u32;
        if let PropertySize::Eight = self.size {
            c.dw1 = (value >> 32) as u32;
        }
        c
    }
}

/// A Property Set command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PropertySet {
    pub size: PropertySize,
    pub ofst: u32,
    /// The value; only the low 4 bytes count for a 4-byte property.
    pub value: u64,
}

impl PropertySet {
    pub fn from_command(c: &Command) -> Result<Self, DecodeError> {
        let size = PropertySize::from_attrib(c.0[40])?;
        let raw = le64(&c.0, 48);
        Ok(PropertySet {
            size,
            ofst: le32(&c.0, 44),
            value: match size {
                PropertySize::Four => raw & 0xFFFF_FFFF,
                PropertySize::Eight => raw,
            },
        })
    }
    pub fn to_command(&self, cid: u16) -> Command {
        let mut c = Command::new(admin::FABRICS, cid, 0);
        c.set_fctype(fctype::PROPERTY_SET);
        c.0[40] = self.size.attrib();
        put32(&mut c.0, 44, self.ofst);
        put64(&mut c.0, 48, self.value);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabrics::reg;
    use proptest::prelude::*;

    #[test]
    fn get_cap_layout() {
        let g = PropertyGet {
            size: PropertySize::Eight,
            ofst: reg::CAP,
        };
        let c = g.to_command(7);
        assert_eq!((c.0[0], c.0[4], c.0[40]), (0x7F, 0x04, 1));
        assert_eq!(&c.0[44..48], &[0, 0, 0, 0]);
        assert_eq!(PropertyGet::from_command(&c).unwrap(), g);
        let r = g.completion(7, 0x1122_3344_5566_7788);
        assert_eq!((r.dw0, r.dw1), (0x5566_7788, 0x1122_3344));
        let r4 = PropertyGet {
            size: PropertySize::Four,
            ofst: reg::VS,
        }
        .completion(1, u64::MAX);
        assert_eq!((r4.dw0, r4.dw1), (u32::MAX, 0));
    }

    #[test]
    fn set_cc_layout() {
        let s = PropertySet {
            size: PropertySize::Four,
            ofst: reg::CC,
            value: 0x0046_0001,
        };
        let c = s.to_command(2);
        assert_eq!((c.0[4], c.0[40]), (0x00, 0));
        assert_eq!(&c.0[44..48], &[0x14, 0, 0, 0]);
        assert_eq!(&c.0[48..56], &[0x01, 0, 0x46, 0, 0, 0, 0, 0]);
        assert_eq!(PropertySet::from_command(&c).unwrap(), s);
    }

    #[test]
    fn reserved_size_is_invalid_field() {
        let mut c = PropertyGet::default().to_command(1);
        c.0[40] = 2;
        assert!(matches!(
            PropertyGet::from_command(&c),
            Err(DecodeError::InvalidField { offset: 40, .. })
        ));
        assert!(PropertySet::from_command(&c).is_err());
    }

    proptest! {
        #[test]
        fn roundtrip(eight: bool, ofst: u32, value: u64, cid: u16) {
            let size = if eight { PropertySize::Eight } else { PropertySize::Four };
            let value = if eight { value } else { value & 0xFFFF_FFFF };
            let s = PropertySet { size, ofst, value };
            prop_assert_eq!(PropertySet::from_command(&s.to_command(cid)).unwrap(), s);
            let g = PropertyGet { size, ofst };
            prop_assert_eq!(PropertyGet::from_command(&g.to_command(cid)).unwrap(), g);
        }
    }
}
