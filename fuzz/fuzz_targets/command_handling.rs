//! Arbitrary byte streams as one NVMe/TCP connection to a real target (an NVM namespace on
//! RAM and a Key Value namespace, controller already connected so that I/O queues can be
//! opened): PDU framing, admin and I/O command dispatch of both command sets. Nothing may
//! panic or hang; every malformed PDU must end the connection with a termination PDU
//! (checked inside `fuzz_one_connection`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    nvmf_target::fuzz_one_connection(data);
});
