//! Little-endian field access for the on-disk structures. Reads return `None` instead of
//! panicking when a field lies outside the buffer (disk content is never trusted).

pub(crate) fn get_u32(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

pub(crate) fn get_u64(buf: &[u8], at: usize) -> Option<u64> {
    let b = buf.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

pub(crate) fn get_array<const N: usize>(buf: &[u8], at: usize) -> Option<[u8; N]> {
    buf.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// Writers: callers size the buffer first; a field outside it is a bug in this crate.
pub(crate) fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn align_up(v: u64, align: u64) -> u64 {
    v.div_ceil(align) * align
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_reads_are_none() {
        let b = [1u8, 0, 0, 0, 2, 0, 0, 0];
        assert_eq!(get_u32(&b, 4), Some(2));
        assert_eq!(get_u32(&b, 5), None);
        assert_eq!(get_u64(&b, 0), Some(0x0000_0002_0000_0001));
        assert_eq!(get_u64(&b, 1), None);
        assert_eq!(get_u32(&b, usize::MAX), None);
        assert_eq!(get_array::<2>(&b, 7), None);
        assert_eq!(align_up(4097, 4096), 8192);
    }
}
