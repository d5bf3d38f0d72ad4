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
        let n = len.min(s.len());
        d[..n].copy_from_slice(&s.as_bytes()[..n]);
    }
}

/// Writes a NUL-terminated/padded string field (NQN style).
pub fn put_str_nul(dst: &mut [u8], off: usize, len: usize, s: &str) {
    if let Some(d) = dst.get_mut(off..off + len) {
        d.fill(0);
        let n = (len.saturating_sub(1)).min(s.len());
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
