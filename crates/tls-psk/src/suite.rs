//! Cipher suites (RFC 8446 appendix B.4) and the per-direction AEAD traffic keys
//! (section 5.3 nonces, section 7.3 key derivation).

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes128Gcm, Aes256Gcm, Nonce};
use zeroize::Zeroizing;

use crate::hash::{HashAlg, hkdf_expand_label};

/// A TLS 1.3 cipher suite this implementation speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CipherSuite {
    /// TLS_AES_128_GCM_SHA256 (0x1301), mandatory for NVMe/TCP.
    Aes128GcmSha256,
    /// TLS_AES_256_GCM_SHA384 (0x1302).
    Aes256GcmSha384,
}

impl CipherSuite {
    pub const ALL: [CipherSuite; 2] = [CipherSuite::Aes128GcmSha256, CipherSuite::Aes256GcmSha384];

    pub fn id(self) -> u16 {
        match self {
            Self::Aes128GcmSha256 => 0x1301,
            Self::Aes256GcmSha384 => 0x1302,
        }
    }

    pub fn from_id(id: u16) -> Option<Self> {
        match id {
            0x1301 => Some(Self::Aes128GcmSha256),
            0x1302 => Some(Self::Aes256GcmSha384),
            _ => None,
        }
    }

    pub fn hash(self) -> HashAlg {
        match self {
            Self::Aes128GcmSha256 => HashAlg::Sha256,
            Self::Aes256GcmSha384 => HashAlg::Sha384,
        }
    }

    fn key_len(self) -> usize {
        match self {
            Self::Aes128GcmSha256 => 16,
            Self::Aes256GcmSha384 => 32,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Aes128GcmSha256 => "TLS_AES_128_GCM_SHA256",
            Self::Aes256GcmSha384 => "TLS_AES_256_GCM_SHA384",
        }
    }
}

/// The AEAD tag length of both suites.
pub(crate) const TAG_LEN: usize = 16;

enum Aead {
    A128(Box<Aes128Gcm>),
    A256(Box<Aes256Gcm>),
}

/// One direction's record protection: key, static IV and the record sequence number.
pub(crate) struct TrafficKeys {
    aead: Aead,
    iv: Zeroizing<[u8; 12]>,
    seq: u64,
}

impl TrafficKeys {
    /// [sender]_write_key / _iv from a traffic secret.
    pub fn derive(suite: CipherSuite, secret: &[u8]) -> Self {
        let alg = suite.hash();
        let key = hkdf_expand_label(alg, secret, b"key", b"", suite.key_len());
        let iv_bytes = hkdf_expand_label(alg, secret, b"iv", b"", 12);
        let mut iv = Zeroizing::new([0u8; 12]);
        iv.copy_from_slice(&iv_bytes);
        // The key lengths are the suites' own: new_from_slice cannot fail.
        let aead = match suite {
            CipherSuite::Aes128GcmSha256 => match Aes128Gcm::new_from_slice(&key) {
                Ok(c) => Aead::A128(Box::new(c)),
                Err(_) => unreachable!("AES-128 key is 16 bytes"),
            },
            CipherSuite::Aes256GcmSha384 => match Aes256Gcm::new_from_slice(&key) {
                Ok(c) => Aead::A256(Box::new(c)),
                Err(_) => unreachable!("AES-256 key is 32 bytes"),
            },
        };
        Self { aead, iv, seq: 0 }
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    fn nonce(&self) -> [u8; 12] {
        let mut n = *self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        n
    }

    /// Encrypts `buf` in place (appending the tag) and advances the sequence number.
    pub fn seal(&mut self, aad: &[u8], buf: &mut Vec<u8>) {
        let nonce = self.nonce();
        let nonce = Nonce::from_slice(&nonce);
        let r = match &self.aead {
            Aead::A128(c) => c.encrypt_in_place(nonce, aad, buf),
            Aead::A256(c) => c.encrypt_in_place(nonce, aad, buf),
        };
        // Encryption into a Vec only fails on allocation.
        if r.is_err() {
            unreachable!("AES-GCM encryption into a Vec cannot fail");
        }
        self.seq += 1;
    }

    /// Decrypts `buf` in place (dropping the tag); false if authentication fails.
    pub fn open(&mut self, aad: &[u8], buf: &mut Vec<u8>) -> bool {
        let nonce = self.nonce();
        let nonce = Nonce::from_slice(&nonce);
        let r = match &self.aead {
            Aead::A128(c) => c.decrypt_in_place(nonce, aad, buf),
            Aead::A256(c) => c.decrypt_in_place(nonce, aad, buf),
        };
        if r.is_ok() {
            self.seq += 1;
        }
        r.is_ok()
    }
}
