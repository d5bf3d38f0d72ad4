//! SHA-256/384, HMAC, HKDF (RFC 5869) and TLS 1.3's HKDF-Expand-Label / Derive-Secret
//! (RFC 8446 section 7.1). HKDF is these few lines over the `hmac` crate: the `hkdf` release
//! built on hmac 0.13 needs a newer digest stack than the workspace pins.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha384};
use zeroize::Zeroizing;

/// The hash of a cipher suite and of a PSK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashAlg {
    Sha256,
    Sha384,
}

impl HashAlg {
    pub fn output_len(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha384 => 48,
        }
    }

    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Self::Sha256 => Sha256::digest(data).to_vec(),
            Self::Sha384 => Sha384::digest(data).to_vec(),
        }
    }

    /// HMAC over the concatenation of `parts`.
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
        fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
            // HMAC takes keys of any length: new_from_slice cannot fail for it.
            let mut m = match <M as KeyInit>::new_from_slice(key) {
                Ok(m) => m,
                Err(_) => unreachable!("HMAC accepts every key length"),
            };
            for p in parts {
                m.update(p);
            }
            Zeroizing::new(m.finalize().into_bytes().to_vec())
        }
        match self {
            Self::Sha256 => run::<Hmac<Sha256>>(key, parts),
            Self::Sha384 => run::<Hmac<Sha384>>(key, parts),
        }
    }
}

/// HKDF-Extract(salt, IKM). An empty salt is HashLen zeros (same HMAC key).
pub fn hkdf_extract(alg: HashAlg, salt: &[u8], ikm: &[u8]) -> Zeroizing<Vec<u8>> {
    alg.hmac(salt, &[ikm])
}

/// HKDF-Expand(PRK, info, L). `len` is at most 255 * HashLen (asserted: callers pass
/// constants).
pub fn hkdf_expand(alg: HashAlg, prk: &[u8], info: &[u8], len: usize) -> Zeroizing<Vec<u8>> {
    assert!(
        len <= 255 * alg.output_len(),
        "HKDF-Expand length too large"
    );
    let mut out = Zeroizing::new(Vec::with_capacity(len));
    let mut t: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::new());
    let mut counter = 1u8;
    while out.len() < len {
        t = alg.hmac(prk, &[&t, info, &[counter]]);
        let n = (len - out.len()).min(t.len());
        out.extend_from_slice(&t[..n]);
        counter = counter.wrapping_add(1);
    }
    out
}

/// The HkdfLabel structure: u16 length, "tls13 " + label (u8 vector), context (u8 vector).
pub fn hkdf_label(len: usize, label: &[u8], context: &[u8]) -> Vec<u8> {
    let mut info = Vec::with_capacity(4 + 6 + label.len() + context.len());
    info.extend_from_slice(&(len as u16).to_be_bytes());
    info.push((6 + label.len()) as u8);
    info.extend_from_slice(b"tls13 ");
    info.extend_from_slice(label);
    info.push(context.len() as u8);
    info.extend_from_slice(context);
    info
}

/// HKDF-Expand-Label(Secret, Label, Context, Length).
pub fn hkdf_expand_label(
    alg: HashAlg,
    secret: &[u8],
    label: &[u8],
    context: &[u8],
    len: usize,
) -> Zeroizing<Vec<u8>> {
    hkdf_expand(alg, secret, &hkdf_label(len, label, context), len)
}

/// Derive-Secret(Secret, Label, Messages) given Transcript-Hash(Messages).
pub fn derive_secret(
    alg: HashAlg,
    secret: &[u8],
    label: &[u8],
    transcript_hash: &[u8],
) -> Zeroizing<Vec<u8>> {
    hkdf_expand_label(alg, secret, label, transcript_hash, alg.output_len())
}

/// The running hash of the handshake messages.
#[derive(Clone)]
pub(crate) enum Transcript {
    Sha256(Sha256),
    Sha384(Sha384),
}

impl Transcript {
    pub fn new(alg: HashAlg) -> Self {
        match alg {
            HashAlg::Sha256 => Self::Sha256(Sha256::new()),
            HashAlg::Sha384 => Self::Sha384(Sha384::new()),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Self::Sha256(h) => h.update(data),
            Self::Sha384(h) => h.update(data),
        }
    }

    /// The hash of everything so far (the running state is kept).
    pub fn current(&self) -> Vec<u8> {
        match self {
            Self::Sha256(h) => h.clone().finalize().to_vec(),
            Self::Sha384(h) => h.clone().finalize().to_vec(),
        }
    }

    /// The hash of everything so far followed by `more` (the running state is kept).
    pub fn hash_with(&self, more: &[u8]) -> Vec<u8> {
        let mut t = self.clone();
        t.update(more);
        t.current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 5869 test case 1 (SHA-256).
    #[test]
    fn hkdf_rfc5869_case1() {
        let ikm = [0x0bu8; 22];
        let salt: Vec<u8> = (0u8..=0x0c).collect();
        let info: Vec<u8> = (0xf0u8..=0xf9).collect();
        let prk = hkdf_extract(HashAlg::Sha256, &salt, &ikm);
        assert_eq!(
            hex(&prk),
            "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5"
        );
        let okm = hkdf_expand(HashAlg::Sha256, &prk, &info, 42);
        assert_eq!(
            hex(&okm),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
        );
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
