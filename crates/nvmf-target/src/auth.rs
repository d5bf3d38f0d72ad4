//! DH-HMAC-CHAP on the target (NVMe Base 2.0, 8.13.5): per (subsystem, host) secrets,
//! the controller's side of the exchange on each queue, and what a queue may do before
//! it is authenticated.
//!
//! A host with a [`DhchapHostConfig`] on a subsystem gets AUTHREQ.ATR in every Connect
//! response; the queue then runs only Authentication Send/Receive and Disconnect (other
//! commands: Authentication Required) until an exchange succeeds. The exchange
//! ([`AuthExchange`]) is a pure state machine over message bytes, driven by the fabrics
//! command handlers and by the fuzz target:
//!
//! ```text
//!  Send AUTH_Negotiate ─▶ Receive Challenge ─▶ Send Reply ─▶ Receive Success1
//!       (any time: re-authentication)                          └─▶ Send Success2 (bidirectional)
//!  any error ─▶ Receive AUTH_Failure1 (reason) ─▶ the connection ends
//! ```
//!
//! Secure channel concatenation (NVMe Base 2.1, "Secure channel concatenation"; Linux
//! `nvmet_auth_negotiate`, `nvmet_auth_insert_psk`): a host whose config sets `concat`
//! must negotiate SC_C = NEWTLSPSK on a plain-TCP admin queue; after the exchange succeeds
//! [`AuthExchange::take_generated`] hands out the generated PSK (HMAC(KS, C1 || C2)), which
//! the subsystem retains for that host until the next concatenation replaces it. The host
//! then connects over TLS with the `NVMe1G..` identity of that key, and those queues need
//! no further authentication. SC_C values that do not fit the queue (NEWTLSPSK over TLS,
//! REPLACETLSPSK without it, any on an I/O queue, any for a host not set up for it,
//! unknown values, none for a host that must concatenate) fail with "concatenation
//! mismatch"; so does a null DH group, which leaves no session key to generate from.
//!
//! Secrets never reach logs or `Debug` output; responses are compared in constant time.

use std::sync::Arc;

use nvme_proto::auth::crypto::{
    ResponseInput, ctrl_response, effective_challenge, host_response, responses_equal,
};
use nvme_proto::auth::dh::PRIVATE_BYTES;
use nvme_proto::auth::msg::{AUTH_ID_DHCHAP, SC_C_NEWTLSPSK, SC_C_NONE, SC_C_REPLACETLSPSK};
use nvme_proto::auth::{
    AuthMessage, Challenge, DhGroup, DhKeyPair, DhchapSecret, Failure, FailureReason, HashId,
    MAX_MESSAGE_BYTES, Negotiate, Reply, Success1,
};
use nvme_proto::tls_key::{GeneratedPsk, PskHash};
use zeroize::Zeroizing;

/// What a subsystem requires of one host: its secret, optionally the controller's secret
/// (for hosts that authenticate the controller too), and the hash functions and DH groups
/// the controller accepts, in its order of preference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhchapHostConfig {
    /// The host's secret (`nvme connect --dhchap-secret`).
    pub secret: DhchapSecret,
    /// The controller's secret (`nvme connect --dhchap-ctrl-secret`); without it, a host
    /// asking for bidirectional authentication is refused.
    pub ctrl_secret: Option<DhchapSecret>,
    /// Accepted hash functions, preferred first (never empty when used).
    pub hashes: Vec<HashId>,
    /// Accepted DH groups, preferred first.
    pub dhgroups: Vec<DhGroup>,
    /// Secure channel concatenation required: the host authenticates on a plain-TCP admin
    /// queue with SC_C = NEWTLSPSK and then connects over TLS with the generated PSK.
    pub concat: bool,
}

impl DhchapHostConfig {
    /// The defaults: SHA-256, -384, -512; ffdhe2048 first, then the larger groups, then
    /// the null group (hosts that do no Diffie-Hellman).
    pub fn new(secret: DhchapSecret, ctrl_secret: Option<DhchapSecret>) -> Self {
        DhchapHostConfig {
            secret,
            ctrl_secret,
            hashes: HashId::ALL.to_vec(),
            dhgroups: vec![
                DhGroup::Ffdhe2048,
                DhGroup::Ffdhe3072,
                DhGroup::Ffdhe4096,
                DhGroup::Ffdhe6144,
                DhGroup::Ffdhe8192,
                DhGroup::Null,
            ],
            concat: false,
        }
    }

    /// What no exchange could satisfy: concatenation with the null group alone (it leaves
    /// no session key to generate a PSK from).
    pub fn check(&self) -> Result<(), &'static str> {
        if self.concat && !self.dhgroups.iter().any(|g| *g != DhGroup::Null) {
            return Err("secure channel concatenation needs a DH group other than null");
        }
        Ok(())
    }
}

/// The randomness of challenges, sequence numbers and DH exponents (a seam: the fuzz
/// target and tests use a fixed one).
pub trait AuthRandom: Send + Sync {
    fn fill(&self, buf: &mut [u8]);
}

/// The operating system's randomness (through `rand`'s thread-local CSPRNG).
#[derive(Debug, Default, Clone, Copy)]
pub struct OsAuthRandom;

impl AuthRandom for OsAuthRandom {
    fn fill(&self, buf: &mut [u8]) {
        use rand::RngCore as _;
        rand::rng().fill_bytes(buf);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Waiting for AUTH_Negotiate.
    Negotiate,
    /// Waiting for the Authentication Receive that fetches the challenge.
    Challenge,
    /// Waiting for DH-HMAC-CHAP_Reply.
    Reply,
    /// Waiting for the Authentication Receive that fetches Success1.
    Success1,
    /// Waiting for DH-HMAC-CHAP_Success2 (bidirectional).
    Success2,
    /// Waiting for the Authentication Receive that fetches Failure1.
    Failure1(FailureReason),
    /// The exchange ended (success: another Negotiate may start a new one).
    Done,
}

/// What an Authentication Send did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendResult {
    /// Accepted; the exchange goes on (or has just succeeded).
    Accepted,
    /// The message was wrong: the next Authentication Receive returns Failure1 with
    /// this reason, and the connection ends.
    Failed(FailureReason),
    /// The host sent AUTH_Failure2 (it refused the controller): the connection ends.
    HostAborted(u8),
}

/// What an Authentication Receive returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiveResult {
    /// The message bytes (the transfer is padded with zeros to AL).
    pub message: Vec<u8>,
    /// Set when the message is Failure1: the connection ends after it.
    pub failure: Option<FailureReason>,
}

/// The controller's side of one queue's DH-HMAC-CHAP exchanges.
pub struct AuthExchange {
    cfg: Arc<DhchapHostConfig>,
    host_nqn: String,
    subsys_nqn: String,
    step: Step,
    authenticated: bool,
    t_id: u16,
    hash: HashId,
    group: DhGroup,
    s1: u32,
    c1: Zeroizing<Vec<u8>>,
    keypair: Option<DhKeyPair>,
    session_key: Option<Zeroizing<Vec<u8>>>,
    /// C2 and S2 when the host authenticates the controller.
    c2: Option<(Zeroizing<Vec<u8>>, u32)>,
    /// The queue: its ID and whether it runs over TLS (what SC_C must fit).
    qid: u16,
    over_tls: bool,
    /// SC_C of the current transaction.
    sc_c: u8,
    /// The generated PSK of a concatenating exchange: computed once the host's response
    /// checked out, handed out only when the exchange succeeded.
    generated: Option<GeneratedPsk>,
}

impl std::fmt::Debug for AuthExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthExchange")
            .field("host_nqn", &self.host_nqn)
            .field("subsys_nqn", &self.subsys_nqn)
            .field("step", &self.step)
            .field("authenticated", &self.authenticated)
            .finish_non_exhaustive()
    }
}

impl AuthExchange {
    pub fn new(cfg: Arc<DhchapHostConfig>, host_nqn: &str, subsys_nqn: &str) -> Self {
        AuthExchange {
            cfg,
            host_nqn: host_nqn.to_string(),
            subsys_nqn: subsys_nqn.to_string(),
            step: Step::Negotiate,
            authenticated: false,
            t_id: 0,
            hash: HashId::Sha256,
            group: DhGroup::Null,
            s1: 0,
            c1: Zeroizing::new(Vec::new()),
            keypair: None,
            session_key: None,
            c2: None,
            qid: 0,
            over_tls: false,
            sc_c: SC_C_NONE,
            generated: None,
        }
    }

    /// The queue this exchange runs on: its ID and whether it is over TLS.
    pub fn on_queue(mut self, qid: u16, over_tls: bool) -> Self {
        self.qid = qid;
        self.over_tls = over_tls;
        self
    }

    /// The PSK a successful concatenating exchange generated (once).
    pub fn take_generated(&mut self) -> Option<GeneratedPsk> {
        // Done and authenticated: the exchange succeeded (a host's Failure2 ends it Done too).
        if self.step != Step::Done || !self.authenticated {
            return None;
        }
        self.generated.take()
    }

    /// Whether SC_C = `sc_c` fits this queue and host (see the module doc).
    fn concat_fits(&self, sc_c: u8) -> bool {
        match sc_c {
            SC_C_NONE => !self.cfg.concat || self.over_tls,
            SC_C_NEWTLSPSK => self.cfg.concat && self.qid == 0 && !self.over_tls,
            SC_C_REPLACETLSPSK => self.cfg.concat && self.qid == 0 && self.over_tls,
            _ => false,
        }
    }

    /// Whether an exchange on this queue succeeded (and none failed since).
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// The hash function and DH group of the current (or last) exchange.
    pub fn negotiated(&self) -> (HashId, DhGroup) {
        (self.hash, self.group)
    }

    fn fail(&mut self, r: FailureReason) -> SendResult {
        self.step = Step::Failure1(r);
        self.authenticated = false;
        self.keypair = None;
        self.session_key = None;
        self.c2 = None;
        self.generated = None;
        SendResult::Failed(r)
    }

    /// An Authentication Send carrying `data`.
    pub fn on_send(&mut self, data: &[u8], rng: &dyn AuthRandom) -> SendResult {
        if let Step::Failure1(r) = self.step {
            return SendResult::Failed(r);
        }
        if data.len() > MAX_MESSAGE_BYTES {
            return self.fail(FailureReason::IncorrectPayload);
        }
        let msg = match AuthMessage::decode(data) {
            Ok(m) => m,
            Err(nvme_proto::DecodeError::Unknown { .. }) => {
                return self.fail(FailureReason::IncorrectMessage);
            }
            Err(_) => return self.fail(FailureReason::IncorrectPayload),
        };
        match msg {
            AuthMessage::Negotiate(n) => self.negotiate(&n, rng),
            AuthMessage::Reply(r) => {
                if self.step != Step::Reply {
                    return self.fail(FailureReason::IncorrectMessage);
                }
                if r.t_id != self.t_id {
                    return self.fail(FailureReason::IncorrectPayload);
                }
                self.reply(&r)
            }
            AuthMessage::Success2(s) => {
                if self.step != Step::Success2 {
                    return self.fail(FailureReason::IncorrectMessage);
                }
                if s.t_id != self.t_id {
                    return self.fail(FailureReason::IncorrectPayload);
                }
                self.finish();
                SendResult::Accepted
            }
            AuthMessage::Failure(f) if f.failure2 => {
                self.step = Step::Done;
                self.authenticated = false;
                SendResult::HostAborted(f.rescode_exp)
            }
            // Controller-to-host messages sent by the host.
            AuthMessage::Failure(_) | AuthMessage::Challenge(_) | AuthMessage::Success1(_) => {
                self.fail(FailureReason::IncorrectMessage)
            }
        }
    }

    fn finish(&mut self) {
        self.step = Step::Done;
        self.authenticated = true;
        self.keypair = None;
        self.session_key = None;
        self.c2 = None;
    }

    fn negotiate(&mut self, n: &Negotiate, rng: &dyn AuthRandom) -> SendResult {
        // A Negotiate starts a new transaction at any point except after a failure
        // (re-authentication keeps the queue authenticated until it fails).
        self.t_id = n.t_id;
        self.keypair = None;
        self.session_key = None;
        self.c2 = None;
        self.generated = None;
        self.sc_c = n.sc_c;
        if !self.concat_fits(n.sc_c) {
            return self.fail(FailureReason::ConcatMismatch);
        }
        let concat = n.sc_c != SC_C_NONE;
        let Some(d) = n.protocols.iter().find(|p| p.authid == AUTH_ID_DHCHAP) else {
            return self.fail(FailureReason::NotUsable);
        };
        let Some(hash) = self
            .cfg
            .hashes
            .iter()
            .copied()
            // A generated PSK needs a TLS suite's hash.
            .filter(|h| !concat || PskHash::from_dhchap(*h).is_some())
            .find(|h| d.hash_ids.contains(&(*h as u8)))
        else {
            return self.fail(FailureReason::HashUnusable);
        };
        let Some(group) = self
            .cfg
            .dhgroups
            .iter()
            .copied()
            // The null group leaves no session key to generate a PSK from.
            .filter(|g| !concat || *g != DhGroup::Null)
            .find(|g| d.dh_ids.contains(&(*g as u8)))
        else {
            return self.fail(if concat {
                FailureReason::ConcatMismatch
            } else {
                FailureReason::DhGroupUnusable
            });
        };
        self.hash = hash;
        self.group = group;
        let mut c1 = Zeroizing::new(vec![0u8; hash.len()]);
        rng.fill(&mut c1);
        self.c1 = c1;
        let mut s = [0u8; 4];
        rng.fill(&mut s);
        // 0 means "no sequence number"; never send it.
        self.s1 = u32::from_le_bytes(s).max(1);
        if group != DhGroup::Null {
            let mut x = Zeroizing::new([0u8; PRIVATE_BYTES]);
            rng.fill(&mut x[..]);
            match DhKeyPair::generate(group, &x[..]) {
                Ok(k) => self.keypair = Some(k),
                Err(_) => return self.fail(FailureReason::DhGroupUnusable),
            }
        }
        self.step = Step::Challenge;
        SendResult::Accepted
    }

    fn reply(&mut self, r: &Reply) -> SendResult {
        if r.rval.len() != self.hash.len() {
            return self.fail(FailureReason::IncorrectPayload);
        }
        self.session_key = match (&self.keypair, r.dhv.is_empty()) {
            (None, true) => None,
            (None, false) | (Some(_), true) => return self.fail(FailureReason::IncorrectPayload),
            (Some(k), false) => match k.shared_secret(&r.dhv) {
                Ok(s) => Some(s),
                Err(_) => return self.fail(FailureReason::DhGroupUnusable),
            },
        };
        let input = ResponseInput {
            seqnum: self.s1,
            t_id: self.t_id,
            host_nqn: &self.host_nqn,
            subsys_nqn: &self.subsys_nqn,
        };
        let key = self.cfg.secret.transformed(&self.host_nqn);
        let ch = effective_challenge(
            self.hash,
            self.session_key.as_deref().map(|v| &v[..]),
            &self.c1,
        );
        let expected = host_response(self.hash, &key, &ch, &input);
        if !responses_equal(&expected, &r.rval) {
            return self.fail(FailureReason::Failed);
        }
        if self.sc_c != SC_C_NONE {
            // Concatenation: the host always sends C2 (Linux nvmet_auth_reply), and the
            // generated PSK is HMAC(KS, C1 || C2).
            let (Some(c2), Some(ks), Some(h)) = (
                r.c2.as_ref(),
                self.session_key.as_ref(),
                PskHash::from_dhchap(self.hash),
            ) else {
                return self.fail(FailureReason::Failed);
            };
            match GeneratedPsk::generate(h, ks, &self.c1, c2) {
                Ok(g) => self.generated = Some(g),
                Err(_) => return self.fail(FailureReason::IncorrectPayload),
            }
        }
        match &r.c2 {
            Some(c2) if r.seqnum != 0 => {
                // A host that authenticates the controller needs its secret here; a C2
                // equal to C1 would make the controller answer its own challenge.
                if self.cfg.ctrl_secret.is_none() || responses_equal(c2, &self.c1) {
                    return self.fail(FailureReason::Failed);
                }
                self.c2 = Some((Zeroizing::new(c2.clone()), r.seqnum));
            }
            _ => {
                self.c2 = None;
                self.authenticated = true;
            }
        }
        self.step = Step::Success1;
        SendResult::Accepted
    }

    /// An Authentication Receive with allocation length `al`.
    pub fn on_receive(&mut self, al: u32) -> ReceiveResult {
        let al = al as usize;
        let failure = |me: &mut Self, r: FailureReason| {
            me.step = Step::Failure1(r);
            me.authenticated = false;
            me.keypair = None;
            me.session_key = None;
            ReceiveResult {
                message: Failure::failure1(me.t_id, r).to_bytes(),
                failure: Some(r),
            }
        };
        match self.step {
            Step::Challenge => {
                let dhv = self
                    .keypair
                    .as_ref()
                    .map(|k| k.public().to_vec())
                    .unwrap_or_default();
                let c = Challenge {
                    t_id: self.t_id,
                    hash_id: self.hash as u8,
                    dh_group: self.group as u8,
                    seqnum: self.s1,
                    cval: self.c1.to_vec(),
                    dhv,
                };
                if al < c.len() {
                    return failure(self, FailureReason::IncorrectPayload);
                }
                self.step = Step::Reply;
                ReceiveResult {
                    message: c.to_bytes(),
                    failure: None,
                }
            }
            Step::Success1 => {
                let rval = match &self.c2 {
                    None => None,
                    Some((c2, s2)) => {
                        let Some(cs) = &self.cfg.ctrl_secret else {
                            return failure(self, FailureReason::Failed);
                        };
                        let key = cs.transformed(&self.subsys_nqn);
                        let ch = effective_challenge(
                            self.hash,
                            self.session_key.as_deref().map(|v| &v[..]),
                            c2,
                        );
                        let input = ResponseInput {
                            seqnum: *s2,
                            t_id: self.t_id,
                            host_nqn: &self.host_nqn,
                            subsys_nqn: &self.subsys_nqn,
                        };
                        Some(ctrl_response(self.hash, &key, &ch, &input).to_vec())
                    }
                };
                let s = Success1 {
                    t_id: self.t_id,
                    hl: self.hash.len() as u8,
                    rval,
                };
                if al < s.len() {
                    return failure(self, FailureReason::IncorrectPayload);
                }
                if self.c2.is_some() {
                    self.step = Step::Success2;
                    self.keypair = None;
                    self.session_key = None;
                } else {
                    self.finish();
                }
                ReceiveResult {
                    message: s.to_bytes(),
                    failure: None,
                }
            }
            Step::Failure1(r) => failure(self, r),
            Step::Negotiate | Step::Reply | Step::Success2 | Step::Done => {
                failure(self, FailureReason::IncorrectMessage)
            }
        }
    }
}

/// Fuzzing entry point for the exchange (`fuzz/fuzz_targets/auth_exchange.rs`): `data`
/// drives one [`AuthExchange`] with fixed randomness through a sequence of operations,
/// each a tag byte and its operands:
///
/// - `0`, len (u16 LE), bytes: Authentication Send of those bytes (also fed to every
///   message decoder);
/// - `1`, al (u16 LE): Authentication Receive;
/// - `2`, hash, group: a well-formed AUTH_Negotiate offering that hash and DH group (SC_C
///   from the configuration byte);
/// - `3`, flags: a DH-HMAC-CHAP_Reply computed correctly from the last challenge
///   received (flags bit 0: ask for bidirectional authentication, bit 1: corrupt R1,
///   bit 2: wrong T_ID, bit 3: a C2 with S2 = 0, as concatenating hosts send), so that the
///   deeper states are reached too;
/// - `4`: Success2 of the current transaction.
///
/// The first byte picks the configuration (bit 0: a controller secret; bit 1: secure
/// channel concatenation required; bits 2..4: SC_C of the Negotiates; bit 4: the queue is
/// over TLS). Nothing may panic; returns how many times the queue ended authenticated
/// after an operation.
pub fn fuzz_auth_exchange(data: &[u8]) -> usize {
    use nvme_proto::auth::{ProtocolDescriptor, Success2};
    struct Fixed;
    impl AuthRandom for Fixed {
        fn fill(&self, buf: &mut [u8]) {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(37).wrapping_add(11);
            }
        }
    }
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:f0f0f0f0-0000-4000-8000-000000000001";
    const SUB: &str = "nqn.2026-01.io.ferrobay:fuzz";
    let Some((&cfg_byte, mut rest)) = data.split_first() else {
        return 0;
    };
    let (Ok(secret), Ok(ctrl)) = (
        DhchapSecret::new(1, &[0x5A; 32]),
        DhchapSecret::new(2, &[0xA5; 48]),
    ) else {
        return 0;
    };
    let cfg = Arc::new(DhchapHostConfig {
        dhgroups: vec![DhGroup::Null, DhGroup::Ffdhe2048],
        concat: cfg_byte & 2 != 0,
        ..DhchapHostConfig::new(secret.clone(), (cfg_byte & 1 != 0).then_some(ctrl))
    });
    let sc_c = (cfg_byte >> 2) & 3;
    let mut x = AuthExchange::new(cfg, HOST, SUB).on_queue(0, cfg_byte & 16 != 0);
    let mut last_challenge: Option<Challenge> = None;
    let mut t_id = 0u16;
    let mut authenticated = 0;
    let take = |r: &mut &[u8], n: usize| -> Option<Vec<u8>> {
        if r.len() < n {
            return None;
        }
        let (a, b) = r.split_at(n);
        *r = b;
        Some(a.to_vec())
    };
    while let Some(op) = take(&mut rest, 1) {
        match op[0] % 5 {
            0 => {
                let Some(l) = take(&mut rest, 2) else { break };
                let n = (u16::from_le_bytes([l[0], l[1]]) as usize).min(rest.len());
                let Some(m) = take(&mut rest, n) else { break };
                let _ = AuthMessage::decode(&m);
                let _ = Negotiate::decode(&m);
                let _ = Challenge::decode(&m);
                let _ = Reply::decode(&m);
                let _ = Success1::decode(&m);
                let _ = Failure::decode(&m);
                x.on_send(&m, &Fixed);
            }
            1 => {
                let Some(l) = take(&mut rest, 2) else { break };
                let r = x.on_receive(u32::from(u16::from_le_bytes([l[0], l[1]])));
                if let Ok(c) = Challenge::decode(&r.message) {
                    last_challenge = Some(c);
                }
            }
            2 => {
                let Some(p) = take(&mut rest, 3) else { break };
                t_id = u16::from(p[0]);
                let n = Negotiate {
                    t_id,
                    sc_c,
                    protocols: vec![ProtocolDescriptor::dhchap(&[p[1] % 4], &[p[2] % 3])],
                };
                x.on_send(&n.to_bytes(), &Fixed);
            }
            3 => {
                let Some(f) = take(&mut rest, 1) else { break };
                let Some(ch) = &last_challenge else { continue };
                let (Some(hash), Some(group)) =
                    (HashId::from_u8(ch.hash_id), DhGroup::from_u8(ch.dh_group))
                else {
                    continue;
                };
                let (dhv, ks) = if group == DhGroup::Null {
                    (Vec::new(), None)
                } else {
                    let Ok(k) = DhKeyPair::generate(group, &[0x33; PRIVATE_BYTES]) else {
                        continue;
                    };
                    match k.shared_secret(&ch.dhv) {
                        Ok(s) => (k.public().to_vec(), Some(s)),
                        Err(_) => continue,
                    }
                };
                let input = ResponseInput {
                    seqnum: ch.seqnum,
                    t_id: ch.t_id,
                    host_nqn: HOST,
                    subsys_nqn: SUB,
                };
                let e = effective_challenge(hash, ks.as_deref().map(|v| &v[..]), &ch.cval);
                let mut rval = host_response(hash, &secret.transformed(HOST), &e, &input).to_vec();
                if f[0] & 2 != 0
                    && let Some(b) = rval.first_mut()
                {
                    *b ^= 1;
                }
                let reply = Reply {
                    t_id: if f[0] & 4 != 0 { ch.t_id ^ 1 } else { ch.t_id },
                    seqnum: if f[0] & 1 != 0 { 9 } else { 0 },
                    c2: (f[0] & 9 != 0).then(|| vec![0x44; hash.len()]),
                    rval,
                    dhv,
                };
                x.on_send(&reply.to_bytes(), &Fixed);
            }
            _ => {
                x.on_send(&Success2 { t_id }.to_bytes(), &Fixed);
            }
        }
        // Whatever a concatenation generated is taken (and must be a usable key).
        if let Some(g) = x.take_generated() {
            let _ = g.tls_psk(HOST, SUB);
        }
        if x.authenticated() {
            authenticated += 1;
        }
    }
    authenticated
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_proto::auth::{ProtocolDescriptor, Success2};

    struct Fixed(u8);
    impl AuthRandom for Fixed {
        fn fill(&self, buf: &mut [u8]) {
            buf.fill(self.0);
        }
    }

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001";
    const SUB: &str = "nqn.2026-01.io.ferrobay:test";

    fn cfg(ctrl: bool) -> Arc<DhchapHostConfig> {
        Arc::new(DhchapHostConfig::new(
            DhchapSecret::new(1, &[1; 32]).unwrap(),
            ctrl.then(|| DhchapSecret::new(2, &[2; 48]).unwrap()),
        ))
    }

    fn negotiate(t_id: u16, dh: &[u8]) -> Vec<u8> {
        Negotiate {
            t_id,
            sc_c: 0,
            protocols: vec![ProtocolDescriptor::dhchap(&[1, 2, 3], dh)],
        }
        .to_bytes()
    }

    /// The host's side, computed directly from the nvme-proto primitives.
    fn host_reply(
        ch: &Challenge,
        secret: &DhchapSecret,
        c2: Option<(Vec<u8>, u32)>,
    ) -> (Reply, Option<Zeroizing<Vec<u8>>>) {
        let hash = HashId::from_u8(ch.hash_id).unwrap();
        let group = DhGroup::from_u8(ch.dh_group).unwrap();
        let (dhv, ks) = if group == DhGroup::Null {
            (vec![], None)
        } else {
            let k = DhKeyPair::generate(group, &[0x55; 64]).unwrap();
            let ks = k.shared_secret(&ch.dhv).unwrap();
            (k.public().to_vec(), Some(ks))
        };
        let input = ResponseInput {
            seqnum: ch.seqnum,
            t_id: ch.t_id,
            host_nqn: HOST,
            subsys_nqn: SUB,
        };
        let e = effective_challenge(hash, ks.as_deref().map(|v| &v[..]), &ch.cval);
        let r = host_response(hash, &secret.transformed(HOST), &e, &input);
        (
            Reply {
                t_id: ch.t_id,
                seqnum: c2.as_ref().map_or(0, |c| c.1),
                rval: r.to_vec(),
                c2: c2.map(|c| c.0),
                dhv,
            },
            ks,
        )
    }

    #[test]
    fn unidirectional_exchange_with_each_group() {
        for g in [0u8, 1] {
            let mut x = AuthExchange::new(cfg(false), HOST, SUB);
            assert_eq!(
                x.on_send(&negotiate(3, &[g]), &Fixed(9)),
                SendResult::Accepted
            );
            let ch = Challenge::decode(&x.on_receive(4096).message).unwrap();
            assert_eq!((ch.t_id, ch.hash_id, ch.dh_group), (3, 1, g));
            let (reply, _) = host_reply(&ch, &cfg(false).secret, None);
            assert!(!x.authenticated());
            assert_eq!(
                x.on_send(&reply.to_bytes(), &Fixed(9)),
                SendResult::Accepted
            );
            let s1 = Success1::decode(&x.on_receive(4096).message).unwrap();
            assert_eq!(s1.rval, None);
            assert!(x.authenticated());
        }
    }

    /// Concatenation: the generated PSK comes out only after Success1, equals the host's
    /// HMAC(KS, C1 || C2), and not without C2.
    #[test]
    fn concatenation_hands_out_the_generated_psk_after_success() {
        use nvme_proto::tls_key::{GeneratedPsk, PskHash};
        let concat = Arc::new(DhchapHostConfig {
            concat: true,
            ..(*cfg(false)).clone()
        });
        let neg = |t_id| {
            Negotiate {
                t_id,
                sc_c: SC_C_NEWTLSPSK,
                protocols: vec![ProtocolDescriptor::dhchap(&[1, 2, 3], &[0, 1])],
            }
            .to_bytes()
        };
        let mut x = AuthExchange::new(concat.clone(), HOST, SUB).on_queue(0, false);
        assert_eq!(x.on_send(&neg(5), &Fixed(7)), SendResult::Accepted);
        let ch = Challenge::decode(&x.on_receive(4096).message).unwrap();
        // The null group and SHA-512 are never chosen for concatenation.
        assert_eq!((ch.hash_id, ch.dh_group), (1, 1));
        let c2 = vec![0x66; 32];
        let (reply, ks) = host_reply(&ch, &concat.secret, Some((c2.clone(), 0)));
        assert_eq!(
            x.on_send(&reply.to_bytes(), &Fixed(7)),
            SendResult::Accepted
        );
        assert!(x.take_generated().is_none(), "not before Success1");
        Success1::decode(&x.on_receive(4096).message).unwrap();
        let got = x.take_generated().expect("generated PSK");
        let want = GeneratedPsk::generate(PskHash::Sha256, &ks.unwrap(), &ch.cval, &c2).unwrap();
        assert_eq!(got, want);
        assert!(x.take_generated().is_none(), "handed out once");

        // No C2: failed, nothing generated.
        let mut x = AuthExchange::new(concat, HOST, SUB).on_queue(0, false);
        x.on_send(&neg(6), &Fixed(7));
        let ch = Challenge::decode(&x.on_receive(4096).message).unwrap();
        let (reply, _) = host_reply(&ch, &cfg(false).secret, None);
        assert_eq!(
            x.on_send(&reply.to_bytes(), &Fixed(7)),
            SendResult::Failed(FailureReason::Failed)
        );
        assert!(x.take_generated().is_none());

        // SC_C on an I/O queue, or without a concat config: mismatch.
        let mut x = AuthExchange::new(cfg(false), HOST, SUB).on_queue(0, false);
        assert_eq!(
            x.on_send(&neg(7), &Fixed(7)),
            SendResult::Failed(FailureReason::ConcatMismatch)
        );
        let io = Arc::new(DhchapHostConfig {
            concat: true,
            ..(*cfg(false)).clone()
        });
        let mut x = AuthExchange::new(io, HOST, SUB).on_queue(1, false);
        assert_eq!(
            x.on_send(&neg(8), &Fixed(7)),
            SendResult::Failed(FailureReason::ConcatMismatch)
        );
    }

    #[test]
    fn reauthentication_keeps_the_queue_usable_until_it_fails() {
        let mut x = AuthExchange::new(cfg(false), HOST, SUB);
        for round in 0..3u16 {
            x.on_send(&negotiate(round, &[1]), &Fixed(round as u8 + 1));
            assert_eq!(
                x.authenticated(),
                round > 0,
                "a running re-authentication keeps it"
            );
            let ch = Challenge::decode(&x.on_receive(4096).message).unwrap();
            assert_eq!(ch.t_id, round);
            let (reply, _) = host_reply(&ch, &cfg(false).secret, None);
            assert_eq!(
                x.on_send(&reply.to_bytes(), &Fixed(1)),
                SendResult::Accepted
            );
            assert!(Success1::decode(&x.on_receive(4096).message).is_ok());
            assert!(x.authenticated());
        }
        // A failed re-authentication ends it.
        x.on_send(&negotiate(9, &[0]), &Fixed(7));
        x.on_receive(4096);
        let bad = Reply {
            t_id: 9,
            rval: vec![0; 32],
            ..Default::default()
        };
        assert_eq!(
            x.on_send(&bad.to_bytes(), &Fixed(7)),
            SendResult::Failed(FailureReason::Failed)
        );
        assert!(!x.authenticated());
    }

    #[test]
    fn bidirectional_exchange_checks_the_controller() {
        let c = cfg(true);
        let mut x = AuthExchange::new(c.clone(), HOST, SUB);
        x.on_send(&negotiate(1, &[1]), &Fixed(3));
        let ch = Challenge::decode(&x.on_receive(4096).message).unwrap();
        let c2 = vec![0x77; 32];
        let (reply, ks) = host_reply(&ch, &c.secret, Some((c2.clone(), 42)));
        assert_eq!(
            x.on_send(&reply.to_bytes(), &Fixed(3)),
            SendResult::Accepted
        );
        assert!(!x.authenticated());
        let s1 = Success1::decode(&x.on_receive(4096).message).unwrap();
        let e = effective_challenge(HashId::Sha256, ks.as_deref().map(|v| &v[..]), &c2);
        let input = ResponseInput {
            seqnum: 42,
            t_id: 1,
            host_nqn: HOST,
            subsys_nqn: SUB,
        };
        let want = ctrl_response(
            HashId::Sha256,
            &c.ctrl_secret.as_ref().unwrap().transformed(SUB),
            &e,
            &input,
        );
        assert_eq!(s1.rval.as_deref(), Some(&want[..]));
        assert_eq!(
            x.on_send(&Success2 { t_id: 1 }.to_bytes(), &Fixed(3)),
            SendResult::Accepted
        );
        assert!(x.authenticated());
    }

    #[test]
    fn wrong_secret_replay_and_order_errors_give_failure1() {
        // Wrong secret.
        let mut x = AuthExchange::new(cfg(false), HOST, SUB);
        x.on_send(&negotiate(1, &[0]), &Fixed(1));
        let ch = Challenge::decode(&x.on_receive(4096).message).unwrap();
        let wrong = DhchapSecret::new(1, &[9; 32]).unwrap();
        let (reply, _) = host_reply(&ch, &wrong, None);
        assert_eq!(
            x.on_send(&reply.to_bytes(), &Fixed(1)),
            SendResult::Failed(FailureReason::Failed)
        );
        let f = x.on_receive(4096);
        assert_eq!(f.failure, Some(FailureReason::Failed));
        assert_eq!(
            Failure::decode(&f.message).unwrap().reason(),
            Some(FailureReason::Failed)
        );
        assert!(!x.authenticated());

        // A good reply replayed into a new transaction (new C1) fails.
        let mut x = AuthExchange::new(cfg(false), HOST, SUB);
        x.on_send(&negotiate(1, &[0]), &Fixed(1));
        let ch = Challenge::decode(&x.on_receive(4096).message).unwrap();
        let (good, _) = host_reply(&ch, &cfg(false).secret, None);
        assert_eq!(x.on_send(&good.to_bytes(), &Fixed(1)), SendResult::Accepted);
        x.on_receive(4096);
        x.on_send(&negotiate(1, &[0]), &Fixed(2));
        x.on_receive(4096);
        assert_eq!(
            x.on_send(&good.to_bytes(), &Fixed(2)),
            SendResult::Failed(FailureReason::Failed)
        );
        // And replayed again at the wrong step.
        let mut x = AuthExchange::new(cfg(false), HOST, SUB);
        assert_eq!(
            x.on_send(&good.to_bytes(), &Fixed(1)),
            SendResult::Failed(FailureReason::IncorrectMessage)
        );
        // Unknown hash / DH groups.
        let mut x = AuthExchange::new(cfg(false), HOST, SUB);
        let n = Negotiate {
            t_id: 0,
            sc_c: 0,
            protocols: vec![ProtocolDescriptor::dhchap(&[9], &[0])],
        };
        assert_eq!(
            x.on_send(&n.to_bytes(), &Fixed(1)),
            SendResult::Failed(FailureReason::HashUnusable)
        );
        let mut x = AuthExchange::new(cfg(false), HOST, SUB);
        assert_eq!(
            x.on_send(&negotiate(0, &[7]), &Fixed(1)),
            SendResult::Failed(FailureReason::DhGroupUnusable)
        );
        // Bidirectional without a controller secret.
        let mut x = AuthExchange::new(cfg(false), HOST, SUB);
        x.on_send(&negotiate(1, &[0]), &Fixed(1));
        let ch = Challenge::decode(&x.on_receive(4096).message).unwrap();
        let (reply, _) = host_reply(&ch, &cfg(false).secret, Some((vec![5; 32], 7)));
        assert_eq!(
            x.on_send(&reply.to_bytes(), &Fixed(1)),
            SendResult::Failed(FailureReason::Failed)
        );
        // Garbage.
        let mut x = AuthExchange::new(cfg(false), HOST, SUB);
        assert!(matches!(
            x.on_send(&[1, 2, 3], &Fixed(1)),
            SendResult::Failed(_)
        ));
        assert!(x.on_receive(2).failure.is_some());
    }
}
