//! DH-HMAC-CHAP on the target: arbitrary bytes as a script of Authentication Send and
//! Receive operations (raw messages, well-formed negotiates, correctly computed replies
//! with chosen corruptions) against one queue's exchange state machine, and every
//! authentication message decoder. Nothing may panic (see
//! `nvmf_target::fuzz_auth_exchange` for the script's encoding).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    nvmf_target::fuzz_auth_exchange(data);
});
