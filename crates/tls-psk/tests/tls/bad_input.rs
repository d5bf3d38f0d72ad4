//! Bad input against our server: each gets its alert and a closed connection, and a good
//! client connecting afterwards is served.

use std::sync::Arc;
use std::time::Duration;

use tls_psk::{AlertDescription, Connection, HashAlg};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::*;

/// Sends `bytes` raw, then reads until the server closes; returns what it sent.
async fn send_raw(port: u16, bytes: &[u8], half_close: bool) -> Vec<u8> {
    let mut s = tcp(port).await;
    s.write_all(bytes).await.expect("write");
    if half_close {
        s.shutdown().await.expect("shutdown");
    }
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("server closes the connection")
        .expect("read");
    out
}

fn alert(desc: AlertDescription) -> Vec<u8> {
    vec![21, 3, 3, 0, 2, 2, desc.code()]
}

/// A TLS 1.2 ClientHello: no supported_versions extension.
fn tls12_client_hello() -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend_from_slice(&[0x42; 32]);
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0xc0, 0x2f]); // ECDHE-RSA-AES128-GCM-SHA256
    body.extend_from_slice(&[1, 0]);
    let mut hs = vec![1, 0, 0, body.len() as u8];
    hs.extend_from_slice(&body);
    let mut rec = vec![22, 3, 1, 0, hs.len() as u8];
    rec.extend_from_slice(&hs);
    rec
}

/// A real ClientHello record from our client.
fn client_hello_record() -> Vec<u8> {
    let c = Connection::client(client_config(HashAlg::Sha256)).expect("client");
    c.outgoing().to_vec()
}

#[tokio::test]
async fn bad_input_gets_alerts_and_others_are_served() {
    let cases: Vec<(&str, Vec<u8>, bool, Vec<u8>)> = vec![
        (
            "HTTP request",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            false,
            alert(AlertDescription::DecodeError),
        ),
        (
            "TLS 1.2-only ClientHello",
            tls12_client_hello(),
            false,
            alert(AlertDescription::ProtocolVersion),
        ),
        (
            "oversized record",
            vec![22, 3, 3, 0x4e, 0x20, 1, 2, 3],
            false,
            alert(AlertDescription::RecordOverflow),
        ),
        (
            "unknown record type",
            vec![99, 3, 3, 0, 1, 0],
            false,
            alert(AlertDescription::UnexpectedMessage),
        ),
        (
            "application data before keys",
            vec![23, 3, 3, 0, 1, 0],
            false,
            alert(AlertDescription::UnexpectedMessage),
        ),
        (
            "truncated record",
            vec![22, 3, 1, 0, 100, 1, 0, 0],
            true,
            Vec::new(),
        ),
        (
            "tampered binder",
            {
                let mut ch = client_hello_record();
                let n = ch.len();
                ch[n - 1] ^= 1;
                ch
            },
            false,
            alert(AlertDescription::DecryptError),
        ),
        // The record is whole but the handshake message in it is not: the server waits for
        // the rest, then sees the end of the stream.
        (
            "truncated ClientHello",
            {
                let ch = client_hello_record();
                let mut short = ch[..ch.len() - 40].to_vec();
                let len = (short.len() - 5) as u16;
                short[3..5].copy_from_slice(&len.to_be_bytes());
                short
            },
            true,
            Vec::new(),
        ),
        // A ClientHello whose inner lengths disagree with the message length.
        (
            "ClientHello with a bad extension length",
            {
                let mut ch = client_hello_record();
                // Record header 5, handshake header 4, version 2, random 32, session id 1+32,
                // suites 2+2*n, compression 2, then the extensions' u16 length.
                let suites =
                    u16::from_be_bytes([ch[5 + 4 + 2 + 32 + 33], ch[5 + 4 + 2 + 32 + 34]]) as usize;
                let at = 5 + 4 + 2 + 32 + 33 + 2 + suites + 2;
                ch[at] ^= 0x40;
                ch
            },
            false,
            alert(AlertDescription::DecodeError),
        ),
    ];
    // One server for all: every bad connection, then a good one.
    let (port, task) = echo_server(server_config(&[psk(HashAlg::Sha256)]), cases.len() + 1).await;
    for (what, bytes, half_close, want) in &cases {
        let got = send_raw(port, bytes, *half_close).await;
        assert_eq!(&got, want, "{what}: server answer");
    }
    let mut tls = tls_psk::connect(tcp(port).await, client_config(HashAlg::Sha256))
        .await
        .expect("good client");
    tls.write_all(b"still serving").await.expect("write");
    tls.flush().await.expect("flush");
    let mut back = [0u8; 13];
    tls.read_exact(&mut back).await.expect("read");
    assert_eq!(&back, b"still serving");
    tls.shutdown().await.expect("shutdown");
    let results = task.await.expect("server");
    for (i, (what, ..)) in cases.iter().enumerate() {
        let e = results[i].as_ref().expect_err(what);
        eprintln!("{what}: {e}");
    }
    assert!(results[cases.len()].is_ok());
}

#[test]
fn arbitrary_bytes_never_panic_the_server() {
    use proptest::prelude::*;
    let config = server_config(&[psk(HashAlg::Sha256)]);
    let ch = client_hello_record();
    let mut runner = proptest::test_runner::TestRunner::default();
    runner
        .run(
            &(
                proptest::collection::vec(any::<u8>(), 0..2048),
                any::<usize>(),
                any::<u8>(),
            ),
            |(junk, at, xor)| {
                // Pure junk.
                let mut c = Connection::server(Arc::clone(&config));
                c.feed(&junk);
                let _ = c.process();
                // A real ClientHello with one byte changed, then junk.
                let mut c = Connection::server(Arc::clone(&config));
                let mut m = ch.clone();
                let i = at % m.len();
                m[i] ^= xor.max(1);
                c.feed(&m);
                let _ = c.process();
                c.feed(&junk);
                let _ = c.process();
                Ok(())
            },
        )
        .expect("no panic");
}
