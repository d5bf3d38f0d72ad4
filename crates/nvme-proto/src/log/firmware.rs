//! Firmware Slot Information log page (LID 0x03), 512 bytes (NVMe Base
//! 2.0 "Firmware Slot Information"; Linux `struct nvme_fw_slot_info_log`).
//!
//! 0 AFI (bits 2:0 active slot, 6:4 slot activated at next reset), 8..64 FRS1..FRS7
//! (8 ASCII bytes each, zero when the slot is empty).

use crate::bytes::{get_ascii, put_ascii_padded};
use crate::error::DecodeError;

/// The firmware slot log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FirmwareSlotLog {
    /// Active firmware info: bits 2:0 active slot, bits 6:4 next slot (0 = none).
    pub afi: u8,
    /// Revisions in slots 1..7 (index 0 is slot 1); empty = no firmware in the slot.
    pub frs: [String; 7],
}

impl FirmwareSlotLog {
    pub const BYTES: usize = 512;

    /// One slot, active, holding revision `fr`.
    pub fn single(fr: &str) -> Self {
        let mut l = FirmwareSlotLog {
            afi: 1,
            ..Default::default()
        };
        l.frs[0] = fr.to_string();
        l
    }

    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        let b = &mut out[..n];
        b.fill(0);
        if let Some(x) = b.first_mut() {
            *x = self.afi;
        }
        for (i, fr) in self.frs.iter().enumerate() {
            if !fr.is_empty() {
                put_ascii_padded(b, 8 + 8 * i, 8, fr);
            }
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        self.encode(&mut b);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(DecodeError::Short {
                what: "firmware slot log",
                needed_bytes: Self::BYTES,
                got_bytes: b.len(),
            });
        }
        Ok(FirmwareSlotLog {
            afi: b[0],
            frs: std::array::from_fn(|i| get_ascii(b, 8 + 8 * i, 8)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        let l = FirmwareSlotLog::single("0.1.0");
        let b = l.to_bytes();
        assert_eq!(b[0], 1);
        assert_eq!(&b[8..16], b"0.1.0   ");
        assert!(b[16..].iter().all(|&x| x == 0));
        assert_eq!(FirmwareSlotLog::decode(&b).unwrap(), l);
    }

    proptest! {
        #[test]
        fn stable(b in proptest::collection::vec(any::<u8>(), 512)) {
            let l = FirmwareSlotLog::decode(&b).unwrap();
            prop_assert_eq!(FirmwareSlotLog::decode(&l.to_bytes()).unwrap(), l);
        }
    }
}
