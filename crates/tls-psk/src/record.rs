//! The record layer's sending side and record constants (RFC 8446 section 5).
//!
//! Record: type (1) | legacy_record_version 0x0303 (2) | length (2) | fragment. Protected
//! records carry type 23 and AEAD(content | inner type | zero padding) with the 5-byte header
//! as additional data; this side never pads.

use zeroize::Zeroizing;

use crate::codec::handshake_message;
use crate::error::AlertDescription;
use crate::key_schedule::next_traffic_secret;
use crate::messages::HT_KEY_UPDATE;
use crate::suite::{CipherSuite, TAG_LEN, TrafficKeys};

pub(crate) const CT_CHANGE_CIPHER_SPEC: u8 = 20;
pub(crate) const CT_ALERT: u8 = 21;
pub(crate) const CT_HANDSHAKE: u8 = 22;
pub(crate) const CT_APPLICATION_DATA: u8 = 23;

pub(crate) const HEADER_LEN: usize = 5;
/// Largest plaintext fragment (2^14).
pub const MAX_PLAINTEXT: usize = 16384;
/// Largest protected fragment (2^14 + 256).
pub const MAX_CIPHERTEXT: usize = MAX_PLAINTEXT + 256;
/// After this many records under one key, the sender moves to the next key (KeyUpdate):
/// AES-GCM's limit is 2^24.5 records per key (RFC 8446 section 5.5).
pub(crate) const KEY_UPDATE_AFTER_RECORDS: u64 = 1 << 24;

/// Record protection state and the bytes waiting to be sent.
pub(crate) struct RecordLayer {
    pub suite: Option<CipherSuite>,
    pub rx: Option<TrafficKeys>,
    pub tx: Option<TrafficKeys>,
    /// Application traffic secrets (for KeyUpdate); empty during the handshake.
    pub rx_secret: Zeroizing<Vec<u8>>,
    pub tx_secret: Zeroizing<Vec<u8>>,
    pub outgoing: Vec<u8>,
    sent_ccs: bool,
}

impl RecordLayer {
    pub fn new() -> Self {
        Self {
            suite: None,
            rx: None,
            tx: None,
            rx_secret: Zeroizing::new(Vec::new()),
            tx_secret: Zeroizing::new(Vec::new()),
            outgoing: Vec::new(),
            sent_ccs: false,
        }
    }

    /// Sends `data` as records of `content_type`, protected once a write key is set.
    pub fn send(&mut self, content_type: u8, data: &[u8]) {
        for chunk in data.chunks(MAX_PLAINTEXT) {
            match &mut self.tx {
                None => {
                    self.outgoing.extend_from_slice(&[content_type, 3, 3]);
                    self.outgoing
                        .extend_from_slice(&(chunk.len() as u16).to_be_bytes());
                    self.outgoing.extend_from_slice(chunk);
                }
                Some(keys) => {
                    let len = chunk.len() + 1 + TAG_LEN;
                    let header = [CT_APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
                    let mut buf = Vec::with_capacity(len);
                    buf.extend_from_slice(chunk);
                    buf.push(content_type);
                    keys.seal(&header, &mut buf);
                    self.outgoing.extend_from_slice(&header);
                    self.outgoing.extend_from_slice(&buf);
                }
            }
        }
    }

    pub fn send_handshake(&mut self, msg: &[u8]) {
        self.send(CT_HANDSHAKE, msg);
    }

    /// The middlebox-compatibility change_cipher_spec record (RFC 8446 appendix D.4), once.
    pub fn send_ccs(&mut self) {
        if !self.sent_ccs {
            self.sent_ccs = true;
            self.outgoing
                .extend_from_slice(&[CT_CHANGE_CIPHER_SPEC, 3, 3, 0, 1, 1]);
        }
    }

    pub fn send_alert(&mut self, alert: AlertDescription) {
        let level = if alert == AlertDescription::CloseNotify {
            1
        } else {
            2
        };
        self.send(CT_ALERT, &[level, alert.code()]);
    }

    /// Application data, moving to the next key first when the current one has been used
    /// for `KEY_UPDATE_AFTER_RECORDS` records.
    pub fn send_application_data(&mut self, data: &[u8]) {
        for chunk in data.chunks(MAX_PLAINTEXT) {
            if self
                .tx
                .as_ref()
                .is_some_and(|k| k.seq() >= KEY_UPDATE_AFTER_RECORDS)
            {
                self.send_key_update(false);
            }
            self.send(CT_APPLICATION_DATA, chunk);
        }
    }

    /// KeyUpdate under the current key, then switch to the next one.
    pub fn send_key_update(&mut self, request_peer: bool) {
        self.send_handshake(&handshake_message(HT_KEY_UPDATE, &[u8::from(request_peer)]));
        if let Some(suite) = self.suite {
            self.tx_secret = next_traffic_secret(suite.hash(), &self.tx_secret);
            self.tx = Some(TrafficKeys::derive(suite, &self.tx_secret));
        }
    }

    pub fn update_rx(&mut self) {
        if let Some(suite) = self.suite {
            self.rx_secret = next_traffic_secret(suite.hash(), &self.rx_secret);
            self.rx = Some(TrafficKeys::derive(suite, &self.rx_secret));
        }
    }

    /// Installs the application traffic secrets.
    pub fn install_application(
        &mut self,
        suite: CipherSuite,
        tx: Zeroizing<Vec<u8>>,
        rx: Option<Zeroizing<Vec<u8>>>,
    ) {
        self.suite = Some(suite);
        self.tx = Some(TrafficKeys::derive(suite, &tx));
        self.tx_secret = tx;
        if let Some(rx) = rx {
            self.rx = Some(TrafficKeys::derive(suite, &rx));
            self.rx_secret = rx;
        }
    }
}
