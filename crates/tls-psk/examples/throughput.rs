//! Measures TLS-PSK throughput over loopback TCP in one process:
//! `cargo run -p tls-psk --example throughput [MiB]`.

use std::sync::Arc;
use std::time::Instant;

use tls_psk::{ClientConfig, HashAlg, Psk, PskTable, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mib: usize = std::env::args().nth(1).map_or(Ok(64), |s| s.parse())?;
    let psk = Psk::new(&b"bench"[..], &[9u8; 32], HashAlg::Sha256)?;
    let mut table = PskTable::new();
    table.insert(psk.clone());
    let server = Arc::new(ServerConfig::new(Arc::new(table)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let sink = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await?;
        let mut tls = tls_psk::accept(tcp, server).await?;
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0usize;
        loop {
            let n = tls.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            total += n;
        }
        Ok::<usize, std::io::Error>(total)
    });
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut tls = tls_psk::connect(tcp, ClientConfig::new(psk)).await?;
    let chunk = vec![0x5au8; 1 << 20];
    let start = Instant::now();
    for _ in 0..mib {
        tls.write_all(&chunk).await?;
    }
    tls.shutdown().await?;
    let total = sink.await??;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{} MiB in {secs:.3} s: {:.1} MiB/s",
        total >> 20,
        total as f64 / secs / (1 << 20) as f64
    );
    Ok(())
}
