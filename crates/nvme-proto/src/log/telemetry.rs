//! Telemetry Host-Initiated log page (LID 07h; NVMe Base 2.0 "Telemetry Host-Initiated";
//! Linux `struct nvme_telemetry_log`).
//!
//! A 512-byte header, then data areas 1..3 in 512-byte blocks: area 1 runs from block 1
//! through block `data_area_last_block[0]`, area 2 from the next block through
//! `[1]`, area 3 through `[2]` (a last block equal to the previous one: empty). Ferrobay
//! puts its extended SMART page (`ext_smart`, `docs/wire/ext-smart.md`) in data area 1,
//! padded with zeroes to a whole block; areas 2 and 3 are empty. The log specific
//! parameter bit 0 (Create Telemetry Host-Initiated Data) asks the controller to capture
//! new data; the generation number counts captures.

use crate::bytes::{le16, le32, put_bytes, put16, put32};
use crate::error::DecodeError;

pub const HEADER_BYTES: usize = 512;
pub const BLOCK_BYTES: usize = 512;
/// Log specific parameter: capture new data before returning the page.
pub const LSP_CREATE: u8 = 1 << 0;
/// The IEEE OUI field: Ferrobay has none registered, so it stays zero.
pub const IEEE_OUI: [u8; 3] = [0, 0, 0];

/// Header offsets.
pub mod off {
    pub const LOG_IDENTIFIER: usize = 0;
    pub const IEEE_OUI: usize = 5;
    pub const DATA_AREA_1_LAST_BLOCK: usize = 8;
    pub const DATA_AREA_2_LAST_BLOCK: usize = 10;
    pub const DATA_AREA_3_LAST_BLOCK: usize = 12;
    pub const DATA_AREA_4_LAST_BLOCK: usize = 16;
    pub const HOST_GENERATION: usize = 381;
    pub const CONTROLLER_DATA_AVAILABLE: usize = 382;
    pub const CONTROLLER_GENERATION: usize = 383;
    pub const REASON_IDENTIFIER: usize = 384;
    pub const REASON_IDENTIFIER_BYTES: usize = 128;
}

/// The header of a Telemetry Host-Initiated page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TelemetryHeader {
    pub log_identifier: u8,
    pub ieee_oui: [u8; 3],
    /// Last block of data areas 1, 2 and 3.
    pub data_area_last_block: [u16; 3],
    pub data_area_4_last_block: u32,
    pub host_generation: u8,
    pub controller_data_available: bool,
    pub controller_generation: u8,
    pub reason_identifier: Vec<u8>,
}

impl TelemetryHeader {
    pub fn encode(&self, b: &mut [u8]) {
        put_bytes(b, off::LOG_IDENTIFIER, &[self.log_identifier]);
        put_bytes(b, off::IEEE_OUI, &self.ieee_oui);
        put16(b, off::DATA_AREA_1_LAST_BLOCK, self.data_area_last_block[0]);
        put16(b, off::DATA_AREA_2_LAST_BLOCK, self.data_area_last_block[1]);
        put16(b, off::DATA_AREA_3_LAST_BLOCK, self.data_area_last_block[2]);
        put32(b, off::DATA_AREA_4_LAST_BLOCK, self.data_area_4_last_block);
        put_bytes(
            b,
            off::HOST_GENERATION,
            &[
                self.host_generation,
                u8::from(self.controller_data_available),
                self.controller_generation,
            ],
        );
        let n = self
            .reason_identifier
            .len()
            .min(off::REASON_IDENTIFIER_BYTES);
        put_bytes(b, off::REASON_IDENTIFIER, &self.reason_identifier[..n]);
    }

    pub fn decode(b: &[u8]) -> Result<TelemetryHeader, DecodeError> {
        if b.len() < HEADER_BYTES {
            return Err(DecodeError::Short {
                what: "telemetry log header",
                needed_bytes: HEADER_BYTES,
                got_bytes: b.len(),
            });
        }
        Ok(TelemetryHeader {
            log_identifier: b[off::LOG_IDENTIFIER],
            ieee_oui: [b[5], b[6], b[7]],
            data_area_last_block: [
                le16(b, off::DATA_AREA_1_LAST_BLOCK),
                le16(b, off::DATA_AREA_2_LAST_BLOCK),
                le16(b, off::DATA_AREA_3_LAST_BLOCK),
            ],
            data_area_4_last_block: le32(b, off::DATA_AREA_4_LAST_BLOCK),
            host_generation: b[off::HOST_GENERATION],
            controller_data_available: b[off::CONTROLLER_DATA_AVAILABLE] != 0,
            controller_generation: b[off::CONTROLLER_GENERATION],
            reason_identifier: b[off::REASON_IDENTIFIER..HEADER_BYTES].to_vec(),
        })
    }

    /// Byte range of data area `n` (1..=3) in the page, by the last-block fields; `None`
    /// for an empty area or a bad `n`.
    pub fn data_area(&self, n: usize) -> Option<std::ops::Range<usize>> {
        if !(1..=3).contains(&n) {
            return None;
        }
        let first_block = if n == 1 {
            1
        } else {
            usize::from(self.data_area_last_block[n - 2]) + 1
        };
        let last = usize::from(self.data_area_last_block[n - 1]);
        (last >= first_block).then(|| first_block * BLOCK_BYTES..(last + 1) * BLOCK_BYTES)
    }
}

/// A whole Telemetry Host-Initiated page with `area1` as data area 1 (padded to blocks;
/// cut at 65534 blocks, the most a u16 last block can address).
pub fn host_initiated_page(generation: u8, area1: &[u8]) -> Vec<u8> {
    let max = (u16::MAX as usize - 1) * BLOCK_BYTES;
    let area1 = &area1[..area1.len().min(max)];
    let blocks = area1.len().div_ceil(BLOCK_BYTES);
    let mut b = vec![0u8; HEADER_BYTES + blocks * BLOCK_BYTES];
    let last = blocks as u16; // area 1 is blocks 1..=blocks
    TelemetryHeader {
        log_identifier: super::lid::TELEMETRY_HOST,
        ieee_oui: IEEE_OUI,
        data_area_last_block: [last, last, last],
        data_area_4_last_block: u32::from(last),
        host_generation: generation,
        controller_data_available: false,
        controller_generation: 0,
        reason_identifier: Vec::new(),
    }
    .encode(&mut b);
    b[HEADER_BYTES..HEADER_BYTES + area1.len()].copy_from_slice(area1);
    b
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn page_layout() {
        let p = host_initiated_page(3, &[0xAB; 700]);
        assert_eq!(p.len(), 512 + 1024);
        assert_eq!(p[0], 0x07);
        assert_eq!(le16(&p, 8), 2);
        assert_eq!(le16(&p, 10), 2);
        assert_eq!(p[381], 3);
        let h = TelemetryHeader::decode(&p).unwrap();
        assert_eq!(h.data_area(1), Some(512..1536));
        assert_eq!(h.data_area(2), None);
        assert_eq!(&p[512..512 + 700], &[0xAB; 700][..]);
        assert!(p[512 + 700..].iter().all(|&b| b == 0));
        let empty = host_initiated_page(0, &[]);
        assert_eq!(empty.len(), 512);
        assert_eq!(TelemetryHeader::decode(&empty).unwrap().data_area(1), None);
    }

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..1100), n in 0usize..5) {
            if let Ok(h) = TelemetryHeader::decode(&b) {
                let _ = h.data_area(n);
            }
        }
    }
}
