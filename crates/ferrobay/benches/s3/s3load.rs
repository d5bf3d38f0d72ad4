//! The load generator (`benches/s3load`, Go, minio-go): built once per run with
//! `go build`, run once per measurement. The servers' CPU time is sampled when it says
//! its measured phase starts and ends (lines on its stderr), so preparing and removing
//! objects is not counted.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// Latency percentiles of one run, ms.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Latency {
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
    pub(crate) mean: f64,
}

/// What s3load reports (its JSON).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct LoadReport {
    pub(crate) op: String,
    pub(crate) object_bytes: u64,
    pub(crate) concurrency: u32,
    pub(crate) duration_s: f64,
    pub(crate) ops: u64,
    pub(crate) errors: u64,
    #[serde(default)]
    pub(crate) first_error: Option<String>,
    pub(crate) bytes: u64,
    #[serde(default)]
    pub(crate) keys: u64,
    pub(crate) ops_per_s: f64,
    pub(crate) mib_per_s: f64,
    pub(crate) latency_ms: Latency,
    #[serde(default)]
    pub(crate) first_byte_ms: Option<Latency>,
}

/// The repository's `benches/s3load` directory.
fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/s3load")
}

/// `go build` of s3load into `out_dir`; the binary's path.
pub(crate) fn build(out_dir: &Path) -> anyhow::Result<PathBuf> {
    let bin = out_dir.join("s3load");
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(source_dir())
        .output()
        .context("run go build (is Go installed?)")?;
    if !out.status.success() {
        bail!(
            "go build of benches/s3load failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(bin)
}

/// One operation to measure.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) op: &'static str,
    pub(crate) object_bytes: u64,
    /// Objects uploaded before GET / LIST.
    pub(crate) objects: u32,
}

/// Where to send the load.
pub(crate) struct Target<'a> {
    pub(crate) endpoint: &'a str,
    pub(crate) access_key: &'a str,
    pub(crate) secret_key: &'a str,
}

/// Runs `case` against `target`; `sample` is called at the start and at the end of
/// the measured phase (the caller reads the servers' CPU time there).
pub(crate) fn run(
    bin: &Path,
    target: &Target<'_>,
    case: &Case,
    concurrency: u32,
    seconds: f64,
    mut sample: impl FnMut(),
) -> anyhow::Result<LoadReport> {
    let endpoint = target
        .endpoint
        .strip_prefix("http://")
        .unwrap_or(target.endpoint);
    let mut child = Command::new(bin)
        .args(["-endpoint", endpoint])
        .args(["-access-key", target.access_key])
        .args(["-secret-key", target.secret_key])
        .args(["-bucket", "bench"])
        .args(["-op", case.op])
        .args(["-size", &case.object_bytes.to_string()])
        .args(["-concurrency", &concurrency.to_string()])
        .args(["-duration", &format!("{}ms", (seconds * 1000.0) as u64)])
        .args(["-objects", &case.objects.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("start {}", bin.display()))?;
    let stderr = child.stderr.take().context("s3load stderr")?;
    let mut other = Vec::new();
    let mut samples = 0;
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        if line.starts_with("s3load: measure ") {
            sample();
            samples += 1;
        } else {
            other.push(line);
        }
    }
    let out = child.wait_with_output().context("wait for s3load")?;
    if !out.status.success() || samples != 2 {
        bail!(
            "s3load {} failed ({}): {}{}",
            case.name,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            other.join("\n")
        );
    }
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "s3load output is not its JSON: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}
