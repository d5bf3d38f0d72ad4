//! `ferrobay up` as a user runs it: start, wait for the `nvme connect` line, connect with
//! our own initiator to the printed NQN, write and read back, Ctrl-C (SIGINT): a clean
//! exit. Start again on the same data dir: the volume is reused and the data is there.

mod common;

use std::path::Path;
use std::process::Command;

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use common::up::{Up, arg_after};
use common::{ferrobay_bin, scratch_dir};
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl};

/// What the connect line says.
struct Connect {
    addr: String,
    port: u16,
    nqn: String,
}

/// `nvme connect -t tcp -a ADDR -s PORT -n NQN`.
fn parse_connect(words: &[String]) -> Connect {
    let line = words.join(" ");
    let after = |flag| arg_after(words, flag).unwrap_or_else(|| panic!("no {flag}: {line}"));
    Connect {
        addr: after("-a").to_string(),
        port: after("-s").parse().expect("port in connect line"),
        nqn: after("-n").to_string(),
    }
}

fn free_port() -> u16 {
    testkit::net::free_port().expect("free port")
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

const HOST_UUID: [u8; 16] = [
    0x5e, 0x1f, 0x0a, 0x7c, 0x22, 0x41, 0x4d, 0x11, 0x9a, 0x3b, 0x70, 0x01, 0x55, 0x12, 0x9e, 0x01,
];
/// Spans a stripe boundary (64 KiB stripe unit): parity is computed from two members.
const OFFSET_BYTES: u64 = 1 << 20;
const LEN_BYTES: usize = 192 << 10;

/// Connects to the volume, optionally writes the pattern, and reads it back.
fn write_and_check(c: &Connect, write: bool) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let url = NvmeTcpUrl::parse(&format!("nvme+tcp://{}:{}/{}/1", c.addr, c.port, c.nqn))
            .expect("url");
        let host = HostIdentity::from_uuid(HOST_UUID);
        let ctrl = url
            .connect(&host, &ConnectOptions::default())
            .await
            .expect("connect to the printed address and NQN");
        let ns = ctrl.namespace(1).await.expect("namespace 1");
        assert!(ns.info().size_bytes >= 64 << 20, "{:?}", ns.info());
        let data = pattern(LEN_BYTES, 7);
        if write {
            ns.write(
                OFFSET_BYTES,
                IoBuf::from_slice(&data),
                WriteFlags::default(),
            )
            .await
            .expect("write");
            ns.flush().await.expect("flush");
        }
        let back = ns
            .read(OFFSET_BYTES, IoBuf::new_zeroed(LEN_BYTES))
            .await
            .expect("read");
        assert!(back.as_slice() == data.as_slice(), "data read back differs");
        ctrl.shutdown().await.expect("controller shutdown");
    });
}

#[test]
fn up_serves_a_volume_and_keeps_its_data_across_restarts() {
    let dir = scratch_dir("up-cli");
    let data_dir = dir.path().join("data");

    let port = free_port();
    let mut up = Up::start(&data_dir, port, dir.path().join("up1.log"));
    let c = parse_connect(&up.wait_connect_line());
    assert_eq!(c.nqn, "nqn.2026-01.io.ferrobay:vol:vol0");
    assert_eq!((c.addr.as_str(), c.port), ("127.0.0.1", port));
    let out = up.stdout.join("\n");
    assert!(out.contains("(created)"), "{out}");
    write_and_check(&c, true);
    // A second `up` on the same data dir is refused before it touches anything.
    let out = Command::new(ferrobay_bin())
        .args(["up", "--data-dir"])
        .arg(&data_dir)
        .args(["--port", &free_port().to_string()])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run ferrobay up");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another process"), "{err}");
    let status = up.interrupt();
    assert!(status.success(), "exit {status}:\n{}", up.log());
    let log = up.log();
    assert!(log.contains("stopped cleanly"), "{log}");

    // Again, on another port: same volume, same data, nothing created.
    let port = free_port();
    let mut up = Up::start(&data_dir, port, dir.path().join("up2.log"));
    let c = parse_connect(&up.wait_connect_line());
    let out = up.stdout.join("\n");
    assert!(out.contains("(reused)"), "{out}\n{}", up.log());
    assert!(out.contains("--api"), "status hint missing:\n{out}");
    // The API needs the token `up` keeps (0600) and names.
    let token_path = data_dir.canonicalize().expect("data dir").join("api-token");
    assert!(
        out.contains(&format!("API token: {}", token_path.display())),
        "token line missing:\n{out}"
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&token_path)
        .expect("token file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let api = out
        .lines()
        .find_map(|l| l.strip_prefix("API: http://"))
        .and_then(|l| l.split('/').next())
        .expect("API line")
        .to_string();
    let status = |token: Option<&Path>| {
        let mut cmd = Command::new(ferrobay_bin());
        cmd.args(["volume", "status", "vol0", "--json", "--api", &api])
            .current_dir(dir.path())
            .env_remove("FERROBAY_API_TOKEN");
        if let Some(t) = token {
            cmd.arg("--api-token-file").arg(t);
        }
        cmd.output().expect("run ferrobay volume status")
    };
    let refused = status(None);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("missing bearer token"),
        "{refused:?}"
    );
    let shown = status(Some(&token_path));
    assert!(shown.status.success(), "{shown:?}");
    let view: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("status JSON");
    assert_eq!(view["record"]["name"], "vol0", "{view:#}");
    write_and_check(&c, false);
    let status = up.interrupt();
    assert!(status.success(), "exit {status}:\n{}", up.log());
}

#[test]
fn up_on_a_taken_port_says_so_in_one_line() {
    let dir = scratch_dir("up-port");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let out = Command::new(ferrobay_bin())
        .args(["up", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--port", &port.to_string()])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run ferrobay up");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with("ferrobay:"))
        .unwrap_or_else(|| panic!("no error line:\n{err}"));
    assert!(
        line.contains("already in use") && line.contains("--port"),
        "{line}"
    );
    // Nothing was started, so nothing was created.
    assert!(!dir.path().join("data").join("n1").exists());
}
