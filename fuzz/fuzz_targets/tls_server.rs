//! TLS 1.3 PSK server (crates/tls-psk): arbitrary bytes as records from a client, optionally
//! after a real ClientHello or a whole real handshake (see `tls_psk::fuzz::server_bytes` for
//! the input's encoding). Nothing may panic; errors are final.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tls_psk::fuzz::server_bytes(data);
});
