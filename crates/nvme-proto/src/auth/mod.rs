//! NVMe in-band authentication, DH-HMAC-CHAP (NVMe Base 2.0, 8.13 "NVMe over Fabrics
//! Secure Channel and In-band Authentication", 6.3/6.4 "Authentication Send/Receive";
//! Linux `include/linux/nvme.h`, `include/linux/nvme-auth.h`, `drivers/nvme/common/auth.c`).
//!
//! - [`msg`]: the messages (AUTH_Negotiate, DH-HMAC-CHAP_Challenge/_Reply/_Success1/
//!   _Success2, AUTH_Failure1/2);
//! - [`secret`]: the `DHHC-1:..` secret representation and its transformation;
//! - [`crypto`]: the augmented challenge and the host/controller responses;
//! - [`dh`]: the FFDHE groups;
//! - [`AuthSend`] / [`AuthReceive`]: the fabrics commands' fields.
//!
//! Byte layouts: `docs/wire/auth.md`.

pub mod crypto;
pub mod dh;
mod ffdhe;
pub mod msg;
pub mod secret;

pub use dh::{DhError, DhKeyPair};
pub use msg::{
    AuthMessage, Challenge, Failure, FailureReason, Negotiate, ProtocolDescriptor, Reply, Success1,
    Success2,
};
pub use secret::{DhchapSecret, SecretError};

use crate::bytes::{le32, put32};
use crate::command::Command;
use crate::error::DecodeError;
use crate::opcode::{admin, fctype};

/// SECP of DH-HMAC-CHAP in Authentication Send/Receive (NVMe Base 2.0, Figure 444).
pub const SECP_DHCHAP: u8 = 0xE9;
/// SPSP0 and SPSP1 of DH-HMAC-CHAP.
pub const SPSP_DHCHAP: u8 = 0x01;
/// The largest message this implementation sends or accepts: a Reply or Challenge with
/// ffdhe8192 (16 + 2 * 64 + 1024 bytes) fits with room to spare. Linux uses 4096 too.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// Hash function identifiers (NVMe Base 2.0, Figure 446).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum HashId {
    Sha256 = 1,
    Sha384 = 2,
    Sha512 = 3,
}

impl HashId {
    pub const ALL: [HashId; 3] = [HashId::Sha256, HashId::Sha384, HashId::Sha512];

    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(HashId::Sha256),
            2 => Some(HashId::Sha384),
            3 => Some(HashId::Sha512),
            _ => None,
        }
    }
    /// The digest length HL in bytes.
    pub const fn len(self) -> usize {
        match self {
            HashId::Sha256 => 32,
            HashId::Sha384 => 48,
            HashId::Sha512 => 64,
        }
    }
    pub const fn is_empty(self) -> bool {
        false
    }
    /// The name Linux and nvme-cli use: `hmac(sha256)`, ...
    pub const fn name(self) -> &'static str {
        match self {
            HashId::Sha256 => "hmac(sha256)",
            HashId::Sha384 => "hmac(sha384)",
            HashId::Sha512 => "hmac(sha512)",
        }
    }
    /// Accepts `sha256`, `hmac(sha256)`, `SHA-256` (and the 384/512 forms).
    pub fn parse(s: &str) -> Option<Self> {
        let t = s.trim().to_ascii_lowercase().replace('-', "");
        let t = t
            .strip_prefix("hmac(")
            .and_then(|x| x.strip_suffix(')'))
            .unwrap_or(&t);
        match t {
            "sha256" => Some(HashId::Sha256),
            "sha384" => Some(HashId::Sha384),
            "sha512" => Some(HashId::Sha512),
            _ => None,
        }
    }
}

impl std::fmt::Display for HashId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// DH group identifiers (NVMe Base 2.0, Figure 447).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DhGroup {
    Null = 0,
    Ffdhe2048 = 1,
    Ffdhe3072 = 2,
    Ffdhe4096 = 3,
    Ffdhe6144 = 4,
    Ffdhe8192 = 5,
}

impl DhGroup {
    pub const ALL: [DhGroup; 6] = [
        DhGroup::Null,
        DhGroup::Ffdhe2048,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe8192,
    ];

    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(DhGroup::Null),
            1 => Some(DhGroup::Ffdhe2048),
            2 => Some(DhGroup::Ffdhe3072),
            3 => Some(DhGroup::Ffdhe4096),
            4 => Some(DhGroup::Ffdhe6144),
            5 => Some(DhGroup::Ffdhe8192),
            _ => None,
        }
    }
    /// Bytes of a DH value (the modulus size; 0 for null).
    pub const fn value_bytes(self) -> usize {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 384,
            DhGroup::Ffdhe4096 => 512,
            DhGroup::Ffdhe6144 => 768,
            DhGroup::Ffdhe8192 => 1024,
        }
    }
    /// The name Linux and nvme-cli use: `null`, `ffdhe2048`, ...
    pub const fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        let t = s.trim().to_ascii_lowercase();
        Self::ALL.into_iter().find(|g| g.name() == t)
    }
}

impl std::fmt::Display for DhGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Authentication Send (fabrics FCTYPE 05h): CDW10 byte 40 NSSF, 41 SPSP0, 42 SPSP1,
/// 43 SECP; CDW11 (44..48) TL, the transfer length (Linux `struct nvmf_auth_send_command`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthSend {
    pub secp: u8,
    pub spsp0: u8,
    pub spsp1: u8,
    pub tl: u32,
}

/// Authentication Receive (fabrics FCTYPE 06h): the same fields, CDW11 is AL, the
/// allocation length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthReceive {
    pub secp: u8,
    pub spsp0: u8,
    pub spsp1: u8,
    pub al: u32,
}

fn auth_fields(c: &Command) -> (u8, u8, u8, u32) {
    (c.0[43], c.0[41], c.0[42], le32(&c.0, 44))
}

fn auth_command(cid: u16, ty: u8, secp: u8, spsp0: u8, spsp1: u8, len: u32) -> Command {
    let mut c = Command::new(admin::FABRICS, cid, 0);
    c.set_fctype(ty);
    c.0[41] = spsp0;
    c.0[42] = spsp1;
    c.0[43] = secp;
    put32(&mut c.0, 44, len);
    c
}

/// Why an Authentication Send/Receive is refused before its payload is looked at
/// (Invalid Field in Command, DNR, at the given SQE byte).
fn check_fields(secp: u8, spsp0: u8, spsp1: u8, len: u32) -> Result<(), DecodeError> {
    let bad = |offset, reason| DecodeError::InvalidField {
        what: "Authentication Send/Receive",
        offset,
        reason,
    };
    if secp != SECP_DHCHAP {
        return Err(bad(43, "SECP is not DH-HMAC-CHAP (E9h)"));
    }
    if spsp0 != SPSP_DHCHAP {
        return Err(bad(41, "SPSP0 is not 01h"));
    }
    if spsp1 != SPSP_DHCHAP {
        return Err(bad(42, "SPSP1 is not 01h"));
    }
    if len == 0 {
        return Err(bad(44, "zero length"));
    }
    Ok(())
}

impl AuthSend {
    pub fn dhchap(tl: u32) -> Self {
        AuthSend {
            secp: SECP_DHCHAP,
            spsp0: SPSP_DHCHAP,
            spsp1: SPSP_DHCHAP,
            tl,
        }
    }
    pub fn from_command(c: &Command) -> Self {
        let (secp, spsp0, spsp1, tl) = auth_fields(c);
        AuthSend {
            secp,
            spsp0,
            spsp1,
            tl,
        }
    }
    /// Checks SECP/SPSP0/SPSP1 are DH-HMAC-CHAP's and TL is not zero.
    pub fn check(&self) -> Result<(), DecodeError> {
        check_fields(self.secp, self.spsp0, self.spsp1, self.tl)
    }
    pub fn to_command(&self, cid: u16) -> Command {
        auth_command(
            cid,
            fctype::AUTH_SEND,
            self.secp,
            self.spsp0,
            self.spsp1,
            self.tl,
        )
    }
}

impl AuthReceive {
    pub fn dhchap(al: u32) -> Self {
        AuthReceive {
            secp: SECP_DHCHAP,
            spsp0: SPSP_DHCHAP,
            spsp1: SPSP_DHCHAP,
            al,
        }
    }
    pub fn from_command(c: &Command) -> Self {
        let (secp, spsp0, spsp1, al) = auth_fields(c);
        AuthReceive {
            secp,
            spsp0,
            spsp1,
            al,
        }
    }
    /// Checks SECP/SPSP0/SPSP1 are DH-HMAC-CHAP's and AL is not zero.
    pub fn check(&self) -> Result<(), DecodeError> {
        check_fields(self.secp, self.spsp0, self.spsp1, self.al)
    }
    pub fn to_command(&self, cid: u16) -> Command {
        auth_command(
            cid,
            fctype::AUTH_RECEIVE,
            self.secp,
            self.spsp0,
            self.spsp1,
            self.al,
        )
    }
}

#[cfg(test)]
mod vectors;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_command_layout_matches_linux() {
        // Linux nvme_auth_submit: secp E9h, spsp0 = spsp1 = 01h, tl/al in CDW11.
        let c = AuthSend::dhchap(72).to_command(5);
        assert_eq!(c.opcode(), 0x7F);
        assert_eq!(c.fctype(), 0x05);
        assert_eq!(&c.0[40..48], &[0, 1, 1, 0xE9, 72, 0, 0, 0]);
        assert_eq!(AuthSend::from_command(&c), AuthSend::dhchap(72));
        let r = AuthReceive::dhchap(4096).to_command(6);
        assert_eq!(r.fctype(), 0x06);
        assert_eq!(&r.0[40..48], &[0, 1, 1, 0xE9, 0, 0x10, 0, 0]);
        assert!(AuthReceive::from_command(&r).check().is_ok());
        let mut bad = r;
        bad.0[43] = 0xEA;
        assert!(AuthReceive::from_command(&bad).check().is_err());
        assert!(AuthSend::dhchap(0).check().is_err());
    }

    #[test]
    fn names_parse() {
        assert_eq!(HashId::parse("hmac(sha384)"), Some(HashId::Sha384));
        assert_eq!(HashId::parse("SHA-512"), Some(HashId::Sha512));
        assert_eq!(HashId::parse("md5"), None);
        assert_eq!(DhGroup::parse("ffdhe8192"), Some(DhGroup::Ffdhe8192));
        assert_eq!(DhGroup::parse("null"), Some(DhGroup::Null));
        assert_eq!(DhGroup::parse("ffdhe1024"), None);
    }
}
