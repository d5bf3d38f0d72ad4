//! ClientHello, ServerHello / HelloRetryRequest (RFC 8446 sections 4.1.2-4.1.4) and the
//! extensions this subset uses (section 4.2). Parsing borrows from the message; every length
//! is checked against its container.

use crate::codec::{Reader, handshake_message, put_u16, with_len8, with_len16};
use crate::error::{AlertDescription, TlsError};

pub(crate) const HT_CLIENT_HELLO: u8 = 1;
pub(crate) const HT_SERVER_HELLO: u8 = 2;
pub(crate) const HT_NEW_SESSION_TICKET: u8 = 4;
pub(crate) const HT_ENCRYPTED_EXTENSIONS: u8 = 8;
pub(crate) const HT_FINISHED: u8 = 20;
pub(crate) const HT_KEY_UPDATE: u8 = 24;
pub(crate) const HT_MESSAGE_HASH: u8 = 254;

pub(crate) const EXT_SUPPORTED_GROUPS: u16 = 10;
pub(crate) const EXT_SIGNATURE_ALGORITHMS: u16 = 13;
pub(crate) const EXT_PRE_SHARED_KEY: u16 = 41;
pub(crate) const EXT_EARLY_DATA: u16 = 42;
pub(crate) const EXT_SUPPORTED_VERSIONS: u16 = 43;
pub(crate) const EXT_COOKIE: u16 = 44;
pub(crate) const EXT_PSK_KEY_EXCHANGE_MODES: u16 = 45;
pub(crate) const EXT_KEY_SHARE: u16 = 51;

pub(crate) const TLS13: u16 = 0x0304;
pub(crate) const LEGACY_VERSION: u16 = 0x0303;
pub(crate) const PSK_MODE_KE: u8 = 0;
pub(crate) const PSK_MODE_DHE_KE: u8 = 1;

/// ServerHello.random of a HelloRetryRequest: SHA-256("HelloRetryRequest").
pub(crate) const HRR_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

fn illegal(reason: &str) -> TlsError {
    TlsError::proto(AlertDescription::IllegalParameter, reason)
}

/// The offered PSKs of a ClientHello's pre_shared_key extension.
pub(crate) struct OfferedPsks<'a> {
    pub identities: Vec<&'a [u8]>,
    pub binders: Vec<&'a [u8]>,
    /// Offset in the whole handshake message of the binders list (its length field): the
    /// binders are computed over the message up to here.
    pub binders_at: usize,
}

pub(crate) struct ClientHello<'a> {
    pub legacy_version: u16,
    pub session_id: &'a [u8],
    pub suites: Vec<u16>,
    pub versions: Option<Vec<u16>>,
    pub groups: Vec<u16>,
    pub key_shares: Vec<(u16, &'a [u8])>,
    pub psk_modes: Option<&'a [u8]>,
    pub psk: Option<OfferedPsks<'a>>,
    pub early_data: bool,
}

impl<'a> ClientHello<'a> {
    /// Parses a whole handshake message (4-byte header included).
    pub fn parse(msg: &'a [u8]) -> Result<Self, TlsError> {
        let mut r = Reader::new(msg, "ClientHello");
        r.take(4)?;
        let legacy_version = r.u16()?;
        r.take(32)?;
        let session_id = r.vec8()?;
        if session_id.len() > 32 {
            return Err(TlsError::decode("ClientHello (session id over 32 bytes)"));
        }
        let suites_raw = r.vec16()?;
        if suites_raw.is_empty() || suites_raw.len() % 2 != 0 {
            return Err(TlsError::decode("ClientHello cipher suites"));
        }
        let suites = suites_raw
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        let compression = r.vec8()?;
        let mut ch = ClientHello {
            legacy_version,
            session_id,
            suites,
            versions: None,
            groups: Vec::new(),
            key_shares: Vec::new(),
            psk_modes: None,
            psk: None,
            early_data: false,
        };
        if r.is_empty() {
            // No extensions at all: a TLS 1.2 (or older) hello.
            return Ok(ch);
        }
        let ext_start = r.pos() + 2;
        let mut exts = r.sub16()?;
        r.finish()?;
        let mut seen: Vec<u16> = Vec::new();
        while !exts.is_empty() {
            if ch.psk.is_some() {
                return Err(illegal(
                    "pre_shared_key is not the last ClientHello extension",
                ));
            }
            let ty = exts.u16()?;
            let body_at = ext_start + exts.pos() + 2;
            let body = exts.vec16()?;
            if seen.contains(&ty) {
                return Err(illegal("duplicate ClientHello extension"));
            }
            seen.push(ty);
            let mut b = Reader::new(body, "ClientHello extension");
            match ty {
                EXT_SUPPORTED_VERSIONS => {
                    let list = b.vec8()?;
                    if list.is_empty() || list.len() % 2 != 0 {
                        return Err(TlsError::decode("supported_versions"));
                    }
                    ch.versions = Some(
                        list.chunks_exact(2)
                            .map(|c| u16::from_be_bytes([c[0], c[1]]))
                            .collect(),
                    );
                }
                EXT_SUPPORTED_GROUPS => {
                    let list = b.vec16()?;
                    if list.len() % 2 != 0 {
                        return Err(TlsError::decode("supported_groups"));
                    }
                    ch.groups = list
                        .chunks_exact(2)
                        .map(|c| u16::from_be_bytes([c[0], c[1]]))
                        .collect();
                }
                EXT_KEY_SHARE => {
                    let mut list = b.sub16()?;
                    while !list.is_empty() {
                        let group = list.u16()?;
                        let key = list.vec16()?;
                        if key.is_empty() {
                            return Err(TlsError::decode("key_share entry"));
                        }
                        if ch.key_shares.iter().any(|(g, _)| *g == group) {
                            return Err(illegal("two key shares for one group"));
                        }
                        ch.key_shares.push((group, key));
                    }
                }
                EXT_PSK_KEY_EXCHANGE_MODES => {
                    let modes = b.vec8()?;
                    if modes.is_empty() {
                        return Err(TlsError::decode("psk_key_exchange_modes"));
                    }
                    ch.psk_modes = Some(modes);
                }
                EXT_EARLY_DATA => ch.early_data = true,
                EXT_PRE_SHARED_KEY => {
                    let mut ids = b.sub16()?;
                    let mut identities = Vec::new();
                    while !ids.is_empty() {
                        let id = ids.vec16()?;
                        ids.u32()?; // obfuscated_ticket_age: 0 for external PSKs, unused
                        if id.is_empty() {
                            return Err(TlsError::decode("PSK identity"));
                        }
                        identities.push(id);
                    }
                    let binders_at = body_at + b.pos();
                    let mut bl = b.sub16()?;
                    let mut binders = Vec::new();
                    while !bl.is_empty() {
                        let binder = bl.vec8()?;
                        if binder.len() < 32 {
                            return Err(TlsError::decode("PSK binder"));
                        }
                        binders.push(binder);
                    }
                    if identities.is_empty() || identities.len() != binders.len() {
                        return Err(illegal("PSK identities and binders do not pair up"));
                    }
                    ch.psk = Some(OfferedPsks {
                        identities,
                        binders,
                        binders_at,
                    });
                }
                _ => continue, // ignored (server_name, signature_algorithms, ...)
            }
            b.finish()?;
        }
        if compression != [0] && ch.versions.as_ref().is_some_and(|v| v.contains(&TLS13)) {
            return Err(illegal("TLS 1.3 ClientHello with compression"));
        }
        Ok(ch)
    }
}

/// What a client puts in its ClientHello.
pub(crate) struct ClientHelloParams<'a> {
    pub random: &'a [u8; 32],
    pub session_id: &'a [u8],
    pub suites: &'a [u16],
    pub groups: &'a [u16],
    pub key_shares: &'a [(u16, Vec<u8>)],
    pub psk_modes: &'a [u8],
    pub cookie: Option<&'a [u8]>,
    pub identity: &'a [u8],
    pub binder_len: usize,
}

/// Encodes a ClientHello with a zero binder; returns it and the offset of the binders list
/// (see `OfferedPsks::binders_at`). The caller computes the binder and writes it at the end.
pub(crate) fn encode_client_hello(p: &ClientHelloParams<'_>) -> (Vec<u8>, usize) {
    let mut body = Vec::with_capacity(256);
    put_u16(&mut body, LEGACY_VERSION);
    body.extend_from_slice(p.random);
    with_len8(&mut body, |b| b.extend_from_slice(p.session_id));
    with_len16(&mut body, |b| p.suites.iter().for_each(|s| put_u16(b, *s)));
    body.extend_from_slice(&[1, 0]); // legacy_compression_methods: null
    with_len16(&mut body, |e| {
        put_u16(e, EXT_SUPPORTED_VERSIONS);
        with_len16(e, |b| with_len8(b, |l| put_u16(l, TLS13)));
        if !p.groups.is_empty() {
            put_u16(e, EXT_SUPPORTED_GROUPS);
            with_len16(e, |b| {
                with_len16(b, |l| p.groups.iter().for_each(|g| put_u16(l, *g)))
            });
        }
        // Not needed for PSK authentication; some servers insist on seeing it.
        put_u16(e, EXT_SIGNATURE_ALGORITHMS);
        with_len16(e, |b| {
            with_len16(b, |l| {
                [0x0403u16, 0x0804, 0x0805]
                    .iter()
                    .for_each(|s| put_u16(l, *s))
            })
        });
        if !p.key_shares.is_empty() {
            put_u16(e, EXT_KEY_SHARE);
            with_len16(e, |b| {
                with_len16(b, |l| {
                    for (g, k) in p.key_shares {
                        put_u16(l, *g);
                        with_len16(l, |x| x.extend_from_slice(k));
                    }
                })
            });
        }
        if let Some(c) = p.cookie {
            put_u16(e, EXT_COOKIE);
            with_len16(e, |b| with_len16(b, |x| x.extend_from_slice(c)));
        }
        put_u16(e, EXT_PSK_KEY_EXCHANGE_MODES);
        with_len16(e, |b| with_len8(b, |l| l.extend_from_slice(p.psk_modes)));
        put_u16(e, EXT_PRE_SHARED_KEY);
        with_len16(e, |b| {
            with_len16(b, |ids| {
                with_len16(ids, |x| x.extend_from_slice(p.identity));
                ids.extend_from_slice(&0u32.to_be_bytes());
            });
            with_len16(b, |bl| {
                with_len8(bl, |x| x.resize(x.len() + p.binder_len, 0))
            });
        });
    });
    // The binders list (u16 length, u8 length, binder) is the last thing in the message.
    let msg = handshake_message(HT_CLIENT_HELLO, &body);
    let at = msg.len() - p.binder_len - 3;
    (msg, at)
}

pub(crate) struct ServerHello<'a> {
    pub session_id: &'a [u8],
    pub suite: u16,
    pub is_hrr: bool,
    pub version: Option<u16>,
    /// ServerHello: (group, key_exchange); HelloRetryRequest: (selected group, empty).
    pub key_share: Option<(u16, &'a [u8])>,
    pub selected_psk: Option<u16>,
    pub cookie: Option<&'a [u8]>,
}

impl<'a> ServerHello<'a> {
    pub fn parse(msg: &'a [u8]) -> Result<Self, TlsError> {
        let mut r = Reader::new(msg, "ServerHello");
        r.take(4)?;
        let legacy_version = r.u16()?;
        let random = r.take(32)?;
        let session_id = r.vec8()?;
        let suite = r.u16()?;
        let compression = r.u8()?;
        let is_hrr = random == HRR_RANDOM;
        let mut sh = ServerHello {
            session_id,
            suite,
            is_hrr,
            version: None,
            key_share: None,
            selected_psk: None,
            cookie: None,
        };
        if r.is_empty() {
            return Ok(sh); // TLS 1.2 or older: no supported_versions
        }
        let mut exts = r.sub16()?;
        r.finish()?;
        let mut seen: Vec<u16> = Vec::new();
        while !exts.is_empty() {
            let ty = exts.u16()?;
            let body = exts.vec16()?;
            if seen.contains(&ty) {
                return Err(illegal("duplicate ServerHello extension"));
            }
            seen.push(ty);
            let mut b = Reader::new(body, "ServerHello extension");
            match ty {
                EXT_SUPPORTED_VERSIONS => sh.version = Some(b.u16()?),
                EXT_KEY_SHARE if is_hrr => sh.key_share = Some((b.u16()?, &[])),
                EXT_KEY_SHARE => {
                    let g = b.u16()?;
                    sh.key_share = Some((g, b.vec16()?));
                }
                EXT_PRE_SHARED_KEY if !is_hrr => sh.selected_psk = Some(b.u16()?),
                EXT_COOKIE if is_hrr => {
                    let c = b.vec16()?;
                    if c.is_empty() {
                        return Err(TlsError::decode("cookie"));
                    }
                    sh.cookie = Some(c);
                }
                _ => {
                    return Err(TlsError::proto(
                        AlertDescription::UnsupportedExtension,
                        format!("server sent extension {ty} this client did not offer"),
                    ));
                }
            }
            b.finish()?;
        }
        if sh.version == Some(TLS13) && (legacy_version != LEGACY_VERSION || compression != 0) {
            return Err(illegal(
                "TLS 1.3 ServerHello with a wrong legacy version or compression",
            ));
        }
        Ok(sh)
    }
}

/// A ServerHello (`key_share` = the server's share) or, with `hrr`, a HelloRetryRequest
/// (`key_share` = the selected group, no key; no pre_shared_key).
pub(crate) fn encode_server_hello(
    random: &[u8; 32],
    session_id: &[u8],
    suite: u16,
    key_share: Option<(u16, &[u8])>,
    psk_index: u16,
    hrr: bool,
) -> Vec<u8> {
    let mut body = Vec::with_capacity(128);
    put_u16(&mut body, LEGACY_VERSION);
    body.extend_from_slice(if hrr { &HRR_RANDOM } else { random });
    with_len8(&mut body, |b| b.extend_from_slice(session_id));
    put_u16(&mut body, suite);
    body.push(0);
    with_len16(&mut body, |e| {
        put_u16(e, EXT_SUPPORTED_VERSIONS);
        with_len16(e, |b| put_u16(b, TLS13));
        if let Some((g, k)) = key_share {
            put_u16(e, EXT_KEY_SHARE);
            with_len16(e, |b| {
                put_u16(b, g);
                if !hrr {
                    with_len16(b, |x| x.extend_from_slice(k));
                }
            });
        }
        if !hrr {
            put_u16(e, EXT_PRE_SHARED_KEY);
            with_len16(e, |b| put_u16(b, psk_index));
        }
    });
    handshake_message(HT_SERVER_HELLO, &body)
}
