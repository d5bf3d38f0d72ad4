//! Configuration: the external PSKs, offered groups and modes, the randomness seam.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use zeroize::Zeroizing;

use crate::error::TlsError;
use crate::hash::HashAlg;
use crate::kx::NamedGroup;
use crate::suite::CipherSuite;

/// Where handshake randomness comes from (a seam so that tests and the fuzzer are
/// deterministic).
pub trait RandomSource: Send + Sync {
    fn fill(&self, buf: &mut [u8]);
}

/// The operating system's CSPRNG (through `rand`'s thread generator, seeded from it).
#[derive(Debug, Default, Clone, Copy)]
pub struct OsRandom;

impl RandomSource for OsRandom {
    fn fill(&self, buf: &mut [u8]) {
        rand::RngCore::fill_bytes(&mut rand::rng(), buf);
    }
}

/// An external pre-shared key: identity, secret and the hash it is bound to (RFC 8446
/// section 4.2.11: a PSK is used only with cipher suites of its hash).
#[derive(Clone)]
pub struct Psk {
    identity: Vec<u8>,
    key: Zeroizing<Vec<u8>>,
    hash: HashAlg,
}

impl Psk {
    pub fn new(identity: impl Into<Vec<u8>>, key: &[u8], hash: HashAlg) -> Result<Self, TlsError> {
        let identity = identity.into();
        if identity.is_empty() || identity.len() > u16::MAX as usize - 6 {
            return Err(TlsError::Config(
                "a PSK identity has 1 to 65529 bytes".into(),
            ));
        }
        if key.is_empty() {
            return Err(TlsError::Config("a PSK may not be empty".into()));
        }
        Ok(Self {
            identity,
            key: Zeroizing::new(key.to_vec()),
            hash,
        })
    }

    pub fn identity(&self) -> &[u8] {
        &self.identity
    }

    pub fn key(&self) -> &[u8] {
        &self.key
    }

    pub fn hash(&self) -> HashAlg {
        self.hash
    }
}

impl fmt::Debug for Psk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("Psk")
            .field("identity", &String::from_utf8_lossy(&self.identity))
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

/// A server's PSK lookup by identity.
pub trait PskStore: Send + Sync {
    fn lookup(&self, identity: &[u8]) -> Option<Psk>;

    /// Every key `identity` may stand for, tried in order against the client's binder (the
    /// first that verifies is used): for peers whose key derivation has variants. All must
    /// have the same hash. Default: [`Self::lookup`]'s key.
    fn candidates(&self, identity: &[u8]) -> Vec<Psk> {
        self.lookup(identity).into_iter().collect()
    }
}

/// A fixed table of PSKs.
#[derive(Debug, Default, Clone)]
pub struct PskTable {
    by_identity: HashMap<Vec<u8>, Psk>,
}

impl PskTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, psk: Psk) {
        self.by_identity.insert(psk.identity.clone(), psk);
    }
}

impl PskStore for PskTable {
    fn lookup(&self, identity: &[u8]) -> Option<Psk> {
        self.by_identity.get(identity).cloned()
    }
}

/// Which PSK key-exchange modes (RFC 8446 section 4.2.9) a side accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyExchangeModes {
    /// psk_dhe_ke: PSK plus (EC)DHE, forward secret.
    pub dhe: bool,
    /// psk_ke: PSK only, no forward secrecy.
    pub psk_only: bool,
}

impl KeyExchangeModes {
    pub const DHE_ONLY: Self = Self {
        dhe: true,
        psk_only: false,
    };
    pub const BOTH: Self = Self {
        dhe: true,
        psk_only: true,
    };
    pub const PSK_ONLY: Self = Self {
        dhe: false,
        psk_only: true,
    };
}

/// A client: one PSK.
#[derive(Clone)]
pub struct ClientConfig {
    pub psk: Psk,
    pub modes: KeyExchangeModes,
    /// supported_groups, in preference order.
    pub groups: Vec<NamedGroup>,
    /// The groups that get a key share in the first ClientHello (a subset of `groups`); the
    /// server may ask for another with a HelloRetryRequest.
    pub key_share_groups: Vec<NamedGroup>,
    /// Offered suites; only those of the PSK's hash are sent.
    pub suites: Vec<CipherSuite>,
    pub random: Arc<dyn RandomSource>,
}

impl ClientConfig {
    /// psk_dhe_ke with x25519 (secp256r1 on request), both suites.
    pub fn new(psk: Psk) -> Self {
        Self {
            psk,
            modes: KeyExchangeModes::DHE_ONLY,
            groups: vec![NamedGroup::X25519, NamedGroup::Secp256r1],
            key_share_groups: vec![NamedGroup::X25519],
            suites: CipherSuite::ALL.to_vec(),
            random: Arc::new(OsRandom),
        }
    }
}

/// A server: a PSK store.
#[derive(Clone)]
pub struct ServerConfig {
    pub psks: Arc<dyn PskStore>,
    pub modes: KeyExchangeModes,
    /// Groups in the server's preference order.
    pub groups: Vec<NamedGroup>,
    /// Suites in the server's preference order.
    pub suites: Vec<CipherSuite>,
    pub random: Arc<dyn RandomSource>,
}

impl ServerConfig {
    /// Both modes (psk_dhe_ke preferred), x25519 then secp256r1, both suites.
    pub fn new(psks: Arc<dyn PskStore>) -> Self {
        Self {
            psks,
            modes: KeyExchangeModes::BOTH,
            groups: vec![NamedGroup::X25519, NamedGroup::Secp256r1],
            suites: CipherSuite::ALL.to_vec(),
            random: Arc::new(OsRandom),
        }
    }
}
