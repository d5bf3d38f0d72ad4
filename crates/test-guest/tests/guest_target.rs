//! Harness self-test: a background guest runs the kernel's NVMe/TCP target
//! (nvmet-tcp) behind a QEMU host forward; a plain TCP client on the host
//! sends an ICReq and gets the ICResp. Later tests point our initiator at it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use test_guest::{GuestConfig, GuestError, spawn};

const NQN: &str = "nqn.2026-01.io.ferrobay.test:guest-target";
const JOB: &str = r#"
dev=$(nvmet_ramdisk 64) || { fail ramdisk; exit 1; }
check nvmet_setup nvmet_setup "$NQN" "$GUEST_ADDR" 4420 "$dev" || exit 1
ready nqn=$NQN port=4420 dev=$dev
host_sync stop
info "stopping the target"
"#;

#[test]
fn guest_nvmet_answers_icreq_on_forwarded_port() {
    let cfg = GuestConfig::new("selftest-guest-target", JOB)
        .env("NQN", NQN)
        .forward(4420)
        .timeout(Duration::from_secs(180));
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let ready = guest
        .wait_ready(Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ready.get("nqn"), Some(NQN));
    let port = guest.host_port(4420).expect("forwarded port");
    assert_ne!(port, 0);

    // A wait that runs out while the guest is alive says so, with the log.
    let err = guest
        .wait_for("not-a-sync-point", Duration::from_millis(300))
        .expect_err("nobody calls host_sync not-a-sync-point");
    assert!(matches!(err, GuestError::Timeout { .. }), "{err}");
    assert!(
        err.to_string().contains("READY nqn="),
        "log tail in the error: {err}"
    );

    // ICReq: CH type 0x00, flags 0, hlen 128, pdo 0, plen 128; PFV 0, HPDA 0,
    // digests off, MAXR2T 0 (0-based: 1).
    let mut icreq = [0u8; 128];
    icreq[2] = 128;
    icreq[4..8].copy_from_slice(&128u32.to_le_bytes());
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the forward");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    s.write_all(&icreq).expect("send ICReq");
    let mut resp = [0u8; 128];
    s.read_exact(&mut resp).unwrap_or_else(|e| {
        panic!(
            "reading the ICResp: {e}\n{}",
            guest.snapshot().diagnostics()
        )
    });
    assert_eq!(resp[0], 0x01, "PDU type ICResp");
    assert_eq!(resp[2], 128, "HLEN");
    assert_eq!(
        u32::from_le_bytes([resp[4], resp[5], resp[6], resp[7]]),
        128,
        "PLEN"
    );
    assert_eq!(u16::from_le_bytes([resp[8], resp[9]]), 0, "PFV");
    let maxh2cdata = u32::from_le_bytes([resp[12], resp[13], resp[14], resp[15]]);
    assert!(maxh2cdata >= 4096, "MAXH2CDATA {maxh2cdata}");
    drop(s);

    guest.release("stop").expect("release");
    let run = guest
        .finish(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(run.passed("nvmet_setup").is_some());
}
