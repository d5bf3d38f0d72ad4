//! The DH-HMAC-CHAP computations (NVMe Base 2.0, 8.13.5.2..8.13.5.5; Linux
//! `drivers/nvme/common/auth.c`, `nvme_auth_dhchap_setup_{host,ctrl}_response`).
//!
//! - augmented challenge: Ca = HMAC-H(H(Ks), C), Ks the DH session key (padded to the
//!   group's size), used instead of C when the DH group is not null;
//! - host response R1 = HMAC-H(Kh', C1 || S1 (LE32) || T_ID (LE16) || 00h || "HostHost"
//!   || NQNh || 00h || NQNc);
//! - controller response R2 = HMAC-H(Kc', C2 || S2 (LE32) || T_ID (LE16) || 00h ||
//!   "Controller" || NQNc || 00h || NQNh);
//!
//! where Kh' and Kc' are the transformed secrets ([`super::DhchapSecret::transformed`]).

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::HashId;

fn mac_parts<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
    // HMAC takes keys of any length: new_from_slice cannot fail for it.
    let mut m = match <M as KeyInit>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return Zeroizing::new(Vec::new()),
    };
    for p in parts {
        m.update(p);
    }
    Zeroizing::new(m.finalize().into_bytes().to_vec())
}

/// HMAC-H(key, parts[0] || parts[1] || ...).
pub fn hmac_parts(hash: HashId, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
    match hash {
        HashId::Sha256 => mac_parts::<Hmac<Sha256>>(key, parts),
        HashId::Sha384 => mac_parts::<Hmac<Sha384>>(key, parts),
        HashId::Sha512 => mac_parts::<Hmac<Sha512>>(key, parts),
    }
}

/// H(data).
pub fn digest(hash: HashId, data: &[u8]) -> Zeroizing<Vec<u8>> {
    Zeroizing::new(match hash {
        HashId::Sha256 => Sha256::digest(data).to_vec(),
        HashId::Sha384 => Sha384::digest(data).to_vec(),
        HashId::Sha512 => Sha512::digest(data).to_vec(),
    })
}

/// The augmented challenge HMAC-H(H(session key), challenge) (Linux
/// `nvme_auth_augmented_challenge`).
pub fn augmented_challenge(
    hash: HashId,
    session_key: &[u8],
    challenge: &[u8],
) -> Zeroizing<Vec<u8>> {
    let hk = digest(hash, session_key);
    hmac_parts(hash, &hk, &[challenge])
}

/// The challenge the response is computed over: C itself for the null DH group, the
/// augmented challenge otherwise.
pub fn effective_challenge(
    hash: HashId,
    session_key: Option<&[u8]>,
    challenge: &[u8],
) -> Zeroizing<Vec<u8>> {
    match session_key {
        Some(ks) => augmented_challenge(hash, ks, challenge),
        None => Zeroizing::new(challenge.to_vec()),
    }
}

/// What a response is computed over, besides the key and the challenge.
#[derive(Debug, Clone, Copy)]
pub struct ResponseInput<'a> {
    pub seqnum: u32,
    pub t_id: u16,
    pub host_nqn: &'a str,
    pub subsys_nqn: &'a str,
}

/// R1, the host's response: `key` is the host secret transformed with the host NQN,
/// `challenge` the effective challenge from C1.
pub fn host_response(
    hash: HashId,
    key: &[u8],
    challenge: &[u8],
    r: &ResponseInput<'_>,
) -> Zeroizing<Vec<u8>> {
    response(
        hash,
        key,
        challenge,
        r,
        b"HostHost",
        r.host_nqn,
        r.subsys_nqn,
    )
}

/// R2, the controller's response: `key` is the controller secret transformed with the
/// subsystem NQN, `challenge` the effective challenge from C2.
pub fn ctrl_response(
    hash: HashId,
    key: &[u8],
    challenge: &[u8],
    r: &ResponseInput<'_>,
) -> Zeroizing<Vec<u8>> {
    response(
        hash,
        key,
        challenge,
        r,
        b"Controller",
        r.subsys_nqn,
        r.host_nqn,
    )
}

/// HMAC(key, challenge || seqnum || t_id || 0 || label || own NQN || 0 || peer NQN): both
/// responses, which differ in the label and the order of the NQNs.
fn response(
    hash: HashId,
    key: &[u8],
    challenge: &[u8],
    r: &ResponseInput<'_>,
    label: &[u8],
    own_nqn: &str,
    peer_nqn: &str,
) -> Zeroizing<Vec<u8>> {
    hmac_parts(
        hash,
        key,
        &[
            challenge,
            &r.seqnum.to_le_bytes(),
            &r.t_id.to_le_bytes(),
            &[0],
            label,
            own_nqn.as_bytes(),
            &[0],
            peer_nqn.as_bytes(),
        ],
    )
}

/// Constant-time equality of two responses (false when the lengths differ).
pub fn responses_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}
