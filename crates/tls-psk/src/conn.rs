//! A sans-IO TLS connection: bytes in (`feed`), `process`, bytes out (`outgoing`), plaintext
//! through `read` / `write`. Every buffer is bounded: `feed` takes at most two full records,
//! decryption stops while `PLAINTEXT_CAP` bytes wait to be read, `write` takes nothing while
//! `OUTGOING_CAP` bytes wait to be sent.

use std::sync::Arc;

use crate::Negotiated;
use crate::client::ClientHandshake;
use crate::config::{ClientConfig, ServerConfig};
use crate::error::{AlertDescription, TlsError};
use crate::messages::{
    HT_CLIENT_HELLO, HT_FINISHED, HT_KEY_UPDATE, HT_NEW_SESSION_TICKET, HT_SERVER_HELLO,
};
use crate::record::{
    CT_ALERT, CT_APPLICATION_DATA, CT_CHANGE_CIPHER_SPEC, CT_HANDSHAKE, HEADER_LEN, MAX_CIPHERTEXT,
    MAX_PLAINTEXT, RecordLayer,
};
use crate::server::ServerHandshake;

/// At most this many received bytes are buffered before `process` (two full records).
pub const INCOMING_CAP: usize = 2 * (HEADER_LEN + MAX_CIPHERTEXT);
/// Decryption pauses while this many plaintext bytes wait for `read`.
pub const PLAINTEXT_CAP: usize = 4 * MAX_PLAINTEXT;
/// `write` accepts nothing while this many bytes wait to be sent.
pub const OUTGOING_CAP: usize = 8 * MAX_PLAINTEXT;
/// Largest handshake message accepted (a PSK-only handshake has no certificates).
const MAX_HANDSHAKE_MESSAGE: usize = 16 * 1024;

enum Handshake {
    Client(Box<ClientHandshake>),
    Server(Box<ServerHandshake>),
}

pub struct Connection {
    rl: RecordLayer,
    hs: Handshake,
    connected: bool,
    incoming: Vec<u8>,
    hs_buf: Vec<u8>,
    plaintext: Vec<u8>,
    plaintext_read: usize,
    peer_closed: bool,
    close_sent: bool,
    error: Option<TlsError>,
    negotiated: Option<Negotiated>,
}

fn unexpected(reason: &str) -> TlsError {
    TlsError::proto(AlertDescription::UnexpectedMessage, reason)
}

impl Connection {
    /// A client; its ClientHello is ready in `outgoing()`.
    pub fn client(config: ClientConfig) -> Result<Self, TlsError> {
        let mut rl = RecordLayer::new();
        let hs = ClientHandshake::start(config, &mut rl)?;
        Ok(Self::with(rl, Handshake::Client(Box::new(hs))))
    }

    pub fn server(config: Arc<ServerConfig>) -> Self {
        Self::with(
            RecordLayer::new(),
            Handshake::Server(Box::new(ServerHandshake::new(config))),
        )
    }

    fn with(rl: RecordLayer, hs: Handshake) -> Self {
        Self {
            rl,
            hs,
            connected: false,
            incoming: Vec::new(),
            hs_buf: Vec::new(),
            plaintext: Vec::new(),
            plaintext_read: 0,
            peer_closed: false,
            close_sent: false,
            error: None,
            negotiated: None,
        }
    }

    pub fn is_handshaking(&self) -> bool {
        !self.connected && self.error.is_none()
    }

    /// Suite, group and PSK identity, once the handshake is complete.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// The peer sent close_notify: no more data will come.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    pub fn error(&self) -> Option<&TlsError> {
        self.error.as_ref()
    }

    /// How many bytes `feed` accepts now.
    pub fn incoming_space(&self) -> usize {
        INCOMING_CAP.saturating_sub(self.incoming.len())
    }

    /// Takes received bytes (as many as fit); returns how many.
    pub fn feed(&mut self, data: &[u8]) -> usize {
        if self.error.is_some() {
            return data.len(); // discarded
        }
        let n = data.len().min(self.incoming_space());
        self.incoming.extend_from_slice(&data[..n]);
        n
    }

    /// Bytes to send to the peer.
    pub fn outgoing(&self) -> &[u8] {
        &self.rl.outgoing
    }

    pub fn consume_outgoing(&mut self, n: usize) {
        self.rl.outgoing.drain(..n.min(self.rl.outgoing.len()));
    }

    /// Plaintext received and not yet read.
    pub fn readable(&self) -> usize {
        self.plaintext.len() - self.plaintext_read
    }

    /// Copies received plaintext into `buf`.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let n = buf.len().min(self.readable());
        buf[..n].copy_from_slice(&self.plaintext[self.plaintext_read..self.plaintext_read + n]);
        self.plaintext_read += n;
        if self.plaintext_read == self.plaintext.len() {
            self.plaintext.clear();
            self.plaintext_read = 0;
        }
        n
    }

    /// Encrypts application data; returns how much was taken (0 while `OUTGOING_CAP` bytes
    /// wait to be sent).
    pub fn write(&mut self, data: &[u8]) -> Result<usize, TlsError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if !self.connected {
            return Err(TlsError::Config(
                "write before the TLS handshake completed".into(),
            ));
        }
        if self.close_sent {
            return Err(TlsError::Config("write after close_notify".into()));
        }
        let room = OUTGOING_CAP.saturating_sub(self.rl.outgoing.len());
        let n = data.len().min(room);
        self.rl.send_application_data(&data[..n]);
        Ok(n)
    }

    /// Sends close_notify (once).
    pub fn close(&mut self) {
        if !self.close_sent && self.error.is_none() {
            self.close_sent = true;
            self.rl.send_alert(AlertDescription::CloseNotify);
        }
    }

    /// Moves this side's sending key forward; with `request_peer`, asks the peer to do the
    /// same.
    pub fn key_update(&mut self, request_peer: bool) -> Result<(), TlsError> {
        if !self.connected || self.error.is_some() {
            return Err(TlsError::Config(
                "key update outside an established connection".into(),
            ));
        }
        self.rl.send_key_update(request_peer);
        Ok(())
    }

    /// Processes every complete record received. An error is final: the alert for it (if
    /// any) is in `outgoing()`, and every later call returns the same error.
    pub fn process(&mut self) -> Result<(), TlsError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let r = self.process_records();
        if let Err(e) = &r {
            if let Some(alert) = e.alert_to_send() {
                self.rl.send_alert(alert);
            }
            self.error = Some(e.clone());
            self.incoming.clear();
            self.hs_buf.clear();
        }
        r
    }

    fn process_records(&mut self) -> Result<(), TlsError> {
        while self.readable() < PLAINTEXT_CAP
            && !self.peer_closed
            && self.incoming.len() >= HEADER_LEN
        {
            let ty = self.incoming[0];
            if self.incoming[1] != 3 {
                return Err(TlsError::proto(
                    AlertDescription::DecodeError,
                    "not a TLS record",
                ));
            }
            let len = u16::from_be_bytes([self.incoming[3], self.incoming[4]]) as usize;
            let limit = if ty == CT_APPLICATION_DATA {
                MAX_CIPHERTEXT
            } else {
                MAX_PLAINTEXT
            };
            if len > limit {
                return Err(TlsError::proto(
                    AlertDescription::RecordOverflow,
                    format!("record of {len} bytes"),
                ));
            }
            if self.incoming.len() < HEADER_LEN + len {
                break;
            }
            let record: Vec<u8> = self.incoming.drain(..HEADER_LEN + len).collect();
            self.record(record)?;
        }
        Ok(())
    }

    fn record(&mut self, mut record: Vec<u8>) -> Result<(), TlsError> {
        let ty = record[0];
        let payload = &record[HEADER_LEN..];
        match ty {
            CT_CHANGE_CIPHER_SPEC => {
                if payload != [1] || self.connected {
                    return Err(unexpected("change_cipher_spec outside the handshake"));
                }
                Ok(())
            }
            CT_ALERT if !self.connected => self.alert(payload),
            CT_HANDSHAKE => {
                if self.rl.rx.is_some() {
                    return Err(unexpected(
                        "plaintext handshake record after encryption started",
                    ));
                }
                self.handshake_bytes(&record[HEADER_LEN..])
            }
            CT_APPLICATION_DATA => {
                let Some(keys) = self.rl.rx.as_mut() else {
                    return Err(unexpected("protected record before the keys are known"));
                };
                let header: [u8; HEADER_LEN] =
                    [record[0], record[1], record[2], record[3], record[4]];
                let mut body = record.split_off(HEADER_LEN);
                if !keys.open(&header, &mut body) {
                    return Err(TlsError::proto(
                        AlertDescription::BadRecordMac,
                        "record does not authenticate",
                    ));
                }
                // TLSInnerPlaintext: content | type | zeros.
                let Some(end) = body.iter().rposition(|b| *b != 0) else {
                    return Err(unexpected("protected record without a content type"));
                };
                let inner_type = body[end];
                body.truncate(end);
                if body.len() > MAX_PLAINTEXT {
                    return Err(TlsError::proto(
                        AlertDescription::RecordOverflow,
                        "plaintext over 2^14 bytes",
                    ));
                }
                match inner_type {
                    CT_HANDSHAKE => self.handshake_bytes(&body),
                    CT_ALERT => self.alert(&body),
                    CT_APPLICATION_DATA if self.connected => {
                        self.plaintext.extend_from_slice(&body);
                        Ok(())
                    }
                    _ => Err(unexpected("unexpected protected content type")),
                }
            }
            _ => Err(unexpected("unknown record type")),
        }
    }

    fn alert(&mut self, payload: &[u8]) -> Result<(), TlsError> {
        if payload.len() != 2 {
            return Err(TlsError::proto(
                AlertDescription::DecodeError,
                "malformed alert",
            ));
        }
        match AlertDescription::from_code(payload[1]) {
            AlertDescription::CloseNotify => {
                self.peer_closed = true;
                Ok(())
            }
            AlertDescription::UserCanceled => Ok(()),
            other => Err(TlsError::PeerAlert(other)),
        }
    }

    fn handshake_bytes(&mut self, data: &[u8]) -> Result<(), TlsError> {
        if data.is_empty() {
            return Err(unexpected("empty handshake record"));
        }
        self.hs_buf.extend_from_slice(data);
        while self.hs_buf.len() >= 4 {
            let len =
                u32::from_be_bytes([0, self.hs_buf[1], self.hs_buf[2], self.hs_buf[3]]) as usize;
            if len > MAX_HANDSHAKE_MESSAGE {
                return Err(TlsError::proto(
                    AlertDescription::DecodeError,
                    "handshake message too large",
                ));
            }
            if self.hs_buf.len() < 4 + len {
                break;
            }
            let msg: Vec<u8> = self.hs_buf.drain(..4 + len).collect();
            let msg_type = msg[0];
            self.handshake_message(msg_type, &msg)?;
            // Messages that change the keys must end their record.
            let changes_keys = matches!(
                msg_type,
                HT_CLIENT_HELLO | HT_SERVER_HELLO | HT_FINISHED | HT_KEY_UPDATE
            );
            if changes_keys && !self.hs_buf.is_empty() {
                return Err(unexpected("handshake data across a key change"));
            }
        }
        Ok(())
    }

    fn handshake_message(&mut self, msg_type: u8, msg: &[u8]) -> Result<(), TlsError> {
        if !self.connected {
            let done = match &mut self.hs {
                Handshake::Client(c) => c.handle(&mut self.rl, msg_type, msg)?,
                Handshake::Server(s) => s.handle(&mut self.rl, msg_type, msg)?,
            };
            if done {
                self.connected = true;
                self.negotiated = match &self.hs {
                    Handshake::Client(c) => c.negotiated(),
                    Handshake::Server(s) => s.negotiated(),
                };
            }
            return Ok(());
        }
        match msg_type {
            HT_KEY_UPDATE => {
                let request = match msg.get(4..) {
                    Some([0]) => false,
                    Some([1]) => true,
                    _ => {
                        return Err(TlsError::proto(
                            AlertDescription::DecodeError,
                            "malformed KeyUpdate",
                        ));
                    }
                };
                self.rl.update_rx();
                if request && !self.close_sent {
                    self.rl.send_key_update(false);
                }
                Ok(())
            }
            // Session tickets are not used (no resumption): ignored.
            HT_NEW_SESSION_TICKET if matches!(self.hs, Handshake::Client(_)) => Ok(()),
            _ => Err(unexpected("unexpected post-handshake message")),
        }
    }
}
