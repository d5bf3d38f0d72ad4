//! Finite-field Diffie-Hellman over the RFC 7919 groups (ffdhe2048..ffdhe8192, generator
//! 2), as DH-HMAC-CHAP uses them: public values and the session key are big-endian and
//! padded to the size of the modulus (Linux `crypto_kpp_maxsize`).
//!
//! Randomness comes from the caller (the private exponent's bytes), so that this crate
//! does no I/O and tests are deterministic.

use std::sync::OnceLock;

use num_bigint::BigUint;
use zeroize::Zeroizing;

use super::DhGroup;
use super::ffdhe;

/// Why a peer's DH value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DhError {
    #[error("the null DH group has no DH values")]
    NullGroup,
    #[error("DH value is {got} bytes, {group} needs {want}")]
    Length {
        group: &'static str,
        got: usize,
        want: usize,
    },
    #[error("DH value is outside 2..p-2")]
    Range,
}

/// Bytes of private-exponent randomness [`DhKeyPair::generate`] wants: 512 bits, twice
/// the 200-bit strength of ffdhe8192 and more than the others need.
pub const PRIVATE_BYTES: usize = 64;

fn prime(group: DhGroup) -> Option<&'static BigUint> {
    static P: [OnceLock<BigUint>; 5] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    let (i, hex) = match group {
        DhGroup::Null => return None,
        DhGroup::Ffdhe2048 => (0, ffdhe::FFDHE2048_P),
        DhGroup::Ffdhe3072 => (1, ffdhe::FFDHE3072_P),
        DhGroup::Ffdhe4096 => (2, ffdhe::FFDHE4096_P),
        DhGroup::Ffdhe6144 => (3, ffdhe::FFDHE6144_P),
        DhGroup::Ffdhe8192 => (4, ffdhe::FFDHE8192_P),
    };
    Some(P[i].get_or_init(|| {
        // The constants are valid hex (a test checks each one).
        BigUint::parse_bytes(hex.as_bytes(), 16).unwrap_or_default()
    }))
}

fn to_padded(v: &BigUint, len: usize) -> Vec<u8> {
    let b = v.to_bytes_be();
    let mut out = vec![0u8; len.saturating_sub(b.len())];
    out.extend_from_slice(&b[b.len().saturating_sub(len)..]);
    out
}

/// One side's DH key pair in a group other than null.
pub struct DhKeyPair {
    group: DhGroup,
    private: BigUint,
    public: Vec<u8>,
}

impl std::fmt::Debug for DhKeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DhKeyPair {{ group: {}, private: <redacted> }}",
            self.group
        )
    }
}

impl Drop for DhKeyPair {
    fn drop(&mut self) {
        // BigUint offers no zeroize; overwrite its value at least.
        self.private = BigUint::default();
    }
}

impl DhKeyPair {
    /// A key pair from `random` (at least [`PRIVATE_BYTES`] random bytes are wanted; the
    /// exponent is forced into 2^(8n-1)..2^(8n)).
    pub fn generate(group: DhGroup, random: &[u8]) -> Result<Self, DhError> {
        let p = prime(group).ok_or(DhError::NullGroup)?;
        let mut bytes = Zeroizing::new(random.to_vec());
        if bytes.is_empty() {
            bytes.push(0);
        }
        bytes[0] |= 0x80;
        let private = BigUint::from_bytes_be(&bytes);
        let public = BigUint::from(2u32).modpow(&private, p);
        Ok(DhKeyPair {
            group,
            public: to_padded(&public, group.value_bytes()),
            private,
        })
    }

    pub fn group(&self) -> DhGroup {
        self.group
    }

    /// g^x mod p, big-endian, padded to the modulus size.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The session key peer^x mod p (padded to the modulus size) from the peer's public
    /// value, which must be exactly the modulus size and within 2..=p-2.
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, DhError> {
        let p = prime(self.group).ok_or(DhError::NullGroup)?;
        let want = self.group.value_bytes();
        if peer.len() != want {
            return Err(DhError::Length {
                group: self.group.name(),
                got: peer.len(),
                want,
            });
        }
        let y = BigUint::from_bytes_be(peer);
        let two = BigUint::from(2u32);
        if y < two || y > p - &two {
            return Err(DhError::Range);
        }
        let s = y.modpow(&self.private, p);
        Ok(Zeroizing::new(to_padded(&s, want)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// floor(2^k * e) by the series sum 1/n!, with guard bits.
    fn e_scaled(k: u32) -> BigUint {
        let guard = 64;
        let one = BigUint::from(1u32) << (k + guard);
        let mut term = one.clone();
        let mut sum = one;
        let mut n = 1u32;
        while term > BigUint::default() {
            term /= n;
            sum += &term;
            n += 1;
        }
        sum >> guard
    }

    #[test]
    fn primes_match_the_rfc_7919_formula() {
        let cases = [
            (DhGroup::Ffdhe2048, 2048u32, 560316u64),
            (DhGroup::Ffdhe3072, 3072, 2625351),
            (DhGroup::Ffdhe4096, 4096, 5736041),
            (DhGroup::Ffdhe6144, 6144, 15705020),
            (DhGroup::Ffdhe8192, 8192, 10965728),
        ];
        for (g, b, x) in cases {
            let one = BigUint::from(1u32);
            let p = (&one << b) - (&one << (b - 64)) + ((e_scaled(b - 130) + x) << 64) - &one;
            assert_eq!(prime(g), Some(&p), "{g}");
            assert_eq!(g.value_bytes() * 8, b as usize);
        }
    }

    #[test]
    fn both_sides_agree_and_bad_values_are_refused() {
        let a = DhKeyPair::generate(DhGroup::Ffdhe2048, &[7; PRIVATE_BYTES]).unwrap();
        let b = DhKeyPair::generate(DhGroup::Ffdhe2048, &[9; PRIVATE_BYTES]).unwrap();
        assert_eq!(a.public().len(), 256);
        let ka = a.shared_secret(b.public()).unwrap();
        let kb = b.shared_secret(a.public()).unwrap();
        assert_eq!(ka, kb);
        assert_eq!(ka.len(), 256);
        assert!(matches!(
            a.shared_secret(&[1; 255]),
            Err(DhError::Length { .. })
        ));
        let mut one = vec![0; 256];
        one[255] = 1;
        assert_eq!(a.shared_secret(&one), Err(DhError::Range));
        assert_eq!(a.shared_secret(&[0xFF; 256]), Err(DhError::Range));
        assert!(DhKeyPair::generate(DhGroup::Null, &[1]).is_err());
        assert!(!format!("{a:?}").contains("07"));
    }
}
