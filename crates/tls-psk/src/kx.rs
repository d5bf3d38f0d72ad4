//! (EC)DHE key shares for psk_dhe_ke: X25519 (RFC 7748) and secp256r1 (uncompressed points,
//! RFC 8446 section 4.2.8.2).

use p256::elliptic_curve::sec1::ToEncodedPoint;
use zeroize::Zeroizing;

use crate::config::RandomSource;
use crate::error::{AlertDescription, TlsError};

/// A key-exchange group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedGroup {
    X25519,
    Secp256r1,
}

impl NamedGroup {
    pub fn id(self) -> u16 {
        match self {
            Self::X25519 => 0x001d,
            Self::Secp256r1 => 0x0017,
        }
    }

    pub fn from_id(id: u16) -> Option<Self> {
        match id {
            0x001d => Some(Self::X25519),
            0x0017 => Some(Self::Secp256r1),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::X25519 => "x25519",
            Self::Secp256r1 => "secp256r1",
        }
    }
}

/// This side's ephemeral secret.
pub(crate) enum KeyShare {
    X25519(x25519_dalek::StaticSecret),
    P256(p256::SecretKey),
}

impl KeyShare {
    /// A fresh secret and its public key_exchange bytes.
    pub fn generate(group: NamedGroup, rng: &dyn RandomSource) -> (Self, Vec<u8>) {
        match group {
            NamedGroup::X25519 => {
                let mut b = Zeroizing::new([0u8; 32]);
                rng.fill(&mut b[..]);
                let s = x25519_dalek::StaticSecret::from(*b);
                let public = x25519_dalek::PublicKey::from(&s).as_bytes().to_vec();
                (Self::X25519(s), public)
            }
            NamedGroup::Secp256r1 => loop {
                let mut b = Zeroizing::new([0u8; 32]);
                rng.fill(&mut b[..]);
                // Zero or a value at or above the group order: draw again.
                if let Ok(s) = p256::SecretKey::from_slice(&b[..]) {
                    let public = s.public_key().to_encoded_point(false).as_bytes().to_vec();
                    break (Self::P256(s), public);
                }
            },
        }
    }

    pub fn group(&self) -> NamedGroup {
        match self {
            Self::X25519(_) => NamedGroup::X25519,
            Self::P256(_) => NamedGroup::Secp256r1,
        }
    }

    /// The shared secret with the peer's key_exchange bytes; a malformed or low-order peer key
    /// is `illegal_parameter`.
    pub fn agree(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, TlsError> {
        let bad = |what: &str| {
            TlsError::proto(
                AlertDescription::IllegalParameter,
                format!("invalid {what} key share"),
            )
        };
        match self {
            Self::X25519(s) => {
                let p: [u8; 32] = peer.try_into().map_err(|_| bad("x25519"))?;
                let shared = s.diffie_hellman(&x25519_dalek::PublicKey::from(p));
                if !shared.was_contributory() {
                    return Err(bad("x25519 (low order)"));
                }
                Ok(Zeroizing::new(shared.as_bytes().to_vec()))
            }
            Self::P256(s) => {
                if peer.len() != 65 || peer[0] != 4 {
                    return Err(bad("secp256r1 (not an uncompressed point)"));
                }
                let pk = p256::PublicKey::from_sec1_bytes(peer).map_err(|_| bad("secp256r1"))?;
                let shared = p256::ecdh::diffie_hellman(s.to_nonzero_scalar(), pk.as_affine());
                Ok(Zeroizing::new(shared.raw_secret_bytes().to_vec()))
            }
        }
    }
}
