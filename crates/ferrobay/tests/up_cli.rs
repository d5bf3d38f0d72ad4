//! `ferrobay up` as a user runs it: start, wait for the `nvme connect` line, connect with
//! our own initiator to the printed NQN, write and read back, Ctrl-C (SIGINT): a clean
//! exit. Start again on the same data dir: the volume is reused and the data is there.
//! Its central discovery controller moves off a taken port 8009 and says where.

mod common;

use std::path::Path;
use std::process::Command;

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use common::up::{Up, arg_after, line_words};
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
    // replace-member on a cluster volume goes to the owner through the API; what cannot
    // be done is refused in one line and changes nothing.
    let replace = |member: &str, node: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_ferrobay"))
            .args([
                "volume",
                "replace-member",
                "vol0",
                member,
                node,
                "--api",
                &api,
            ])
            .arg("--api-token-file")
            .arg(&token_path)
            .output()
            .expect("run ferrobay volume replace-member");
        assert!(!out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).trim().to_string()
    };
    assert_eq!(
        replace("7", "n1"),
        "ferrobay: volume vol0 has no member 7 (its members are 0..2)"
    );
    let same_domain = replace("1", "n1");
    assert!(
        same_domain.contains("n1 holds member 0 of volume vol0 already"),
        "{same_domain}"
    );
    let after = status(Some(&token_path));
    let after: serde_json::Value = serde_json::from_slice(&after.stdout).expect("status JSON");
    assert_eq!(
        after["record"], view["record"],
        "a refusal changed the record"
    );
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

/// Port 8009 taken (held here): `up` puts its central discovery controller on another
/// port and says so; the printed `nvme discover` line works: the volume is there for any
/// host, the drives only for the processor node.
#[test]
fn up_moves_the_cdc_off_a_taken_8009_and_says_so() {
    // 8009 must be taken when `up` starts: held here when free; otherwise someone else
    // (another process, or another test's `up`) holds it, and if it was let go just as
    // `up` started (no note printed), try again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let dir = scratch_dir("up-cdc");
    let (mut up, _held) = loop {
        let held = std::net::TcpListener::bind("127.0.0.1:8009").ok();
        let data_dir = dir.path().join("data");
        let mut up = Up::start(&data_dir, free_port(), dir.path().join("up.log"));
        up.wait_connect_line();
        if up
            .stdout
            .join("\n")
            .contains("Note: 127.0.0.1:8009 is in use")
        {
            break (up, held);
        }
        assert!(held.is_none(), "8009 held here, yet no note:\n{}", up.log());
        assert!(
            std::time::Instant::now() < deadline,
            "8009 was never taken when up started"
        );
        let status = up.interrupt();
        assert!(status.success(), "exit {status}:\n{}", up.log());
    };
    let out = up.stdout.join("\n");
    assert!(
        out.contains("Note: 127.0.0.1:8009 is in use") && out.contains("--cdc-port"),
        "{out}"
    );
    let discover = line_words(&up.stdout, "nvme discover ")
        .unwrap_or_else(|| panic!("no discover line:\n{out}"));
    let port: u16 = arg_after(&discover, "-s")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port: {out}"));
    assert_ne!(port, 8009);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cdc = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let subsystems = |hostnqn: &str| -> Vec<String> {
        let host = HostIdentity::from_hostnqn(hostnqn).expect("host");
        let mut v: Vec<String> = rt
            .block_on(nvmf_host::discover(cdc, &host))
            .unwrap_or_else(|e| panic!("discover {cdc}: {e}\n{}", up.log()))
            .into_iter()
            .filter(|e| e.subtype == 2)
            .map(|e| e.subnqn)
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        subsystems("nqn.2014-08.org.nvmexpress:uuid:5e1f0a7c-2241-4d11-9a3b-700155129e09"),
        ["nqn.2026-01.io.ferrobay:vol:vol0"]
    );
    assert_eq!(
        subsystems("nqn.2026-01.io.ferrobay:processor:p1"),
        [
            "nqn.2026-01.io.ferrobay:n1:d0",
            "nqn.2026-01.io.ferrobay:n2:d0",
            "nqn.2026-01.io.ferrobay:n3:d0",
            "nqn.2026-01.io.ferrobay:vol:vol0"
        ]
    );
    let status = up.interrupt();
    assert!(status.success(), "exit {status}:\n{}", up.log());
}
