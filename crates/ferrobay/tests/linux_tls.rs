//! NVMe/TCP over TLS between the Linux kernel's host and a storage node: the trixie guest
//! (kernel 6.12 with CONFIG_NVME_TCP_TLS, nvme-cli 2.13 with libnvme 1.13, tlshd from
//! ktls-utils 1.0.0, keyctl) against `ferrobay node run --tls-listen`, each host configured
//! with `ferrobay gen-tls-key` and `ferrobay node host allow --tls-psk FILE`. One boot runs
//! every case (tests/guest/tls.sh): tlshd runs with the `.nvme` keyring; `nvme
//! check-tls-key --insert` puts the derived TLS PSKs there under the identity the node
//! derives (version 0 and 1); `nvme connect --tls` with a SHA-256 key and either identity
//! connects and its data reads back with O_DIRECT; the host without TLS and a wrong key
//! are refused, the node logging one line for the wrong key and never a key; `nvme
//! connect-all` through the node's discovery controller picks the TLS listener's entry
//! (TREQ required, TSAS TLS 1.3) and connects with TLS unasked; a SHA-384
//! key is refused the way tlshd 1.0.0 gets it wrong (its binder is SHA-256, docs/security.md)
//! or, with a fixed tlshd, connects.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;
use std::time::Duration;

use common::{NodeProcess, scratch_dir};
use nvme_proto::tls_key::{ConfiguredPsk, Derivation};
use test_guest::{Flavour, GuestConfig, run_job};

const NQN: &str = "nqn.2026-01.io.ferrobay:n1:d0";
const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:7a7a7a7a-0000-4000-8000-00000000000a";
const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:7a7a7a7a-0000-4000-8000-00000000000b";
const HOST_C: &str = "nqn.2014-08.org.nvmexpress:uuid:7a7a7a7a-0000-4000-8000-00000000000c";
const HOST_W: &str = "nqn.2014-08.org.nvmexpress:uuid:7a7a7a7a-0000-4000-8000-00000000000e";
/// A refused connect must end this fast (the node answers with an alert or a Connect
/// status; a host waiting for a reply that never comes would take the kernel's timeout).
const REFUSAL_MAX_SECS: f64 = 20.0;

fn ferrobay(args: &[&str]) -> String {
    common::ferrobay_stdout(args).trim().to_string()
}

/// A new configured PSK, allowed for `host` (with the key in a file, as users do).
fn allow_new_key(dir: &Path, data: &Path, host: &str, hmac: &str) -> String {
    let key = ferrobay(&["gen-tls-key", "--hmac", hmac]);
    let file = dir.join(format!("{}.psk", &host[host.len() - 1..]));
    std::fs::write(&file, format!("{key}\n")).unwrap();
    ferrobay(&[
        "node",
        "host",
        "allow",
        "--data-dir",
        data.to_str().unwrap(),
        NQN,
        host,
        "--tls-psk",
        file.to_str().unwrap(),
    ]);
    key
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Every secret a key leads to: its interchange base64, and the retained and TLS PSKs
/// (both derivations, both identity versions) for `host`, in hex.
fn secrets(key: &str, host: &str) -> Vec<String> {
    let k = ConfiguredPsk::parse(key).unwrap();
    let mut out = vec![key.split(':').nth(2).unwrap().to_string()];
    for d in Derivation::ALL {
        out.push(hex(&k.retained_with(d, host)));
        for v in [0, 1] {
            out.push(hex(&k.tls_psk_with(d, v, host, NQN).unwrap().1));
        }
    }
    out
}

#[test]
fn linux_host_connects_over_tls_to_a_storage_node() {
    if let Some(why) = test_guest::unavailable_flavour(Flavour::Trixie) {
        testkit::prereq::missing(why);
        return;
    }
    let dir = scratch_dir("linux-tls");
    let data = dir.path().join("n1");
    let drive = format!("d0=file:{}:64M", dir.path().join("d0.img").display());
    let node = NodeProcess::start_with(
        "n1",
        &data,
        &[drive],
        (0, 0, 0),
        &["--tls-listen", "127.0.0.1:0"],
        &[],
    );
    let plain_port = common::Endpoints::port(&node.endpoints.nvme_tcp[0]);
    let tls_port = common::Endpoints::port(&node.endpoints.nvme_tcp[1]);
    let key_a = allow_new_key(dir.path(), &data, HOST_A, "1");
    let key_b = allow_new_key(dir.path(), &data, HOST_B, "2");
    let key_c = allow_new_key(dir.path(), &data, HOST_C, "1");
    let node_key_w = allow_new_key(dir.path(), &data, HOST_W, "1");
    // W's host has another key than the node's.
    let key_w = ferrobay(&["gen-tls-key", "--hmac", "1"]);
    // The identities nvme-cli must insert the keys under: what the node derives. Version
    // 1 carries a digest of the retained PSK, and nvme-cli 2.13's libnvme derives that
    // one the pre-RFC 8446 way (see nvme_proto::tls_key::Derivation).
    let identity = |key: &str, d, v, host| {
        ConfiguredPsk::parse(key)
            .unwrap()
            .tls_psk_with(d, v, host, NQN)
            .unwrap()
            .0
    };
    let id_a = identity(&key_a, Derivation::Rfc8446, 0, HOST_A);
    let id_b = identity(&key_b, Derivation::Rfc8446, 0, HOST_B);
    let id_c = identity(&key_c, Derivation::LibnvmeCompat, 1, HOST_C);
    assert_ne!(id_c, identity(&key_c, Derivation::Rfc8446, 1, HOST_C));

    let cfg = GuestConfig::new("linux-tls", include_str!("guest/tls.sh"))
        .trixie()
        .env("TLS_PORT", tls_port)
        .env("PLAIN_PORT", plain_port)
        .env("NQN", NQN)
        .env("HOST_A", HOST_A)
        .env("KEY_A", &key_a)
        .env("ID_A", &id_a)
        .env("HOST_B", HOST_B)
        .env("KEY_B", &key_b)
        .env("ID_B", &id_b)
        .env("HOST_C", HOST_C)
        .env("KEY_C", &key_c)
        .env("ID_C", &id_c)
        .env("HOST_W", HOST_W)
        .env("KEY_W", &key_w)
        .timeout(Duration::from_secs(300));
    let run = run_job(&cfg).unwrap_or_else(|e| panic!("{e}\nnode log:\n{}", node.log()));
    let log = node.log();
    for want in [
        "tlshd_running",
        "tlshd_keyring",
        "a_insert",
        "b_insert",
        "c_insert",
        "w_insert",
        "a_connect",
        "a_io",
        "a_io_small",
        "a_disconnect",
        "c_connect",
        "c_io",
        "c_io_small",
        "c_disconnect",
        "a_plain_refused",
        "w_wrong_key_refused",
        "a_again_connect",
        "a_again_io",
        "host_loopback",
        "connect_all_tls",
        "connect_all_io",
    ] {
        assert!(
            run.passed(want).is_some(),
            "missing PASS {want}\n{}\nnode log:\n{log}",
            run.diagnostics()
        );
    }
    assert!(run.ok(), "{}\nnode log:\n{log}", run.diagnostics());
    for refusal in ["a_plain_refused", "w_wrong_key_refused"] {
        let secs: f64 = run
            .passed(refusal)
            .unwrap()
            .get("secs")
            .unwrap()
            .parse()
            .unwrap();
        assert!(secs < REFUSAL_MAX_SECS, "{refusal} took {secs} s");
        eprintln!("{refusal}: refused in {secs:.2} s");
    }
    // One TLS handshake per queue (admin and I/O) of each connection, all by tlshd.
    let mut queues = 0;
    for case in [
        "a_connect",
        "c_connect",
        "a_again_connect",
        "connect_all_tls",
    ] {
        let r = run.passed(case).unwrap();
        queues += r
            .get("queues")
            .and_then(|q| q.parse::<u32>().ok())
            .unwrap_or(0);
        eprintln!(
            "{case}: TLS connect in {} s, key {}, {} queues (admin + I/O)",
            r.get("secs").unwrap_or("?"),
            r.get("tls_key").unwrap_or("?"),
            r.get("queues").unwrap_or("?")
        );
    }

    let ok: u32 = run.result("tls_handshakes_ok").unwrap().parse().unwrap();
    assert!(queues >= 8, "admin + I/O queues of 4 connections: {queues}");
    assert_eq!(
        ok,
        queues,
        "tlshd's successful handshakes\n{}",
        run.diagnostics()
    );
    eprintln!(
        "tlshd: {ok} handshakes succeeded, {} failed",
        run.result("tls_handshakes_failed").unwrap_or("?")
    );

    // The node: every queue of A and C authenticated with TLS (the admin queue and the
    // I/O queues each run a handshake); one line for the wrong key; the plain connect
    // refused; never a key.
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("TLS handshake refused"))
        .collect();
    let w_lines: Vec<&&str> = refused.iter().filter(|l| l.contains(HOST_W)).collect();
    assert_eq!(w_lines.len(), 1, "one line for the wrong key:\n{log}");
    assert!(
        w_lines[0].contains("(wrong key)") && w_lines[0].contains("decrypt_error"),
        "{}",
        w_lines[0]
    );
    assert!(
        !refused
            .iter()
            .any(|l| l.contains(HOST_A) || l.contains(HOST_C)),
        "A and C must not be refused a handshake:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("must connect through a TLS listener") && l.contains(HOST_A)),
        "A's plain connect is not logged:\n{log}"
    );
    // SHA-384: tlshd 1.0.0 offers the identity NVMe0R02 with a SHA-256 binder.
    if run.passed("b_refused").is_some() {
        let b: Vec<&&str> = refused.iter().filter(|l| l.contains(HOST_B)).collect();
        assert_eq!(b.len(), 1, "{log}");
        assert!(
            b[0].contains("binder of 32 bytes, the identity's hash makes 48"),
            "B refused for another reason than tlshd's SHA-256 binder: {}",
            b[0]
        );
        eprintln!("b: SHA-384 key refused (tlshd's binder is SHA-256)");
    } else {
        assert!(
            run.passed("b_connect").is_some() && run.passed("b_io").is_some(),
            "{}",
            run.diagnostics()
        );
        eprintln!("b: SHA-384 key connected");
    }
    for (key, host) in [
        (&key_a, HOST_A),
        (&key_b, HOST_B),
        (&key_c, HOST_C),
        (&key_w, HOST_W),
        (&node_key_w, HOST_W),
    ] {
        for s in secrets(key, host) {
            assert!(!log.contains(&s), "a key reached the node log:\n{log}");
            assert!(
                !run.log.contains(&s),
                "a key reached the guest's output (tlshd, nvme-cli)"
            );
        }
    }
}
