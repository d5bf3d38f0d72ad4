//! The fuzzing entry point survives hand-picked and mutated inputs, and a well-formed
//! session fed through it gets exactly the expected answers.
//! `FUZZ_CASES=N` runs more mutations.

use nvmf_target::{
    fuzz_auth_exchange, fuzz_one_connection, fuzz_seed_admin_session, fuzz_seed_io_session,
    fuzz_seed_kv_session,
};
use proptest::prelude::*;

#[test]
fn fixed_inputs() {
    assert_eq!(fuzz_one_connection(&[]), 0);
    fuzz_one_connection(&[0u8; 7]);
    fuzz_one_connection(&[0xFF; 300]);
    let s = fuzz_seed_admin_session();
    // ICResp, Connect and Property Set responses, Identify data (C2HData header + 4096)
    // and its response.
    assert_eq!(fuzz_one_connection(&s), 128 + 24 + 24 + 24 + 4096 + 24);
    let io = fuzz_seed_io_session();
    // ICResp, Connect, write response, read data + response, and the R2T of the last write.
    assert_eq!(
        fuzz_one_connection(&io),
        128 + 24 + 24 + (24 + 512) + 24 + 24
    );
    let kv = fuzz_seed_kv_session();
    // ICResp, Connect; Store; Retrieve data (512) + response; Exist; List data (the
    // host's 256 bytes) + response; Delete; Retrieve of the deleted key (no data).
    assert_eq!(
        fuzz_one_connection(&kv),
        128 + 24 + 24 + (24 + 512 + 24) + 24 + (24 + 256 + 24) + 24 + 24
    );
    for cut in [1, 8, 100, 128, 200, s.len() - 1] {
        fuzz_one_connection(&kv[..cut.min(kv.len())]);
        fuzz_one_connection(&s[..cut]);
        fuzz_one_connection(&io[..cut.min(io.len())]);
    }
}

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]
    #[test]
    fn mutated_sessions(
        seed in 0u8..3,
        flips in proptest::collection::vec((0usize..2000, 0u8..8), 0..4),
        tail in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut s = match seed {
            0 => fuzz_seed_admin_session(),
            1 => fuzz_seed_io_session(),
            _ => fuzz_seed_kv_session(),
        };
        for (at, bit) in flips {
            if let Some(b) = s.get_mut(at) {
                *b ^= 1 << bit;
            }
        }
        s.extend(tail);
        fuzz_one_connection(&s);
    }
}

/// The seeds of the `command_handling` fuzz target in `fuzz/corpus/command_handling` are
/// these sessions; regenerate them with
/// `FERROBAY_WRITE_FUZZ_CORPUS=1 cargo test -p nvmf-target --test fuzz_entry`.
#[test]
fn fuzz_corpus_seeds_match() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus/command_handling");
    let write = std::env::var_os("FERROBAY_WRITE_FUZZ_CORPUS").is_some();
    for (name, bytes) in [
        ("seed-admin-session", nvmf_target::fuzz_seed_admin_session()),
        ("seed-io-session", nvmf_target::fuzz_seed_io_session()),
        ("seed-kv-session", nvmf_target::fuzz_seed_kv_session()),
    ] {
        let path = dir.join(name);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (regenerate with FERROBAY_WRITE_FUZZ_CORPUS=1)",
                path.display()
            )
        });
        assert!(on_disk == bytes, "{name} differs from the generated seed");
        assert!(
            nvmf_target::fuzz_one_connection(&bytes) > 0,
            "{name}: the target answers the seed session"
        );
    }
}

/// The DH-HMAC-CHAP exchange's entry point: a scripted good exchange authenticates (null
/// group and ffdhe2048, one and both directions), bad ones do not, and arbitrary inputs
/// never panic.
#[test]
fn auth_exchange_entry() {
    assert_eq!(fuzz_auth_exchange(&[]), 0);
    // Negotiate (T_ID 7, SHA-256, null), Receive, Reply, Receive (Success1).
    let good = [0u8, 2, 7, 1, 0, 1, 0, 16, 3, 0, 1, 0, 16];
    assert!(fuzz_auth_exchange(&good) > 0);
    let ffdhe = [0u8, 2, 7, 1, 1, 1, 0, 16, 3, 0, 1, 0, 16];
    assert!(fuzz_auth_exchange(&ffdhe) > 0);
    // Bidirectional (controller secret, C2), then Success2.
    let bidi = [1u8, 2, 7, 3, 1, 1, 0, 16, 3, 1, 1, 0, 16, 4];
    assert!(fuzz_auth_exchange(&bidi) > 0);
    // Secure channel concatenation (config: concat, SC_C NEWTLSPSK): ffdhe2048, a C2 with
    // S2 = 0; without SC_C, or over TLS, it is a mismatch.
    let concat = [6u8, 2, 7, 1, 1, 1, 0, 16, 3, 8, 1, 0, 16];
    assert!(fuzz_auth_exchange(&concat) > 0);
    for cfg in [2u8, 6 | 16] {
        let mut bad = concat;
        bad[0] = cfg;
        assert_eq!(fuzz_auth_exchange(&bad), 0, "config {cfg}");
    }
    // Corrupted response, wrong T_ID, bidirectional without a controller secret.
    for f in [2u8, 4, 1] {
        let bad = [0u8, 2, 7, 1, 0, 1, 0, 16, 3, f, 1, 0, 16, 4];
        assert_eq!(fuzz_auth_exchange(&bad), 0, "flags {f}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]
    #[test]
    fn auth_exchange_survives_anything(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        fuzz_auth_exchange(&data);
    }
}
