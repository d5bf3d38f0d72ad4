//! Bounded readers and writers for TLS's length-prefixed vectors (RFC 8446 section 3).

use crate::error::TlsError;

/// Reads big-endian integers and length-prefixed vectors; every read is bounds-checked and a
/// short input is a `decode_error` naming `what`.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, pos: 0, what }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], TlsError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(TlsError::decode(self.what)),
        }
    }

    pub fn u8(&mut self) -> Result<u8, TlsError> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, TlsError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self) -> Result<u32, TlsError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A vector with a one-byte length.
    pub fn vec8(&mut self) -> Result<&'a [u8], TlsError> {
        let n = self.u8()? as usize;
        self.take(n)
    }

    /// A vector with a two-byte length.
    pub fn vec16(&mut self) -> Result<&'a [u8], TlsError> {
        let n = self.u16()? as usize;
        self.take(n)
    }

    /// A sub-reader over a vector with a two-byte length.
    pub fn sub16(&mut self) -> Result<Reader<'a>, TlsError> {
        let what = self.what;
        Ok(Reader::new(self.vec16()?, what))
    }

    /// Fails unless everything was read.
    pub fn finish(&self) -> Result<(), TlsError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(TlsError::decode(self.what))
        }
    }
}

pub(crate) fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_u24(out: &mut Vec<u8>, v: usize) {
    debug_assert!(v < 1 << 24);
    out.extend_from_slice(&(v as u32).to_be_bytes()[1..]);
}

/// Writes a two-byte length, then what `f` appends, then patches the length.
pub(crate) fn with_len16(out: &mut Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0, 0]);
    f(out);
    let n = out.len() - at - 2;
    assert!(n <= u16::MAX as usize, "TLS vector over 65535 bytes");
    out[at..at + 2].copy_from_slice(&(n as u16).to_be_bytes());
}

/// Writes a one-byte length, then what `f` appends, then patches the length.
pub(crate) fn with_len8(out: &mut Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.push(0);
    f(out);
    let n = out.len() - at - 1;
    assert!(n <= u8::MAX as usize, "TLS vector over 255 bytes");
    out[at] = n as u8;
}

/// A handshake message: type, three-byte length, body.
pub(crate) fn handshake_message(msg_type: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + body.len());
    out.push(msg_type);
    put_u24(&mut out, body.len());
    out.extend_from_slice(body);
    out
}
