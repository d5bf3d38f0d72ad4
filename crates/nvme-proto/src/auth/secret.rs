//! The DHHC-1 secret representation (NVMe Base 2.0, 8.13.5.8 "DH-HMAC-CHAP secret
//! representation"; Linux `nvme_auth_parse_key`, nvme-cli `gen-dhchap-key`):
//!
//! `DHHC-1:<hh>:<base64 of key || CRC-32(key) little endian>:` where `hh` is the hash
//! used to transform the secret (00: none, 01: SHA-256, 02: SHA-384, 03: SHA-512) and the
//! key is 32, 48 or 64 bytes.
//!
//! The key bytes are zeroized on drop and never shown by `Debug`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use zeroize::Zeroizing;

use super::HashId;
use super::crypto::hmac_parts;

/// Why a string is not a DHHC-1 secret. Never contains the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("a DH-HMAC-CHAP secret starts with \"DHHC-1:\"")]
    Prefix,
    #[error("the secret's transformation hash must be 00, 01, 02 or 03")]
    Transform,
    #[error("the secret's key is not valid base64")]
    Base64,
    #[error("the secret's key is {0} bytes; DH-HMAC-CHAP keys are 32, 48 or 64 bytes")]
    KeyLength(usize),
    #[error("the secret's CRC-32 does not match its key (mistyped or truncated secret)")]
    Crc,
}

/// A DH-HMAC-CHAP secret: the key and the hash that transforms it (0: none).
#[derive(Clone, PartialEq, Eq)]
pub struct DhchapSecret {
    transform: u8,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for DhchapSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DhchapSecret {{ transform: {:02}, key: <{} bytes redacted> }}",
            self.transform,
            self.key.len()
        )
    }
}

/// Key lengths the representation allows.
pub const KEY_LENGTHS: [usize; 3] = [32, 48, 64];

impl DhchapSecret {
    /// A secret from raw key bytes (32, 48 or 64) and a transformation hash (0..=3).
    pub fn new(transform: u8, key: &[u8]) -> Result<Self, SecretError> {
        if transform > 3 {
            return Err(SecretError::Transform);
        }
        if !KEY_LENGTHS.contains(&key.len()) {
            return Err(SecretError::KeyLength(key.len()));
        }
        Ok(DhchapSecret {
            transform,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// Parses `DHHC-1:hh:base64:` (surrounding whitespace ignored, the final ':' optional).
    pub fn parse(s: &str) -> Result<Self, SecretError> {
        let s = s.trim();
        let rest = s.strip_prefix("DHHC-1:").ok_or(SecretError::Prefix)?;
        let (hh, b64) = rest.split_once(':').ok_or(SecretError::Prefix)?;
        let transform = match hh {
            "00" => 0,
            "01" => 1,
            "02" => 2,
            "03" => 3,
            _ => return Err(SecretError::Transform),
        };
        let b64 = b64.strip_suffix(':').unwrap_or(b64);
        if b64.len() > 128 {
            return Err(SecretError::KeyLength(b64.len() * 3 / 4));
        }
        let raw = Zeroizing::new(STANDARD.decode(b64).map_err(|_| SecretError::Base64)?);
        if raw.len() < 4 || !KEY_LENGTHS.contains(&(raw.len() - 4)) {
            return Err(SecretError::KeyLength(raw.len().saturating_sub(4)));
        }
        let (key, crc) = raw.split_at(raw.len() - 4);
        if crc32fast::hash(key).to_le_bytes() != crc {
            return Err(SecretError::Crc);
        }
        Self::new(transform, key)
    }

    /// The DHHC-1 string (what nvme-cli prints and `nvme connect --dhchap-secret` takes).
    pub fn to_dhhc1(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new(Vec::with_capacity(self.key.len() + 4));
        raw.extend_from_slice(&self.key);
        raw.extend_from_slice(&crc32fast::hash(&self.key).to_le_bytes());
        Zeroizing::new(format!(
            "DHHC-1:{:02}:{}:",
            self.transform,
            STANDARD.encode(&raw[..])
        ))
    }

    /// The transformation hash identifier (0: the key is used as it is).
    pub fn transform(&self) -> u8 {
        self.transform
    }

    /// The key length in bytes.
    pub fn key_len(&self) -> usize {
        self.key.len()
    }

    /// The transformed key the response HMACs are keyed with (Linux
    /// `nvme_auth_transform_key`): the key itself for transform 0, otherwise
    /// HMAC-H(key, NQN || "NVMe-over-Fabrics"), where the NQN is the host's for a host
    /// secret and the subsystem's for a controller secret.
    pub fn transformed(&self, nqn: &str) -> Zeroizing<Vec<u8>> {
        match HashId::from_u8(self.transform) {
            None => self.key.clone(),
            Some(h) => hmac_parts(h, &self.key, &[nqn.as_bytes(), b"NVMe-over-Fabrics"]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format_roundtrip() {
        let key: Vec<u8> = (0..32u8).collect();
        let s = DhchapSecret::new(1, &key).unwrap();
        let text = s.to_dhhc1();
        // CRC-32 (IEEE) of 00..1f is 0x91267E8A, stored little endian.
        assert_eq!(
            &text[..],
            "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
        );
        assert_eq!(DhchapSecret::parse(&text).unwrap(), s);
        assert_eq!(
            DhchapSecret::parse(&format!("  {}\n", &text[..text.len() - 1])).unwrap(),
            s
        );
        assert!(!format!("{s:?}").contains("AAEC"));
    }

    #[test]
    fn bad_secrets_are_refused() {
        let good = "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
        assert_eq!(
            DhchapSecret::parse("DHHC-2:01:AA:"),
            Err(SecretError::Prefix)
        );
        assert_eq!(
            DhchapSecret::parse(&good.replace(":01:", ":04:")),
            Err(SecretError::Transform)
        );
        assert_eq!(
            DhchapSecret::parse(&good.replace("AAEC", "AAED")),
            Err(SecretError::Crc)
        );
        assert_eq!(
            DhchapSecret::parse("DHHC-1:00:!!!!:"),
            Err(SecretError::Base64)
        );
        assert_eq!(
            DhchapSecret::parse("DHHC-1:00:AAAAAAAA:"),
            Err(SecretError::KeyLength(2))
        );
        assert_eq!(DhchapSecret::parse(""), Err(SecretError::Prefix));
    }
}
