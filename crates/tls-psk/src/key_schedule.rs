//! The TLS 1.3 key schedule for an external PSK (RFC 8446 section 7.1), binders (section
//! 4.2.11.2) and Finished MACs (section 4.4.4).

use zeroize::Zeroizing;

use crate::hash::{HashAlg, derive_secret, hkdf_expand_label, hkdf_extract};

pub(crate) struct KeySchedule {
    alg: HashAlg,
    early: Zeroizing<Vec<u8>>,
}

/// The handshake traffic secrets and the master secret.
pub(crate) struct HandshakeSecrets {
    pub client: Zeroizing<Vec<u8>>,
    pub server: Zeroizing<Vec<u8>>,
    master: Zeroizing<Vec<u8>>,
}

impl KeySchedule {
    /// Early Secret = HKDF-Extract(0, PSK).
    pub fn new(alg: HashAlg, psk: &[u8]) -> Self {
        let zeros = vec![0u8; alg.output_len()];
        Self {
            alg,
            early: hkdf_extract(alg, &zeros, psk),
        }
    }

    /// The binder of an external PSK over Transcript-Hash(Truncate(ClientHello)).
    pub fn binder(&self, truncated_hash: &[u8]) -> Zeroizing<Vec<u8>> {
        let empty = self.alg.hash(b"");
        let binder_key = derive_secret(self.alg, &self.early, b"ext binder", &empty);
        finished_mac(self.alg, &binder_key, truncated_hash)
    }

    /// Handshake Secret from the (EC)DHE shared secret (zeros in psk_ke), then the handshake
    /// traffic secrets over Transcript-Hash(ClientHello..ServerHello).
    pub fn handshake(&self, dhe: Option<&[u8]>, hello_hash: &[u8]) -> HandshakeSecrets {
        let alg = self.alg;
        let zeros = vec![0u8; alg.output_len()];
        let empty = alg.hash(b"");
        let derived = derive_secret(alg, &self.early, b"derived", &empty);
        let hs = hkdf_extract(alg, &derived, dhe.unwrap_or(&zeros));
        let client = derive_secret(alg, &hs, b"c hs traffic", hello_hash);
        let server = derive_secret(alg, &hs, b"s hs traffic", hello_hash);
        let derived = derive_secret(alg, &hs, b"derived", &empty);
        let master = hkdf_extract(alg, &derived, &zeros);
        HandshakeSecrets {
            client,
            server,
            master,
        }
    }
}

impl HandshakeSecrets {
    /// (client, server) application traffic secrets over
    /// Transcript-Hash(ClientHello..server Finished).
    pub fn application(
        &self,
        alg: HashAlg,
        hash: &[u8],
    ) -> (Zeroizing<Vec<u8>>, Zeroizing<Vec<u8>>) {
        (
            derive_secret(alg, &self.master, b"c ap traffic", hash),
            derive_secret(alg, &self.master, b"s ap traffic", hash),
        )
    }
}

/// HMAC(finished_key(base_key), transcript_hash).
pub(crate) fn finished_mac(
    alg: HashAlg,
    base_key: &[u8],
    transcript_hash: &[u8],
) -> Zeroizing<Vec<u8>> {
    let key = hkdf_expand_label(alg, base_key, b"finished", b"", alg.output_len());
    alg.hmac(&key, &[transcript_hash])
}

/// application_traffic_secret_N+1 (section 7.2).
pub(crate) fn next_traffic_secret(alg: HashAlg, secret: &[u8]) -> Zeroizing<Vec<u8>> {
    hkdf_expand_label(alg, secret, b"traffic upd", b"", alg.output_len())
}
