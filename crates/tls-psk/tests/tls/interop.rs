//! Interoperability with OpenSSL (`openssl s_server` / `s_client`) and GnuTLS
//! (`gnutls-serv` / `gnutls-cli`) on loopback, both directions.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tls_psk::{HashAlg, KeyExchangeModes, NamedGroup, ServerConfig};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::*;

const GNUTLS_PRIORITY: &str = "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK:+DHE-PSK:+PSK";

/// A peer process: killed on drop; its stdout lines arrive on a channel.
struct Peer {
    child: Child,
    lines: mpsc::Receiver<String>,
    stdin: Option<ChildStdin>,
}

impl Peer {
    fn spawn(program: &str, args: &[&str]) -> Option<Peer> {
        if Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {program}"))
            .output()
            .ok()?
            .stdout
            .is_empty()
        {
            testkit::prereq::missing(format!(
                "{program} is not installed (scripts/install-deps.sh installs it)"
            ));
            return None;
        }
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        testkit::process::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().expect("spawn peer");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Some(Peer {
            child,
            lines,
            stdin,
        })
    }

    /// Waits for a stdout line containing `needle`; returns it.
    fn wait_for(&self, needle: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(line) => seen.push(line),
                Err(_) => break,
            }
        }
        panic!(
            "peer never printed {needle:?}; it printed:\n{}",
            seen.join("\n")
        );
    }

    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("write to peer");
        stdin.flush().expect("flush");
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        testkit::process::kill_if_running(&mut self.child);
    }
}

/// Connects our client to a peer server on `port` (retrying while it starts), sends a line
/// and returns the line that comes back.
async fn client_exchange(
    port: u16,
    config: ClientConfig,
    line: &str,
) -> (String, tls_psk::Negotiated) {
    let mut tcp = None;
    for _ in 0..100 {
        if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            tcp = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tcp = tcp.expect("peer server listens");
    let mut tls = tls_psk::connect(tcp, config)
        .await
        .expect("handshake with peer server");
    let negotiated = tls.connection().negotiated().cloned().expect("negotiated");
    tls.write_all(format!("{line}\n").as_bytes())
        .await
        .expect("write");
    tls.flush().await.expect("flush");
    let mut reader = tokio::io::BufReader::new(tls);
    let mut back = String::new();
    tokio::time::timeout(Duration::from_secs(20), reader.read_line(&mut back))
        .await
        .expect("answer in time")
        .expect("read");
    let mut tls = reader.into_inner();
    let _ = tls.shutdown().await;
    (back.trim_end().to_string(), negotiated)
}

/// Our server for one peer client: reads a line, answers "ack: LINE", closes.
async fn line_server(
    config: std::sync::Arc<ServerConfig>,
) -> (
    u16,
    tokio::task::JoinHandle<Result<tls_psk::Negotiated, String>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let tls = tls_psk::accept(tcp, config)
            .await
            .map_err(|e| e.to_string())?;
        let negotiated = tls
            .connection()
            .negotiated()
            .cloned()
            .ok_or("not negotiated")?;
        let mut reader = tokio::io::BufReader::new(tls);
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .await
            .map_err(|e| e.to_string())?;
        let mut tls = reader.into_inner();
        tls.write_all(format!("ack: {}\n", line.trim_end()).as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        tls.shutdown().await.map_err(|e| e.to_string())?;
        Ok(negotiated)
    });
    (port, task)
}

fn openssl_server(port: u16, extra: &[&str]) -> Option<Peer> {
    let accept = format!("127.0.0.1:{port}");
    let mut args = vec![
        "s_server",
        "-tls1_3",
        "-nocert",
        "-psk",
        KEY_HEX,
        "-psk_identity",
        IDENTITY,
        "-accept",
        &accept,
        "-naccept",
        "1",
        "-rev",
    ];
    args.extend_from_slice(extra);
    Peer::spawn("openssl", &args)
}

#[tokio::test]
async fn our_client_to_openssl_server() {
    let port = testkit::net::free_port().expect("port");
    let Some(peer) = openssl_server(port, &[]) else {
        return;
    };
    peer.wait_for("ACCEPT");
    let (back, n) = client_exchange(port, client_config(HashAlg::Sha256), "hello openssl").await;
    assert_eq!(back, "lssnepo olleh");
    assert_eq!(n.group, Some(NamedGroup::X25519));
}

#[tokio::test]
async fn our_client_to_openssl_server_hello_retry_p256() {
    let port = testkit::net::free_port().expect("port");
    let Some(peer) = openssl_server(port, &["-groups", "P-256"]) else {
        return;
    };
    peer.wait_for("ACCEPT");
    let (back, n) = client_exchange(port, client_config(HashAlg::Sha256), "retry").await;
    assert_eq!(back, "yrter");
    assert_eq!(
        n.group,
        Some(NamedGroup::Secp256r1),
        "server asked for P-256 with a HelloRetryRequest"
    );
}

#[tokio::test]
async fn our_client_to_openssl_server_psk_ke() {
    let port = testkit::net::free_port().expect("port");
    let Some(peer) = openssl_server(port, &["-allow_no_dhe_kex"]) else {
        return;
    };
    peer.wait_for("ACCEPT");
    let mut config = client_config(HashAlg::Sha256);
    config.modes = KeyExchangeModes::PSK_ONLY;
    let (back, n) = client_exchange(port, config, "plain psk").await;
    assert_eq!(back, "ksp nialp");
    assert_eq!(n.group, None);
}

async fn openssl_client_case(server: ServerConfig, extra: &[&str]) -> tls_psk::Negotiated {
    let (port, task) = line_server(std::sync::Arc::new(server)).await;
    let connect = format!("127.0.0.1:{port}");
    let mut args = vec![
        "s_client",
        "-tls1_3",
        "-psk",
        KEY_HEX,
        "-psk_identity",
        IDENTITY,
        "-connect",
        &connect,
        "-quiet",
    ];
    args.extend_from_slice(extra);
    let Some(mut peer) = Peer::spawn("openssl", &args) else {
        task.abort();
        return tls_psk::Negotiated {
            suite: tls_psk::CipherSuite::Aes128GcmSha256,
            group: None,
            psk_identity: Vec::new(),
        };
    };
    peer.send_line("ping from openssl");
    peer.wait_for("ack: ping from openssl");
    task.await.expect("server task").expect("server side")
}

// The peer is watched with blocking reads: the server task needs a thread of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_client_to_our_server() {
    let n = openssl_client_case((*server_config(&[psk(HashAlg::Sha256)])).clone(), &[]).await;
    assert_eq!(n.psk_identity, IDENTITY.as_bytes());
    assert_eq!(n.group, Some(NamedGroup::X25519));
}

// The peer is watched with blocking reads: the server task needs a thread of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_client_to_our_server_hello_retry() {
    let mut server = (*server_config(&[psk(HashAlg::Sha256)])).clone();
    server.groups = vec![NamedGroup::Secp256r1];
    let n = openssl_client_case(server, &["-groups", "X25519:P-256"]).await;
    assert_eq!(n.group, Some(NamedGroup::Secp256r1));
}

// The peer is watched with blocking reads: the server task needs a thread of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_client_to_our_server_psk_ke() {
    let mut server = (*server_config(&[psk(HashAlg::Sha256)])).clone();
    server.modes = KeyExchangeModes::PSK_ONLY;
    let n = openssl_client_case(server, &["-allow_no_dhe_kex"]).await;
    assert_eq!(n.group, None);
}

// The peer is watched with blocking reads: the server task needs a thread of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_client_with_wrong_key_is_refused() {
    let (port, task) = line_server(server_config(&[psk(HashAlg::Sha256)])).await;
    let connect = format!("127.0.0.1:{port}");
    let wrong = "ff".repeat(32);
    let Some(mut peer) = Peer::spawn(
        "openssl",
        &[
            "s_client",
            "-tls1_3",
            "-psk",
            &wrong,
            "-psk_identity",
            IDENTITY,
            "-connect",
            &connect,
            "-quiet",
        ],
    ) else {
        task.abort();
        return;
    };
    let err = task.await.expect("server task").expect_err("refused");
    assert!(err.contains("binder does not verify"), "{err}");
    let _ = peer.child.wait();
    peer.stdin.take();
}

fn gnutls_psk_file(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("psk.txt");
    std::fs::write(&path, format!("{IDENTITY}:{KEY_HEX}\n")).expect("psk file");
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn our_client_to_gnutls_server() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = gnutls_psk_file(&dir);
    let port = testkit::net::free_port().expect("port").to_string();
    let priority = format!("--priority={GNUTLS_PRIORITY}");
    let Some(_peer) = Peer::spawn(
        "gnutls-serv",
        &["--port", &port, "--pskpasswd", &file, &priority, "--echo"],
    ) else {
        return;
    };
    let port: u16 = port.parse().expect("port");
    let (back, n) = client_exchange(port, client_config(HashAlg::Sha256), "hello gnutls").await;
    assert_eq!(back, "hello gnutls");
    assert!(n.group.is_some(), "GnuTLS prefers psk_dhe_ke");
}

// The peer is watched with blocking reads: the server task needs a thread of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gnutls_client_to_our_server() {
    let (port, task) = line_server(server_config(&[psk(HashAlg::Sha256)])).await;
    let port = port.to_string();
    let priority = format!("--priority={GNUTLS_PRIORITY}");
    let Some(mut peer) = Peer::spawn(
        "gnutls-cli",
        &[
            "--pskusername",
            IDENTITY,
            "--pskkey",
            KEY_HEX,
            &priority,
            "-p",
            &port,
            "127.0.0.1",
        ],
    ) else {
        task.abort();
        return;
    };
    peer.wait_for("Handshake was completed");
    peer.send_line("ping from gnutls");
    peer.wait_for("ack: ping from gnutls");
    let n = task.await.expect("server task").expect("server side");
    assert_eq!(n.psk_identity, IDENTITY.as_bytes());
    assert!(n.group.is_some());
}

// The peer is watched with blocking reads: the server task needs a thread of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gnutls_client_p256_only() {
    let (port, task) = line_server(server_config(&[psk(HashAlg::Sha256)])).await;
    let port = port.to_string();
    let priority = format!("--priority={GNUTLS_PRIORITY}:-GROUP-ALL:+GROUP-SECP256R1");
    let Some(mut peer) = Peer::spawn(
        "gnutls-cli",
        &[
            "--pskusername",
            IDENTITY,
            "--pskkey",
            KEY_HEX,
            &priority,
            "-p",
            &port,
            "127.0.0.1",
        ],
    ) else {
        task.abort();
        return;
    };
    peer.wait_for("Handshake was completed");
    peer.send_line("p256");
    peer.wait_for("ack: p256");
    let n = task.await.expect("server task").expect("server side");
    assert_eq!(n.group, Some(NamedGroup::Secp256r1));
}
