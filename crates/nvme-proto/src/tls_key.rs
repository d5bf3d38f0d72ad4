//! NVMe/TCP TLS pre-shared keys (NVMe/TCP transport 1.1 section 3.6.1, TP 8011/8018; Linux
//! `drivers/nvme/common`, libnvme `linux.c`):
//!
//! - The PSK interchange format `NVMeTLSkey-1:<hh>:<base64(key || CRC-32(key) LE)>:`, where
//!   `hh` is the hash that turns the configured PSK into the retained PSK (00: none, the
//!   configured PSK is the retained PSK; 01: SHA-256; 02: SHA-384) and the key is 32 or 48
//!   bytes (32 for 01, 48 for 02).
//! - Retained PSK = HKDF-Expand-Label(HKDF-Extract(0, configured), "HostNQN", NQNh, len).
//! - The PSK identity: `NVMe0R<cc> <NQNh> <NQNc>` (version 0) or
//!   `NVMe1R<cc> <NQNh> <NQNc> <digest>` (version 1), with `cc` the cipher suite's hash
//!   (01: SHA-256 / TLS_AES_128_GCM_SHA256, 02: SHA-384 / TLS_AES_256_GCM_SHA384; for
//!   `hh` = 00 it follows the key length) and digest =
//!   Base64(HMAC(retained, NQNh " " NQNc " NVMe-over-Fabrics")).
//! - TLS PSK = HKDF-Expand-Label(HKDF-Extract(0, retained), "nvme-tls-psk", context, len),
//!   context = the whole identity (version 0) or `"<cc> <digest>"` (version 1).
//!
//! - Generated PSK (secure channel concatenation, NVMe Base 2.1 "Generated PSK for TLS"; Linux
//!   `nvme_auth_generate_psk`): HMAC-H(KS, C1 || C2), with H the DH-HMAC-CHAP exchange's hash
//!   (SHA-256 or SHA-384 only: TLS has no SHA-512 suite), KS its DH session key, C1 and C2 its
//!   challenges. Its identity is always version 1, `NVMe1G<cc> <NQNh> <NQNc> <digest>`, the
//!   digest and the TLS PSK computed as for a retained PSK ([`GeneratedPsk`]).
//!
//! HKDF-Expand-Label is RFC 8446's (label prefixed with "tls13 "): [`Derivation::Rfc8446`],
//! what libnvme 1.16 and later derive. libnvme before 1.16 (Debian 13 ships libnvme 1.13
//! with nvme-cli 2.13) builds the HKDF info without the label and context length bytes and
//! with the output length little-endian: [`Derivation::LibnvmeCompat`] (libnvme's
//! `derive_*_compat` now). A Linux host whose key was inserted by such a libnvme uses those
//! keys, so a target accepts both (docs/wire/tls.md). Keys are zeroized on drop
//! and never shown by `Debug`. Byte layouts: docs/wire/tls.md.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use zeroize::Zeroizing;

/// Why a string is not a usable NVMe TLS key or identity. Never contains the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsKeyError {
    #[error("an NVMe TLS key starts with \"NVMeTLSkey-1:\"")]
    Prefix,
    #[error("the TLS key's hash must be 00, 01 or 02")]
    Hash,
    #[error("the TLS key is not valid base64")]
    Base64,
    #[error("the TLS key is {0} bytes; NVMe TLS keys are 32 (hash 00/01) or 48 (hash 00/02) bytes")]
    KeyLength(usize),
    #[error("the TLS key's CRC-32 does not match its key (mistyped or truncated key)")]
    Crc,
    #[error("not an NVMe TLS PSK identity (NVMe<0|1><R|G><01|02> <hostnqn> <subnqn>[ <digest>])")]
    Identity,
    #[error("PSK identity version {0} is not supported (0 and 1 are)")]
    IdentityVersion(u8),
    #[error("a generated PSK needs two challenges of the hash's length ({want} bytes), got {got}")]
    ChallengeLength { want: usize, got: usize },
}

/// How HKDF-Expand-Label's info is laid out for the retained and the TLS PSK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Derivation {
    /// RFC 8446 section 7.1: u16 length (big-endian), u8 label length, "tls13 " label, u8
    /// context length, context. The NVMe/TCP specification's; libnvme >= 1.16.
    Rfc8446,
    /// libnvme before 1.16: u16 length little-endian, "tls13 " label, context (no length
    /// bytes). What its `nvme check-tls-key --insert` puts into the kernel's keyring.
    LibnvmeCompat,
}

impl Derivation {
    /// Both, the specification's first.
    pub const ALL: [Derivation; 2] = [Derivation::Rfc8446, Derivation::LibnvmeCompat];
}

/// The hash of a TLS PSK (and its cipher suite).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PskHash {
    /// 01: SHA-256, TLS_AES_128_GCM_SHA256.
    Sha256,
    /// 02: SHA-384, TLS_AES_256_GCM_SHA384.
    Sha384,
}

impl PskHash {
    pub fn id(self) -> u8 {
        match self {
            Self::Sha256 => 1,
            Self::Sha384 => 2,
        }
    }

    pub fn output_len(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha384 => 48,
        }
    }

    /// The PSK hash of a DH-HMAC-CHAP hash (None for SHA-512, which no TLS 1.3 suite
    /// pairs with: Linux refuses it for concatenation too).
    pub fn from_dhchap(h: crate::auth::HashId) -> Option<Self> {
        match h {
            crate::auth::HashId::Sha256 => Some(Self::Sha256),
            crate::auth::HashId::Sha384 => Some(Self::Sha384),
            crate::auth::HashId::Sha512 => None,
        }
    }

    fn from_id(id: u8) -> Option<Self> {
        match id {
            1 => Some(Self::Sha256),
            2 => Some(Self::Sha384),
            _ => None,
        }
    }

    /// The TLS stack's hash of this PSK hash (what a `tls_psk::Psk` is bound to).
    pub fn tls_alg(self) -> tls_psk::HashAlg {
        match self {
            Self::Sha256 => tls_psk::HashAlg::Sha256,
            Self::Sha384 => tls_psk::HashAlg::Sha384,
        }
    }

    fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
        self.tls_alg().hmac(key, parts)
    }

    /// The PSK digest Base64(HMAC(input PSK, NQNh " " NQNc " NVMe-over-Fabrics")) of a version
    /// 1 identity (NVMe/TCP 3.6.1.3).
    fn psk_digest(self, input_psk: &[u8], hostnqn: &str, subnqn: &str) -> String {
        let mac = self.hmac(
            input_psk,
            &[
                hostnqn.as_bytes(),
                b" ",
                subnqn.as_bytes(),
                b" NVMe-over-Fabrics",
            ],
        );
        STANDARD.encode(&mac[..])
    }

    /// HKDF-Expand-Label(HKDF-Extract(0, ikm), label, context, len) (RFC 5869, RFC 8446 7.1),
    /// with the info laid out as `derivation` says.
    fn extract_expand_label(
        self,
        derivation: Derivation,
        ikm: &[u8],
        label: &str,
        context: &[u8],
        len: usize,
    ) -> Zeroizing<Vec<u8>> {
        let prk = self.hmac(&vec![0u8; self.output_len()], &[ikm]);
        let full_label = format!("tls13 {label}");
        let mut info = Vec::with_capacity(4 + full_label.len() + context.len());
        match derivation {
            Derivation::Rfc8446 => {
                info.extend_from_slice(&(len as u16).to_be_bytes());
                info.push(full_label.len() as u8);
                info.extend_from_slice(full_label.as_bytes());
                info.push(context.len() as u8);
                info.extend_from_slice(context);
            }
            Derivation::LibnvmeCompat => {
                info.extend_from_slice(&(len as u16).to_le_bytes());
                info.extend_from_slice(full_label.as_bytes());
                info.extend_from_slice(context);
            }
        }
        let mut out = Zeroizing::new(Vec::with_capacity(len));
        let mut t: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::new());
        let mut counter = 1u8;
        while out.len() < len {
            t = self.hmac(&prk, &[&t, &info, &[counter]]);
            let n = (len - out.len()).min(t.len());
            out.extend_from_slice(&t[..n]);
            counter = counter.wrapping_add(1);
        }
        out
    }
}

/// A configured PSK in the interchange format's terms: the key and the hash (0: none) that
/// derives the retained PSK from it.
#[derive(Clone, PartialEq, Eq)]
pub struct ConfiguredPsk {
    hmac: u8,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for ConfiguredPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ConfiguredPsk {{ hmac: {:02}, key: <{} bytes redacted> }}",
            self.hmac,
            self.key.len()
        )
    }
}

impl ConfiguredPsk {
    /// A key of 32 or 48 bytes with its retained-PSK hash (0, 1: 32 bytes, 2: 48 bytes).
    pub fn new(hmac: u8, key: &[u8]) -> Result<Self, TlsKeyError> {
        let ok = match hmac {
            0 => key.len() == 32 || key.len() == 48,
            1 => key.len() == 32,
            2 => key.len() == 48,
            _ => return Err(TlsKeyError::Hash),
        };
        if !ok {
            return Err(TlsKeyError::KeyLength(key.len()));
        }
        Ok(Self {
            hmac,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// Parses `NVMeTLSkey-1:hh:base64:` (surrounding whitespace ignored).
    pub fn parse(s: &str) -> Result<Self, TlsKeyError> {
        let rest = s
            .trim()
            .strip_prefix("NVMeTLSkey-1:")
            .ok_or(TlsKeyError::Prefix)?;
        let (hh, b64) = rest.split_once(':').ok_or(TlsKeyError::Prefix)?;
        let hmac = match hh {
            "00" => 0,
            "01" => 1,
            "02" => 2,
            _ => return Err(TlsKeyError::Hash),
        };
        let b64 = b64.strip_suffix(':').ok_or(TlsKeyError::Prefix)?;
        if b64.len() > 96 {
            return Err(TlsKeyError::KeyLength(b64.len() * 3 / 4));
        }
        let raw = Zeroizing::new(STANDARD.decode(b64).map_err(|_| TlsKeyError::Base64)?);
        if raw.len() < 4 {
            return Err(TlsKeyError::KeyLength(0));
        }
        let (key, crc) = raw.split_at(raw.len() - 4);
        if crc32fast::hash(key).to_le_bytes() != crc {
            return Err(TlsKeyError::Crc);
        }
        Self::new(hmac, key)
    }

    /// The interchange string (what `nvme gen-tls-key` prints).
    pub fn to_interchange(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new(Vec::with_capacity(self.key.len() + 4));
        raw.extend_from_slice(&self.key);
        raw.extend_from_slice(&crc32fast::hash(&self.key).to_le_bytes());
        Zeroizing::new(format!(
            "NVMeTLSkey-1:{:02x}:{}:",
            self.hmac,
            STANDARD.encode(&raw[..])
        ))
    }

    /// The retained-PSK hash (0: none).
    pub fn hmac(&self) -> u8 {
        self.hmac
    }

    /// The hash of the TLS PSK and its cipher suite: the retained-PSK hash, or for 00 the
    /// one of the key's length.
    pub fn hash(&self) -> PskHash {
        match self.hmac {
            2 => PskHash::Sha384,
            1 => PskHash::Sha256,
            _ if self.key.len() == 48 => PskHash::Sha384,
            _ => PskHash::Sha256,
        }
    }

    /// The retained PSK for host `hostnqn`.
    pub fn retained(&self, hostnqn: &str) -> Zeroizing<Vec<u8>> {
        self.retained_with(Derivation::Rfc8446, hostnqn)
    }

    /// The retained PSK for host `hostnqn`, derived as `derivation` says.
    pub fn retained_with(&self, derivation: Derivation, hostnqn: &str) -> Zeroizing<Vec<u8>> {
        match PskHash::from_id(self.hmac) {
            None => self.key.clone(),
            Some(h) => h.extract_expand_label(
                derivation,
                &self.key,
                "HostNQN",
                hostnqn.as_bytes(),
                self.key.len(),
            ),
        }
    }

    /// The PSK identity and TLS PSK for `hostnqn` connecting to `subnqn`, identity version 0
    /// or 1 (the specification's derivation).
    pub fn tls_psk(
        &self,
        version: u8,
        hostnqn: &str,
        subnqn: &str,
    ) -> Result<(String, Zeroizing<Vec<u8>>), TlsKeyError> {
        self.tls_psk_with(Derivation::Rfc8446, version, hostnqn, subnqn)
    }

    /// [`Self::tls_psk`] derived as `derivation` says (the version 1 digest too, as it hashes
    /// the retained PSK).
    pub fn tls_psk_with(
        &self,
        derivation: Derivation,
        version: u8,
        hostnqn: &str,
        subnqn: &str,
    ) -> Result<(String, Zeroizing<Vec<u8>>), TlsKeyError> {
        let hash = self.hash();
        let retained = self.retained_with(derivation, hostnqn);
        let (identity, context) = match version {
            0 => {
                let id = format!("NVMe0R{:02} {hostnqn} {subnqn}", hash.id());
                (id.clone(), id)
            }
            1 => {
                let digest = hash.psk_digest(&retained, hostnqn, subnqn);
                (
                    format!("NVMe1R{:02} {hostnqn} {subnqn} {digest}", hash.id()),
                    format!("{:02} {digest}", hash.id()),
                )
            }
            v => return Err(TlsKeyError::IdentityVersion(v)),
        };
        let psk = hash.extract_expand_label(
            derivation,
            &retained,
            "nvme-tls-psk",
            context.as_bytes(),
            self.key.len(),
        );
        Ok((identity, psk))
    }
}

/// A generated PSK: what secure channel concatenation after DH-HMAC-CHAP leaves both sides
/// with (NVMe Base 2.1, "Generated PSK for TLS"; Linux `nvme_auth_generate_psk`). Zeroized
/// on drop, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct GeneratedPsk {
    hash: PskHash,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for GeneratedPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GeneratedPsk {{ hash: {:?}, key: <{} bytes redacted> }}",
            self.hash,
            self.key.len()
        )
    }
}

impl GeneratedPsk {
    /// HMAC-H(KS, C1 || C2): `session_key` is the exchange's DH session key (as the
    /// augmented challenges use it), `c1` the controller's challenge, `c2` the host's; both
    /// challenges are as long as the hash.
    pub fn generate(
        hash: PskHash,
        session_key: &[u8],
        c1: &[u8],
        c2: &[u8],
    ) -> Result<Self, TlsKeyError> {
        let want = hash.output_len();
        for c in [c1, c2] {
            if c.len() != want {
                return Err(TlsKeyError::ChallengeLength { want, got: c.len() });
            }
        }
        Ok(Self {
            hash,
            key: hash.hmac(session_key, &[c1, c2]),
        })
    }

    pub fn hash(&self) -> PskHash {
        self.hash
    }

    /// The PSK digest of the generated PSK for `hostnqn` and `subnqn` (base64, 44 or 64
    /// characters).
    pub fn digest(&self, hostnqn: &str, subnqn: &str) -> String {
        self.hash.psk_digest(&self.key, hostnqn, subnqn)
    }

    /// The identity `NVMe1G<cc> <hostnqn> <subnqn> <digest>` and the TLS PSK
    /// HKDF-Expand-Label(HKDF-Extract(0, generated), "nvme-tls-psk", "<cc> <digest>", L)
    /// (Linux `nvme_auth_derive_tls_psk`, the RFC 8446 label layout).
    pub fn tls_psk(&self, hostnqn: &str, subnqn: &str) -> (String, Zeroizing<Vec<u8>>) {
        let digest = self.digest(hostnqn, subnqn);
        let cc = self.hash.id();
        let psk = self.hash.extract_expand_label(
            Derivation::Rfc8446,
            &self.key,
            "nvme-tls-psk",
            format!("{cc:02} {digest}").as_bytes(),
            self.hash.output_len(),
        );
        (format!("NVMe1G{cc:02} {hostnqn} {subnqn} {digest}"), psk)
    }
}

/// A parsed NVMe TLS PSK identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PskIdentity {
    pub version: u8,
    /// 'G': a PSK generated by DH-HMAC-CHAP secure channel concatenation; 'R': retained.
    pub generated: bool,
    pub hash: PskHash,
    pub hostnqn: String,
    pub subnqn: String,
    /// Version 1's PSK digest.
    pub digest: Option<String>,
}

impl PskIdentity {
    pub fn parse(identity: &[u8]) -> Result<Self, TlsKeyError> {
        let s = std::str::from_utf8(identity).map_err(|_| TlsKeyError::Identity)?;
        let head = s.get(..8).ok_or(TlsKeyError::Identity)?;
        let rest = s
            .get(8..)
            .and_then(|r| r.strip_prefix(' '))
            .ok_or(TlsKeyError::Identity)?;
        let b = head.as_bytes();
        if &b[..4] != b"NVMe" {
            return Err(TlsKeyError::Identity);
        }
        let version = match b[4] {
            b'0' => 0,
            b'1' => 1,
            d if d.is_ascii_digit() => return Err(TlsKeyError::IdentityVersion(d - b'0')),
            _ => return Err(TlsKeyError::Identity),
        };
        let generated = match b[5] {
            b'R' => false,
            b'G' => true,
            _ => return Err(TlsKeyError::Identity),
        };
        let hash = match &b[6..8] {
            b"01" => PskHash::Sha256,
            b"02" => PskHash::Sha384,
            _ => return Err(TlsKeyError::Identity),
        };
        let mut parts = rest.split(' ');
        let hostnqn = parts
            .next()
            .filter(|p| !p.is_empty())
            .ok_or(TlsKeyError::Identity)?;
        let subnqn = parts
            .next()
            .filter(|p| !p.is_empty())
            .ok_or(TlsKeyError::Identity)?;
        let digest = parts.next().map(str::to_string);
        if parts.next().is_some() || (version == 1) != digest.is_some() {
            return Err(TlsKeyError::Identity);
        }
        Ok(Self {
            version,
            generated,
            hash,
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            digest,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
    const SUB: &str = "nqn.2026-01.io.ferrobay:vol1";

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    // Vectors (RFC 8446 form, libnvme >= 1.16) computed from the algorithm description (libnvme derive_retained_key,
    // derive_psk_digest, gen_tls_identity, derive_tls_key) with Python's hashlib/hmac; the
    // interchange strings are accepted by `nvme check-tls-key` (nvme-cli 2.3).
    struct Vector {
        hmac: u8,
        key: &'static str,
        interchange: &'static str,
        retained: &'static str,
        psk0: &'static str,
        digest: &'static str,
        psk1: &'static str,
    }

    const VECTORS: [Vector; 3] = [
        Vector {
            hmac: 1,
            key: "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
            interchange: "NVMeTLSkey-1:01:ABEiM0RVZneImaq7zN3u/wARIjNEVWZ3iJmqu8zd7v8qDMNU:",
            retained: "0febe3f829d5399663ed0a72b3838d9d9485b5172068a737230c6998d24c1bd0",
            psk0: "acc49becb5311a30acf96cfe78e2c6af8b93778309492aadaf8936035ba4e4e6",
            digest: "2VDVqmPmBLi47sHca0Ud3SdXNgL6E02ij5sMO/k/tL4=",
            psk1: "d0b13c8e8b8812aca2f44e06253e7fd431c0b87b2395caeb7afb67c405db8484",
        },
        Vector {
            hmac: 2,
            key: "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
            interchange: "NVMeTLSkey-1:02:ABEiM0RVZneImaq7zN3u/wARIjNEVWZ3iJmqu8zd7v8AESIzRFVmd4iZqrvM3e7/AX3mVQ==:",
            retained: "84e825512ea84275b6a053242aa228b80ce5f5c0830eeba2cdfc7e62a4cc17d97f74d5443521e1b5803f95d11d2d1732",
            psk0: "8896bcb9bcedee1473563bf1161ad0a808756dc400538e866bbd8eb8797882fc8d5d1d2f892e88eb9fd9b696eaeca906",
            digest: "4cLFin2s7HSqIt+2kOq5h3yXo7wZ6eO0uW3tcXBAZ97Qo1eg8PcFrY7Wbvik71sJ",
            psk1: "3fc2a8145792cd2ac9b45829a866865013da0dcf5fba71ec821896f3d5988085a81a35ec5914d65efc1fe297956042d2",
        },
        Vector {
            hmac: 0,
            key: "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100",
            interchange: "NVMeTLSkey-1:00:/+7dzLuqmYh3ZlVEMyIRAP/u3cy7qpmId2ZVRDMiEQCM8qWy:",
            retained: "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100",
            psk0: "8d1311d54c04b8cd80d99ed54679fc97435635e63a7b6d2d4d39b746ddda497f",
            digest: "GROxEek8NU+KZCJZOTA1FDFSVZj5pYBjnj9dQZd8UMg=",
            psk1: "022bb604d072d4dcc6a649b8f6b6bac205c37326123bd30adce06802b0d44218",
        },
    ];

    #[test]
    fn derivations_match_vectors() {
        for v in &VECTORS {
            let k = ConfiguredPsk::new(v.hmac, &unhex(v.key)).expect("key");
            assert_eq!(&k.to_interchange()[..], v.interchange);
            assert_eq!(ConfiguredPsk::parse(v.interchange).expect("parse"), k);
            assert_eq!(
                hex(&k.retained(HOST)),
                v.retained,
                "retained, hmac {}",
                v.hmac
            );
            let cc = k.hash().id();
            let (id0, psk0) = k.tls_psk(0, HOST, SUB).expect("v0");
            assert_eq!(id0, format!("NVMe0R{cc:02} {HOST} {SUB}"));
            assert_eq!(hex(&psk0), v.psk0, "TLS PSK v0, hmac {}", v.hmac);
            let (id1, psk1) = k.tls_psk(1, HOST, SUB).expect("v1");
            assert_eq!(id1, format!("NVMe1R{cc:02} {HOST} {SUB} {}", v.digest));
            assert_eq!(hex(&psk1), v.psk1, "TLS PSK v1, hmac {}", v.hmac);
            let parsed = PskIdentity::parse(id1.as_bytes()).expect("identity");
            assert_eq!(
                (
                    parsed.version,
                    parsed.hostnqn.as_str(),
                    parsed.subnqn.as_str()
                ),
                (1, HOST, SUB)
            );
            assert_eq!(parsed.digest.as_deref(), Some(v.digest));
        }
    }

    /// The version 1 identities `nvme check-tls-key --identity=1 --insert` (nvme-cli 2.13,
    /// libnvme 1.13, in the trixie test guest) put into the kernel's keyring for the
    /// vectors' keys: their digest hashes the retained PSK, so they pin libnvme's pre-RFC
    /// 8446 derivation of it (the TLS PSK itself is checked end to end by
    /// crates/ferrobay/tests/linux_tls.rs: the kernel connects with it).
    #[test]
    fn libnvme_compat_derivation_matches_nvme_cli_2_13() {
        let from_nvme_cli = [
            (1, "0/teCScWNJhVL389pZKzFXC2ttYDvanUzXnPLBYRmiE="),
            (
                2,
                "PizxC3nmGHZAKbyjKuKiJXclmDh/ptS8+4wwyJ6BaI/lxrh5tyd+v8+3M6SIVPr3",
            ),
            // No transform: the retained PSK is the configured one, as in RFC 8446 form.
            (0, "GROxEek8NU+KZCJZOTA1FDFSVZj5pYBjnj9dQZd8UMg="),
        ];
        for (hmac, digest) in from_nvme_cli {
            let v = VECTORS.iter().find(|v| v.hmac == hmac).expect("vector");
            let k = ConfiguredPsk::parse(v.interchange).expect("key");
            let cc = k.hash().id();
            let (id1, psk1) = k
                .tls_psk_with(Derivation::LibnvmeCompat, 1, HOST, SUB)
                .expect("v1");
            assert_eq!(
                id1,
                format!("NVMe1R{cc:02} {HOST} {SUB} {digest}"),
                "hmac {hmac}"
            );
            let (id0, psk0) = k
                .tls_psk_with(Derivation::LibnvmeCompat, 0, HOST, SUB)
                .expect("v0");
            assert_eq!(id0, format!("NVMe0R{cc:02} {HOST} {SUB}"));
            // The two derivations never give the same TLS PSK.
            assert_ne!(hex(&psk0), v.psk0, "hmac {hmac}");
            assert_ne!(hex(&psk1), v.psk1, "hmac {hmac}");
            assert_eq!(psk0.len(), k.hash().output_len());
            if hmac != 0 {
                assert_ne!(
                    k.retained_with(Derivation::LibnvmeCompat, HOST),
                    k.retained(HOST)
                );
            }
        }
    }

    // Generated-PSK vectors: computed with Python's hashlib/hmac/base64 from the formulas of
    // NVMe Base 2.1 "Generated PSK for TLS" and NVMe/TCP 3.6.1.3 as Linux writes them
    // (drivers/nvme/common/auth.c: nvme_auth_generate_psk = HMAC(KS, C1 || C2),
    // nvme_auth_generate_digest, nvme_auth_derive_tls_psk with hkdf_expand_label), a code
    // path that shares nothing with ours. Inputs: KS = (7i + 3) mod 256 for i in 0..256
    // (an ffdhe2048-sized session key), C1 = 0x10 + i, C2 = 0xa0 + i (hash-length bytes).
    // No published vectors exist that we know of.
    #[test]
    fn generated_psk_matches_vectors() {
        let vectors = [
            (
                PskHash::Sha256,
                "0189dad7b6fb165a9dbe1b3b64f71c976c366634999bef86aa38f799d8b9826d",
                "SEs9cp1FPV9yw05MSzWh07BHqqhLlQ8flfCzA7zrEyI=",
                "e14738d9ef7626ef97235c50b91c59bcf56fa1e72f6f512b4245ab9f5a33a7e4",
            ),
            (
                PskHash::Sha384,
                "2c37c1c6d4040345083477cfb5b0a016cae0faa2a9cbeeaf6a67ea06ea5708518826870455982632c7ffdab1c4ee324c",
                "cZdJIFZbHVkMmvT/a85zMbDHSqPrOTDqeh/YyOErkGYAH5LYO5Kkmy1qVXpFQW7y",
                "3c43d54ad34897480f38c8f1acd0343b839298c0a3b9fc38baccc1a4bc09b4ac63eeee4532ecd704183c187f3b2755bb",
            ),
        ];
        let ks: Vec<u8> = (0..256u32).map(|i| ((i * 7 + 3) & 0xff) as u8).collect();
        for (hash, psk, digest, tls) in vectors {
            let n = hash.output_len();
            let c1: Vec<u8> = (0..n).map(|i| (0x10 + i) as u8).collect();
            let c2: Vec<u8> = (0..n).map(|i| (0xa0 + i) as u8).collect();
            let g = GeneratedPsk::generate(hash, &ks, &c1, &c2).expect("generate");
            assert_eq!(hex(&g.key), psk, "{hash:?}");
            assert_eq!(g.digest(HOST, SUB), digest, "{hash:?}");
            let (id, key) = g.tls_psk(HOST, SUB);
            assert_eq!(id, format!("NVMe1G{:02} {HOST} {SUB} {digest}", hash.id()));
            assert_eq!(hex(&key), tls, "{hash:?}");
            let parsed = PskIdentity::parse(id.as_bytes()).expect("identity");
            assert!(parsed.generated && parsed.version == 1 && parsed.hash == hash);
            assert_eq!(parsed.digest.as_deref(), Some(digest));
            // The challenges' order matters (C1 is the controller's).
            let swapped = GeneratedPsk::generate(hash, &ks, &c2, &c1).expect("generate");
            assert_ne!(swapped, g);
            assert!(!format!("{g:?}").contains(&psk[..8]), "Debug hides the key");
        }
        assert_eq!(
            GeneratedPsk::generate(PskHash::Sha256, &ks, &[0; 32], &[0; 48]),
            Err(TlsKeyError::ChallengeLength { want: 32, got: 48 })
        );
        assert_eq!(
            PskHash::from_dhchap(crate::auth::HashId::Sha384),
            Some(PskHash::Sha384)
        );
        assert_eq!(PskHash::from_dhchap(crate::auth::HashId::Sha512), None);
    }

    #[test]
    fn bad_keys_are_refused() {
        let good = VECTORS[0].interchange;
        assert_eq!(
            ConfiguredPsk::parse("DHHC-1:01:abc:"),
            Err(TlsKeyError::Prefix)
        );
        assert_eq!(
            ConfiguredPsk::parse(&good.replace(":01:", ":03:")),
            Err(TlsKeyError::Hash)
        );
        assert_eq!(
            ConfiguredPsk::parse(&good.replace(":01:", ":02:")),
            Err(TlsKeyError::KeyLength(32))
        );
        assert_eq!(
            ConfiguredPsk::parse(&good.replacen("ABEi", "ABEj", 1)),
            Err(TlsKeyError::Crc)
        );
        assert_eq!(
            ConfiguredPsk::parse(&good.replacen("ABEi", "AB*i", 1)),
            Err(TlsKeyError::Base64)
        );
        assert!(
            ConfiguredPsk::parse(&good[..good.len() - 1]).is_err(),
            "missing final ':'"
        );
        let e = ConfiguredPsk::parse(&good.replacen("ABEi", "ABEj", 1)).expect_err("crc");
        assert!(
            !e.to_string().contains("ABE"),
            "errors never show key material"
        );
    }

    #[test]
    fn bad_identities_are_refused() {
        for bad in [
            "",
            "NVMe0R01",
            "NVMe0R01 host",
            "NVMe0R03 h s",
            "NVMe0X01 h s",
            "NVMe1R01 h s",
            "NVMe0R01 h s extra",
            "nvme0R01 h s",
        ] {
            assert!(PskIdentity::parse(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert_eq!(
            PskIdentity::parse(b"NVMe2R01 h s"),
            Err(TlsKeyError::IdentityVersion(2))
        );
        let ok = PskIdentity::parse(b"NVMe0G02 h s").expect("ok");
        assert!(ok.generated && ok.hash == PskHash::Sha384 && ok.digest.is_none());
    }

    #[test]
    fn nvme_cli_keys_parse_when_installed() {
        // `nvme gen-tls-key` output must parse, and ours must pass `nvme check-tls-key`.
        let Ok(out) = std::process::Command::new("nvme")
            .args(["gen-tls-key", "--hmac=2"])
            .output()
        else {
            eprintln!("nvme-cli not installed: cross-check skipped");
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let k = ConfiguredPsk::parse(text.trim()).expect("nvme gen-tls-key output parses");
        assert_eq!((k.hmac(), k.hash()), (2, PskHash::Sha384));
        // nvme-cli 2.3 knows only the transformed forms (01, 02).
        for v in VECTORS.iter().filter(|v| v.hmac != 0) {
            let ours = ConfiguredPsk::new(v.hmac, &unhex(v.key))
                .expect("key")
                .to_interchange();
            let check = std::process::Command::new("nvme")
                .args(["check-tls-key", &format!("--key={}", &ours[..])])
                .output()
                .expect("run nvme check-tls-key");
            assert!(
                check.status.success(),
                "nvme check-tls-key refuses {}",
                &ours[..]
            );
        }
    }
}
