//! Header and data digests: CRC-32C (Castagnoli), stored little-endian after the
//! header or data they cover.

/// CRC-32C of `data` as NVMe/TCP digests carry it.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continues a CRC-32C over a further piece of the same data (for data split across buffers).
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // RFC 3720 B.4: 32 bytes of zeroes -> 0x8A9136AA.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        // "123456789" -> 0xE3069283 (the CRC-32C check value).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xE306_9283);
    }
}
