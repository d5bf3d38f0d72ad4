//! Cipher suites (RFC 8446 appendix B.4) and the per-direction AEAD traffic keys
//! (section 5.3 nonces, section 7.3 key derivation).

use ring::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
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

/// One direction's record protection: key, static IV and the record sequence number.
pub(crate) struct TrafficKeys {
    /// ring's AES-GCM (AES-NI/PCLMULQDQ or VAES assembly where the CPU has them, detected
    /// at run time; constant-time fallbacks otherwise).
    aead: LessSafeKey,
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
        let alg = match suite {
            CipherSuite::Aes128GcmSha256 => &AES_128_GCM,
            CipherSuite::Aes256GcmSha384 => &AES_256_GCM,
        };
        // The key lengths are the suites' own (key_len above): UnboundKey::new cannot fail.
        let aead = match UnboundKey::new(alg, &key) {
            Ok(k) => LessSafeKey::new(k),
            Err(_) => unreachable!("the suite's key length is the algorithm's"),
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
        let nonce = Nonce::assume_unique_for_key(self.nonce());
        // Sealing fails only for inputs beyond AES-GCM's 64 GiB bound; records are 16 KiB.
        if self
            .aead
            .seal_in_place_append_tag(nonce, Aad::from(aad), buf)
            .is_err()
        {
            unreachable!("AES-GCM sealing of a record cannot fail");
        }
        self.seq += 1;
    }

    /// Decrypts `buf` in place (dropping the tag); false if authentication fails.
    pub fn open(&mut self, aad: &[u8], buf: &mut Vec<u8>) -> bool {
        let nonce = Nonce::assume_unique_for_key(self.nonce());
        let plain_len = match self.aead.open_in_place(nonce, Aad::from(aad), buf) {
            Ok(plain) => plain.len(),
            Err(_) => return false,
        };
        buf.truncate(plain_len);
        self.seq += 1;
        true
    }
}
