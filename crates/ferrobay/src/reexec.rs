//! A daemon becoming another binary (docs/upgrade.md): after its clean shutdown it
//! executes the new binary in place (same pid, same arguments, same environment), so a
//! supervisor or a test harness that started it sees one process throughout. If the new
//! binary then fails to start, it executes the previous one again.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set for the new binary: the binary it replaced, to go back to if it cannot start.
const UPGRADED_FROM_ENV: &str = "FERROBAY_UPGRADED_FROM";

/// Whether this daemon got as far as serving (from then on, an error is its own, not
/// the upgrade's).
static READY: AtomicBool = AtomicBool::new(false);

/// Why a daemon's main loop ended.
pub enum Ended {
    /// SIGINT/SIGTERM: exit.
    Stopped,
    /// `POST /api/v1/node/upgrade`: re-execute as this binary once stopped.
    Upgrade(release::UpgradeRequest),
}

/// Waits for the stop signal or an upgrade request.
pub async fn wait(
    stop: impl std::future::Future<Output = ()>,
    upgrade: &release::UpgradeSignal,
) -> Ended {
    tokio::select! {
        () = stop => Ended::Stopped,
        req = upgrade.requested() => Ended::Upgrade(req),
    }
}

/// Executes `binary` with this process's arguments; if that fails, executes this
/// binary again (the node comes back as it was). Returns only if both failed.
pub fn exec(binary: &Path) -> anyhow::Error {
    let previous = std::env::current_exe().ok();
    tracing::info!(binary = %binary.display(), "re-executing as the new binary");
    let e = command(binary, previous.as_deref()).exec();
    let Some(previous) = previous else {
        return anyhow::anyhow!("cannot execute {}: {e}", binary.display());
    };
    tracing::error!(
        "cannot execute {}: {e}; starting again as {}",
        binary.display(),
        previous.display()
    );
    let again = command(&previous, None).exec();
    anyhow::anyhow!(
        "cannot execute {}: {e}; nor {} again: {again}",
        binary.display(),
        previous.display()
    )
}

/// `binary` with this process's arguments and environment, the listening sockets handed
/// down, and `upgraded_from` (the binary to go back to) when there is one.
fn command(binary: &Path, upgraded_from: Option<&Path>) -> std::process::Command {
    let mut cmd = std::process::Command::new(binary);
    cmd.args(args());
    match upgraded_from {
        Some(p) => cmd.env(UPGRADED_FROM_ENV, p),
        None => cmd.env_remove(UPGRADED_FROM_ENV),
    };
    match release::sockets::handover_env() {
        Some(list) => cmd.env(release::sockets::LISTEN_FDS_ENV, list),
        None => cmd.env_remove(release::sockets::LISTEN_FDS_ENV),
    };
    cmd
}

/// The daemon serves: errors from now on are not the upgrade's.
pub fn mark_ready() {
    READY.store(true, Ordering::Release);
}

/// After an upgrade, a daemon that cannot start goes back to the binary it replaced
/// (which then starts as before); otherwise returns `e`.
pub fn fall_back(e: anyhow::Error) -> anyhow::Error {
    if READY.load(Ordering::Acquire) {
        return e;
    }
    let Some(previous) = std::env::var_os(UPGRADED_FROM_ENV).map(PathBuf::from) else {
        return e;
    };
    tracing::error!(
        "this binary cannot start after the upgrade ({e:#}); going back to {}",
        previous.display()
    );
    let err = command(&previous, None).exec();
    e.context(format!(
        "and going back to {} failed: {err}",
        previous.display()
    ))
}

/// The daemon's own arguments, as it was started.
fn args() -> Vec<OsString> {
    std::env::args_os().skip(1).collect()
}

/// At a daemon's start: takes part in socket hand-over (adopts what an upgrade handed
/// down) and logs which binary this one replaced.
pub fn daemon_started() {
    let inherited = release::sockets::enable_handover();
    if inherited > 0 {
        tracing::info!(
            sockets = inherited,
            "listening sockets handed down by the previous binary"
        );
    }
    log_upgraded();
}

fn log_upgraded() {
    if let Some(previous) = std::env::var_os(UPGRADED_FROM_ENV) {
        tracing::info!(
            from = %PathBuf::from(previous).display(),
            build = %release::BuildInfo::this().describe(),
            "started by an upgrade"
        );
    }
}
