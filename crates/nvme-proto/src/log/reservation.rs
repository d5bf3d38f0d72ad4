//! Reservation Notification log page (LID 0x80), 64 bytes (NVMe Base 2.0
//! "Reservation Notification"; Linux `struct nvme_pr_log`).
//!
//! 0..8 log page count, 8 reservation notification log page type, 9 number of available
//! log pages, 10..12 reserved, 12..16 NSID, 16..64 reserved.

use crate::bytes::{le32, le64, put32, put64};
use crate::error::DecodeError;

/// Reservation notification log page types.
pub mod notification_type {
    pub const EMPTY: u8 = 0x00;
    pub const REGISTRATION_PREEMPTED: u8 = 0x01;
    pub const RESERVATION_RELEASED: u8 = 0x02;
    pub const RESERVATION_PREEMPTED: u8 = 0x03;
}

/// One reservation notification log page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReservationNotificationLog {
    /// Increments with each new log page (wraps to 1, skipping 0).
    pub log_page_count: u64,
    /// See [`notification_type`].
    pub log_type: u8,
    /// Pages still queued after this one (saturates at 255).
    pub available_log_pages: u8,
    pub nsid: u32,
}

impl ReservationNotificationLog {
    pub const BYTES: usize = 64;

    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        let b = &mut out[..n];
        b.fill(0);
        put64(b, 0, self.log_page_count);
        if let Some(v) = b.get_mut(8..10) {
            v.copy_from_slice(&[self.log_type, self.available_log_pages]);
        }
        put32(b, 12, self.nsid);
    }

    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        self.encode(&mut b);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(DecodeError::Short {
                what: "reservation notification log",
                needed_bytes: Self::BYTES,
                got_bytes: b.len(),
            });
        }
        Ok(ReservationNotificationLog {
            log_page_count: le64(b, 0),
            log_type: b[8],
            available_log_pages: b[9],
            nsid: le32(b, 12),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        let l = ReservationNotificationLog {
            log_page_count: 0x0102,
            log_type: notification_type::RESERVATION_PREEMPTED,
            available_log_pages: 2,
            nsid: 7,
        };
        let b = l.to_bytes();
        assert_eq!(&b[..16], &[2, 1, 0, 0, 0, 0, 0, 0, 3, 2, 0, 0, 7, 0, 0, 0]);
        assert!(b[16..].iter().all(|&x| x == 0));
        assert_eq!(ReservationNotificationLog::decode(&b).unwrap(), l);
    }

    proptest! {
        #[test]
        fn roundtrip(log_page_count: u64, log_type: u8, available_log_pages: u8, nsid: u32) {
            let l = ReservationNotificationLog { log_page_count, log_type, available_log_pages, nsid };
            prop_assert_eq!(ReservationNotificationLog::decode(&l.to_bytes()).unwrap(), l);
        }
    }
}
