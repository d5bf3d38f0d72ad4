//! The in-band authentication messages carried by Authentication Send and Authentication
//! Receive (NVMe Base 2.0, 8.13.5 "DH-HMAC-CHAP Protocol"; Linux `struct nvmf_auth_*`).
//! Offsets: `docs/wire/auth.md`.
//!
//! Every message starts with AUTH-Type (byte 0), AUTH-Id (byte 1), reserved (2..4) and
//! T_ID (4..6). Decoders check lengths only: whether a value is acceptable (a known hash,
//! a matching transaction) is the state machine's question, answered with a Failure1
//! reason code.

use crate::bytes::{le16, le32, put16, put32};
use crate::error::DecodeError;

/// AUTH-Type values.
pub mod auth_type {
    /// Common messages (Negotiate, Failure1, Failure2).
    pub const COMMON: u8 = 0x00;
    /// DH-HMAC-CHAP messages (Challenge, Reply, Success1, Success2).
    pub const DHCHAP: u8 = 0x01;
}

/// AUTH-Id values.
pub mod msg_id {
    pub const NEGOTIATE: u8 = 0x00;
    pub const CHALLENGE: u8 = 0x01;
    pub const REPLY: u8 = 0x02;
    pub const SUCCESS1: u8 = 0x03;
    pub const SUCCESS2: u8 = 0x04;
    pub const FAILURE2: u8 = 0xF0;
    pub const FAILURE1: u8 = 0xF1;
}

/// AUTHID of the DH-HMAC-CHAP protocol descriptor.
pub const AUTH_ID_DHCHAP: u8 = 0x01;
/// SC_C: no secure channel concatenation.
pub const SC_C_NONE: u8 = 0x00;
/// SC_C: secure channel concatenation on a queue without TLS: the exchange generates a new
/// TLS PSK, with which the host then reconnects over TLS (Linux NVME_AUTH_SECP_NEWTLSPSK).
pub const SC_C_NEWTLSPSK: u8 = 0x01;
/// SC_C: re-authentication on a queue already over TLS with a generated PSK: the exchange
/// generates the PSK that replaces it for the next connections (NVME_AUTH_SECP_REPLACETLSPSK).
pub const SC_C_REPLACETLSPSK: u8 = 0x02;
/// Size of one protocol descriptor in AUTH_Negotiate.
pub const DESCRIPTOR_BYTES: usize = 64;
/// Most hash (and most DH group) identifiers one descriptor holds.
pub const MAX_IDS: usize = 30;
/// Bytes of the fixed header of Challenge, Reply, Success1 and Success2.
pub const HEADER_BYTES: usize = 16;
/// Bytes of a Failure1/Failure2 message.
pub const FAILURE_BYTES: usize = 8;

/// Reason code of Failure1/Failure2: "authentication failure".
pub const REASON_FAILED: u8 = 0x01;

/// Reason code explanations of Failure1/Failure2 (NVMe Base 2.0, Figure 449).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FailureReason {
    /// Authentication failed (e.g. a response did not match).
    Failed = 0x01,
    /// The protocol is not usable.
    NotUsable = 0x02,
    /// Secure channel concatenation mismatch.
    ConcatMismatch = 0x03,
    /// None of the offered hash functions is usable.
    HashUnusable = 0x04,
    /// None of the offered DH groups is usable.
    DhGroupUnusable = 0x05,
    /// A message's payload is incorrect.
    IncorrectPayload = 0x06,
    /// A message arrived out of order or is of an unexpected kind.
    IncorrectMessage = 0x07,
}

impl FailureReason {
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0x01 => FailureReason::Failed,
            0x02 => FailureReason::NotUsable,
            0x03 => FailureReason::ConcatMismatch,
            0x04 => FailureReason::HashUnusable,
            0x05 => FailureReason::DhGroupUnusable,
            0x06 => FailureReason::IncorrectPayload,
            0x07 => FailureReason::IncorrectMessage,
            _ => return None,
        })
    }
    /// A short description for logs.
    pub const fn describe(self) -> &'static str {
        match self {
            FailureReason::Failed => "authentication failed",
            FailureReason::NotUsable => "authentication protocol not usable",
            FailureReason::ConcatMismatch => "secure channel concatenation mismatch",
            FailureReason::HashUnusable => "no usable hash function",
            FailureReason::DhGroupUnusable => "no usable DH group",
            FailureReason::IncorrectPayload => "incorrect payload",
            FailureReason::IncorrectMessage => "incorrect message",
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:#04x})", self.describe(), *self as u8)
    }
}

fn short(what: &'static str, needed_bytes: usize, got_bytes: usize) -> DecodeError {
    DecodeError::Short {
        what,
        needed_bytes,
        got_bytes,
    }
}

fn slice<'a>(
    b: &'a [u8],
    off: usize,
    len: usize,
    what: &'static str,
) -> Result<&'a [u8], DecodeError> {
    b.get(off..off + len)
        .ok_or_else(|| short(what, off + len, b.len()))
}

/// One protocol descriptor of AUTH_Negotiate (64 bytes): AUTHID, HALEN hash identifiers
/// in IDList[0..30] and DHLEN DH group identifiers in IDList[30..60].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProtocolDescriptor {
    pub authid: u8,
    /// Hash function identifiers in the host's order of preference (at most 30).
    pub hash_ids: Vec<u8>,
    /// DH group identifiers in the host's order of preference (at most 30).
    pub dh_ids: Vec<u8>,
}

impl ProtocolDescriptor {
    /// A DH-HMAC-CHAP descriptor.
    pub fn dhchap(hash_ids: &[u8], dh_ids: &[u8]) -> Self {
        ProtocolDescriptor {
            authid: AUTH_ID_DHCHAP,
            hash_ids: hash_ids.iter().copied().take(MAX_IDS).collect(),
            dh_ids: dh_ids.iter().copied().take(MAX_IDS).collect(),
        }
    }
    fn encode(&self, out: &mut [u8]) {
        if out.len() < DESCRIPTOR_BYTES {
            return;
        }
        out[..DESCRIPTOR_BYTES].fill(0);
        out[0] = self.authid;
        let h = self.hash_ids.len().min(MAX_IDS);
        let d = self.dh_ids.len().min(MAX_IDS);
        out[2] = h as u8;
        out[3] = d as u8;
        out[4..4 + h].copy_from_slice(&self.hash_ids[..h]);
        out[34..34 + d].copy_from_slice(&self.dh_ids[..d]);
    }
    fn decode(b: &[u8], base: usize) -> Result<Self, DecodeError> {
        let b = slice(
            b,
            base,
            DESCRIPTOR_BYTES,
            "AUTH_Negotiate protocol descriptor",
        )?;
        let (halen, dhlen) = (b[2] as usize, b[3] as usize);
        if halen > MAX_IDS {
            return Err(DecodeError::InvalidField {
                what: "AUTH_Negotiate descriptor",
                offset: base + 2,
                reason: "HALEN above 30",
            });
        }
        if dhlen > MAX_IDS {
            return Err(DecodeError::InvalidField {
                what: "AUTH_Negotiate descriptor",
                offset: base + 3,
                reason: "DHLEN above 30",
            });
        }
        Ok(ProtocolDescriptor {
            authid: b[0],
            hash_ids: b[4..4 + halen].to_vec(),
            dh_ids: b[34..34 + dhlen].to_vec(),
        })
    }
}

/// AUTH_Negotiate (host to controller, AUTH-Type 00h, AUTH-Id 00h): 8 bytes, then NAPD
/// protocol descriptors.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Negotiate {
    pub t_id: u16,
    /// Secure channel concatenation (0: none).
    pub sc_c: u8,
    pub protocols: Vec<ProtocolDescriptor>,
}

impl Negotiate {
    pub fn len(&self) -> usize {
        8 + DESCRIPTOR_BYTES * self.protocols.len().min(255)
    }
    pub fn is_empty(&self) -> bool {
        self.protocols.is_empty()
    }
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.encode(&mut v);
        v
    }
    pub fn encode(&self, out: &mut [u8]) {
        let n = self.len().min(out.len());
        out[..n].fill(0);
        if out.len() < 8 {
            return;
        }
        out[0] = auth_type::COMMON;
        out[1] = msg_id::NEGOTIATE;
        put16(out, 4, self.t_id);
        out[6] = self.sc_c;
        out[7] = self.protocols.len().min(255) as u8;
        for (i, p) in self.protocols.iter().take(255).enumerate() {
            if let Some(d) = out.get_mut(8 + i * DESCRIPTOR_BYTES..) {
                p.encode(d);
            }
        }
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        header(b, 8, auth_type::COMMON, msg_id::NEGOTIATE, "AUTH_Negotiate")?;
        let napd = b[7] as usize;
        let need = 8 + napd * DESCRIPTOR_BYTES;
        if b.len() < need {
            return Err(short("AUTH_Negotiate descriptors", need, b.len()));
        }
        let mut protocols = Vec::with_capacity(napd);
        for i in 0..napd {
            protocols.push(ProtocolDescriptor::decode(b, 8 + i * DESCRIPTOR_BYTES)?);
        }
        Ok(Negotiate {
            t_id: le16(b, 4),
            sc_c: b[6],
            protocols,
        })
    }
}

fn header(b: &[u8], min: usize, ty: u8, id: u8, what: &'static str) -> Result<(), DecodeError> {
    if b.len() < min {
        return Err(short(what, min, b.len()));
    }
    if b[0] != ty {
        return Err(DecodeError::InvalidField {
            what,
            offset: 0,
            reason: "wrong AUTH-Type",
        });
    }
    if b[1] != id {
        return Err(DecodeError::InvalidField {
            what,
            offset: 1,
            reason: "wrong AUTH-Id",
        });
    }
    Ok(())
}

/// DH-HMAC-CHAP_Challenge (controller to host, AUTH-Id 01h): 16-byte header, HL bytes of
/// challenge C1, then DHVLEN bytes of the controller's DH value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Challenge {
    pub t_id: u16,
    /// HashID (1: SHA-256, 2: SHA-384, 3: SHA-512).
    pub hash_id: u8,
    /// DHGID (0: null, 1..5: ffdhe2048..ffdhe8192).
    pub dh_group: u8,
    /// SEQNUM S1.
    pub seqnum: u32,
    /// C1; its length is HL.
    pub cval: Vec<u8>,
    /// The controller's DH value (empty for the null group).
    pub dhv: Vec<u8>,
}

impl Challenge {
    pub fn len(&self) -> usize {
        HEADER_BYTES + self.cval.len().min(255) + self.dhv.len().min(0xFFFF)
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.encode(&mut v);
        v
    }
    pub fn encode(&self, out: &mut [u8]) {
        let n = self.len().min(out.len());
        out[..n].fill(0);
        if out.len() < HEADER_BYTES {
            return;
        }
        let hl = self.cval.len().min(255);
        let dl = self.dhv.len().min(0xFFFF);
        out[0] = auth_type::DHCHAP;
        out[1] = msg_id::CHALLENGE;
        put16(out, 4, self.t_id);
        out[6] = hl as u8;
        out[8] = self.hash_id;
        out[9] = self.dh_group;
        put16(out, 10, dl as u16);
        put32(out, 12, self.seqnum);
        copy_at(out, HEADER_BYTES, &self.cval[..hl]);
        copy_at(out, HEADER_BYTES + hl, &self.dhv[..dl]);
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let what = "DH-HMAC-CHAP_Challenge";
        header(b, HEADER_BYTES, auth_type::DHCHAP, msg_id::CHALLENGE, what)?;
        let hl = b[6] as usize;
        let dl = le16(b, 10) as usize;
        Ok(Challenge {
            t_id: le16(b, 4),
            hash_id: b[8],
            dh_group: b[9],
            seqnum: le32(b, 12),
            cval: slice(b, HEADER_BYTES, hl, what)?.to_vec(),
            dhv: slice(b, HEADER_BYTES + hl, dl, what)?.to_vec(),
        })
    }
}

fn copy_at(out: &mut [u8], off: usize, src: &[u8]) {
    let end = (off + src.len()).min(out.len());
    if off < end {
        out[off..end].copy_from_slice(&src[..end - off]);
    }
}

/// DH-HMAC-CHAP_Reply (host to controller, AUTH-Id 02h): 16-byte header, HL bytes of
/// response R1, HL bytes of challenge C2 (meaningful when CVALID), DHVLEN bytes of the
/// host's DH value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reply {
    pub t_id: u16,
    /// SEQNUM S2 (0 when the host does not authenticate the controller).
    pub seqnum: u32,
    /// Response R1; its length is HL.
    pub rval: Vec<u8>,
    /// Challenge C2 for the controller (bidirectional authentication), HL bytes.
    pub c2: Option<Vec<u8>>,
    /// The host's DH value (empty for the null group).
    pub dhv: Vec<u8>,
}

impl Reply {
    fn hl(&self) -> usize {
        self.rval.len().min(255)
    }
    pub fn len(&self) -> usize {
        HEADER_BYTES + 2 * self.hl() + self.dhv.len().min(0xFFFF)
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.encode(&mut v);
        v
    }
    pub fn encode(&self, out: &mut [u8]) {
        let n = self.len().min(out.len());
        out[..n].fill(0);
        if out.len() < HEADER_BYTES {
            return;
        }
        let hl = self.hl();
        let dl = self.dhv.len().min(0xFFFF);
        out[0] = auth_type::DHCHAP;
        out[1] = msg_id::REPLY;
        put16(out, 4, self.t_id);
        out[6] = hl as u8;
        out[8] = u8::from(self.c2.is_some());
        put16(out, 10, dl as u16);
        put32(out, 12, self.seqnum);
        copy_at(out, HEADER_BYTES, &self.rval[..hl]);
        if let Some(c2) = &self.c2 {
            copy_at(out, HEADER_BYTES + hl, &c2[..c2.len().min(hl)]);
        }
        copy_at(out, HEADER_BYTES + 2 * hl, &self.dhv[..dl]);
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let what = "DH-HMAC-CHAP_Reply";
        header(b, HEADER_BYTES, auth_type::DHCHAP, msg_id::REPLY, what)?;
        let hl = b[6] as usize;
        let cvalid = b[8] & 1 != 0;
        let dl = le16(b, 10) as usize;
        let c2 = slice(b, HEADER_BYTES + hl, hl, what)?;
        Ok(Reply {
            t_id: le16(b, 4),
            seqnum: le32(b, 12),
            rval: slice(b, HEADER_BYTES, hl, what)?.to_vec(),
            c2: cvalid.then(|| c2.to_vec()),
            dhv: slice(b, HEADER_BYTES + 2 * hl, dl, what)?.to_vec(),
        })
    }
}

/// DH-HMAC-CHAP_Success1 (controller to host, AUTH-Id 03h): 16-byte header, then HL bytes
/// of the controller's response R2 when RVALID.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Success1 {
    pub t_id: u16,
    /// HL: the hash length of the transaction.
    pub hl: u8,
    /// Response R2 (bidirectional authentication), HL bytes.
    pub rval: Option<Vec<u8>>,
}

impl Success1 {
    pub fn len(&self) -> usize {
        HEADER_BYTES
            + if self.rval.is_some() {
                self.hl as usize
            } else {
                0
            }
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.encode(&mut v);
        v
    }
    pub fn encode(&self, out: &mut [u8]) {
        let n = self.len().min(out.len());
        out[..n].fill(0);
        if out.len() < HEADER_BYTES {
            return;
        }
        out[0] = auth_type::DHCHAP;
        out[1] = msg_id::SUCCESS1;
        put16(out, 4, self.t_id);
        out[6] = self.hl;
        if let Some(r) = &self.rval {
            out[8] = 1;
            copy_at(out, HEADER_BYTES, &r[..r.len().min(self.hl as usize)]);
        }
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let what = "DH-HMAC-CHAP_Success1";
        header(b, HEADER_BYTES, auth_type::DHCHAP, msg_id::SUCCESS1, what)?;
        let hl = b[6];
        let rval = if b[8] & 1 != 0 {
            Some(slice(b, HEADER_BYTES, hl as usize, what)?.to_vec())
        } else {
            None
        };
        Ok(Success1 {
            t_id: le16(b, 4),
            hl,
            rval,
        })
    }
}

/// DH-HMAC-CHAP_Success2 (host to controller, AUTH-Id 04h): 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Success2 {
    pub t_id: u16,
}

impl Success2 {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; HEADER_BYTES];
        self.encode(&mut v);
        v
    }
    pub fn encode(&self, out: &mut [u8]) {
        let n = HEADER_BYTES.min(out.len());
        out[..n].fill(0);
        if out.len() < HEADER_BYTES {
            return;
        }
        out[0] = auth_type::DHCHAP;
        out[1] = msg_id::SUCCESS2;
        put16(out, 4, self.t_id);
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        header(
            b,
            HEADER_BYTES,
            auth_type::DHCHAP,
            msg_id::SUCCESS2,
            "DH-HMAC-CHAP_Success2",
        )?;
        Ok(Success2 { t_id: le16(b, 4) })
    }
}

/// AUTH_Failure1 (controller to host, AUTH-Id F1h) or AUTH_Failure2 (host to controller,
/// AUTH-Id F0h): 8 bytes with the reason code and its explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Failure {
    pub t_id: u16,
    /// true: Failure2 (from the host); false: Failure1 (from the controller).
    pub failure2: bool,
    /// Reason code (01h: authentication failure).
    pub rescode: u8,
    /// Reason code explanation, see [`FailureReason`].
    pub rescode_exp: u8,
}

impl Failure {
    pub fn failure1(t_id: u16, reason: FailureReason) -> Self {
        Failure {
            t_id,
            failure2: false,
            rescode: REASON_FAILED,
            rescode_exp: reason as u8,
        }
    }
    pub fn failure2(t_id: u16, reason: FailureReason) -> Self {
        Failure {
            failure2: true,
            ..Self::failure1(t_id, reason)
        }
    }
    /// The explanation, when it is one the specification defines.
    pub fn reason(&self) -> Option<FailureReason> {
        FailureReason::from_u8(self.rescode_exp)
    }
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; FAILURE_BYTES];
        self.encode(&mut v);
        v
    }
    pub fn encode(&self, out: &mut [u8]) {
        let n = FAILURE_BYTES.min(out.len());
        out[..n].fill(0);
        if out.len() < FAILURE_BYTES {
            return;
        }
        out[0] = auth_type::COMMON;
        out[1] = if self.failure2 {
            msg_id::FAILURE2
        } else {
            msg_id::FAILURE1
        };
        put16(out, 4, self.t_id);
        out[6] = self.rescode;
        out[7] = self.rescode_exp;
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let what = "AUTH_Failure";
        if b.len() < FAILURE_BYTES {
            return Err(short(what, FAILURE_BYTES, b.len()));
        }
        let failure2 = match (b[0], b[1]) {
            (auth_type::COMMON, msg_id::FAILURE1) => false,
            (auth_type::COMMON, msg_id::FAILURE2) => true,
            _ => {
                return Err(DecodeError::InvalidField {
                    what,
                    offset: 1,
                    reason: "not a Failure1/Failure2 message",
                });
            }
        };
        Ok(Failure {
            t_id: le16(b, 4),
            failure2,
            rescode: b[6],
            rescode_exp: b[7],
        })
    }
}

/// Any authentication message, told apart by AUTH-Type and AUTH-Id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMessage {
    Negotiate(Negotiate),
    Challenge(Challenge),
    Reply(Reply),
    Success1(Success1),
    Success2(Success2),
    Failure(Failure),
}

impl AuthMessage {
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < 2 {
            return Err(short("authentication message", 2, b.len()));
        }
        Ok(match (b[0], b[1]) {
            (auth_type::COMMON, msg_id::NEGOTIATE) => AuthMessage::Negotiate(Negotiate::decode(b)?),
            (auth_type::COMMON, msg_id::FAILURE1 | msg_id::FAILURE2) => {
                AuthMessage::Failure(Failure::decode(b)?)
            }
            (auth_type::DHCHAP, msg_id::CHALLENGE) => AuthMessage::Challenge(Challenge::decode(b)?),
            (auth_type::DHCHAP, msg_id::REPLY) => AuthMessage::Reply(Reply::decode(b)?),
            (auth_type::DHCHAP, msg_id::SUCCESS1) => AuthMessage::Success1(Success1::decode(b)?),
            (auth_type::DHCHAP, msg_id::SUCCESS2) => AuthMessage::Success2(Success2::decode(b)?),
            (t, i) => {
                return Err(DecodeError::Unknown {
                    what: "AUTH-Type/AUTH-Id",
                    value: ((t as u32) << 8) | i as u32,
                });
            }
        })
    }
    /// T_ID of any message (0 when too short to have one).
    pub fn t_id_of(b: &[u8]) -> u16 {
        le16(b, 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn negotiate_layout_matches_linux() {
        // What Linux's nvme_auth_set_dhchap_negotiate_data sends.
        let n = Negotiate {
            t_id: 0x1234,
            sc_c: 0,
            protocols: vec![ProtocolDescriptor::dhchap(&[1, 2, 3], &[0, 1, 2, 3, 4, 5])],
        };
        let b = n.to_bytes();
        assert_eq!(b.len(), 72);
        assert_eq!(&b[..8], &[0x00, 0x00, 0, 0, 0x34, 0x12, 0, 1]);
        assert_eq!(&b[8..12], &[0x01, 0, 3, 6]);
        assert_eq!(&b[12..15], &[1, 2, 3]);
        // IDList starts at descriptor byte 4; the DH groups at IDList[30].
        assert!(b[15..42].iter().all(|&x| x == 0));
        assert_eq!(&b[42..48], &[0, 1, 2, 3, 4, 5]);
        assert_eq!(Negotiate::decode(&b).unwrap(), n);
    }

    #[test]
    fn challenge_reply_success_failure_layouts() {
        let c = Challenge {
            t_id: 7,
            hash_id: 1,
            dh_group: 1,
            seqnum: 0xA1B2C3D4,
            cval: vec![0xCC; 32],
            dhv: vec![0xDD; 256],
        };
        let b = c.to_bytes();
        assert_eq!(b.len(), 16 + 32 + 256);
        assert_eq!(
            &b[..16],
            &[
                1, 1, 0, 0, 7, 0, 32, 0, 1, 1, 0x00, 0x01, 0xD4, 0xC3, 0xB2, 0xA1
            ]
        );
        assert_eq!(Challenge::decode(&b).unwrap(), c);

        let r = Reply {
            t_id: 7,
            seqnum: 5,
            rval: vec![0xAA; 48],
            c2: Some(vec![0xBB; 48]),
            dhv: vec![],
        };
        let b = r.to_bytes();
        assert_eq!(b.len(), 16 + 96);
        assert_eq!(&b[..16], &[1, 2, 0, 0, 7, 0, 48, 0, 1, 0, 0, 0, 5, 0, 0, 0]);
        assert_eq!(b[16 + 48], 0xBB);
        assert_eq!(Reply::decode(&b).unwrap(), r);
        // CVALID clear: the C2 bytes are still there (zero) but carry nothing.
        let r1 = Reply {
            c2: None,
            seqnum: 0,
            ..r
        };
        let b = r1.to_bytes();
        assert_eq!(b.len(), 16 + 96);
        assert_eq!(Reply::decode(&b).unwrap(), r1);

        let s = Success1 {
            t_id: 7,
            hl: 32,
            rval: Some(vec![0xEE; 32]),
        };
        let b = s.to_bytes();
        assert_eq!(&b[..9], &[1, 3, 0, 0, 7, 0, 32, 0, 1]);
        assert_eq!(Success1::decode(&b).unwrap(), s);
        assert_eq!(
            Success2 { t_id: 9 }.to_bytes(),
            vec![1, 4, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let f = Failure::failure1(9, FailureReason::Failed);
        assert_eq!(f.to_bytes(), vec![0, 0xF1, 0, 0, 9, 0, 1, 1]);
        assert_eq!(
            Failure::failure2(9, FailureReason::IncorrectMessage).to_bytes(),
            vec![0, 0xF0, 0, 0, 9, 0, 1, 7]
        );
        assert_eq!(
            AuthMessage::decode(&f.to_bytes()).unwrap(),
            AuthMessage::Failure(f)
        );
    }

    #[test]
    fn truncated_and_oversized_lengths_are_errors() {
        let c = Challenge {
            hash_id: 1,
            cval: vec![1; 32],
            dhv: vec![2; 256],
            ..Default::default()
        };
        let b = c.to_bytes();
        for n in 0..b.len() {
            assert!(Challenge::decode(&b[..n]).is_err(), "{n}");
        }
        let mut n = Negotiate {
            protocols: vec![ProtocolDescriptor::dhchap(&[1], &[0])],
            ..Default::default()
        }
        .to_bytes();
        n[10] = 31; // HALEN
        assert!(Negotiate::decode(&n).is_err());
        n[10] = 1;
        n[7] = 2; // NAPD past the end
        assert!(Negotiate::decode(&n).is_err());
    }

    proptest! {
        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = AuthMessage::decode(&b);
            let _ = Negotiate::decode(&b);
            let _ = Challenge::decode(&b);
            let _ = Reply::decode(&b);
            let _ = Success1::decode(&b);
            let _ = Success2::decode(&b);
            let _ = Failure::decode(&b);
        }

        #[test]
        fn reply_roundtrips(t_id: u16, seqnum: u32, hl in 0usize..70, c2: bool, dl in 0usize..600) {
            let r = Reply {
                t_id,
                seqnum,
                rval: vec![3; hl],
                c2: c2.then(|| vec![4; hl]),
                dhv: vec![5; dl],
            };
            prop_assert_eq!(Reply::decode(&r.to_bytes()).unwrap(), r);
        }
    }
}
