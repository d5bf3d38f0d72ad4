//! The server handshake (RFC 8446 section 2, PSK-only): ClientHello with external PSKs and
//! their binders, an optional HelloRetryRequest for a missing key share, ServerHello,
//! EncryptedExtensions, Finished, then the client's Finished.

use std::sync::Arc;

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::Negotiated;
use crate::codec::handshake_message;
use crate::config::ServerConfig;
use crate::error::{AlertDescription, TlsError};
use crate::hash::Transcript;
use crate::key_schedule::{KeySchedule, finished_mac};
use crate::kx::{KeyShare, NamedGroup};
use crate::messages::{
    ClientHello, HT_CLIENT_HELLO, HT_ENCRYPTED_EXTENSIONS, HT_FINISHED, HT_MESSAGE_HASH,
    PSK_MODE_DHE_KE, PSK_MODE_KE, TLS13, encode_server_hello,
};
use crate::record::RecordLayer;
use crate::suite::{CipherSuite, TrafficKeys};

enum State {
    WaitClientHello,
    WaitFinished {
        expected: Zeroizing<Vec<u8>>,
        client_ap: Zeroizing<Vec<u8>>,
    },
    Done,
}

/// What the first ClientHello fixed when the server asked for another one.
struct Retry {
    transcript: Transcript,
    suite: CipherSuite,
    group: NamedGroup,
}

pub(crate) struct ServerHandshake {
    config: Arc<ServerConfig>,
    state: State,
    retry: Option<Retry>,
    negotiated: Option<Negotiated>,
}

fn proto(alert: AlertDescription, reason: &str) -> TlsError {
    TlsError::proto(alert, reason)
}

impl ServerHandshake {
    pub fn new(config: Arc<ServerConfig>) -> Self {
        Self {
            config,
            state: State::WaitClientHello,
            retry: None,
            negotiated: None,
        }
    }

    /// Handles one handshake message; true when the handshake is complete.
    pub fn handle(
        &mut self,
        rl: &mut RecordLayer,
        msg_type: u8,
        msg: &[u8],
    ) -> Result<bool, TlsError> {
        match &self.state {
            State::WaitClientHello if msg_type == HT_CLIENT_HELLO => {
                self.client_hello(rl, msg)?;
                Ok(false)
            }
            State::WaitFinished { expected, .. } if msg_type == HT_FINISHED => {
                let got = &msg[4..];
                if got.len() != expected.len() || !bool::from(got.ct_eq(&expected[..])) {
                    return Err(proto(
                        AlertDescription::DecryptError,
                        "client Finished does not verify",
                    ));
                }
                let State::WaitFinished { client_ap, .. } =
                    std::mem::replace(&mut self.state, State::Done)
                else {
                    unreachable!("matched WaitFinished above");
                };
                if let Some(suite) = rl.suite {
                    rl.rx = Some(TrafficKeys::derive(suite, &client_ap));
                }
                rl.rx_secret = client_ap;
                Ok(true)
            }
            _ => Err(TlsError::proto(
                AlertDescription::UnexpectedMessage,
                format!("unexpected handshake message type {msg_type}"),
            )),
        }
    }

    fn client_hello(&mut self, rl: &mut RecordLayer, msg: &[u8]) -> Result<(), TlsError> {
        let config = Arc::clone(&self.config);
        let ch = ClientHello::parse(msg)?;
        if !ch.versions.as_ref().is_some_and(|v| v.contains(&TLS13)) {
            return Err(TlsError::proto(
                AlertDescription::ProtocolVersion,
                format!(
                    "client does not offer TLS 1.3 (ClientHello version 0x{:04x})",
                    ch.legacy_version
                ),
            ));
        }
        if ch.early_data {
            return Err(proto(
                AlertDescription::IllegalParameter,
                "0-RTT early data is not supported",
            ));
        }
        let Some(offered) = &ch.psk else {
            return Err(proto(
                AlertDescription::HandshakeFailure,
                "client offered no pre-shared key (this server authenticates with PSKs only)",
            ));
        };
        let Some(modes) = ch.psk_modes else {
            return Err(proto(
                AlertDescription::MissingExtension,
                "pre_shared_key without psk_key_exchange_modes",
            ));
        };
        let found = offered.identities.iter().enumerate().find_map(|(i, id)| {
            let c = config.psks.candidates(id);
            (!c.is_empty()).then_some((i, c))
        });
        let Some((index, candidates)) = found else {
            let shown: Vec<String> = offered
                .identities
                .iter()
                .map(|id| String::from_utf8_lossy(id).into_owned())
                .collect();
            return Err(TlsError::proto(
                AlertDescription::UnknownPskIdentity,
                format!("no offered PSK identity is known: {}", shown.join(", ")),
            ));
        };
        let alg = candidates[0].hash();
        let suite = config
            .suites
            .iter()
            .copied()
            .find(|s| s.hash() == alg && ch.suites.contains(&s.id()))
            .ok_or_else(|| {
                proto(
                    AlertDescription::HandshakeFailure,
                    "client offers no cipher suite with the PSK's hash",
                )
            })?;
        if self.retry.as_ref().is_some_and(|r| r.suite != suite) {
            return Err(proto(
                AlertDescription::IllegalParameter,
                "second ClientHello changes the cipher suite",
            ));
        }
        let prefix = self
            .retry
            .as_ref()
            .map(|r| r.transcript.clone())
            .unwrap_or_else(|| Transcript::new(alg));
        let binder_hash = prefix.hash_with(&msg[..offered.binders_at]);
        let binder = offered.binders[index];
        // The first candidate key whose binder verifies (constant-time compare each).
        let verified = candidates
            .into_iter()
            .filter(|p| p.hash() == alg)
            .find_map(|p| {
                let ks = KeySchedule::new(alg, p.key());
                let expected = ks.binder(&binder_hash);
                (binder.len() == expected.len() && bool::from(binder.ct_eq(&expected[..])))
                    .then_some((p, ks))
            });
        let Some((psk, ks)) = verified else {
            let why = if binder.len() == alg.output_len() {
                "wrong key".to_string()
            } else {
                // A client that computed the binder with another hash than the identity's
                // (tlshd 1.0.0 does for SHA-384 identities).
                format!(
                    "binder of {} bytes, the identity's hash makes {}",
                    binder.len(),
                    alg.output_len()
                )
            };
            return Err(TlsError::proto(
                AlertDescription::DecryptError,
                format!(
                    "PSK binder does not verify for identity {} ({why})",
                    String::from_utf8_lossy(offered.identities[index])
                ),
            ));
        };

        let client_dhe = modes.contains(&PSK_MODE_DHE_KE);
        let client_ke = modes.contains(&PSK_MODE_KE);
        let mut dhe_share: Option<(NamedGroup, &[u8])> = None;
        if config.modes.dhe && client_dhe {
            dhe_share = config.groups.iter().find_map(|g| {
                ch.key_shares
                    .iter()
                    .find(|(id, _)| *id == g.id())
                    .map(|(_, k)| (*g, *k))
            });
            if let Some(r) = &self.retry {
                if dhe_share.map(|(g, _)| g) != Some(r.group) || ch.key_shares.len() != 1 {
                    return Err(proto(
                        AlertDescription::IllegalParameter,
                        "second ClientHello lacks the requested key share",
                    ));
                }
            } else if dhe_share.is_none()
                && let Some(group) = config
                    .groups
                    .iter()
                    .copied()
                    .find(|g| ch.groups.contains(&g.id()))
            {
                self.hello_retry(rl, msg, ch.session_id, suite, group);
                return Ok(());
            }
        }
        if dhe_share.is_none() && !(config.modes.psk_only && client_ke) {
            return Err(proto(
                AlertDescription::HandshakeFailure,
                "no common PSK key-exchange mode or group (psk_dhe_ke needs x25519 or secp256r1)",
            ));
        }

        let mut transcript = match self.retry.take() {
            Some(r) => r.transcript,
            None => Transcript::new(alg),
        };
        transcript.update(msg);
        let (share, dhe) = match dhe_share {
            Some((group, key)) => {
                let (secret, public) = KeyShare::generate(group, config.random.as_ref());
                (Some((group, public)), Some(secret.agree(key)?))
            }
            None => (None, None),
        };
        let mut random = [0u8; 32];
        config.random.fill(&mut random);
        let sh = encode_server_hello(
            &random,
            ch.session_id,
            suite.id(),
            share.as_ref().map(|(g, k)| (g.id(), k.as_slice())),
            index as u16,
            false,
        );
        transcript.update(&sh);
        rl.send_handshake(&sh);
        if !ch.session_id.is_empty() {
            rl.send_ccs();
        }
        let secrets = ks.handshake(dhe.as_ref().map(|d| d.as_slice()), &transcript.current());
        rl.suite = Some(suite);
        rl.tx = Some(TrafficKeys::derive(suite, &secrets.server));
        let ee = handshake_message(HT_ENCRYPTED_EXTENSIONS, &[0, 0]);
        transcript.update(&ee);
        rl.send_handshake(&ee);
        let fin = handshake_message(
            HT_FINISHED,
            &finished_mac(alg, &secrets.server, &transcript.current()),
        );
        transcript.update(&fin);
        rl.send_handshake(&fin);
        let hash = transcript.current();
        let (client_ap, server_ap) = secrets.application(alg, &hash);
        let expected = finished_mac(alg, &secrets.client, &hash);
        rl.rx = Some(TrafficKeys::derive(suite, &secrets.client));
        rl.install_application(suite, server_ap, None);
        self.negotiated = Some(Negotiated {
            suite,
            group: share.map(|(g, _)| g),
            psk_identity: psk.identity().to_vec(),
        });
        self.state = State::WaitFinished {
            expected,
            client_ap,
        };
        Ok(())
    }

    /// Asks for a key share of `group` (section 4.1.4).
    fn hello_retry(
        &mut self,
        rl: &mut RecordLayer,
        ch1: &[u8],
        session_id: &[u8],
        suite: CipherSuite,
        group: NamedGroup,
    ) {
        let alg = suite.hash();
        let hrr = encode_server_hello(
            &[0; 32],
            session_id,
            suite.id(),
            Some((group.id(), &[])),
            0,
            true,
        );
        let mut transcript = Transcript::new(alg);
        let ch1_hash = alg.hash(ch1);
        transcript.update(&[HT_MESSAGE_HASH, 0, 0, ch1_hash.len() as u8]);
        transcript.update(&ch1_hash);
        transcript.update(&hrr);
        rl.send_handshake(&hrr);
        if !session_id.is_empty() {
            rl.send_ccs();
        }
        self.retry = Some(Retry {
            transcript,
            suite,
            group,
        });
    }

    pub fn negotiated(&self) -> Option<Negotiated> {
        self.negotiated.clone()
    }
}
