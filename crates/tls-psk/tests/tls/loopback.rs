//! Our client against our server.

use std::time::Duration;

use tls_psk::{CipherSuite, HashAlg, KeyExchangeModes, NamedGroup, Psk, ServerConfig, TlsError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::*;

/// Sends `data` through an echo server and checks it comes back unchanged.
async fn round_trip(
    client: ClientConfig,
    server: std::sync::Arc<ServerConfig>,
    data: &[u8],
) -> tls_psk::Negotiated {
    let (port, task) = echo_server(server, 1).await;
    let tls = tls_psk::connect(tcp(port).await, client)
        .await
        .expect("client handshake");
    let client_side = tls.connection().negotiated().cloned().expect("negotiated");
    let (mut rd, mut wr) = tokio::io::split(tls);
    let data_owned = data.to_vec();
    let writer = tokio::spawn(async move {
        wr.write_all(&data_owned).await.expect("write");
        wr.flush().await.expect("flush");
        wr
    });
    let mut back = vec![0u8; data.len()];
    rd.read_exact(&mut back).await.expect("read back");
    assert!(back == data, "echoed bytes differ");
    let mut wr = writer.await.expect("writer");
    wr.shutdown().await.expect("shutdown");
    let mut rest = Vec::new();
    rd.read_to_end(&mut rest).await.expect("clean close");
    assert!(rest.is_empty());
    let server_side = task
        .await
        .expect("server")
        .remove(0)
        .expect("server connection");
    assert_eq!(client_side, server_side, "both sides agree");
    server_side
}

#[tokio::test]
async fn psk_dhe_x25519_sha256_moves_data_both_ways() {
    let data = testkit::data::pattern(1 << 20, 7);
    let n = round_trip(
        client_config(HashAlg::Sha256),
        server_config(&[psk(HashAlg::Sha256)]),
        &data,
    )
    .await;
    assert_eq!(n.suite, CipherSuite::Aes128GcmSha256);
    assert_eq!(n.group, Some(NamedGroup::X25519));
    assert_eq!(n.psk_identity, IDENTITY.as_bytes());
}

#[tokio::test]
async fn sha384_psk_uses_aes256() {
    let n = round_trip(
        client_config(HashAlg::Sha384),
        server_config(&[psk(HashAlg::Sha384)]),
        b"three eight four",
    )
    .await;
    assert_eq!(n.suite, CipherSuite::Aes256GcmSha384);
}

#[tokio::test]
async fn hello_retry_request_for_secp256r1() {
    let mut server = (*server_config(&[psk(HashAlg::Sha256)])).clone();
    server.groups = vec![NamedGroup::Secp256r1];
    let client = client_config(HashAlg::Sha256); // key share for x25519 only
    let n = round_trip(client, std::sync::Arc::new(server), b"retry").await;
    assert_eq!(n.group, Some(NamedGroup::Secp256r1));
}

#[tokio::test]
async fn psk_ke_without_dhe() {
    let mut client = client_config(HashAlg::Sha256);
    client.modes = KeyExchangeModes::PSK_ONLY;
    let n = round_trip(client, server_config(&[psk(HashAlg::Sha256)]), b"no dhe").await;
    assert_eq!(n.group, None);
}

#[tokio::test]
async fn server_requiring_dhe_refuses_psk_ke_client() {
    let mut server = (*server_config(&[psk(HashAlg::Sha256)])).clone();
    server.modes = KeyExchangeModes::DHE_ONLY;
    let (port, task) = echo_server(std::sync::Arc::new(server), 1).await;
    let mut client = client_config(HashAlg::Sha256);
    client.modes = KeyExchangeModes::PSK_ONLY;
    let err = tls_psk::connect(tcp(port).await, client)
        .await
        .err()
        .expect("refused");
    assert_eq!(
        tls_psk::tls_error(&err),
        Some(&TlsError::PeerAlert(
            tls_psk::AlertDescription::HandshakeFailure
        ))
    );
    let server_err = task
        .await
        .expect("server")
        .remove(0)
        .expect_err("server refuses");
    assert!(
        server_err.contains("no common PSK key-exchange mode"),
        "{server_err}"
    );
}

#[tokio::test]
async fn key_update_both_directions() {
    let (port, task) = echo_server(server_config(&[psk(HashAlg::Sha256)]), 1).await;
    let mut tls = tls_psk::connect(tcp(port).await, client_config(HashAlg::Sha256))
        .await
        .expect("handshake");
    for round in 0..5u8 {
        tls.key_update().expect("key update");
        let msg = [round; 1000];
        tls.write_all(&msg).await.expect("write");
        tls.flush().await.expect("flush");
        let mut back = [0u8; 1000];
        tls.read_exact(&mut back)
            .await
            .expect("read after key update");
        assert_eq!(back, msg);
    }
    tls.shutdown().await.expect("shutdown");
    task.await
        .expect("server")
        .remove(0)
        .expect("server side ok");
}

#[tokio::test]
async fn wrong_key_is_refused_with_decrypt_error() {
    let (port, task) = echo_server(server_config(&[psk(HashAlg::Sha256)]), 1).await;
    let wrong = Psk::new(IDENTITY, &[0x55; 32], HashAlg::Sha256).expect("psk");
    let err = tls_psk::connect(tcp(port).await, ClientConfig::new(wrong))
        .await
        .err()
        .expect("refused");
    assert_eq!(
        tls_psk::tls_error(&err),
        Some(&TlsError::PeerAlert(
            tls_psk::AlertDescription::DecryptError
        ))
    );
    let server_err = task
        .await
        .expect("server")
        .remove(0)
        .expect_err("server refuses");
    assert!(
        server_err.contains("binder does not verify"),
        "{server_err}"
    );
}

#[tokio::test]
async fn unknown_identity_is_refused() {
    let (port, task) = echo_server(server_config(&[psk(HashAlg::Sha256)]), 1).await;
    let other = Psk::new("somebody-else", &key(), HashAlg::Sha256).expect("psk");
    let err = tls_psk::connect(tcp(port).await, ClientConfig::new(other))
        .await
        .err()
        .expect("refused");
    assert_eq!(
        tls_psk::tls_error(&err),
        Some(&TlsError::PeerAlert(
            tls_psk::AlertDescription::UnknownPskIdentity
        ))
    );
    let server_err = task
        .await
        .expect("server")
        .remove(0)
        .expect_err("server refuses");
    assert!(server_err.contains("somebody-else"), "{server_err}");
}

#[tokio::test]
async fn hash_mismatch_is_refused() {
    // The same identity and key bound to SHA-384 on the client: no suite in common.
    let (port, task) = echo_server(server_config(&[psk(HashAlg::Sha256)]), 1).await;
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        tls_psk::connect(tcp(port).await, client_config(HashAlg::Sha384)),
    )
    .await;
    assert!(r.expect("no hang").is_err());
    assert!(task.await.expect("server").remove(0).is_err());
}

/// A store with two keys for one identity (a peer whose derivation has variants).
struct TwoKeys(Vec<Psk>);

impl tls_psk::PskStore for TwoKeys {
    fn lookup(&self, identity: &[u8]) -> Option<Psk> {
        self.candidates(identity).into_iter().next()
    }
    fn candidates(&self, identity: &[u8]) -> Vec<Psk> {
        self.0
            .iter()
            .filter(|p| p.identity() == identity)
            .cloned()
            .collect()
    }
}

#[tokio::test]
async fn the_candidate_whose_binder_verifies_is_used() {
    let other = Psk::new(IDENTITY, &[0x5a; 32], HashAlg::Sha256).expect("psk");
    // The client's key second: the first candidate's binder fails, the second's verifies.
    let store = std::sync::Arc::new(TwoKeys(vec![other.clone(), psk(HashAlg::Sha256)]));
    let server = std::sync::Arc::new(ServerConfig::new(store));
    let n = round_trip(client_config(HashAlg::Sha256), server, b"second candidate").await;
    assert_eq!(n.psk_identity, IDENTITY.as_bytes());
    // Neither key is the client's: refused with decrypt_error.
    let store = std::sync::Arc::new(TwoKeys(vec![other.clone(), other]));
    let (port, task) = echo_server(std::sync::Arc::new(ServerConfig::new(store)), 1).await;
    let client = tls_psk::connect(tcp(port).await, client_config(HashAlg::Sha256)).await;
    assert!(client.is_err(), "a client with neither key connected");
    let server = task.await.expect("server").remove(0);
    let e = server.expect_err("server refuses");
    assert!(
        e.contains("(wrong key)") && e.contains("decrypt_error"),
        "{e}"
    );
}
