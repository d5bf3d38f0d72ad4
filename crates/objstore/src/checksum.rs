//! The object checksums S3 clients ask for (CRC32, CRC32C, CRC64NVME, SHA-1, SHA-256),
//! computed while a body streams through, and their combination for multipart uploads:
//! full-object CRCs are combined from the parts' CRCs (no second pass over the data),
//! composite checksums hash the parts' checksums.

use base64::Engine;
use s3s::crypto::Checksum;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

pub const ALL: [Algorithm; 5] = [
    Algorithm::Crc32,
    Algorithm::Crc32c,
    Algorithm::Crc64Nvme,
    Algorithm::Sha1,
    Algorithm::Sha256,
];

impl Algorithm {
    /// The name S3 uses (`x-amz-checksum-algorithm`, `ChecksumAlgorithm`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "CRC32",
            Algorithm::Crc32c => "CRC32C",
            Algorithm::Crc64Nvme => "CRC64NVME",
            Algorithm::Sha1 => "SHA1",
            Algorithm::Sha256 => "SHA256",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        ALL.into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }

    /// The header carrying a value of this algorithm (`x-amz-checksum-crc32`, ...).
    pub fn header(self) -> String {
        format!("x-amz-checksum-{}", self.name().to_ascii_lowercase())
    }

    /// CRCs can be combined into a full-object checksum of a multipart upload.
    pub fn is_crc(self) -> bool {
        matches!(
            self,
            Algorithm::Crc32 | Algorithm::Crc32c | Algorithm::Crc64Nvme
        )
    }

    fn crc_algorithm(self) -> Option<crc_fast::CrcAlgorithm> {
        match self {
            Algorithm::Crc32 => Some(crc_fast::CrcAlgorithm::Crc32IsoHdlc),
            Algorithm::Crc32c => Some(crc_fast::CrcAlgorithm::Crc32Iscsi),
            Algorithm::Crc64Nvme => Some(crc_fast::CrcAlgorithm::Crc64Nvme),
            _ => None,
        }
    }
}

/// One running checksum.
pub enum Hasher {
    Crc32(s3s::crypto::Crc32),
    Crc32c(s3s::crypto::Crc32c),
    Crc64Nvme(s3s::crypto::Crc64Nvme),
    Sha1(s3s::crypto::Sha1),
    Sha256(s3s::crypto::Sha256),
}

impl Hasher {
    pub fn new(a: Algorithm) -> Self {
        match a {
            Algorithm::Crc32 => Hasher::Crc32(Checksum::new()),
            Algorithm::Crc32c => Hasher::Crc32c(Checksum::new()),
            Algorithm::Crc64Nvme => Hasher::Crc64Nvme(Checksum::new()),
            Algorithm::Sha1 => Hasher::Sha1(Checksum::new()),
            Algorithm::Sha256 => Hasher::Sha256(Checksum::new()),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Crc32(h) => h.update(data),
            Hasher::Crc32c(h) => h.update(data),
            Hasher::Crc64Nvme(h) => h.update(data),
            Hasher::Sha1(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
        }
    }

    /// The digest, as raw bytes (big-endian for CRCs, as S3 encodes them).
    pub fn finalize(self) -> Vec<u8> {
        match self {
            Hasher::Crc32(h) => h.finalize().to_vec(),
            Hasher::Crc32c(h) => h.finalize().to_vec(),
            Hasher::Crc64Nvme(h) => h.finalize().to_vec(),
            Hasher::Sha1(h) => h.finalize().as_ref().to_vec(),
            Hasher::Sha256(h) => h.finalize().as_ref().to_vec(),
        }
    }
}

pub fn b64(raw: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(raw)
}

pub fn unb64(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

fn be_u64(raw: &[u8]) -> u64 {
    raw.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

/// The CRC of `a ++ b` from the CRC of `a`, the CRC of `b` and the length of `b`.
/// `None` for non-CRC algorithms or malformed values.
pub fn combine_crc(alg: Algorithm, a: &[u8], b: &[u8], b_len: u64) -> Option<Vec<u8>> {
    let crc = alg.crc_algorithm()?;
    let width = if alg == Algorithm::Crc64Nvme { 8 } else { 4 };
    if a.len() != width || b.len() != width {
        return None;
    }
    let combined = crc_fast::checksum_combine(crc, be_u64(a), be_u64(b), b_len);
    Some(combined.to_be_bytes()[8 - width..].to_vec())
}

/// The checksum of an empty input.
pub fn empty(alg: Algorithm) -> Vec<u8> {
    Hasher::new(alg).finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(alg: Algorithm, data: &[u8]) -> Vec<u8> {
        let mut h = Hasher::new(alg);
        h.update(data);
        h.finalize()
    }

    #[test]
    fn known_values() {
        // CRC32 / CRC32C check values of "123456789".
        assert_eq!(
            digest(Algorithm::Crc32, b"123456789"),
            0xcbf43926u32.to_be_bytes()
        );
        assert_eq!(
            digest(Algorithm::Crc32c, b"123456789"),
            0xe3069283u32.to_be_bytes()
        );
        assert_eq!(
            b64(&digest(Algorithm::Sha256, b"")),
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
        );
    }

    #[test]
    fn combined_crcs_equal_the_crc_of_the_whole() {
        let a = b"hello, ".repeat(100);
        let b = b"world".repeat(77);
        let whole = [a.clone(), b.clone()].concat();
        for alg in [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64Nvme] {
            let got = combine_crc(alg, &digest(alg, &a), &digest(alg, &b), b.len() as u64);
            assert_eq!(got, Some(digest(alg, &whole)), "{alg:?}");
        }
        assert_eq!(combine_crc(Algorithm::Sha1, &[], &[], 0), None);
    }
}
