//! A TLS-PSK echo server for trying peers by hand:
//! `cargo run -p tls-psk --example psk_echo_server -- PORT IDENTITY HEXKEY`
//! then e.g. `openssl s_client -tls1_3 -psk HEXKEY -psk_identity IDENTITY -connect 127.0.0.1:PORT`.

use std::sync::Arc;

use tls_psk::{HashAlg, Psk, PskTable, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, port, identity, key] = &args[..] else {
        return Err("usage: psk_echo_server PORT IDENTITY HEXKEY".into());
    };
    let key: Vec<u8> = (0..key.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(key.get(i..i + 2).unwrap_or("x"), 16))
        .collect::<Result<_, _>>()?;
    let mut table = PskTable::new();
    table.insert(Psk::new(identity.as_bytes(), &key, HashAlg::Sha256)?);
    let config = Arc::new(ServerConfig::new(Arc::new(table)));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.parse::<u16>()?)).await?;
    loop {
        let (tcp, peer) = listener.accept().await?;
        let config = Arc::clone(&config);
        tokio::spawn(async move {
            let mut tls = match tls_psk::accept(tcp, config).await {
                Ok(t) => t,
                Err(e) => return eprintln!("{peer}: handshake failed: {e}"),
            };
            eprintln!("{peer}: connected {:?}", tls.connection().negotiated());
            let mut buf = vec![0u8; 16384];
            loop {
                match tls.read(&mut buf).await {
                    Ok(0) => break,
                    Ok(n) => {
                        if tls.write_all(&buf[..n]).await.is_err() || tls.flush().await.is_err() {
                            break;
                        }
                    }
                    Err(e) => return eprintln!("{peer}: {e}"),
                }
            }
            let _ = tls.shutdown().await;
            eprintln!("{peer}: closed");
        });
    }
}
