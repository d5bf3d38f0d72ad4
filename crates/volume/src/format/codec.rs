//! Bounds-checked little-endian field access on a fixed-size block.
//!
//! Every accessor takes an offset from the format tables and a slice whose length was
//! checked once by the caller, so field reads cannot fail at run time; they still never
//! index out of bounds (a wrong constant yields zeroes, caught by the vector tests).

pub(crate) fn get<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = buf.get(at..at + N) {
        out.copy_from_slice(src);
    }
    out
}

pub(crate) fn u8_at(buf: &[u8], at: usize) -> u8 {
    get::<1>(buf, at)[0]
}

pub(crate) fn u16_at(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(get(buf, at))
}

pub(crate) fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(get(buf, at))
}

pub(crate) fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(get(buf, at))
}

pub(crate) fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = buf.get_mut(at..at + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

pub(crate) fn put_u8(buf: &mut [u8], at: usize, v: u8) {
    put(buf, at, &[v]);
}

pub(crate) fn put_u16(buf: &mut [u8], at: usize, v: u16) {
    put(buf, at, &v.to_le_bytes());
}

pub(crate) fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    put(buf, at, &v.to_le_bytes());
}

pub(crate) fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    put(buf, at, &v.to_le_bytes());
}

/// A UTF-8 string stored NUL-padded in `max` bytes with its length elsewhere.
pub(crate) fn str_at(buf: &[u8], at: usize, len: usize, max: usize) -> Option<String> {
    if len > max {
        return None;
    }
    let bytes = buf.get(at..at + len)?;
    std::str::from_utf8(bytes).ok().map(str::to_owned)
}
