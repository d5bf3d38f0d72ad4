//! PDU headers and framing.
//!
//! Every PDU starts with an 8-byte common header (CH):
//! `0 type | 1 flags | 2 hlen | 3 pdo | 4..8 plen (LE)`, followed by the PDU specific
//! header (PSH) up to `hlen`, an optional 4-byte header digest, padding up to `pdo`,
//! the data, and an optional 4-byte data digest. `plen` counts all of it.

use crate::bytes::{le16, le32, put16, put32};
use crate::command::Command;
use crate::completion::Completion;
use crate::tcp::digest::crc32c;
use crate::{CQE_BYTES, SQE_BYTES};

/// PDU type codes.
pub mod pdu_type {
    pub const IC_REQ: u8 = 0x00;
    pub const IC_RESP: u8 = 0x01;
    pub const H2C_TERM_REQ: u8 = 0x02;
    pub const C2H_TERM_REQ: u8 = 0x03;
    pub const CAPSULE_CMD: u8 = 0x04;
    pub const CAPSULE_RESP: u8 = 0x05;
    pub const H2C_DATA: u8 = 0x06;
    pub const C2H_DATA: u8 = 0x07;
    pub const R2T: u8 = 0x09;
}

/// Common header flag bits.
pub mod pdu_flags {
    /// A header digest follows the header.
    pub const HDGST: u8 = 0x01;
    /// A data digest follows the data.
    pub const DDGST: u8 = 0x02;
    /// Last data PDU of a transfer (H2CData, C2HData).
    pub const LAST_PDU: u8 = 0x04;
    /// C2HData: the command completed successfully; no CapsuleResp follows.
    pub const SUCCESS: u8 = 0x08;
}

/// Length of the common header.
pub const CH_BYTES: usize = 8;
/// Length of a header or data digest.
pub const DIGEST_BYTES: usize = 4;
/// ICReq and ICResp are fixed at 128 bytes.
pub const IC_BYTES: usize = 128;
/// Header length of CapsuleCmd: CH + SQE.
pub const CAPSULE_CMD_HLEN: usize = CH_BYTES + SQE_BYTES;
/// Header length of CapsuleResp: CH + CQE.
pub const CAPSULE_RESP_HLEN: usize = CH_BYTES + CQE_BYTES;
/// Header length of H2CData, C2HData, R2T and the termination requests.
pub const DATA_HLEN: usize = 24;
/// The largest header a PDU can have plus its digest and the largest data alignment pad.
pub const MAX_HEADER_BYTES: usize = IC_BYTES + DIGEST_BYTES + 128;
/// The most bytes of the offending PDU header a termination request carries.
pub const TERM_REQ_MAX_DATA_BYTES: usize = 128;

const _: () = assert!(CAPSULE_CMD_HLEN == 72 && CAPSULE_RESP_HLEN == 24);

/// The header length each PDU type must carry, or None for an unknown type.
pub const fn expected_hlen(t: u8) -> Option<usize> {
    match t {
        pdu_type::IC_REQ | pdu_type::IC_RESP => Some(IC_BYTES),
        pdu_type::H2C_TERM_REQ | pdu_type::C2H_TERM_REQ => Some(DATA_HLEN),
        pdu_type::CAPSULE_CMD => Some(CAPSULE_CMD_HLEN),
        pdu_type::CAPSULE_RESP => Some(CAPSULE_RESP_HLEN),
        pdu_type::H2C_DATA | pdu_type::C2H_DATA | pdu_type::R2T => Some(DATA_HLEN),
        _ => None,
    }
}

/// Fatal error status (FES) codes of H2CTermReq/C2HTermReq.
pub mod fes {
    pub const INVALID_HEADER_FIELD: u16 = 0x01;
    pub const PDU_SEQUENCE_ERROR: u16 = 0x02;
    pub const HEADER_DIGEST_ERROR: u16 = 0x03;
    pub const DATA_OUT_OF_RANGE: u16 = 0x04;
    pub const R2T_LIMIT_EXCEEDED: u16 = 0x05;
    pub const UNSUPPORTED_PARAMETER: u16 = 0x06;
}

/// A fatal transport error: the connection ends with a termination request carrying
/// `fes` and `fei` (for header field errors, the byte offset of the bad field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("fatal NVMe/TCP error: {reason} (FES {fes:#x}, FEI {fei})")]
pub struct FatalError {
    pub fes: u16,
    pub fei: u32,
    pub reason: &'static str,
}

impl FatalError {
    pub const fn header_field(offset: u32, reason: &'static str) -> Self {
        FatalError {
            fes: fes::INVALID_HEADER_FIELD,
            fei: offset,
            reason,
        }
    }
    pub const fn sequence(reason: &'static str) -> Self {
        FatalError {
            fes: fes::PDU_SEQUENCE_ERROR,
            fei: 0,
            reason,
        }
    }
    pub const fn header_digest() -> Self {
        FatalError {
            fes: fes::HEADER_DIGEST_ERROR,
            fei: 0,
            reason: "header digest mismatch",
        }
    }
    pub const fn out_of_range(reason: &'static str) -> Self {
        FatalError {
            fes: fes::DATA_OUT_OF_RANGE,
            fei: 0,
            reason,
        }
    }
    pub const fn limit_exceeded(reason: &'static str) -> Self {
        FatalError {
            fes: fes::R2T_LIMIT_EXCEEDED,
            fei: 0,
            reason,
        }
    }
    pub const fn unsupported(offset: u32, reason: &'static str) -> Self {
        FatalError {
            fes: fes::UNSUPPORTED_PARAMETER,
            fei: offset,
            reason,
        }
    }
}

/// The 8-byte common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommonHeader {
    pub pdu_type: u8,
    pub flags: u8,
    pub hlen: u8,
    pub pdo: u8,
    pub plen: u32,
}

impl CommonHeader {
    pub fn decode(b: &[u8; CH_BYTES]) -> Self {
        CommonHeader {
            pdu_type: b[0],
            flags: b[1],
            hlen: b[2],
            pdo: b[3],
            plen: le32(b, 4),
        }
    }
    pub fn encode(&self, out: &mut [u8]) {
        if out.len() >= CH_BYTES {
            out[0] = self.pdu_type;
            out[1] = self.flags;
            out[2] = self.hlen;
            out[3] = self.pdo;
            put32(out, 4, self.plen);
        }
    }
}

/// Which digests a connection negotiated in ICReq/ICResp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Digests {
    pub header: bool,
    pub data: bool,
}

impl Digests {
    /// The DGST byte of ICReq/ICResp: bit 0 header digest, bit 1 data digest.
    pub const fn from_bits(b: u8) -> Self {
        Digests {
            header: b & 1 != 0,
            data: b & 2 != 0,
        }
    }
    pub const fn bits(&self) -> u8 {
        (self.header as u8) | ((self.data as u8) << 1)
    }
}

/// Where the parts of a PDU lie, derived from its common header and the digests in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PduLayout {
    /// Header length (CH + PSH).
    pub hlen: usize,
    /// Whether a header digest follows the header.
    pub has_hdgst: bool,
    /// Offset of the data from the start of the PDU (0 when there is none).
    pub data_offset: usize,
    /// Number of data bytes (without digest).
    pub data_len: usize,
    /// Whether a data digest follows the data.
    pub has_ddgst: bool,
    /// Total PDU length (plen).
    pub total_len: usize,
}

impl PduLayout {
    /// Bytes that follow the common header up to the end of the header digest.
    pub const fn header_rest_len(&self) -> usize {
        self.hlen - CH_BYTES + if self.has_hdgst { DIGEST_BYTES } else { 0 }
    }
    /// Padding bytes between the header (and digest) and the data.
    pub const fn pad_len(&self) -> usize {
        if self.data_len == 0 {
            0
        } else {
            self.data_offset - self.hlen - if self.has_hdgst { DIGEST_BYTES } else { 0 }
        }
    }
}

/// Validates a received common header against the PDU type's rules and the digests
/// in force, and works out the layout. `max_data_bytes` bounds the data a peer may send
/// in one PDU. `digests` is `None` before the connection is initialized (ICReq/ICResp).
pub fn layout(
    ch: &CommonHeader,
    digests: Option<Digests>,
    max_data_bytes: usize,
) -> Result<PduLayout, FatalError> {
    let hlen = expected_hlen(ch.pdu_type).ok_or(FatalError::header_field(0, "unknown PDU type"))?;
    if ch.hlen as usize != hlen {
        return Err(FatalError::header_field(
            2,
            "HLEN does not match the PDU type",
        ));
    }
    let is_ic = matches!(ch.pdu_type, pdu_type::IC_REQ | pdu_type::IC_RESP);
    let is_term = matches!(ch.pdu_type, pdu_type::H2C_TERM_REQ | pdu_type::C2H_TERM_REQ);
    let plen = ch.plen as usize;
    if is_ic {
        if plen != IC_BYTES {
            return Err(FatalError::header_field(
                4,
                "PLEN of ICReq/ICResp must be 128",
            ));
        }
        return Ok(PduLayout {
            hlen,
            has_hdgst: false,
            data_offset: 0,
            data_len: 0,
            has_ddgst: false,
            total_len: plen,
        });
    }
    if is_term {
        // Termination requests never carry digests; their data is the offending header.
        if plen < hlen || plen > hlen + TERM_REQ_MAX_DATA_BYTES {
            return Err(FatalError::header_field(
                4,
                "PLEN of a termination request out of range",
            ));
        }
        return Ok(PduLayout {
            hlen,
            has_hdgst: false,
            data_offset: if plen > hlen { hlen } else { 0 },
            data_len: plen - hlen,
            has_ddgst: false,
            total_len: plen,
        });
    }
    let dg = digests.ok_or(FatalError::sequence("PDU before connection initialization"))?;
    let has_hdgst = ch.flags & pdu_flags::HDGST != 0;
    let has_ddgst = ch.flags & pdu_flags::DDGST != 0;
    if has_hdgst != dg.header {
        return Err(FatalError::header_field(
            1,
            "HDGSTF flag does not match the negotiated header digest",
        ));
    }
    let header_end = hlen + if has_hdgst { DIGEST_BYTES } else { 0 };
    if plen < header_end {
        return Err(FatalError::header_field(4, "PLEN shorter than the header"));
    }
    let carries_data = matches!(
        ch.pdu_type,
        pdu_type::CAPSULE_CMD | pdu_type::H2C_DATA | pdu_type::C2H_DATA
    );
    if plen == header_end {
        if ch.pdo != 0 && carries_data {
            // A PDO with no data is tolerated only when it points at the end.
            if ch.pdo as usize != header_end {
                return Err(FatalError::header_field(3, "PDO set on a PDU without data"));
            }
        }
        if has_ddgst && ch.pdu_type != pdu_type::CAPSULE_CMD {
            return Err(FatalError::header_field(
                1,
                "DDGSTF set on a PDU without data",
            ));
        }
        return Ok(PduLayout {
            hlen,
            has_hdgst,
            data_offset: 0,
            data_len: 0,
            has_ddgst: false,
            total_len: plen,
        });
    }
    if !carries_data {
        return Err(FatalError::header_field(
            4,
            "PLEN too long for a PDU without data",
        ));
    }
    if has_ddgst != dg.data {
        return Err(FatalError::header_field(
            1,
            "DDGSTF flag does not match the negotiated data digest",
        ));
    }
    let pdo = ch.pdo as usize;
    if pdo < header_end || pdo > plen {
        return Err(FatalError::header_field(3, "PDO outside the PDU"));
    }
    let trailer = if has_ddgst { DIGEST_BYTES } else { 0 };
    let data_len = plen
        .checked_sub(pdo + trailer)
        .ok_or(FatalError::header_field(
            4,
            "PLEN shorter than PDO plus data digest",
        ))?;
    if data_len == 0 {
        return Err(FatalError::header_field(4, "data PDU with zero data bytes"));
    }
    if data_len > max_data_bytes {
        return Err(FatalError::limit_exceeded(
            "PDU carries more data than allowed",
        ));
    }
    Ok(PduLayout {
        hlen,
        has_hdgst,
        data_offset: pdo,
        data_len,
        has_ddgst,
        total_len: plen,
    })
}

/// ICReq / ICResp parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IcReq {
    /// PDU format version, 0.
    pub pfv: u16,
    /// Host PDU data alignment (0's based dwords) for data the controller sends.
    pub hpda: u8,
    pub digests: Digests,
    /// Maximum outstanding R2Ts per command, 0's based.
    pub maxr2t: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IcResp {
    pub pfv: u16,
    /// Controller PDU data alignment for data the host sends.
    pub cpda: u8,
    pub digests: Digests,
    /// Largest H2CData payload the controller accepts, in bytes.
    pub maxh2cdata: u32,
}

/// H2CTermReq / C2HTermReq.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TermReq {
    pub fes: u16,
    pub fei: u32,
}

/// H2CData / C2HData header fields. `ttag` is 0 for C2HData.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataHeader {
    pub cccid: u16,
    pub ttag: u16,
    pub offset: u32,
    pub length: u32,
}

/// R2T header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct R2t {
    pub cccid: u16,
    pub ttag: u16,
    pub offset: u32,
    pub length: u32,
}

/// A decoded PDU header (CH + PSH).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PduHeader {
    IcReq(IcReq),
    IcResp(IcResp),
    H2CTermReq(TermReq),
    C2HTermReq(TermReq),
    CapsuleCmd(Command),
    CapsuleResp(Completion),
    H2CData(DataHeader),
    C2HData(DataHeader),
    R2t(R2t),
}

impl PduHeader {
    pub const fn pdu_type(&self) -> u8 {
        match self {
            PduHeader::IcReq(_) => pdu_type::IC_REQ,
            PduHeader::IcResp(_) => pdu_type::IC_RESP,
            PduHeader::H2CTermReq(_) => pdu_type::H2C_TERM_REQ,
            PduHeader::C2HTermReq(_) => pdu_type::C2H_TERM_REQ,
            PduHeader::CapsuleCmd(_) => pdu_type::CAPSULE_CMD,
            PduHeader::CapsuleResp(_) => pdu_type::CAPSULE_RESP,
            PduHeader::H2CData(_) => pdu_type::H2C_DATA,
            PduHeader::C2HData(_) => pdu_type::C2H_DATA,
            PduHeader::R2t(_) => pdu_type::R2T,
        }
    }

    /// Decodes the header from `hdr`, which holds at least `hlen` bytes starting with the CH
    /// (the caller has validated the CH with [`layout`]).
    pub fn decode(ch: &CommonHeader, hdr: &[u8]) -> Result<Self, FatalError> {
        let hlen =
            expected_hlen(ch.pdu_type).ok_or(FatalError::header_field(0, "unknown PDU type"))?;
        let h = hdr
            .get(..hlen)
            .ok_or(FatalError::header_field(2, "header shorter than HLEN"))?;
        Ok(match ch.pdu_type {
            pdu_type::IC_REQ => PduHeader::IcReq(IcReq {
                pfv: le16(h, 8),
                hpda: h[10],
                digests: Digests::from_bits(h[11]),
                maxr2t: le32(h, 12),
            }),
            pdu_type::IC_RESP => PduHeader::IcResp(IcResp {
                pfv: le16(h, 8),
                cpda: h[10],
                digests: Digests::from_bits(h[11]),
                maxh2cdata: le32(h, 12),
            }),
            pdu_type::H2C_TERM_REQ => PduHeader::H2CTermReq(TermReq {
                fes: le16(h, 8),
                fei: le32(h, 10),
            }),
            pdu_type::C2H_TERM_REQ => PduHeader::C2HTermReq(TermReq {
                fes: le16(h, 8),
                fei: le32(h, 10),
            }),
            pdu_type::CAPSULE_CMD => {
                let mut sqe = [0u8; SQE_BYTES];
                sqe.copy_from_slice(&h[CH_BYTES..CAPSULE_CMD_HLEN]);
                PduHeader::CapsuleCmd(Command(sqe))
            }
            pdu_type::CAPSULE_RESP => {
                let mut cqe = [0u8; CQE_BYTES];
                cqe.copy_from_slice(&h[CH_BYTES..CAPSULE_RESP_HLEN]);
                PduHeader::CapsuleResp(Completion::decode(&cqe))
            }
            pdu_type::H2C_DATA | pdu_type::C2H_DATA => {
                let d = DataHeader {
                    cccid: le16(h, 8),
                    ttag: le16(h, 10),
                    offset: le32(h, 12),
                    length: le32(h, 16),
                };
                if ch.pdu_type == pdu_type::H2C_DATA {
                    PduHeader::H2CData(d)
                } else {
                    PduHeader::C2HData(d)
                }
            }
            pdu_type::R2T => PduHeader::R2t(R2t {
                cccid: le16(h, 8),
                ttag: le16(h, 10),
                offset: le32(h, 12),
                length: le32(h, 16),
            }),
            _ => return Err(FatalError::header_field(0, "unknown PDU type")),
        })
    }

    /// Writes the PSH (bytes 8..hlen) into `h`, which is at least hlen bytes and zeroed.
    fn encode_psh(&self, h: &mut [u8]) {
        match self {
            PduHeader::IcReq(r) => {
                put16(h, 8, r.pfv);
                h[10] = r.hpda;
                h[11] = r.digests.bits();
                put32(h, 12, r.maxr2t);
            }
            PduHeader::IcResp(r) => {
                put16(h, 8, r.pfv);
                h[10] = r.cpda;
                h[11] = r.digests.bits();
                put32(h, 12, r.maxh2cdata);
            }
            PduHeader::H2CTermReq(t) | PduHeader::C2HTermReq(t) => {
                put16(h, 8, t.fes);
                put32(h, 10, t.fei);
            }
            PduHeader::CapsuleCmd(c) => h[CH_BYTES..CAPSULE_CMD_HLEN].copy_from_slice(&c.0),
            PduHeader::CapsuleResp(c) => {
                h[CH_BYTES..CAPSULE_RESP_HLEN].copy_from_slice(&c.encode())
            }
            PduHeader::H2CData(d) | PduHeader::C2HData(d) => {
                put16(h, 8, d.cccid);
                put16(h, 10, d.ttag);
                put32(h, 12, d.offset);
                put32(h, 16, d.length);
            }
            PduHeader::R2t(r) => {
                put16(h, 8, r.cccid);
                put16(h, 10, r.ttag);
                put32(h, 12, r.offset);
                put32(h, 16, r.length);
            }
        }
    }
}

/// An encoded PDU header ready to send: CH + PSH, header digest and data padding.
/// The data (and its digest, see [`data_digest`]) follow separately.
#[derive(Clone)]
pub struct EncodedHeader {
    buf: [u8; MAX_HEADER_BYTES],
    len: usize,
}

impl EncodedHeader {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::fmt::Debug for EncodedHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EncodedHeader({:02x?})", self.as_bytes())
    }
}

/// How to frame an outgoing PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Framing {
    /// Digests in force on the connection (ignored for IC and termination PDUs).
    pub digests: Digests,
    /// Data alignment the peer asked for, in bytes ((PDA + 1) * 4); 0 or 4 for none.
    pub data_align_bytes: usize,
}

/// Encodes the header of a PDU carrying `data_len` data bytes, with `extra_flags`
/// (LAST_PDU, SUCCESS) added to the digest flags.
pub fn encode_header(
    h: &PduHeader,
    extra_flags: u8,
    data_len: usize,
    fr: Framing,
) -> EncodedHeader {
    let t = h.pdu_type();
    let hlen = expected_hlen(t).unwrap_or(CH_BYTES);
    let mut out = EncodedHeader {
        buf: [0u8; MAX_HEADER_BYTES],
        len: hlen,
    };
    let plain = matches!(
        t,
        pdu_type::IC_REQ | pdu_type::IC_RESP | pdu_type::H2C_TERM_REQ | pdu_type::C2H_TERM_REQ
    );
    let hd = !plain && fr.digests.header;
    let dd = !plain && fr.digests.data && data_len > 0;
    let mut flags = extra_flags;
    if hd {
        flags |= pdu_flags::HDGST;
    }
    if dd {
        flags |= pdu_flags::DDGST;
    }
    let header_end = hlen + if hd { DIGEST_BYTES } else { 0 };
    // Termination requests carry their data right after the header, without PDO.
    let (pdo, data_start) = if data_len == 0 || plain {
        (0, header_end)
    } else {
        let a = fr.data_align_bytes.max(1);
        let start = header_end.div_ceil(a) * a;
        (start, start)
    };
    let plen = data_start + data_len + if dd { DIGEST_BYTES } else { 0 };
    h.encode_psh(&mut out.buf[..hlen]);
    CommonHeader {
        pdu_type: t,
        flags,
        hlen: hlen as u8,
        pdo: pdo.min(255) as u8,
        plen: plen as u32,
    }
    .encode(&mut out.buf);
    if hd {
        let d = crc32c(&out.buf[..hlen]);
        put32(&mut out.buf, hlen, d);
    }
    out.len = data_start.min(MAX_HEADER_BYTES);
    out
}

/// The 4 data-digest bytes for `data`.
pub fn data_digest(data: &[u8]) -> [u8; DIGEST_BYTES] {
    crc32c(data).to_le_bytes()
}

/// Checks the header digest that follows the `hlen` header bytes in `hdr`.
pub fn check_header_digest(hdr: &[u8], hlen: usize) -> Result<(), FatalError> {
    let (Some(h), Some(d)) = (hdr.get(..hlen), hdr.get(hlen..hlen + DIGEST_BYTES)) else {
        return Err(FatalError::header_digest());
    };
    if crc32c(h) == le32(d, 0) {
        Ok(())
    } else {
        Err(FatalError::header_digest())
    }
}

/// Encodes a complete termination request (C2H from a controller, H2C from a host)
/// carrying up to 128 bytes of the offending PDU header.
pub fn encode_term_req(from_controller: bool, err: &FatalError, offending: &[u8]) -> Vec<u8> {
    let n = offending.len().min(TERM_REQ_MAX_DATA_BYTES);
    let t = TermReq {
        fes: err.fes,
        fei: err.fei,
    };
    let h = if from_controller {
        PduHeader::C2HTermReq(t)
    } else {
        PduHeader::H2CTermReq(t)
    };
    let hdr = encode_header(&h, 0, n, Framing::default());
    let mut v = Vec::with_capacity(DATA_HLEN + n);
    v.extend_from_slice(hdr.as_bytes());
    // Termination requests carry no PDO; their data starts right after the header.
    if let Some(b) = v.get_mut(3) {
        *b = 0;
    }
    v.extend_from_slice(&offending[..n]);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ch_of(b: &[u8]) -> CommonHeader {
        let mut a = [0u8; CH_BYTES];
        a.copy_from_slice(&b[..CH_BYTES]);
        CommonHeader::decode(&a)
    }

    #[test]
    fn icresp_bytes() {
        let h = PduHeader::IcResp(IcResp {
            pfv: 0,
            cpda: 0,
            digests: Digests {
                header: true,
                data: false,
            },
            maxh2cdata: 0x2_0000,
        });
        let e = encode_header(&h, 0, 0, Framing::default());
        let b = e.as_bytes();
        assert_eq!(b.len(), 128);
        assert_eq!(&b[..8], &[0x01, 0, 128, 0, 128, 0, 0, 0]);
        assert_eq!(b[11], 1);
        assert_eq!(&b[12..16], &[0, 0, 2, 0]);
    }

    #[test]
    fn c2h_data_with_digests() {
        let h = PduHeader::C2HData(DataHeader {
            cccid: 5,
            ttag: 0,
            offset: 0,
            length: 512,
        });
        let fr = Framing {
            digests: Digests {
                header: true,
                data: true,
            },
            data_align_bytes: 0,
        };
        let e = encode_header(&h, pdu_flags::LAST_PDU | pdu_flags::SUCCESS, 512, fr);
        let b = e.as_bytes();
        let ch = ch_of(b);
        assert_eq!(ch.flags, 0x0F);
        assert_eq!(ch.hlen, 24);
        assert_eq!(ch.pdo, 28);
        assert_eq!(ch.plen, 28 + 512 + 4);
        check_header_digest(b, 24).unwrap();
        let l = layout(&ch, Some(fr.digests), 1 << 20).unwrap();
        assert_eq!((l.data_offset, l.data_len, l.has_ddgst), (28, 512, true));
    }

    #[test]
    fn aligned_data_offset() {
        let h = PduHeader::C2HData(DataHeader {
            cccid: 1,
            ttag: 0,
            offset: 0,
            length: 8,
        });
        let fr = Framing {
            digests: Digests::default(),
            data_align_bytes: 64,
        };
        let e = encode_header(&h, 0, 8, fr);
        assert_eq!(e.as_bytes().len(), 64);
        let ch = ch_of(e.as_bytes());
        assert_eq!(ch.pdo, 64);
        let l = layout(&ch, Some(Digests::default()), 1 << 20).unwrap();
        assert_eq!(l.pad_len(), 40);
    }

    #[test]
    fn rejects_bad_headers() {
        let d = Some(Digests::default());
        // Unknown type.
        let ch = CommonHeader {
            pdu_type: 0x08,
            flags: 0,
            hlen: 24,
            pdo: 0,
            plen: 24,
        };
        assert_eq!(
            layout(&ch, d, 4096).unwrap_err().fes,
            fes::INVALID_HEADER_FIELD
        );
        // Wrong hlen for a capsule.
        let ch = CommonHeader {
            pdu_type: 4,
            flags: 0,
            hlen: 24,
            pdo: 0,
            plen: 72,
        };
        assert_eq!(layout(&ch, d, 4096).unwrap_err().fei, 2);
        // Header digest flag without negotiation.
        let ch = CommonHeader {
            pdu_type: 4,
            flags: 1,
            hlen: 72,
            pdo: 0,
            plen: 76,
        };
        assert_eq!(layout(&ch, d, 4096).unwrap_err().fei, 1);
        // Too much data.
        let ch = CommonHeader {
            pdu_type: 6,
            flags: 0,
            hlen: 24,
            pdo: 24,
            plen: 24 + 8192,
        };
        assert_eq!(
            layout(&ch, d, 4096).unwrap_err().fes,
            fes::R2T_LIMIT_EXCEEDED
        );
        // Capsule before ICReq.
        let ch = CommonHeader {
            pdu_type: 4,
            flags: 0,
            hlen: 72,
            pdo: 0,
            plen: 72,
        };
        assert_eq!(
            layout(&ch, None, 4096).unwrap_err().fes,
            fes::PDU_SEQUENCE_ERROR
        );
        // ICReq with a wrong plen.
        let ch = CommonHeader {
            pdu_type: 0,
            flags: 0,
            hlen: 128,
            pdo: 0,
            plen: 200,
        };
        assert!(layout(&ch, None, 4096).is_err());
        // PDO inside the header.
        let ch = CommonHeader {
            pdu_type: 4,
            flags: 0,
            hlen: 72,
            pdo: 10,
            plen: 72 + 16,
        };
        assert_eq!(layout(&ch, d, 4096).unwrap_err().fei, 3);
    }

    #[test]
    fn term_req_layout() {
        let v = encode_term_req(true, &FatalError::header_digest(), &[0xAA; 200]);
        assert_eq!(v.len(), 24 + 128);
        let ch = ch_of(&v);
        assert_eq!(ch.pdu_type, pdu_type::C2H_TERM_REQ);
        assert_eq!(ch.plen as usize, v.len());
        assert_eq!(le16(&v, 8), fes::HEADER_DIGEST_ERROR);
        assert!(layout(&ch, None, 0).is_ok());
    }

    fn any_header() -> impl Strategy<Value = PduHeader> {
        prop_oneof![
            (any::<u16>(), any::<u8>(), 0u8..4, any::<u32>()).prop_map(|(pfv, hpda, d, maxr2t)| {
                PduHeader::IcReq(IcReq {
                    pfv,
                    hpda,
                    digests: Digests::from_bits(d),
                    maxr2t,
                })
            }),
            (any::<u16>(), any::<u8>(), 0u8..4, any::<u32>()).prop_map(|(pfv, cpda, d, m)| {
                PduHeader::IcResp(IcResp {
                    pfv,
                    cpda,
                    digests: Digests::from_bits(d),
                    maxh2cdata: m,
                })
            }),
            proptest::array::uniform32(any::<u8>()).prop_map(|a| {
                let mut sqe = [0u8; 64];
                sqe[..32].copy_from_slice(&a);
                sqe[32..].copy_from_slice(&a);
                PduHeader::CapsuleCmd(Command(sqe))
            }),
            (any::<u16>(), any::<u16>(), any::<u32>(), any::<u32>()).prop_map(|(c, t, o, l)| {
                PduHeader::H2CData(DataHeader {
                    cccid: c,
                    ttag: t,
                    offset: o,
                    length: l,
                })
            }),
            (any::<u16>(), any::<u16>(), any::<u32>(), any::<u32>()).prop_map(|(c, t, o, l)| {
                PduHeader::R2t(R2t {
                    cccid: c,
                    ttag: t,
                    offset: o,
                    length: l,
                })
            }),
            (any::<u16>(), any::<u32>())
                .prop_map(|(fes, fei)| PduHeader::C2HTermReq(TermReq { fes, fei })),
        ]
    }

    proptest! {
        #[test]
        fn header_roundtrip(h in any_header(), hd: bool, dd: bool, align in 0usize..5) {
            let fr = Framing { digests: Digests { header: hd, data: dd }, data_align_bytes: align * 16 };
            let data_len = if matches!(h, PduHeader::H2CData(_)) { 100 } else { 0 };
            let e = encode_header(&h, 0, data_len, fr);
            let b = e.as_bytes();
            let ch = ch_of(b);
            let is_plain = matches!(h, PduHeader::IcReq(_) | PduHeader::IcResp(_) | PduHeader::C2HTermReq(_));
            let l = layout(&ch, if is_plain { None } else { Some(fr.digests) }, 1 << 20).unwrap();
            prop_assert_eq!(l.data_len, data_len);
            if l.has_hdgst { check_header_digest(b, l.hlen).unwrap(); }
            prop_assert_eq!(PduHeader::decode(&ch, b).unwrap(), h);
        }

        #[test]
        fn layout_never_panics(t: u8, flags: u8, hlen: u8, pdo: u8, plen: u32, hd: bool, dd: bool, max in 0usize..100_000) {
            let ch = CommonHeader { pdu_type: t, flags, hlen, pdo, plen };
            if let Ok(l) = layout(&ch, Some(Digests { header: hd, data: dd }), max) {
                let trailer = if l.has_ddgst { 4 } else { 0 };
                prop_assert!(l.data_offset + l.data_len + trailer <= l.total_len);
                prop_assert!(l.data_len <= max.max(TERM_REQ_MAX_DATA_BYTES));
            }
        }
    }
}
