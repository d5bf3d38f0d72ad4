//! `ferrobay s3 run` end to end: the boto3 suite (tests/s3/*.py, run by pytest) and the
//! aws CLI against a gateway process on SQLite, and two gateway processes sharing a
//! PostgreSQL index; the same suite and CLI session against the gateway `ferrobay up`
//! starts on its storage nodes' KV namespaces (a process, as a user runs it). Missing
//! Python packages, aws or PostgreSQL fail the test under FERROBAY_REQUIRE_ALL=1
//! (scripts/install-deps.sh installs them) and skip otherwise.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use objstore::testing::PgServer;
use testkit::prereq::missing as skip_or_fail;

const ACCESS_KEY: &str = "ferrobay-root";
const SECRET_KEY: &str = "ferrobay-root-secret";

/// A gateway and the key pair to use it with.
#[derive(Clone, Debug)]
struct Endpoint {
    url: String,
    access_key: String,
    secret_key: String,
}

impl Endpoint {
    fn root(url: &str) -> Endpoint {
        Endpoint {
            url: url.to_string(),
            access_key: ACCESS_KEY.into(),
            secret_key: SECRET_KEY.into(),
        }
    }
}

/// A `ferrobay s3 run` child process, killed on drop.
struct GatewayProcess {
    child: Child,
    endpoint: String,
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ferrobay() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferrobay"));
    c.env("FERROBAY_S3_ACCESS_KEY", ACCESS_KEY)
        .env("FERROBAY_S3_SECRET_KEY", SECRET_KEY);
    c
}

fn store_args(dir: &Path) -> Vec<String> {
    (1..=3)
        .flat_map(|i| {
            [
                "--store".to_string(),
                format!("s{i}={}", dir.join(format!("store{i}")).display()),
            ]
        })
        .collect()
}

fn start_gateway(dir: &Path, meta: &str, name: &str) -> GatewayProcess {
    start_gateway_with(dir, meta, name, &[], "http")
}

/// [`start_gateway`] with more arguments; the endpoint gets `scheme`.
fn start_gateway_with(
    dir: &Path,
    meta: &str,
    name: &str,
    extra: &[&std::ffi::OsStr],
    scheme: &str,
) -> GatewayProcess {
    let endpoints = dir.join(format!("{name}.json"));
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log file");
    let child = ferrobay()
        .args(["s3", "run", "--listen", "127.0.0.1:0", "--index", meta])
        .args(store_args(dir))
        .args(extra)
        .arg("--endpoints-file")
        .arg(&endpoints)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start ferrobay s3 run");
    let mut gw = GatewayProcess {
        child,
        endpoint: String::new(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(&endpoints)
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
            && let Some(addr) = v["s3"].as_str()
        {
            gw.endpoint = format!("{scheme}://{addr}");
            return gw;
        }
        if let Ok(Some(status)) = gw.child.try_wait() {
            let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
            panic!("ferrobay s3 run exited ({status}):\n{log}");
        }
        assert!(Instant::now() < deadline, "gateway did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn python_ready() -> Result<(), String> {
    let out = Command::new("python3")
        .args(["-c", "import boto3, pytest"])
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        return Err("python3 cannot import boto3 and pytest: run scripts/install-deps.sh".into());
    }
    Ok(())
}

fn aws_ready() -> Result<(), String> {
    match Command::new("aws").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err(
            "the aws CLI is not installed: run scripts/install-deps.sh (Debian package awscli)"
                .into(),
        ),
    }
}

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3")
}

/// `ferrobay s3 key add`: returns (access key, secret).
fn add_key(index: &str, access_key: &str) -> (String, String) {
    let out = ferrobay()
        .args([
            "s3",
            "key",
            "add",
            "--index",
            index,
            "--access-key",
            access_key,
        ])
        .output()
        .expect("ferrobay s3 key add");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    (field("AccessKeyId"), field("SecretAccessKey"))
}

/// The boto3 suite against `root`, with `alt` as the second user; `log` is the
/// gateway's log, shown when the suite fails.
fn run_boto3_suite(root: &Endpoint, alt: (String, String), log: &dyn Fn() -> String) {
    let out = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short"])
        .arg(suite_dir())
        .current_dir(suite_dir())
        .env("S3_ENDPOINT", &root.url)
        .env("S3_ACCESS_KEY", &root.access_key)
        .env("S3_SECRET_KEY", &root.secret_key)
        .env("S3_ALT_ACCESS_KEY", alt.0)
        .env("S3_ALT_SECRET_KEY", alt.1)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .expect("python3 -m pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or_default().to_string();
    println!("boto3 suite: {summary}");
    if !out.status.success() {
        let log = log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        panic!(
            "boto3 suite failed:\n{stdout}\n{}\ngateway log (last lines):\n{}",
            String::from_utf8_lossy(&out.stderr),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
}

#[test]
fn boto3_suite_against_the_gateway() {
    if let Err(why) = python_ready() {
        return skip_or_fail(&why);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = format!("sqlite:{}", dir.path().join("index.db").display());
    let gw = start_gateway(dir.path(), &meta, "gw");
    let alt = add_key(&meta, "ALTUSER");
    run_boto3_suite(&Endpoint::root(&gw.endpoint), alt, &|| {
        std::fs::read_to_string(dir.path().join("gw.log")).unwrap_or_default()
    });
}

fn aws(e: &Endpoint, args: &[&str], cwd: &Path) -> Output {
    Command::new("aws")
        .arg("--endpoint-url")
        .arg(&e.url)
        .args(args)
        .current_dir(cwd)
        .env("AWS_ACCESS_KEY_ID", &e.access_key)
        .env("AWS_SECRET_ACCESS_KEY", &e.secret_key)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .output()
        .expect("run aws")
}

fn aws_ok(endpoint: &Endpoint, args: &[&str], cwd: &Path) -> String {
    let out = aws(endpoint, args, cwd);
    assert!(
        out.status.success(),
        "aws {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

/// The aws CLI's everyday commands against one gateway: high-level `aws s3` (with its
/// multipart uploads above 8 MiB) and `aws s3api`.
fn aws_cli_session(a: &Endpoint, b: &Endpoint, work: &Path) {
    std::fs::create_dir_all(work.join("up/sub")).expect("mkdir");
    let big = pattern(20 << 20, 1);
    std::fs::write(work.join("up/big.bin"), &big).expect("write");
    std::fs::write(work.join("up/sub/small.txt"), b"small file\n").expect("write");
    aws_ok(a, &["s3", "mb", "s3://cli-bucket"], work);
    aws_ok(a, &["s3", "sync", "up", "s3://cli-bucket/data"], work);
    let ls = aws_ok(b, &["s3", "ls", "--recursive", "s3://cli-bucket"], work);
    assert!(
        ls.contains("data/big.bin") && ls.contains("data/sub/small.txt"),
        "{ls}"
    );
    assert!(ls.contains(&format!("{}", big.len())), "{ls}");
    aws_ok(
        b,
        &["s3", "cp", "s3://cli-bucket/data/big.bin", "big.out"],
        work,
    );
    assert_eq!(
        std::fs::read(work.join("big.out")).expect("read"),
        big,
        "bytes through aws s3 cp"
    );
    let head = aws_ok(
        b,
        &[
            "s3api",
            "head-object",
            "--bucket",
            "cli-bucket",
            "--key",
            "data/big.bin",
        ],
        work,
    );
    let v: serde_json::Value = serde_json::from_str(&head).expect("json");
    assert!(
        v["ETag"].as_str().expect("etag").contains('-'),
        "multipart ETag: {head}"
    );
    aws_ok(
        a,
        &[
            "s3api",
            "put-object",
            "--bucket",
            "cli-bucket",
            "--key",
            "c.txt",
            "--body",
            "up/sub/small.txt",
            "--checksum-algorithm",
            "SHA256",
        ],
        work,
    );
    let attrs = aws_ok(
        b,
        &[
            "s3api",
            "head-object",
            "--bucket",
            "cli-bucket",
            "--key",
            "c.txt",
            "--checksum-mode",
            "ENABLED",
        ],
        work,
    );
    assert!(attrs.contains("ChecksumSHA256"), "{attrs}");
    let url = aws_ok(
        a,
        &[
            "s3",
            "presign",
            "s3://cli-bucket/c.txt",
            "--expires-in",
            "300",
        ],
        work,
    );
    assert!(url.trim().starts_with("http://"), "{url}");
    let missing = aws(
        b,
        &[
            "s3api",
            "get-object",
            "--bucket",
            "cli-bucket",
            "--key",
            "nope",
            "out",
        ],
        work,
    );
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("NoSuchKey"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    aws_ok(a, &["s3", "rm", "--recursive", "s3://cli-bucket"], work);
    let ls = aws_ok(b, &["s3", "ls", "--recursive", "s3://cli-bucket"], work);
    assert!(ls.trim().is_empty(), "{ls}");
    aws_ok(b, &["s3", "rb", "s3://cli-bucket"], work);
}

#[test]
fn aws_cli_against_the_gateway() {
    if let Err(why) = aws_ready() {
        return skip_or_fail(&why);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = format!("sqlite:{}", dir.path().join("index.db").display());
    let gw = start_gateway(dir.path(), &meta, "gw");
    let e = Endpoint::root(&gw.endpoint);
    aws_cli_session(&e, &e, &dir.path().join("work"));
}

/// S3 over HTTPS with a certificate from `ferrobay gen-cert`: the aws CLI trusting the CA
/// (`--ca-bundle`) puts and gets an object byte for byte; without the CA it is refused.
#[test]
fn aws_cli_over_https() {
    if let Err(why) = aws_ready() {
        return skip_or_fail(&why);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let tls = dir.path().join("tls");
    let out = ferrobay()
        .args([
            "gen-cert",
            "--name",
            "127.0.0.1",
            "--name",
            "localhost",
            "--out-dir",
        ])
        .arg(&tls)
        .output()
        .expect("run gen-cert");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = format!("sqlite:{}", dir.path().join("index.db").display());
    let (cert, key) = (tls.join("cert.pem"), tls.join("key.pem"));
    let gw = start_gateway_with(
        dir.path(),
        &meta,
        "gw",
        &[
            "--tls-cert".as_ref(),
            cert.as_os_str(),
            "--tls-key".as_ref(),
            key.as_os_str(),
        ],
        "https",
    );
    let e = Endpoint::root(&gw.endpoint);
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).expect("mkdir");
    let data = pattern(3 << 20, 7);
    std::fs::write(work.join("obj.bin"), &data).expect("write");
    let ca = tls.join("ca.pem");
    let ca = ca.to_str().expect("utf-8 path");
    aws_ok(
        &e,
        &["--ca-bundle", ca, "s3", "mb", "s3://tls-bucket"],
        &work,
    );
    aws_ok(
        &e,
        &[
            "--ca-bundle",
            ca,
            "s3",
            "cp",
            "obj.bin",
            "s3://tls-bucket/obj.bin",
        ],
        &work,
    );
    aws_ok(
        &e,
        &[
            "--ca-bundle",
            ca,
            "s3",
            "cp",
            "s3://tls-bucket/obj.bin",
            "back.bin",
        ],
        &work,
    );
    assert_eq!(std::fs::read(work.join("back.bin")).expect("read"), data);
    // Without the CA: the certificate is not trusted.
    let out = aws(&e, &["s3", "ls", "s3://tls-bucket"], &work);
    assert!(!out.status.success(), "aws trusted an unknown CA");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("SSL") || err.contains("certificate"), "{err}");
    // The gateway still serves a trusting client.
    let ls = aws_ok(
        &e,
        &["--ca-bundle", ca, "s3", "ls", "s3://tls-bucket"],
        &work,
    );
    assert!(ls.contains("obj.bin"), "{ls}");
}

/// `ferrobay up --tls`: the aws CLI line it prints (`--ca-bundle DATA_DIR/tls/ca.pem`,
/// HTTPS endpoint) works as printed: a bucket, an object up and back byte for byte,
/// multipart included; without the CA the CLI refuses the certificate.
#[test]
fn aws_cli_against_ferrobay_up_tls() {
    if let Err(why) = aws_ready() {
        return skip_or_fail(&why);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let (_, mut up, e) = start_up_fresh(&data_dir, dir.path().join("up.log"), || {
        let tls_port = testkit::net::free_port().expect("port").to_string();
        vec!["--tls".into(), "--tls-port".into(), tls_port]
    });
    assert!(e.url.starts_with("https://"), "{}", up.log());
    let ca = data_dir
        .canonicalize()
        .expect("data dir")
        .join("tls/ca.pem");
    let ca = ca.to_str().expect("utf-8 path");
    let printed = up
        .stdout
        .iter()
        .find(|l| l.contains("aws --endpoint-url https://"))
        .unwrap_or_else(|| panic!("no aws line:\n{}", up.log()))
        .clone();
    assert!(printed.contains(&format!("--ca-bundle {ca}")), "{printed}");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).expect("mkdir");
    // Above the CLI's 8 MiB multipart threshold.
    let data = pattern(9 << 20, 5);
    std::fs::write(work.join("obj.bin"), &data).expect("write");
    let tls = |args: &[&str]| {
        let mut all = vec!["--ca-bundle", ca];
        all.extend_from_slice(args);
        aws_ok(&e, &all, &work)
    };
    tls(&["s3", "mb", "s3://up-tls"]);
    tls(&["s3", "cp", "obj.bin", "s3://up-tls/obj.bin"]);
    tls(&["s3", "cp", "s3://up-tls/obj.bin", "back.bin"]);
    assert_eq!(
        std::fs::read(work.join("back.bin")).expect("read"),
        data,
        "bytes through aws s3 cp over HTTPS"
    );
    let untrusted = aws(&e, &["s3", "ls", "s3://up-tls"], &work);
    assert!(!untrusted.status.success(), "aws trusted an unknown CA");
    let err = String::from_utf8_lossy(&untrusted.stderr);
    assert!(err.contains("SSL") || err.contains("certificate"), "{err}");
    tls(&["s3", "rm", "s3://up-tls/obj.bin"]);
    tls(&["s3", "rb", "s3://up-tls"]);
    assert!(up.interrupt().success(), "{}", up.log());
}

#[test]
fn two_gateways_share_a_postgresql_index() {
    if let Err(why) = aws_ready() {
        return skip_or_fail(&why);
    }
    let pg = match PgServer::start() {
        Ok(pg) => pg,
        Err(why) => return skip_or_fail(&why),
    };
    let url = pg.create_database().expect("database");
    let dir = tempfile::tempdir().expect("tempdir");
    let a = start_gateway(dir.path(), &url, "a");
    let b = start_gateway(dir.path(), &url, "b");
    // Written through one gateway, read and deleted through the other.
    aws_cli_session(
        &Endpoint::root(&a.endpoint),
        &Endpoint::root(&b.endpoint),
        &dir.path().join("work"),
    );
}

#[test]
fn bad_command_lines_get_one_line_reasons() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str], env_keys: bool| {
        let mut c = if env_keys {
            ferrobay()
        } else {
            Command::new(env!("CARGO_BIN_EXE_ferrobay"))
        };
        c.env_remove(if env_keys {
            "UNUSED"
        } else {
            "FERROBAY_S3_ACCESS_KEY"
        });
        c.args(args).output().expect("run")
    };
    let store = format!("s1={}", dir.path().join("s1").display());
    let cases: [(&[&str], bool, &str); 5] = [
        // --meta is the cluster's metadata store; the index has its own flag.
        (
            &[
                "s3",
                "run",
                "--listen",
                "127.0.0.1:0",
                "--index",
                "sqlite:/tmp/x.db",
                "--meta",
                "sqlite:/tmp/x.db",
            ],
            true,
            "give the object index with --index sqlite:/tmp/x.db",
        ),
        (
            &[
                "s3",
                "run",
                "--listen",
                "127.0.0.1:0",
                "--index",
                "mysql://x",
                "--store",
                &store,
            ],
            true,
            "--index mysql://x",
        ),
        (
            &[
                "s3",
                "run",
                "--listen",
                "127.0.0.1:0",
                "--index",
                "sqlite:/tmp/x.db",
                "--store",
                "nodir",
            ],
            true,
            "--store nodir",
        ),
        (
            &[
                "s3",
                "run",
                "--listen",
                "127.0.0.1:0",
                "--index",
                "sqlite:/tmp/x.db",
                "--store",
                &store,
                "--ec",
                "2",
            ],
            true,
            "--ec",
        ),
        (
            &[
                "s3",
                "run",
                "--listen",
                "127.0.0.1:0",
                "--index",
                "sqlite:/tmp/x.db",
                "--store",
                &store,
            ],
            false,
            "FERROBAY_S3_ACCESS_KEY",
        ),
    ];
    for (args, keys, want) in cases {
        let out = run(args, keys);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(want) && err.trim().lines().count() == 1,
            "{args:?}: {err}"
        );
    }
    // One store cannot hold a 2+1 stripe: refused with the reason.
    let meta = format!("sqlite:{}", dir.path().join("i.db").display());
    let out = run(
        &[
            "s3",
            "run",
            "--listen",
            "127.0.0.1:0",
            "--index",
            &meta,
            "--store",
            &store,
        ],
        true,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("failure domains"), "{err}");
}

/// `ferrobay up` on `data_dir` (NVMe/TCP and S3 ports given), ready; the S3 endpoint
/// and key pair it printed.
fn start_up(data_dir: &Path, ports: (u16, u16), log: PathBuf) -> (common::up::Up, Endpoint) {
    start_up_with(data_dir, ports, log, &[])
}

fn start_up_with(
    data_dir: &Path,
    ports: (u16, u16),
    log: PathBuf,
    extra: &[&str],
) -> (common::up::Up, Endpoint) {
    let mut up = common::up::Up::start_ports(data_dir, ports.0, ports.1, log, extra);
    up.wait_connect_line();
    let e = endpoint_of(&up);
    (up, e)
}

/// The S3 endpoint and key pair a ready `up` printed.
fn endpoint_of(up: &common::up::Up) -> Endpoint {
    let s3 = up.s3();
    assert_eq!(s3.region, "us-east-1");
    Endpoint {
        url: s3.endpoint,
        access_key: s3.access_key,
        secret_key: s3.secret_key,
    }
}

fn up_ports() -> (u16, u16) {
    let p = testkit::net::free_ports(2).expect("ports");
    (p[0], p[1])
}

/// [`start_up_with`] on fresh ports (NVMe/TCP, S3 and the ones `extra` names), into a
/// new `data_dir`. The ports were free a moment before `up` binds them, and another
/// test's outgoing connection may take one as its local port meanwhile: then `up` says
/// the port is in use and it runs again on new ports. Returns the ports it runs on.
fn start_up_fresh(
    data_dir: &Path,
    log: PathBuf,
    extra: impl Fn() -> Vec<String>,
) -> ((u16, u16), common::up::Up, Endpoint) {
    const TRIES: usize = 4;
    for attempt in 1..=TRIES {
        let _ = std::fs::remove_dir_all(data_dir);
        let ports = up_ports();
        let extra = extra();
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let mut up = common::up::Up::start_ports(data_dir, ports.0, ports.1, log.clone(), &extra);
        match up.wait_ready() {
            Ok(_) => {
                let e = endpoint_of(&up);
                return (ports, up, e);
            }
            Err(why) if why.contains("already in use") && attempt < TRIES => {
                eprintln!("ferrobay up: a port was taken meanwhile, again on new ports");
            }
            Err(why) => panic!("{why}"),
        }
    }
    unreachable!("the last try panics or returns")
}

/// The gateway `ferrobay up` starts (EC 2+1 on the KV namespaces of its three storage
/// nodes), driven by the whole boto3 suite.
#[test]
fn boto3_suite_against_ferrobay_up() {
    if let Err(why) = python_ready() {
        return skip_or_fail(&why);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let (_, mut up, root) = start_up_fresh(&data_dir, dir.path().join("up.log"), Vec::new);
    let index = format!("sqlite:{}", data_dir.join("s3/index.db").display());
    let alt = add_key(&index, "ALTUSER");
    run_boto3_suite(&root, alt, &|| up.log());
    assert!(up.interrupt().success(), "{}", up.log());
}

/// The aws CLI against `ferrobay up`'s gateway (put/get/list/delete, multipart, ranged
/// GET), then a restart on the same data dir: the same key pair, the pool reused, the
/// objects there with their bytes.
#[test]
fn aws_cli_against_ferrobay_up_and_its_restart() {
    if let Err(why) = aws_ready() {
        return skip_or_fail(&why);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let (ports, mut up, e) = start_up_fresh(&data_dir, dir.path().join("up1.log"), Vec::new);
    assert!(
        up.stdout
            .iter()
            .any(|l| l.starts_with("S3: ") && l.contains("(created)") && l.contains("EC 2+1")),
        "{}",
        up.log()
    );
    assert!(
        up.stdout
            .iter()
            .any(|l| l.contains("aws --endpoint-url") && l.contains(" s3 cp ")),
        "no aws s3 cp example:\n{}",
        up.log()
    );
    let work = dir.path().join("work");
    aws_cli_session(&e, &e, &work);

    // A multi-stripe object that stays, and a ranged GET of it.
    let keep = pattern(5 << 20, 9);
    std::fs::write(work.join("keep.bin"), &keep).expect("write");
    aws_ok(&e, &["s3", "mb", "s3://kept"], &work);
    aws_ok(&e, &["s3", "cp", "keep.bin", "s3://kept/keep.bin"], &work);
    let ranged = |e: &Endpoint, out: &str| {
        aws_ok(
            e,
            &[
                "s3api",
                "get-object",
                "--bucket",
                "kept",
                "--key",
                "keep.bin",
                "--range",
                "bytes=2097000-2099999",
                out,
            ],
            &work,
        );
        assert_eq!(
            std::fs::read(work.join(out)).expect("read"),
            &keep[2_097_000..2_100_000],
            "ranged GET across a stripe boundary"
        );
    };
    ranged(&e, "range1.out");
    assert!(up.interrupt().success(), "{}", up.log());

    let (mut up, e2) = start_up(&data_dir, ports, dir.path().join("up2.log"));
    assert_eq!(
        (&e2.access_key, &e2.secret_key),
        (&e.access_key, &e.secret_key),
        "the key pair is kept in the data dir"
    );
    assert!(
        up.stdout
            .iter()
            .any(|l| l.starts_with("S3: ") && l.contains("(reused)")),
        "{}",
        up.log()
    );
    aws_ok(&e2, &["s3", "cp", "s3://kept/keep.bin", "back.bin"], &work);
    assert_eq!(
        std::fs::read(work.join("back.bin")).expect("read"),
        keep,
        "the object after a restart"
    );
    ranged(&e2, "range2.out");
    aws_ok(&e2, &["s3", "rm", "s3://kept/keep.bin"], &work);
    aws_ok(&e2, &["s3", "rb", "s3://kept"], &work);
    assert!(up.interrupt().success(), "{}", up.log());
}
