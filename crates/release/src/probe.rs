//! What another binary is: runs `BINARY version --json` and reads its [`BuildInfo`].

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::BuildInfo;

/// How long `BINARY version --json` may take.
const PROBE_TIMEOUT_MS: u64 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{}: no such file", .0.display())]
    NotFound(PathBuf),
    #[error("{}: not an executable file", .0.display())]
    NotExecutable(PathBuf),
    #[error("{}: cannot run it: {reason}", path.display())]
    CannotRun { path: PathBuf, reason: String },
    #[error("{}: `version --json` did not answer within {timeout_ms} ms", path.display())]
    Timeout { path: PathBuf, timeout_ms: u64 },
    #[error("{}: `version --json` failed ({status}): {stderr}", path.display())]
    Failed {
        path: PathBuf,
        status: String,
        stderr: String,
    },
    #[error("{}: not a ferrobay binary (`version --json` printed {printed:?})", path.display())]
    NotFerrobay { path: PathBuf, printed: String },
}

/// Runs `binary version --json` and parses what it prints.
pub fn probe(binary: &Path) -> Result<BuildInfo, ProbeError> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = binary.to_path_buf();
    let meta = std::fs::metadata(binary).map_err(|_| ProbeError::NotFound(path.clone()))?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(ProbeError::NotExecutable(path));
    }
    let mut child = spawn_version(binary).map_err(|e| ProbeError::CannotRun {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    let deadline = Instant::now() + Duration::from_millis(PROBE_TIMEOUT_MS);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProbeError::Timeout {
                    path,
                    timeout_ms: PROBE_TIMEOUT_MS,
                });
            }
            Err(e) => {
                return Err(ProbeError::CannotRun {
                    path,
                    reason: e.to_string(),
                });
            }
        }
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut stdout);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut stderr);
    }
    if !status.success() {
        return Err(ProbeError::Failed {
            path,
            status: status.to_string(),
            stderr: first_line(&stderr),
        });
    }
    serde_json::from_str::<BuildInfo>(stdout.trim())
        .ok()
        .filter(|b| b.oldest_protocol >= 1 && b.oldest_protocol <= b.protocol)
        .ok_or_else(|| ProbeError::NotFerrobay {
            path,
            printed: first_line(&stdout),
        })
}

/// Starts `binary version --json`. A binary just written may still be open for writing
/// in a child some other thread is forking (ETXTBSY until that child executes): tried
/// again for a moment.
fn spawn_version(binary: &Path) -> std::io::Result<std::process::Child> {
    const TRIES: u32 = 50;
    let mut tries = 0;
    loop {
        let started = Command::new(binary)
            .args(["version", "--json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match started {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < TRIES => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("").trim();
    line.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn reads_what_a_binary_says_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let b = script(
            dir.path(),
            "new",
            r#"[ "$1 $2" = "version --json" ] && echo '{"version":"0.2.0","protocol":2,"oldest_protocol":1}'"#,
        );
        let info = probe(&b).unwrap();
        assert_eq!(
            info,
            BuildInfo {
                version: "0.2.0".into(),
                protocol: 2,
                oldest_protocol: 1
            }
        );
    }

    #[test]
    fn says_why_a_file_is_not_a_ferrobay_binary() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        assert!(matches!(probe(&missing), Err(ProbeError::NotFound(_))));
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "x").unwrap();
        assert!(matches!(probe(&plain), Err(ProbeError::NotExecutable(_))));
        let other = script(dir.path(), "other", "echo hello");
        let e = probe(&other).unwrap_err();
        assert!(e.to_string().contains("not a ferrobay binary"), "{e}");
        let failing = script(dir.path(), "failing", "echo broken >&2; exit 3");
        let e = probe(&failing).unwrap_err();
        assert!(e.to_string().contains("broken"), "{e}");
        let bad_range = script(
            dir.path(),
            "bad",
            r#"echo '{"version":"x","protocol":1,"oldest_protocol":2}'"#,
        );
        assert!(matches!(
            probe(&bad_range),
            Err(ProbeError::NotFerrobay { .. })
        ));
    }
}
