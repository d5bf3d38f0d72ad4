//! Cluster processes on 127.0.0.1 as separate `ferrobay` daemons: the command lines of
//! `ferrobay node run --meta` and `ferrobay processor run` (the daemon handle that waits
//! for the endpoints file is `testkit::process::Daemon`). Shared by the CLI tests and
//! `benches/cluster.rs` (included there with `#[path]`, so it uses nothing from the rest
//! of `common`).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
#[allow(unused_imports)] // each includer uses part of it
pub use testkit::process::{Daemon, kill_if_running, run_cli, terminate_child};

/// (owner, epoch) of a `volume status --json` view once the owner published its status.
pub fn owner_of(view: &Value) -> Option<(String, u64)> {
    let owner = view.get("owner")?;
    let node = owner.get("node")?.as_str()?.to_string();
    let epoch = owner.get("epoch")?.as_u64()?;
    let status_owner = view.get("status")?.get("owner")?.as_str()?;
    (status_owner == node).then_some((node, epoch))
}

/// Polls `volume status` until `want` owns `volume` (with an epoch above `after_epoch`,
/// when given) and has published its status; returns that view. The error says who owns
/// it instead.
pub fn wait_owner(
    binary: &Path,
    meta_url: &str,
    volume: &str,
    want: &str,
    after_epoch: Option<u64>,
    timeout: Duration,
) -> Result<Value, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let out = run_cli(
            binary,
            &["volume", "status", volume, "--json", "--meta", meta_url],
        )?;
        let view: Value = serde_json::from_str(&out)
            .map_err(|e| format!("volume status: not JSON ({e}): {out}"))?;
        if let Some((node, epoch)) = owner_of(&view)
            && node == want
            && after_epoch.is_none_or(|a| epoch > a)
        {
            return Ok(view);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{want} does not own {volume} (epoch > {after_epoch:?}) after {timeout:?}: owner {}",
                view["owner"]
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `ferrobay node run --meta` on any free ports with one drive; it writes
/// `data_dir/endpoints.json` when it serves.
pub fn node_run_args(
    name: &str,
    meta_url: &str,
    lease_ttl_ms: Option<&str>,
    drive: &str,
    data_dir: &Path,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "node",
        "run",
        "--name",
        name,
        "--listen",
        "127.0.0.1:0",
        "--discovery-listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--meta",
        meta_url,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(ttl) = lease_ttl_ms {
        args.extend(["--lease-ttl-ms".to_string(), ttl.to_string()]);
    }
    args.extend(["--drive".to_string(), drive.to_string()]);
    args.extend(["--data-dir".to_string(), data_dir.display().to_string()]);
    args
}

/// `ferrobay processor run` on any free ports; it writes `endpoints_file` when it serves.
pub fn processor_run_args(
    name: &str,
    meta_url: &str,
    lease_ttl_ms: &str,
    endpoints_file: &Path,
) -> Vec<String> {
    [
        "processor",
        "run",
        "--name",
        name,
        "--listen",
        "127.0.0.1:0",
        "--api-listen",
        "127.0.0.1:0",
        "--meta",
        meta_url,
        "--lease-ttl-ms",
        lease_ttl_ms,
        "--endpoints-file",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([endpoints_file.display().to_string()])
    .collect()
}
