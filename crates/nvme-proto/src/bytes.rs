//! Little-endian field access on byte slices with bounds checks.
//!
//! Getters return 0 past the end of the slice only where documented by the caller;
//! the `get_*` helpers here are for fixed-size arrays whose length is already checked.

/// Reads a little-endian u16 at `off` from a slice known to be long enough.
/// Returns 0 if the slice is too short (callers check lengths first; this keeps
/// decoding panic-free even if they do not).
#[inline]
pub fn le16(b: &[u8], off: usize) -> u16 {
    match b.get(off..off + 2) {
        Some(s) => u16::from_le_bytes([s[0], s[1]]),
        None => 0,
    }
}

/// Reads a little-endian u32 at `off`, 0 if out of bounds.
#[inline]
pub fn le32(b: &[u8], off: usize) -> u32 {
    match b.get(off..off + 4) {
        Some(s) => u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
        None => 0,
    }
}

/// Reads a little-endian u64 at `off`, 0 if out of bounds.
#[inline]
pub fn le64(b: &[u8], off: usize) -> u64 {
    match b.get(off..off + 8) {
        Some(s) => {
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            u64::from_le_bytes(a)
        }
        None => 0,
    }
}

/// Writes a little-endian u16 at `off`; ignored if out of bounds (encoders size their buffers).
#[inline]
pub fn put16(b: &mut [u8], off: usize, v: u16) {
    if let Some(s) = b.get_mut(off..off + 2) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Writes a little-endian u32 at `off`; ignored if out of bounds.
#[inline]
pub fn put32(b: &mut [u8], off: usize, v: u32) {
    if let Some(s) = b.get_mut(off..off + 4) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Writes a little-endian u64 at `off`; ignored if out of bounds.
#[inline]
pub fn put64(b: &mut [u8], off: usize, v: u64) {
    if let Some(s) = b.get_mut(off..off + 8) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Copies `src` into `dst[off..]`, truncating to the room available.
#[inline]
pub fn put_bytes(dst: &mut [u8], off: usize, src: &[u8]) {
    if let Some(d) = dst.get_mut(off..) {
        let n = d.len().min(src.len());
        d[..n].copy_from_slice(&src[..n]);
    }
}

/// Writes an ASCII string field padded with spaces (Identify SN/MN/FR style).
pub fn put_ascii_padded(dst: &mut [u8], off: usize, len: usize, s: &str) {
    if let Some(d) = dst.get_mut(off..off + len) {
        d.fill(b' ');
        let n = floor_char_boundary(s, len);
        d[..n].copy_from_slice(&s.as_bytes()[..n]);
    }
}

/// The largest `n <= max` at which `s` can be cut without splitting a UTF-8 character
/// (so that truncated fields stay valid UTF-8).
pub fn floor_char_boundary(s: &str, max: usize) -> usize {
    if max >= s.len() {
        return s.len();
    }
    let mut n = max;
    while n > 0 && !s.is_char_boundary(n) {
        n -= 1;
    }
    n
}

/// Writes a NUL-terminated/padded string field (NQN style).
pub fn put_str_nul(dst: &mut [u8], off: usize, len: usize, s: &str) {
    if let Some(d) = dst.get_mut(off..off + len) {
        d.fill(0);
        let n = floor_char_boundary(s, len.saturating_sub(1));
        d[..n].copy_from_slice(&s.as_bytes()[..n]);
    }
}

/// Reads a NUL-terminated (or full-length) string field, lossily as UTF-8, trimmed of
/// trailing NULs and spaces.
pub fn get_str(b: &[u8], off: usize, len: usize) -> String {
    let s = b.get(off..(off + len).min(b.len())).unwrap_or(&[]);
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    String::from_utf8_lossy(&s[..end]).trim_end().to_string()
}

/// Reads a NUL-terminated string field lossily as UTF-8, without trimming (NQN fields,
/// where spaces are significant). The result is cut to `len - 1` bytes, so that it always
/// fits the field again with its NUL.
pub fn get_str_nul(b: &[u8], off: usize, len: usize) -> String {
    let s = b.get(off..(off + len).min(b.len())).unwrap_or(&[]);
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    let mut v = String::from_utf8_lossy(&s[..end]).into_owned();
    v.truncate(floor_char_boundary(&v, len.saturating_sub(1)));
    v
}

/// Reads a space-padded ASCII field (Identify SN/MN/FR style) up to the first NUL: bytes
/// that are not printable ASCII become '?', trailing spaces are trimmed. The result always
/// fits the field again byte for byte.
pub fn get_ascii(b: &[u8], off: usize, len: usize) -> String {
    let s = b.get(off..(off + len).min(b.len())).unwrap_or(&[]);
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    let v: String = s[..end]
        .iter()
        .map(|&c| {
            if (0x20..0x7F).contains(&c) {
                c as char
            } else {
                '?'
            }
        })
        .collect();
    v.trim_end_matches(' ').to_string()
}

/// Reads a little-endian u128 at `off` (Identify and SMART 16-byte counters), 0 if out of bounds.
#[inline]
pub fn le128(b: &[u8], off: usize) -> u128 {
    match b.get(off..off + 16) {
        Some(s) => {
            let mut a = [0u8; 16];
            a.copy_from_slice(s);
            u128::from_le_bytes(a)
        }
        None => 0,
    }
}

/// Writes a little-endian u128 at `off`; ignored if out of bounds.
#[inline]
pub fn put128(b: &mut [u8], off: usize, v: u128) {
    if let Some(s) = b.get_mut(off..off + 16) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Copies `N` bytes at `off` into an array, zeros if out of bounds.
#[inline]
pub fn get_array<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    if let Some(s) = b.get(off..off + N) {
        a.copy_from_slice(s);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_utf8_valid() {
        let mut b = [0u8; 4];
        // "aé€": 1 + 2 + 3 bytes; 3 bytes of room keep "aé" only.
        put_str_nul(&mut b, 0, 4, "aé€");
        assert_eq!(&b, &[b'a', 0xC3, 0xA9, 0]);
        put_ascii_padded(&mut b, 0, 2, "€");
        assert_eq!(&b[..2], b"  ");
        assert_eq!(get_str_nul(&[b'x'; 8], 0, 8), "xxxxxxx");
        assert_eq!(get_ascii(b"A\xffB  \0zz", 0, 8), "A?B");
        assert_eq!(le128(&[1; 15], 0), 0);
        assert_eq!(get_array::<2>(&[7, 8, 9], 1), [8, 9]);
        assert_eq!(get_array::<2>(&[7, 8, 9], 2), [0, 0]);
    }
}
