//! HTTPS over real TCP and real rustls: certificates from `tls::generate`, a client that
//! trusts the CA, one that does not, a plain-HTTP client and a garbage stream on the TLS
//! port (neither disturbs the next client), and the load errors of bad PEM files. A
//! certificate renewed in place (`gen-cert --force` style: same CA, new key) is served to
//! new connections without a restart while an open connection keeps working; files that
//! do not load keep the certificate in use.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::Path;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use httpapi::tls::{ClientTls, ServerTls, TlsError, generate};
use httpapi::{ClientError, HttpClient, HttpServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Files {
    _dir: tempfile::TempDir,
    ca: std::path::PathBuf,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
}

fn files(names: &[&str]) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let g = generate(
        &names.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        30,
        30,
        None,
    )
    .unwrap();
    let ca = dir.path().join("ca.pem");
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&ca, &g.ca_cert_pem).unwrap();
    std::fs::write(dir.path().join("ca-key.pem"), &g.ca_key_pem).unwrap();
    std::fs::write(&cert, &g.cert_pem).unwrap();
    std::fs::write(&key, &g.key_pem).unwrap();
    Files {
        _dir: dir,
        ca,
        cert,
        key,
    }
}

async fn server(f: &Files) -> HttpServer {
    let app = Router::new().route("/hello", get(|| async { "{\"hello\":\"tls\"}" }));
    let tls = ServerTls::from_pem_files(&f.cert, &f.key).unwrap();
    HttpServer::serve(
        "127.0.0.1:0".parse().unwrap(),
        httpapi::server::finish(app),
        Some(tls),
    )
    .await
    .unwrap()
}

async fn hello(c: &HttpClient) -> Result<serde_json::Value, ClientError> {
    c.call("GET", "/hello", None).await
}

#[tokio::test]
async fn trusted_client_gets_answers_untrusted_is_refused() {
    let f = files(&["localhost", "127.0.0.1"]);
    let s = server(&f).await;
    let url = format!("https://{}", s.local_addr());
    let trusted = HttpClient::new(url.clone()).with_tls(ClientTls::from_ca_file(&f.ca).unwrap());
    assert_eq!(
        hello(&trusted).await.unwrap(),
        serde_json::json!({"hello": "tls"})
    );
    // By name too (the certificate has both SANs).
    let by_name = HttpClient::new(format!("https://localhost:{}", s.local_addr().port()))
        .with_tls(ClientTls::from_ca_file(&f.ca).unwrap());
    hello(&by_name).await.unwrap();

    // No CA given: trusts nothing.
    let e = hello(&HttpClient::new(url.clone())).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ClientError::Tls { .. }), "{e:?}");
    assert!(msg.contains("--ca-cert"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");

    // Another cluster's CA.
    let other = files(&["localhost", "127.0.0.1"]);
    let e =
        hello(&HttpClient::new(url.clone()).with_tls(ClientTls::from_ca_file(&other.ca).unwrap()))
            .await
            .unwrap_err();
    assert!(matches!(e, ClientError::Tls { .. }), "{e:?}");

    // A bare host:port with a CA configured goes over https.
    let bare = HttpClient::new(s.local_addr().to_string())
        .with_tls(ClientTls::from_ca_file(&f.ca).unwrap());
    assert!(bare.is_https());
    hello(&bare).await.unwrap();

    // The server still serves the trusted client.
    hello(&trusted).await.unwrap();
    s.stop().await;
}

#[tokio::test]
async fn wrong_name_is_refused() {
    let f = files(&["storage-1.example"]);
    let s = server(&f).await;
    let c = HttpClient::new(format!("https://{}", s.local_addr()))
        .with_tls(ClientTls::from_ca_file(&f.ca).unwrap());
    let e = hello(&c).await.unwrap_err();
    assert!(matches!(e, ClientError::Tls { .. }), "{e:?}");
    assert!(e.to_string().contains("gen-cert --name"), "{e}");
}

#[tokio::test]
async fn plain_http_and_garbage_do_not_disturb_others() {
    let f = files(&["127.0.0.1"]);
    let s = server(&f).await;
    let addr = s.local_addr();
    let trusted = HttpClient::new(format!("https://{addr}"))
        .with_tls(ClientTls::from_ca_file(&f.ca).unwrap());

    // A plain-HTTP client on the TLS port: an error, no answer.
    let plain = HttpClient::new(format!("http://{addr}")).with_timeout(Duration::from_secs(15));
    assert!(hello(&plain).await.is_err());

    // Connections that stall in the handshake or send random bytes, held open meanwhile.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    let mut garbage = TcpStream::connect(addr).await.unwrap();
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    garbage.write_all(&noise).await.unwrap();
    let _ = stalled.write_all(&[0x16, 0x03, 0x01]).await;

    // Others keep being served, several at once.
    for _ in 0..3 {
        hello(&trusted).await.unwrap();
    }
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let c = HttpClient::new(format!("https://{addr}"))
                .with_tls(ClientTls::from_ca_file(&f.ca).unwrap());
            tokio::spawn(async move { hello(&c).await.map(|_| ()) })
        })
        .collect();
    for c in clients {
        c.await.unwrap().unwrap();
    }

    // The garbage connection was closed by the server.
    let mut buf = [0u8; 64];
    let r = tokio::time::timeout(Duration::from_secs(5), garbage.read(&mut buf)).await;
    assert!(
        matches!(r, Ok(Ok(_)) | Ok(Err(_))),
        "garbage stream still open"
    );
    // A handshake still stalled does not hold up the stop.
    let t = std::time::Instant::now();
    s.stop().await;
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "stop took {:?}",
        t.elapsed()
    );
    drop(stalled);
}

fn load_err(cert: &Path, key: &Path) -> String {
    let e: TlsError = ServerTls::from_pem_files(cert, key).unwrap_err();
    let m = e.to_string();
    assert!(!m.contains('\n'), "{m}");
    assert!(!m.contains("PRIVATE KEY-----"), "{m}");
    m
}

#[test]
fn load_errors_name_the_file_and_reason() {
    let f = files(&["localhost"]);
    let other = files(&["localhost"]);
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a pem file\n").unwrap();

    let m = load_err(&missing, &f.key);
    assert!(
        m.contains("missing.pem") && m.contains("no such file"),
        "{m}"
    );
    let m = load_err(&empty, &f.key);
    assert!(
        m.contains("empty.pem") && m.contains("no certificate"),
        "{m}"
    );
    let m = load_err(&f.cert, &empty);
    assert!(
        m.contains("empty.pem") && m.contains("no private key"),
        "{m}"
    );
    // A certificate file given as the key.
    let m = load_err(&f.cert, &f.cert);
    assert!(m.contains("no private key"), "{m}");
    let m = load_err(&f.cert, &other.key);
    assert!(m.contains("does not match"), "{m}");
    let e = ClientTls::from_ca_file(&missing).unwrap_err();
    assert!(e.to_string().contains("missing.pem"), "{e}");
}

#[test]
fn generate_reuses_a_ca() {
    let names = vec!["localhost".to_string()];
    let first = generate(&names, 30, 30, None).unwrap();
    let second = generate(
        &names,
        30,
        30,
        Some((&first.ca_cert_pem, &first.ca_key_pem)),
    )
    .unwrap();
    assert_eq!(first.ca_cert_pem, second.ca_cert_pem);
    assert_ne!(first.key_pem, second.key_pem);
    assert!(format!("{second:?}").find("PRIVATE").is_none());
}

#[tokio::test]
async fn certificate_from_a_reused_ca_is_trusted() {
    let f = files(&["127.0.0.1"]);
    let ca_pem = std::fs::read_to_string(&f.ca).unwrap();
    // Not kept by `files`: make the CA here to reuse it.
    let names = vec!["127.0.0.1".to_string()];
    let first = generate(&names, 30, 30, None).unwrap();
    let renewed = generate(
        &names,
        30,
        30,
        Some((&first.ca_cert_pem, &first.ca_key_pem)),
    )
    .unwrap();
    assert_ne!(ca_pem, first.ca_cert_pem);
    std::fs::write(&f.ca, &first.ca_cert_pem).unwrap();
    std::fs::write(&f.cert, &renewed.cert_pem).unwrap();
    std::fs::write(&f.key, &renewed.key_pem).unwrap();
    let s = server(&f).await;
    let c = HttpClient::new(format!("https://{}", s.local_addr()))
        .with_tls(ClientTls::from_ca_file(&f.ca).unwrap());
    hello(&c).await.unwrap();
}

/// A TLS client (HTTP/1.1, keep-alive) that trusts `ca`: the certificate the server
/// presented and the stream, for more requests on the same connection.
async fn raw_tls(
    addr: std::net::SocketAddr,
    ca: &Path,
) -> (Vec<u8>, tokio_rustls::client::TlsStream<TcpStream>) {
    let mut roots = rustls::RootCertStore::empty();
    for c in httpapi::tls::load_certs(ca).unwrap() {
        roots.add(c).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let presented = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    (presented, tls)
}

/// One keep-alive GET /hello on `s`; the body.
async fn get_hello(s: &mut tokio_rustls::client::TlsStream<TcpStream>) -> String {
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"}") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("an answer on the open connection")
            .unwrap();
        assert!(
            n > 0,
            "connection closed: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).to_string()
}

fn der_of(pem_file: &Path) -> Vec<u8> {
    httpapi::tls::load_certs(pem_file).unwrap()[0].to_vec()
}

/// Replaces `path` the way renewal tools do: a new file renamed over the old one.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_certificate_is_served_without_a_restart() {
    let f = files(&["127.0.0.1"]);
    let app = Router::new().route("/hello", get(|| async { "{\"hello\":\"tls\"}" }));
    let tls = ServerTls::from_pem_files(&f.cert, &f.key).unwrap();
    // Look at the files before every handshake (default: at most every 5 s).
    tls.set_reload_check_interval(Duration::ZERO);
    let s = HttpServer::serve(
        "127.0.0.1:0".parse().unwrap(),
        httpapi::server::finish(app),
        Some(tls.clone()),
    )
    .await
    .unwrap();
    let addr = s.local_addr();
    let old_der = der_of(&f.cert);
    let (presented, mut open) = raw_tls(addr, &f.ca).await;
    assert_eq!(presented, old_der);
    assert!(get_hello(&mut open).await.contains("tls"));

    // Renew as `gen-cert --force` does: the same CA signs a new certificate and key.
    let ca_pem = std::fs::read_to_string(&f.ca).unwrap();
    let dir = f.ca.parent().unwrap();
    let ca_key = std::fs::read_to_string(dir.join("ca-key.pem")).unwrap();
    let renewed = generate(&["127.0.0.1".to_string()], 60, 30, Some((&ca_pem, &ca_key))).unwrap();
    replace(&f.key, &renewed.key_pem);
    replace(&f.cert, &renewed.cert_pem);
    let new_der = der_of(&f.cert);
    assert_ne!(new_der, old_der);
    let (presented, mut second) = raw_tls(addr, &f.ca).await;
    assert_eq!(
        presented, new_der,
        "a new connection gets the renewed certificate"
    );
    assert!(get_hello(&mut second).await.contains("tls"));
    // The connection opened before the renewal goes on.
    assert!(get_hello(&mut open).await.contains("tls"));
    // Clients that trust the CA see no difference.
    let trusted = HttpClient::new(format!("https://{addr}"))
        .with_tls(ClientTls::from_ca_file(&f.ca).unwrap());
    hello(&trusted).await.unwrap();

    // Bad files: a half-written certificate, then a key of another certificate. The
    // renewed certificate stays in use (one log line each), connections keep working.
    replace(&f.cert, "-----BEGIN CERTIFICATE-----\nMIIB");
    let (presented, _) = raw_tls(addr, &f.ca).await;
    assert_eq!(presented, new_der, "garbage kept the loaded certificate");
    let other = generate(&["127.0.0.1".to_string()], 30, 30, None).unwrap();
    replace(&f.cert, &renewed.cert_pem);
    replace(&f.key, &other.key_pem);
    let (presented, _) = raw_tls(addr, &f.ca).await;
    assert_eq!(
        presented, new_der,
        "a mismatched key kept the loaded certificate"
    );
    assert!(get_hello(&mut open).await.contains("tls"));
    let e = tls.reload().unwrap_err();
    assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e}");
    // Repaired: picked up again.
    replace(&f.key, &renewed.key_pem);
    let (presented, _) = raw_tls(addr, &f.ca).await;
    assert_eq!(presented, new_der);
    tls.reload().unwrap();
    hello(&trusted).await.unwrap();
    s.stop().await;
}
