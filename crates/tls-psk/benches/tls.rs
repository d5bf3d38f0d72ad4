//! TLS record protection throughput, side by side in one run:
//!
//! 1. AEAD: sealing and opening 16 KiB records (the record layer's fragment) with
//!    AES-128-GCM and AES-256-GCM, in ring (the crate's implementation) and in RustCrypto's
//!    aes-gcm 0.10 (what it used before; kept here as the reference line).
//! 2. Stream: `TLS_BENCH_MIB` MiB (default 256) one way over loopback TCP through
//!    `tls_psk::connect` / `accept` (both suites), against plain TCP on the same machine.
//!
//! Medians of `TLS_BENCH_ROUNDS` rounds (default 5), alternating the cases within each round.
//! Output: JSON on stdout and in `<target>/bench/tls.json` (or `TLS_BENCH_OUT`); a summary
//! on stderr. Runs on any x86-64 (AES-NI/PCLMULQDQ or not: both libraries detect at run time).

use std::sync::Arc;
use std::time::Instant;

use aes_gcm::aead::{AeadInPlace, KeyInit};
use serde_json::{Value, json};
use tls_psk::{ClientConfig, HashAlg, Psk, PskTable, ServerConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Error = Box<dyn std::error::Error + Send + Sync>;

const RECORD: usize = 16384;
const AAD: [u8; 5] = [23, 3, 3, 0x40, 0x11];

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// MiB/s of sealing then opening `records` records with ring.
fn ring_aead(alg: &'static ring::aead::Algorithm, records: usize) -> Result<f64, Error> {
    use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey};
    let key = vec![7u8; alg.key_len()];
    let key = LessSafeKey::new(UnboundKey::new(alg, &key).map_err(|_| "ring key")?);
    let mut buf = vec![0x5au8; RECORD];
    let start = Instant::now();
    for i in 0..records {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&(i as u64).to_be_bytes());
        buf.truncate(RECORD);
        key.seal_in_place_append_tag(Nonce::assume_unique_for_key(n), Aad::from(AAD), &mut buf)
            .map_err(|_| "ring seal")?;
        let plain = key
            .open_in_place(Nonce::assume_unique_for_key(n), Aad::from(AAD), &mut buf)
            .map_err(|_| "ring open")?;
        assert_eq!(plain.len(), RECORD);
    }
    Ok(mib_per_s(records * RECORD, start))
}

/// The same with RustCrypto's aes-gcm.
fn rustcrypto_aead<C: KeyInit + AeadInPlace>(records: usize) -> Result<f64, Error> {
    let key = vec![7u8; C::key_size()];
    let cipher = C::new_from_slice(&key).map_err(|_| "aes-gcm key")?;
    let mut buf = Vec::with_capacity(RECORD + 16);
    buf.resize(RECORD, 0x5a);
    let start = Instant::now();
    for i in 0..records {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&(i as u64).to_be_bytes());
        let nonce = aes_gcm::Nonce::from_slice(&n);
        buf.truncate(RECORD);
        cipher
            .encrypt_in_place(nonce, &AAD, &mut buf)
            .map_err(|_| "aes-gcm seal")?;
        cipher
            .decrypt_in_place(nonce, &AAD, &mut buf)
            .map_err(|_| "aes-gcm open")?;
        assert_eq!(buf.len(), RECORD);
    }
    Ok(mib_per_s(records * RECORD, start))
}

fn mib_per_s(bytes: usize, start: Instant) -> f64 {
    bytes as f64 / (1 << 20) as f64 / start.elapsed().as_secs_f64()
}

/// Reads until `bytes` arrived (or EOF); returns how many did.
async fn drain<S: AsyncRead + Unpin>(mut s: S, bytes: usize) -> Result<usize, Error> {
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0usize;
    while got < bytes {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

/// Writes `bytes` in 1 MiB chunks and flushes.
async fn push<S: AsyncWrite + Unpin>(mut s: S, bytes: usize) -> Result<(), Error> {
    let chunk = vec![0xa5u8; 1 << 20];
    let mut sent = 0;
    while sent < bytes {
        s.write_all(&chunk).await?;
        sent += chunk.len();
    }
    s.flush().await?;
    Ok(())
}

/// MiB/s of `bytes` written by a client and read by a server over loopback: TLS with a
/// PSK of `hash` (its suite), or plain TCP. Timed on the server from the end of its
/// handshake to the last byte.
async fn stream(bytes: usize, tls: Option<HashAlg>) -> Result<f64, Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let psk = tls.map(|h| Psk::new("bench", &[0x42; 32], h)).transpose()?;
    let server_psk = psk.clone();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        let (got, start) = match server_psk {
            Some(p) => {
                let mut table = PskTable::new();
                table.insert(p);
                let cfg = Arc::new(ServerConfig::new(Arc::new(table)));
                let s = tls_psk::accept(tcp, cfg).await?;
                let start = Instant::now();
                (drain(s, bytes).await?, start)
            }
            None => {
                let start = Instant::now();
                (drain(tcp, bytes).await?, start)
            }
        };
        Ok::<_, Error>((got, start))
    });
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    match psk {
        Some(p) => push(tls_psk::connect(tcp, ClientConfig::new(p)).await?, bytes).await?,
        None => push(tcp, bytes).await?,
    }
    let (got, start) = server.await??;
    assert_eq!(got, bytes, "bytes received");
    Ok(mib_per_s(got, start))
}

/// What the AES-GCM paths can use on this CPU (both libraries choose at run time): a run
/// on an AVX2-only machine says so instead of looking like one with AVX-512/VAES.
#[cfg(target_arch = "x86_64")]
fn aes_gcm_cpu_features() -> Vec<&'static str> {
    [
        ("aes", std::arch::is_x86_feature_detected!("aes")),
        (
            "pclmulqdq",
            std::arch::is_x86_feature_detected!("pclmulqdq"),
        ),
        ("avx2", std::arch::is_x86_feature_detected!("avx2")),
        ("vaes", std::arch::is_x86_feature_detected!("vaes")),
        (
            "vpclmulqdq",
            std::arch::is_x86_feature_detected!("vpclmulqdq"),
        ),
        ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
    ]
    .into_iter()
    .filter_map(|(name, has)| has.then_some(name))
    .collect()
}

#[cfg(not(target_arch = "x86_64"))]
fn aes_gcm_cpu_features() -> Vec<&'static str> {
    Vec::new()
}

fn main() -> Result<(), Error> {
    let rounds = env_u64("TLS_BENCH_ROUNDS", 5).max(1) as usize;
    let mib = env_u64("TLS_BENCH_MIB", 256).max(1) as usize;
    let records = (mib << 20) / RECORD;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let names = [
        "aead_ring_aes128gcm",
        "aead_rustcrypto_aes128gcm",
        "aead_ring_aes256gcm",
        "aead_rustcrypto_aes256gcm",
        "stream_tcp",
        "stream_tls_aes128gcm",
        "stream_tls_aes256gcm",
    ];
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        runs[0].push(ring_aead(&ring::aead::AES_128_GCM, records)?);
        runs[1].push(rustcrypto_aead::<aes_gcm::Aes128Gcm>(records)?);
        runs[2].push(ring_aead(&ring::aead::AES_256_GCM, records)?);
        runs[3].push(rustcrypto_aead::<aes_gcm::Aes256Gcm>(records)?);
        runs[4].push(rt.block_on(stream(mib << 20, None))?);
        runs[5].push(rt.block_on(stream(mib << 20, Some(HashAlg::Sha256)))?);
        runs[6].push(rt.block_on(stream(mib << 20, Some(HashAlg::Sha384)))?);
        eprintln!(
            "round {}: {}",
            round + 1,
            names
                .iter()
                .zip(&runs)
                .map(|(n, r)| format!("{n} {:.0}", r[round]))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let medians: Vec<f64> = runs.iter().cloned().map(median).collect();
    let mut results = serde_json::Map::new();
    for ((n, r), m) in names.iter().zip(&runs).zip(&medians) {
        results.insert(
            n.to_string(),
            json!({ "mib_per_s_median": m, "mib_per_s_rounds": r }),
        );
    }
    let ratios = json!({
        "aes128gcm_ring_over_rustcrypto": medians[0] / medians[1],
        "aes256gcm_ring_over_rustcrypto": medians[2] / medians[3],
        "stream_tls_aes128gcm_over_tcp": medians[5] / medians[4],
        "stream_tls_aes256gcm_over_tcp": medians[6] / medians[4],
    });
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default();
    let cpu_features = aes_gcm_cpu_features();
    eprintln!(
        "cpu: {cpu}; AES-GCM-relevant features: {}",
        cpu_features.join(" ")
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let report: Value = json!({
        "bench": "tls",
        "record_bytes": RECORD,
        "stream_bytes": mib << 20,
        "rounds": rounds,
        "cpu": cpu,
        "cpu_features": cpu_features,
        "load_after": load.trim(),
        "results": results,
        "ratios": ratios,
    });
    let text = serde_json::to_string_pretty(&report)?;
    println!("{text}");
    let out = match std::env::var_os("TLS_BENCH_OUT") {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
            std::fs::create_dir_all(&dir)?;
            dir.join("tls.json")
        }
    };
    std::fs::write(&out, &text)?;
    eprintln!("ratios: {ratios}");
    eprintln!("JSON: {}", out.display());
    Ok(())
}
