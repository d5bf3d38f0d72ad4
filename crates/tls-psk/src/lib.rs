//! TLS 1.3 with external pre-shared keys only: the subset of RFC 8446 that NVMe/TCP uses
//! (NVMe/TCP transport specification 1.1, TP 8011).
//!
//! - Cipher suites TLS_AES_128_GCM_SHA256 and TLS_AES_256_GCM_SHA384.
//! - Key exchange psk_dhe_ke (x25519, secp256r1) and psk_ke; external PSK binders; a
//!   HelloRetryRequest when the client sent no key share the server can use.
//! - KeyUpdate (also automatic before a key's AES-GCM record limit), alerts, close_notify.
//! - No certificates, no session tickets, no 0-RTT.
//!
//! [`Connection`] is the sans-IO state machine; [`TlsStream`] drives it over a tokio stream.
//! The wire subset is described in docs/wire/tls.md.
//!
//! Why not rustls: it has no external-PSK API.

mod client;
mod codec;
mod config;
mod conn;
mod error;
#[doc(hidden)]
pub mod fuzz;
pub mod hash;
mod key_schedule;
mod kx;
mod messages;
mod record;
mod server;
mod stream;
mod suite;

pub use config::{
    ClientConfig, KeyExchangeModes, OsRandom, Psk, PskStore, PskTable, RandomSource, ServerConfig,
};
pub use conn::{Connection, INCOMING_CAP, OUTGOING_CAP, PLAINTEXT_CAP};
pub use error::{AlertDescription, TlsError};
pub use hash::HashAlg;
pub use kx::NamedGroup;
pub use record::{MAX_CIPHERTEXT, MAX_PLAINTEXT};
pub use stream::{TlsStream, accept, connect, tls_error, to_io};
pub use suite::CipherSuite;

/// What a completed handshake agreed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    pub suite: CipherSuite,
    /// The (EC)DHE group; None in psk_ke.
    pub group: Option<NamedGroup>,
    /// The PSK identity the client authenticated with.
    pub psk_identity: Vec<u8>,
}
