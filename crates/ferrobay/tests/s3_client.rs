//! The Python client library (clients/python, package `ferrobay_s3`) by its own pytest
//! suites: the unit tests (routing, ejection and return, retry policy, transfers and the
//! dataset over fault-injecting fakes), and the integration tests against three
//! `ferrobay s3 run` processes sharing one PostgreSQL index and the same shard stores,
//! one of which is killed with SIGKILL under a mixed workload and restarted. The
//! integration suite runs against the package installed with pip (into a temp dir), so
//! the packaging is tested too. Missing python3 modules or PostgreSQL fail the tests
//! under FERROBAY_REQUIRE_ALL=1 (scripts/install-deps.sh installs them) and skip
//! otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use objstore::testing::PgServer;
use testkit::prereq::missing as skip_or_fail;

fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/python")
}

fn python_ready(modules: &str) -> Result<(), String> {
    let out = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "python3 cannot import {modules}: run scripts/install-deps.sh"
        ));
    }
    Ok(())
}

/// Runs pytest on `tests` (relative to clients/python) with `env`, its temp files
/// (gateway stores, downloads) in a temp dir removed afterwards; panics with its output
/// when it fails, skips or runs no test.
fn pytest(tests: &str, env: &[(&str, &str)]) {
    let basetemp = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new("python3");
    cmd.args([
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--tb=short",
        "-rs",
    ])
    .arg(format!(
        "--basetemp={}",
        basetemp.path().join("pytest").display()
    ))
    .arg(tests)
    .current_dir(client_dir())
    .env("AWS_EC2_METADATA_DISABLED", "true")
    .env("AWS_CONFIG_FILE", "/dev/null")
    .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("python3 -m pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or_default().to_string();
    println!("ferrobay_s3 {tests}: {summary}");
    // pytest exits 5 when it collected nothing: that is a failure here too.
    assert!(
        out.status.success() && !summary.contains("skipped"),
        "pytest {tests} failed (exit {:?}):\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn python_client_unit_tests() {
    if let Err(why) = python_ready("boto3, pytest") {
        return skip_or_fail(&why);
    }
    pytest("tests/unit", &[]);
}

/// The package is typed (py.typed): mypy --strict (settings in pyproject.toml) and
/// pyflakes find nothing.
#[test]
fn python_client_static_checks() {
    if let Err(why) = python_ready("mypy, pyflakes, boto3") {
        return skip_or_fail(&why);
    }
    for args in [&["-m", "mypy"][..], &["-m", "pyflakes", "src", "tests"][..]] {
        let out = Command::new("python3")
            .args(args)
            .current_dir(client_dir())
            .env("MYPY_CACHE_DIR", "/dev/null")
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "python3 {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("dir entry");
        let name = entry.file_name();
        if name == "__pycache__" || name.to_string_lossy().ends_with(".egg-info") {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

/// `pip install` of clients/python into `target` (offline: no build isolation, no
/// dependencies fetched; boto3 is already installed). Built from a copy, since
/// setuptools leaves build files next to the sources.
fn pip_install(target: &Path, scratch: &Path) {
    let source = scratch.join("ferrobay-s3");
    for part in ["pyproject.toml", "README.md"] {
        std::fs::create_dir_all(&source).expect("mkdir");
        std::fs::copy(client_dir().join(part), source.join(part)).expect("copy");
    }
    copy_tree(&client_dir().join("src"), &source.join("src"));
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--target",
        ])
        .arg(target)
        .arg(&source)
        .output()
        .expect("python3 -m pip install");
    assert!(
        out.status.success(),
        "pip install clients/python failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn python_client_against_three_gateways_one_killed() {
    if let Err(why) = python_ready("boto3, pytest, setuptools, wheel") {
        return skip_or_fail(&why);
    }
    let pg = match PgServer::start() {
        Ok(pg) => pg,
        Err(why) => return skip_or_fail(&why),
    };
    let meta = pg.create_database().expect("database");
    let installed = tempfile::tempdir().expect("tempdir");
    let scratch = tempfile::tempdir().expect("tempdir");
    pip_install(installed.path(), scratch.path());
    let installed_at = installed.path().to_string_lossy().to_string();
    pytest(
        "tests/integration",
        &[
            ("FERROBAY_BIN", env!("CARGO_BIN_EXE_ferrobay")),
            ("FERROBAY_S3_META", &meta),
            ("PYTHONPATH", &installed_at),
            ("FERROBAY_S3_INSTALLED_AT", &installed_at),
        ],
    );
}
