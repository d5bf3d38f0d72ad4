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
    // The cluster's failure predictions: every drive of the three storage nodes and the
    // volume's three members, all healthy.
    let predictions = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_ferrobay"))
            .args(["predictions", "--api", &api])
            .args(extra)
            .arg("--api-token-file")
            .arg(&token_path)
            .output()
            .expect("run ferrobay predictions");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    // Members are graded from the processor node's samples (one a second).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let table = loop {
        let table = predictions(&[]);
        let members = table.lines().filter(|l| l.contains("vol0 member")).count();
        if members == 3 || std::time::Instant::now() > deadline {
            break table;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert!(table.starts_with("NODE"), "{table}");
    for node in ["n1", "n2", "n3"] {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(node) && l.contains("storage") && l.contains(" ok ")),
            "{node} missing:\n{table}"
        );
    }
    let members = table.lines().filter(|l| l.contains("vol0 member")).count();
    assert_eq!(members, 3, "{table}");
    assert!(!table.contains("not asked"), "{table}");
    let n2: serde_json::Value =
        serde_json::from_str(&predictions(&["--node", "n2", "--json"])).expect("JSON");
    assert_eq!(n2[0]["node"], "n2", "{n2:#}");
    assert_eq!(n2[0]["drives"][0]["prediction"]["grade"], "ok", "{n2:#}");
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

/// `up --tls`: the volume is served over TLS to the configured host with the key file the
/// printed lines name (the key itself is never printed), the host in plain TCP is refused,
/// the CDC lists the TLS listener as a TLS entry;
/// the API answers over HTTPS with the printed CA and refuses plain HTTP; S3 is HTTPS.
#[test]
fn up_tls_is_secure_end_to_end() {
    use std::os::unix::fs::PermissionsExt as _;
    const TLS_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:5e1f0a7c-2241-4d11-9a3b-700155129e01";
    let dir = scratch_dir("up-tls");
    let data_dir = dir.path().join("data");
    let (port, tls_port) = (free_port(), free_port());
    let tls_port_s = tls_port.to_string();
    let mut up = Up::start_with(
        &data_dir,
        port,
        dir.path().join("up.log"),
        &["--tls", "--tls-port", &tls_port_s, "--host-nqn", TLS_HOST],
    );
    up.wait_connect_line();
    let out = up.stdout.join("\n");
    let tls_dir = data_dir.canonicalize().expect("data dir").join("tls");
    // Every file of DIR/tls is private; no key shows in what `up` prints.
    for e in std::fs::read_dir(&tls_dir).expect("tls dir") {
        let p = e.expect("entry").path();
        let mode = std::fs::metadata(&p).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", p.display());
    }
    let key = std::fs::read_to_string(tls_dir.join("host.psk")).expect("host.psk");
    let key = key.trim();
    let proc_key = std::fs::read_to_string(tls_dir.join("processor.psk")).expect("key");
    let full = up.log();
    for k in [key, proc_key.trim()] {
        assert!(!full.contains(k), "a key in the output:\n{full}");
    }
    // nvme check-tls-key --keydata="$(cat FILE)" --hostnqn=H --subsysnqn=NQN ... --insert
    let insert = out
        .lines()
        .find(|l| l.trim_start().starts_with("nvme check-tls-key "))
        .unwrap_or_else(|| panic!("no check-tls-key line:\n{out}"));
    let file = insert
        .split("$(cat ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .expect("key file in the line");
    assert_eq!(Path::new(file), tls_dir.join("host.psk"), "{insert}");
    assert!(
        insert.contains(&format!("--hostnqn={TLS_HOST}")),
        "{insert}"
    );
    let words: Vec<String> = up
        .stdout
        .iter()
        .find(|l| l.trim_start().starts_with("nvme connect ") && l.ends_with(" --tls"))
        .map(|l| l.split_whitespace().map(String::from).collect())
        .unwrap_or_else(|| panic!("no TLS connect line:\n{out}"));
    let c = parse_connect(&words);
    assert_eq!(c.port, tls_port, "{out}");
    assert!(
        words.iter().any(|w| w == &format!("--hostnqn={TLS_HOST}")),
        "{words:?}"
    );

    // Our initiator as that host: TLS with the key from the printed file, a block written
    // and read back; the same host in plain TCP is refused.
    let psk = nvme_proto::tls_key::ConfiguredPsk::parse(
        &std::fs::read_to_string(file).expect("read the printed key file"),
    )
    .expect("a configured PSK");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let host = HostIdentity::from_hostnqn(TLS_HOST).expect("host");
        let at: std::net::SocketAddr = format!("{}:{}", c.addr, c.port).parse().expect("addr");
        let opts = ConnectOptions {
            io_queues: 1,
            connect_timeout_ms: 5000,
            tls: Some(nvmf_host::TlsCredentials::new(psk)),
            ..ConnectOptions::default()
        };
        let ctrl = nvmf_host::Controller::connect(at, &c.nqn, &host, &opts)
            .await
            .expect("connect over TLS with the printed key file");
        let ns = ctrl.namespace(1).await.expect("namespace 1");
        let data = pattern(LEN_BYTES, 3);
        ns.write_at(OFFSET_BYTES, IoBuf::from_slice(&data), true)
            .await
            .expect("write over TLS");
        let back = ns
            .read_at(OFFSET_BYTES, IoBuf::new_zeroed(LEN_BYTES))
            .await
            .expect("read over TLS");
        assert!(back[..] == data[..], "data read back over TLS differs");
        ctrl.shutdown().await.expect("shutdown");
        let plain: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let plain_opts = ConnectOptions {
            io_queues: 1,
            connect_timeout_ms: 5000,
            ..ConnectOptions::default()
        };
        let refused = nvmf_host::Controller::connect(plain, &c.nqn, &host, &plain_opts).await;
        assert!(refused.is_err(), "the TLS host got in over plain TCP");
        // The central discovery controller lists the TLS listener as a TLS entry (what
        // `nvme connect-all --tls` picks), beside the plain one.
        let words = line_words(&up.stdout, "nvme discover ").expect("discover line");
        let cdc: std::net::SocketAddr = format!(
            "{}:{}",
            arg_after(&words, "-a").unwrap(),
            arg_after(&words, "-s").unwrap()
        )
        .parse()
        .expect("CDC address");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let entries = nvmf_host::discover(cdc, &host).await.expect("discover");
            let tls = entries
                .iter()
                .find(|e| e.subnqn == c.nqn && e.trsvcid == tls_port.to_string() && e.sectype == 2);
            if let Some(e) = tls {
                assert_eq!(e.treq & 3, 1, "secure channel required: {e:?}");
                assert!(
                    entries
                        .iter()
                        .any(|e| e.subnqn == c.nqn && e.trsvcid == port.to_string()),
                    "{entries:#?}"
                );
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no TLS entry in the CDC's log: {entries:#?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    });

    // The same host from the CLI: `ferrobay bench --tls-psk FILE` with the printed key
    // file writes and verifies over TLS; without the key it gets nowhere.
    let url = format!("nvme+tcp://{}:{}/{}/1", c.addr, c.port, c.nqn);
    let bench = |extra: &[&str]| {
        Command::new(ferrobay_bin())
            .args([
                "bench",
                "--target",
                &url,
                "--hostnqn",
                TLS_HOST,
                "--rw",
                "randwrite",
            ])
            .args(["--size", "1M", "--verify", "--json"])
            .args(extra)
            .output()
            .expect("run ferrobay bench")
    };
    let run = bench(&["--tls-psk", file]);
    assert!(run.status.success(), "{run:?}");
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).expect("bench JSON");
    assert_eq!(report["errors"], 0, "{report:#}");
    assert_eq!(report["verify"]["blocks_failed"], 0, "{report:#}");
    assert!(
        report["verify"]["blocks_checked"].as_u64() > Some(0),
        "{report:#}"
    );
    let without = bench(&[]);
    assert!(
        !without.status.success(),
        "no key, yet connected: {without:?}"
    );

    // The API: HTTPS with the printed CA; plain HTTP is refused.
    let ca = tls_dir.join("ca.pem");
    assert!(
        out.contains(&format!("CA certificate: {}", ca.display())),
        "{out}"
    );
    let api = out
        .lines()
        .find_map(|l| l.strip_prefix("API: https://"))
        .and_then(|l| l.split('/').next())
        .unwrap_or_else(|| panic!("no https API line:\n{out}"))
        .to_string();
    let token = data_dir.canonicalize().expect("dir").join("api-token");
    let status = |url: &str, ca: Option<&Path>| {
        let mut cmd = Command::new(ferrobay_bin());
        cmd.args(["volume", "status", "vol0", "--json", "--api", url])
            .arg("--api-token-file")
            .arg(&token)
            .env_remove("FERROBAY_CA_CERT");
        if let Some(ca) = ca {
            cmd.arg("--ca-cert").arg(ca);
        }
        cmd.output().expect("run ferrobay volume status")
    };
    let ok = status(&format!("https://{api}"), Some(&ca));
    assert!(ok.status.success(), "{ok:?}\n{}", up.log());
    let view: serde_json::Value = serde_json::from_slice(&ok.stdout).expect("status JSON");
    assert_eq!(view["record"]["name"], "vol0", "{view:#}");
    let plain = status(&format!("http://{api}"), None);
    assert!(!plain.status.success(), "plain HTTP answered: {plain:?}");
    let untrusted = status(&format!("https://{api}"), None);
    assert!(!untrusted.status.success(), "{untrusted:?}");
    // S3 over HTTPS, with the aws-cli line naming the CA.
    assert!(
        out.contains(&format!(
            "aws --endpoint-url https://127.0.0.1:{} --ca-bundle {} s3 mb s3://bucket",
            up.s3_port,
            ca.display()
        )),
        "{out}"
    );
    rt.block_on(async {
        let tls = httpapi::tls::ClientTls::from_ca_file(&ca).expect("CA");
        let s3 =
            httpapi::HttpClient::new(format!("https://127.0.0.1:{}", up.s3_port)).with_tls(tls);
        let (code, _) = s3.request("GET", "/", None).await.expect("S3 over HTTPS");
        assert_eq!(code, 403, "an unsigned request is refused by S3, over TLS");
        let plain = httpapi::HttpClient::new(format!("http://127.0.0.1:{}", up.s3_port));
        assert!(
            plain.request("GET", "/", None).await.is_err(),
            "S3 answered plain HTTP"
        );
    });
    let status = up.interrupt();
    assert!(status.success(), "exit {status}:\n{}", up.log());
}
