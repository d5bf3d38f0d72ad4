//! HTTPS on a storage node's HTTP port as a user sets it up: `ferrobay gen-cert`, then
//! `ferrobay node run --tls-cert --tls-key`; the CLI reaches the node over https with
//! `--ca-cert` (or FERROBAY_CA_CERT), through `--api https://..` or the data dir; without
//! the CA, or over plain HTTP, it is refused with a one-line reason. Bad certificate files
//! stop `node run` with a reason naming the file.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{NodeProcess, ferrobay_bin, scratch_dir};

fn run(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(ferrobay_bin());
    c.args(args).env_remove("FERROBAY_CA_CERT");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run ferrobay")
}

fn ok(args: &[&str], env: &[(&str, &Path)]) -> String {
    let out = run(args, env);
    assert!(
        out.status.success(),
        "ferrobay {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The one line of a refused command.
fn refused(args: &[&str], env: &[(&str, &Path)]) -> String {
    let out = run(args, env);
    assert!(!out.status.success(), "ferrobay {args:?} succeeded");
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.starts_with("ferrobay: "), "{err}");
    err
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn node_api_over_https_with_the_ca_and_refused_without() {
    let dir = scratch_dir("https-node");
    let tls = dir.path().join("tls");
    ok(
        &[
            "gen-cert",
            "--out-dir",
            s(&tls),
            "--name",
            "127.0.0.1",
            "--name",
            "localhost",
        ],
        &[],
    );
    let (ca, cert, key) = (
        tls.join("ca.pem"),
        tls.join("cert.pem"),
        tls.join("key.pem"),
    );
    let data = dir.path().join("n1");
    let node = NodeProcess::start_with(
        "n1",
        &data,
        &["ram:64M".to_string()],
        (0, 0, 0),
        &["--tls-cert", s(&cert), "--tls-key", s(&key)],
        &[],
    );
    let http = node.endpoints.http.clone().unwrap();
    assert!(http.starts_with("https://127.0.0.1:"), "{http}");
    let port = http.rsplit(':').next().unwrap();
    let token = data.join("api-token");

    // Through the data dir (its endpoints name https) and through --api.
    let health = ok(
        &[
            "node",
            "health",
            "--data-dir",
            s(&data),
            "--ca-cert",
            s(&ca),
        ],
        &[],
    );
    assert!(!health.is_empty());
    let by_name = format!("https://localhost:{port}");
    let v: serde_json::Value = serde_json::from_str(&ok(
        &[
            "node",
            "ns",
            "list",
            "--api",
            &by_name,
            "--api-token-file",
            s(&token),
            "--json",
            "--ca-cert",
            s(&ca),
        ],
        &[],
    ))
    .unwrap();
    assert!(v.is_array() || v.is_object(), "{v}");
    // The CA from the environment; a bare ADDR:PORT then means https.
    let bare = format!("127.0.0.1:{port}");
    ok(
        &[
            "node",
            "health",
            "--api",
            &bare,
            "--api-token-file",
            s(&token),
        ],
        &[("FERROBAY_CA_CERT", &ca)],
    );

    // No CA: the certificate is not trusted, and the line says what to do.
    let e = refused(&["node", "health", "--data-dir", s(&data)], &[]);
    assert!(e.contains("--ca-cert"), "{e}");
    // Another cluster's CA.
    let other = dir.path().join("other");
    ok(
        &["gen-cert", "--out-dir", s(&other), "--name", "127.0.0.1"],
        &[],
    );
    let e = refused(
        &[
            "node",
            "health",
            "--data-dir",
            s(&data),
            "--ca-cert",
            s(&other.join("ca.pem")),
        ],
        &[],
    );
    assert!(e.contains("TLS"), "{e}");
    // Plain HTTP on the HTTPS port gets no answer.
    let plain = format!("http://127.0.0.1:{port}");
    refused(
        &[
            "node",
            "health",
            "--api",
            &plain,
            "--api-token-file",
            s(&token),
        ],
        &[],
    );
    // A --ca-cert that is no certificate.
    let e = refused(
        &[
            "node",
            "health",
            "--data-dir",
            s(&data),
            "--ca-cert",
            s(&token),
        ],
        &[],
    );
    assert!(
        e.contains("api-token") && e.contains("no certificate"),
        "{e}"
    );

    // The node kept serving through all of that.
    ok(
        &[
            "node",
            "health",
            "--data-dir",
            s(&data),
            "--ca-cert",
            s(&ca),
        ],
        &[],
    );
    // Renewal without a restart: another CA's certificate renamed over the files, then
    // SIGHUP; the node serves it at once (clients of the old CA are refused now).
    for f in ["cert.pem", "key.pem"] {
        let tmp = tls.join(format!("{f}.new"));
        std::fs::copy(other.join(f), &tmp).unwrap();
        std::fs::rename(&tmp, tls.join(f)).unwrap();
    }
    let hup = |pid: u32| {
        // Our own child, by pid.
        let st = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    };
    hup(node.child.id());
    let other_ca = other.join("ca.pem");
    let wait_log = |want: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !node.log().contains(want) {
            assert!(
                std::time::Instant::now() < deadline,
                "no {want:?} in the log:\n{}",
                node.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    wait_log("SIGHUP: TLS certificate reloaded");
    let health = ["node", "health", "--data-dir", s(&data), "--ca-cert"];
    ok(&[&health[..], &[s(&other_ca)]].concat(), &[]);
    refused(&[&health[..], &[s(&ca)]].concat(), &[]);
    // A bad file on SIGHUP keeps the certificate in use, and the node keeps running.
    std::fs::write(tls.join("cert.pem"), "-----BEGIN CERTIFICATE-----\nMIIB").unwrap();
    hup(node.child.id());
    wait_log("SIGHUP: TLS certificate not reloaded");
    ok(&[&health[..], &[s(&other_ca)]].concat(), &[]);

    let log = node.log();
    assert!(!log.contains("PRIVATE KEY"), "key material in the log");
}

#[test]
fn bad_certificate_files_stop_node_run_with_a_reason() {
    let dir = scratch_dir("https-bad");
    let tls = dir.path().join("tls");
    ok(
        &["gen-cert", "--out-dir", s(&tls), "--name", "127.0.0.1"],
        &[],
    );
    let data = dir.path().join("n1");
    let node_run = |cert: &Path, key: &Path| {
        refused(
            &[
                "node",
                "run",
                "--name",
                "n1",
                "--data-dir",
                s(&data),
                "--listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--drive",
                "ram:16M",
                "--tls-cert",
                s(cert),
                "--tls-key",
                s(key),
            ],
            &[],
        )
    };
    let e = node_run(&tls.join("cert.pem"), &tls.join("missing.pem"));
    assert!(
        e.contains("missing.pem") && e.contains("no such file"),
        "{e}"
    );
    let e = node_run(&tls.join("cert.pem"), &tls.join("ca.pem"));
    assert!(e.contains("no private key"), "{e}");
    let e = node_run(&tls.join("cert.pem"), &tls.join("ca-key.pem"));
    assert!(e.contains("does not match"), "{e}");
    // --tls-cert alone is a usage error.
    let out = run(
        &[
            "node",
            "run",
            "--name",
            "n1",
            "--data-dir",
            s(&data),
            "--tls-cert",
            s(&tls.join("cert.pem")),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
}
