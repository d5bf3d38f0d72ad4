//! tls-psk against itself, OpenSSL and GnuTLS over real TCP on loopback, and against bad
//! input. One test binary: the helpers below are compiled once.

mod bad_input;
mod interop;
mod loopback;

use std::sync::Arc;

use tls_psk::{ClientConfig, HashAlg, Psk, PskTable, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const IDENTITY: &str = "client-one";
pub const KEY_HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

pub fn key() -> Vec<u8> {
    hex::decode(KEY_HEX).expect("hex key")
}

pub fn psk(hash: HashAlg) -> Psk {
    Psk::new(IDENTITY, &key(), hash).expect("psk")
}

pub fn server_config(psks: &[Psk]) -> Arc<ServerConfig> {
    let mut table = PskTable::new();
    for p in psks {
        table.insert(p.clone());
    }
    Arc::new(ServerConfig::new(Arc::new(table)))
}

pub fn client_config(hash: HashAlg) -> ClientConfig {
    ClientConfig::new(psk(hash))
}

/// An echo server on loopback: accepts `n` connections, each one handshakes and echoes
/// until the client closes. Returns its port and the per-connection results.
pub async fn echo_server(
    config: Arc<ServerConfig>,
    n: usize,
) -> (
    u16,
    tokio::task::JoinHandle<Vec<Result<tls_psk::Negotiated, String>>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        let mut handles = Vec::new();
        for _ in 0..n {
            let (tcp, _) = listener.accept().await.expect("accept");
            let config = Arc::clone(&config);
            handles.push(tokio::spawn(async move {
                let mut tls = tls_psk::accept(tcp, config)
                    .await
                    .map_err(|e| e.to_string())?;
                let negotiated = tls
                    .connection()
                    .negotiated()
                    .cloned()
                    .ok_or("no negotiated parameters")?;
                let mut buf = vec![0u8; 65536];
                loop {
                    let got = tls.read(&mut buf).await.map_err(|e| e.to_string())?;
                    if got == 0 {
                        break;
                    }
                    tls.write_all(&buf[..got])
                        .await
                        .map_err(|e| e.to_string())?;
                    tls.flush().await.map_err(|e| e.to_string())?;
                }
                let _ = tls.shutdown().await;
                Ok(negotiated)
            }));
        }
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.expect("join"));
        }
        out
    });
    (port, task)
}

pub async fn tcp(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect")
}
