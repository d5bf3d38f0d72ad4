//! The client handshake (RFC 8446 section 2, PSK-only): ClientHello with one external PSK,
//! an optional HelloRetryRequest round, ServerHello, EncryptedExtensions, Finished.

use subtle::ConstantTimeEq;

use crate::Negotiated;
use crate::codec::{Reader, handshake_message};
use crate::config::ClientConfig;
use crate::error::{AlertDescription, TlsError};
use crate::hash::Transcript;
use crate::key_schedule::{HandshakeSecrets, KeySchedule, finished_mac};
use crate::kx::{KeyShare, NamedGroup};
use crate::messages::{
    ClientHelloParams, EXT_SUPPORTED_GROUPS, HT_ENCRYPTED_EXTENSIONS, HT_FINISHED, HT_MESSAGE_HASH,
    HT_SERVER_HELLO, PSK_MODE_DHE_KE, PSK_MODE_KE, ServerHello, TLS13, encode_client_hello,
};
use crate::record::RecordLayer;
use crate::suite::{CipherSuite, TrafficKeys};

enum State {
    WaitServerHello,
    WaitEncryptedExtensions,
    WaitFinished,
    Done,
}

pub(crate) struct ClientHandshake {
    config: ClientConfig,
    state: State,
    random: [u8; 32],
    session_id: [u8; 32],
    suites: Vec<u16>,
    modes: Vec<u8>,
    shares: Vec<(KeyShare, Vec<u8>)>,
    transcript: Transcript,
    ks: KeySchedule,
    hrr_suite: Option<u16>,
    suite: Option<CipherSuite>,
    group: Option<NamedGroup>,
    secrets: Option<HandshakeSecrets>,
}

fn proto(alert: AlertDescription, reason: &str) -> TlsError {
    TlsError::proto(alert, reason)
}

impl ClientHandshake {
    /// Checks the configuration and sends the ClientHello.
    pub fn start(config: ClientConfig, rl: &mut RecordLayer) -> Result<Self, TlsError> {
        let alg = config.psk.hash();
        let suites: Vec<u16> = config
            .suites
            .iter()
            .filter(|s| s.hash() == alg)
            .map(|s| s.id())
            .collect();
        if suites.is_empty() {
            return Err(TlsError::Config(
                "no configured cipher suite uses the PSK's hash".into(),
            ));
        }
        let mut modes = Vec::new();
        if config.modes.dhe {
            modes.push(PSK_MODE_DHE_KE);
            if config.groups.is_empty()
                || config
                    .key_share_groups
                    .iter()
                    .any(|g| !config.groups.contains(g))
            {
                return Err(TlsError::Config(
                    "key share groups must be among the supported groups".into(),
                ));
            }
        }
        if config.modes.psk_only {
            modes.push(PSK_MODE_KE);
        }
        if modes.is_empty() {
            return Err(TlsError::Config("no PSK key-exchange mode enabled".into()));
        }
        let mut random = [0u8; 32];
        config.random.fill(&mut random);
        let mut session_id = [0u8; 32];
        config.random.fill(&mut session_id);
        let shares = if config.modes.dhe {
            config
                .key_share_groups
                .iter()
                .map(|g| KeyShare::generate(*g, config.random.as_ref()))
                .collect()
        } else {
            Vec::new()
        };
        let ks = KeySchedule::new(alg, config.psk.key());
        let mut hs = Self {
            state: State::WaitServerHello,
            random,
            session_id,
            suites,
            modes,
            shares,
            transcript: Transcript::new(alg),
            ks,
            hrr_suite: None,
            suite: None,
            group: None,
            secrets: None,
            config,
        };
        hs.send_client_hello(rl, None);
        Ok(hs)
    }

    fn send_client_hello(&mut self, rl: &mut RecordLayer, cookie: Option<&[u8]>) {
        let alg = self.config.psk.hash();
        let groups: Vec<u16> = if self.config.modes.dhe {
            self.config.groups.iter().map(|g| g.id()).collect()
        } else {
            Vec::new()
        };
        let key_shares: Vec<(u16, Vec<u8>)> = self
            .shares
            .iter()
            .map(|(s, p)| (s.group().id(), p.clone()))
            .collect();
        let (mut msg, at) = encode_client_hello(&ClientHelloParams {
            random: &self.random,
            session_id: &self.session_id,
            suites: &self.suites,
            groups: &groups,
            key_shares: &key_shares,
            psk_modes: &self.modes,
            cookie,
            identity: self.config.psk.identity(),
            binder_len: alg.output_len(),
        });
        let binder = self.ks.binder(&self.transcript.hash_with(&msg[..at]));
        let n = msg.len();
        msg[n - binder.len()..].copy_from_slice(&binder);
        self.transcript.update(&msg);
        rl.send_handshake(&msg);
    }

    /// Handles one handshake message; true when the handshake is complete.
    pub fn handle(
        &mut self,
        rl: &mut RecordLayer,
        msg_type: u8,
        msg: &[u8],
    ) -> Result<bool, TlsError> {
        match self.state {
            State::WaitServerHello if msg_type == HT_SERVER_HELLO => {
                self.server_hello(rl, msg)?;
                Ok(false)
            }
            State::WaitEncryptedExtensions if msg_type == HT_ENCRYPTED_EXTENSIONS => {
                let mut r = Reader::new(msg, "EncryptedExtensions");
                r.take(4)?;
                let mut exts = r.sub16()?;
                r.finish()?;
                while !exts.is_empty() {
                    let ty = exts.u16()?;
                    exts.vec16()?;
                    // A server may tell its groups; anything else was not offered.
                    if ty != EXT_SUPPORTED_GROUPS {
                        return Err(TlsError::proto(
                            AlertDescription::UnsupportedExtension,
                            format!("server sent extension {ty} this client did not offer"),
                        ));
                    }
                }
                self.transcript.update(msg);
                self.state = State::WaitFinished;
                Ok(false)
            }
            State::WaitFinished if msg_type == HT_FINISHED => {
                self.server_finished(rl, msg)?;
                Ok(true)
            }
            _ => Err(TlsError::proto(
                AlertDescription::UnexpectedMessage,
                format!(
                    "unexpected handshake message type {msg_type} (a PSK-only server sends no certificate)"
                ),
            )),
        }
    }

    fn server_hello(&mut self, rl: &mut RecordLayer, msg: &[u8]) -> Result<(), TlsError> {
        let alg = self.config.psk.hash();
        let sh = ServerHello::parse(msg)?;
        if sh.version != Some(TLS13) {
            return Err(proto(
                AlertDescription::ProtocolVersion,
                "server does not speak TLS 1.3",
            ));
        }
        if sh.session_id != self.session_id {
            return Err(proto(
                AlertDescription::IllegalParameter,
                "server did not echo the session id",
            ));
        }
        let suite = CipherSuite::from_id(sh.suite)
            .filter(|s| self.suites.contains(&s.id()))
            .ok_or_else(|| {
                proto(
                    AlertDescription::IllegalParameter,
                    "server chose a cipher suite this client did not offer",
                )
            })?;
        if sh.is_hrr {
            if self.hrr_suite.is_some() {
                return Err(proto(
                    AlertDescription::UnexpectedMessage,
                    "second HelloRetryRequest",
                ));
            }
            self.hrr_suite = Some(sh.suite);
            if let Some((g, _)) = sh.key_share {
                let group = NamedGroup::from_id(g)
                    .filter(|g| self.config.modes.dhe && self.config.groups.contains(g))
                    .ok_or_else(|| {
                        proto(
                            AlertDescription::IllegalParameter,
                            "HelloRetryRequest asks for a group this client did not offer",
                        )
                    })?;
                if self.shares.iter().any(|(s, _)| s.group() == group) {
                    return Err(proto(
                        AlertDescription::IllegalParameter,
                        "HelloRetryRequest asks for a key share this client already sent",
                    ));
                }
                self.shares = vec![KeyShare::generate(group, self.config.random.as_ref())];
            } else if sh.cookie.is_none() {
                return Err(proto(
                    AlertDescription::IllegalParameter,
                    "HelloRetryRequest that changes nothing",
                ));
            }
            // Transcript: message_hash(ClientHello1) | HelloRetryRequest (section 4.4.1).
            let ch1 = self.transcript.current();
            let mut t = Transcript::new(alg);
            t.update(&[HT_MESSAGE_HASH, 0, 0, ch1.len() as u8]);
            t.update(&ch1);
            t.update(msg);
            self.transcript = t;
            rl.send_ccs();
            let cookie = sh.cookie.map(|c| c.to_vec());
            self.send_client_hello(rl, cookie.as_deref());
            return Ok(());
        }
        if self.hrr_suite.is_some_and(|s| s != sh.suite) {
            return Err(proto(
                AlertDescription::IllegalParameter,
                "ServerHello suite differs from the HelloRetryRequest's",
            ));
        }
        match sh.selected_psk {
            Some(0) => {}
            Some(_) => {
                return Err(proto(
                    AlertDescription::IllegalParameter,
                    "server selected a PSK this client did not offer",
                ));
            }
            None => {
                return Err(proto(
                    AlertDescription::HandshakeFailure,
                    "server did not accept the PSK",
                ));
            }
        }
        let dhe = match sh.key_share {
            Some((g, key)) => {
                let (share, _) = self
                    .shares
                    .iter()
                    .find(|(s, _)| s.group().id() == g)
                    .ok_or_else(|| {
                        proto(
                            AlertDescription::IllegalParameter,
                            "server key share for a group this client did not send",
                        )
                    })?;
                self.group = Some(share.group());
                Some(share.agree(key)?)
            }
            None if self.config.modes.psk_only => None,
            None => {
                return Err(proto(
                    AlertDescription::MissingExtension,
                    "server chose psk_ke but this client requires psk_dhe_ke",
                ));
            }
        };
        self.transcript.update(msg);
        let secrets = self.ks.handshake(
            dhe.as_ref().map(|d| d.as_slice()),
            &self.transcript.current(),
        );
        rl.suite = Some(suite);
        rl.rx = Some(TrafficKeys::derive(suite, &secrets.server));
        rl.send_ccs();
        rl.tx = Some(TrafficKeys::derive(suite, &secrets.client));
        self.secrets = Some(secrets);
        self.suite = Some(suite);
        self.shares.clear();
        self.state = State::WaitEncryptedExtensions;
        Ok(())
    }

    fn server_finished(&mut self, rl: &mut RecordLayer, msg: &[u8]) -> Result<(), TlsError> {
        let (Some(secrets), Some(suite)) = (&self.secrets, self.suite) else {
            return Err(proto(
                AlertDescription::InternalError,
                "Finished before ServerHello",
            ));
        };
        let alg = suite.hash();
        let expected = finished_mac(alg, &secrets.server, &self.transcript.current());
        let got = &msg[4..];
        if got.len() != expected.len() || !bool::from(got.ct_eq(&expected[..])) {
            return Err(proto(
                AlertDescription::DecryptError,
                "server Finished does not verify (the server has a different key for this PSK identity)",
            ));
        }
        self.transcript.update(msg);
        let hash = self.transcript.current();
        let (client_ap, server_ap) = secrets.application(alg, &hash);
        let fin = finished_mac(alg, &secrets.client, &hash);
        rl.send_handshake(&handshake_message(HT_FINISHED, &fin));
        rl.install_application(suite, client_ap, Some(server_ap));
        self.secrets = None;
        self.state = State::Done;
        Ok(())
    }

    pub fn negotiated(&self) -> Option<Negotiated> {
        Some(Negotiated {
            suite: self.suite?,
            group: self.group,
            psk_identity: self.config.psk.identity().to_vec(),
        })
    }
}
