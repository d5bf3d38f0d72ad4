//! The fuzz entry (fuzz/fuzz_targets/tls_server.rs): arbitrary bytes against the server side.
//!
//! Input: byte 0 picks the start. Bit 0 set: a real ClientHello (from a client with the
//! server's PSK) is fed first; bit 1 set as well: the whole handshake is completed with that
//! client first. The rest is fed to the server in chunks whose lengths come from the input
//! (one length byte, then that many bytes), `process` after each. Nothing may panic; after an
//! error every call returns it again and nothing more is decrypted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::{ClientConfig, Psk, PskTable, RandomSource, ServerConfig};
use crate::conn::Connection;
use crate::hash::HashAlg;

/// Deterministic "randomness" so that runs are reproducible.
struct Counter(AtomicU64);

impl RandomSource for Counter {
    fn fill(&self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self
                .0
                .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
                .to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

fn psk() -> Option<Psk> {
    Psk::new(&b"fuzz-identity"[..], &[7u8; 32], HashAlg::Sha256).ok()
}

fn shuttle(from: &mut Connection, to: &mut Connection) {
    let out = from.outgoing().to_vec();
    from.consume_outgoing(out.len());
    let mut at = 0;
    while at < out.len() {
        let n = to.feed(&out[at..]);
        at += n;
        if to.process().is_err() || n == 0 {
            break;
        }
    }
}

pub fn server_bytes(data: &[u8]) {
    let Some(psk) = psk() else { return };
    let random: Arc<dyn RandomSource> = Arc::new(Counter(AtomicU64::new(1)));
    let mut table = PskTable::new();
    table.insert(psk.clone());
    let mut sc = ServerConfig::new(Arc::new(table));
    sc.random = Arc::clone(&random);
    let mut server = Connection::server(Arc::new(sc));
    let (mode, mut rest) = match data.split_first() {
        Some((m, r)) => (*m, r),
        None => (0, data),
    };
    if mode & 1 != 0 {
        let mut cc = ClientConfig::new(psk);
        cc.random = random;
        let Ok(mut client) = Connection::client(cc) else {
            return;
        };
        shuttle(&mut client, &mut server);
        if mode & 2 != 0 {
            shuttle(&mut server, &mut client);
            shuttle(&mut client, &mut server);
            if !server.is_handshaking() {
                let _ = client.write(b"hello");
                shuttle(&mut client, &mut server);
            }
        }
    }
    while let Some((len, tail)) = rest.split_first() {
        let n = (*len as usize).min(tail.len());
        let (chunk, after) = tail.split_at(n);
        server.feed(chunk);
        let first = server.process();
        if first.is_err() {
            assert_eq!(server.process(), first, "errors are sticky");
        }
        let mut sink = [0u8; 4096];
        while server.read(&mut sink) > 0 {}
        let out = server.outgoing().len();
        server.consume_outgoing(out);
        rest = after;
        if n == 0 {
            break;
        }
    }
}
