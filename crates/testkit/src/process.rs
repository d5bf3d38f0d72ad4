//! Child processes of a test: they die with it, and a daemon's log is at hand.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Asks the kernel to SIGKILL the child when the thread that spawned it ends, so that a
/// test or bench killed before its drops ran (a panic in another thread, Ctrl-C, kill -9)
/// leaves nothing running. Spawn from a thread that lives as long as the child should
/// (the main thread, or the test's thread). Survives `exec` (e.g. `ip netns exec`).
#[allow(unsafe_code)]
pub fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and only calls prctl(2),
    // which is async-signal-safe; it touches no memory or locks of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The CPUs this process may run on (its affinity mask, which a container's cpuset
/// narrows); empty if the kernel will not say.
#[allow(unsafe_code)]
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data (all zeroes is the empty set); sched_getaffinity
    // writes at most size_of::<cpu_set_t>() bytes into it, and CPU_ISSET reads inside it
    // for indices below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Runs the child on `cpus` only (sched_setaffinity before exec), as SPDK's `-m` / `-c`
/// core masks pin its processes, so benchmarks compare processes placed alike. An empty
/// list leaves the child unpinned; if no CPU of the list is allowed ([`allowed_cpus`]),
/// spawning fails (EINVAL).
#[allow(unsafe_code)]
pub fn pin_to_cpus(cmd: &mut Command, cpus: &[usize]) {
    use std::os::unix::process::CommandExt;
    // SAFETY: cpu_set_t is plain data (all zeroes is the empty set); CPU_SET writes only
    // inside it for an index below CPU_SETSIZE, which the filter ensures.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let mut any = false;
        for &cpu in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(cpu, &mut set);
            any = true;
        }
        any.then_some(set)
    };
    let Some(set) = set else { return };
    // SAFETY: the closure runs in the child between fork and exec and only calls
    // sched_setaffinity(2) on itself with a set built before the fork (no allocation).
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Runs `binary args` (a ferrobay command, `RUST_LOG=warn`, no stdin): its stdout, or an
/// error with the command, its exit status and output.
pub fn run_cli(binary: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(binary)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run ferrobay {args:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "ferrobay {} failed ({}): {stdout}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(stdout)
}

/// SIGTERM to our own `child` and wait up to `timeout` for its exit; None if it still
/// runs.
pub fn terminate_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    if let Ok(Some(s)) = child.try_wait() {
        return Some(s);
    }
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return None;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory; `pid` is our own child,
    // not yet reaped (try_wait above), so it names no other process.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILL and reap `child` if it still runs (for Drop: a test that panics leaves
/// nothing running).
pub fn kill_if_running(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A daemon child, stderr in `log`, killed on drop.
pub struct Daemon {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `binary args` with `RUST_LOG=rust_log`, stderr into `dir/<name>.log`;
    /// `configure` adjusts the command before the spawn (e.g. [`die_with_parent`]).
    pub fn spawn(
        binary: &Path,
        name: &str,
        dir: &Path,
        args: &[String],
        rust_log: &str,
        configure: impl FnOnce(&mut Command),
    ) -> std::io::Result<Daemon> {
        std::fs::create_dir_all(dir)?;
        let log = dir.join(format!("{name}.log"));
        let err = std::fs::File::create(&log)?;
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .env("RUST_LOG", rust_log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err);
        configure(&mut cmd);
        let child = cmd.spawn()?;
        Ok(Daemon {
            name: name.to_string(),
            child,
            log,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The whole log, headed by the daemon's name.
    pub fn log(&self) -> String {
        format!(
            "--- {} ---\n{}",
            self.name,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }

    /// The last `lines` lines of the log, headed by the daemon's name and log path.
    pub fn log_tail(&self, lines: usize) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = s.lines().collect();
        format!(
            "--- {} ({}), last lines:\n{}",
            self.name,
            self.log.display(),
            all[all.len().saturating_sub(lines)..].join("\n")
        )
    }

    /// Waits for a JSON file the daemon writes when it is ready. The error says why
    /// (exited, or not ready within `timeout`), without the log.
    pub fn wait_json(
        &mut self,
        path: &Path,
        timeout: Duration,
    ) -> Result<serde_json::Value, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(s) = std::fs::read_to_string(path)
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&s)
            {
                return Ok(v);
            }
            if let Ok(Some(s)) = self.child.try_wait() {
                return Err(format!("{} exited at start ({s})", self.name));
            }
            if Instant::now() > deadline {
                return Err(format!("{} not ready after {timeout:?}", self.name));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, as a power cut would.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait up to `timeout` for the exit; None if it still runs.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        terminate_child(&mut self.child, timeout)
    }

    /// SIGSTOP: the process freezes (its kernel still accepts TCP connections; nobody
    /// answers) until [`Daemon::resume`]. `false` if it is gone.
    pub fn pause(&mut self) -> bool {
        signal_child(&mut self.child, libc::SIGSTOP)
    }

    /// SIGCONT after [`Daemon::pause`]. `false` if it is gone.
    pub fn resume(&mut self) -> bool {
        signal_child(&mut self.child, libc::SIGCONT)
    }
}

/// Sends `sig` to our own `child` if it still runs.
fn signal_child(child: &mut Child, sig: libc::c_int) -> bool {
    if !matches!(child.try_wait(), Ok(None)) {
        return false;
    }
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return false;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory; `pid` is our own child,
    // not yet reaped (try_wait above), so it names no other process.
    #[allow(unsafe_code)]
    let r = unsafe { libc::kill(pid, sig) };
    r == 0
}

impl Drop for Daemon {
    fn drop(&mut self) {
        kill_if_running(&mut self.child);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_writes_its_log_and_stops_on_sigterm() {
        let dir = std::env::temp_dir().join(format!("testkit-daemon-{}", std::process::id()));
        let args = [
            "-c",
            "echo started >&2; echo '{\"ready\":1}' > \"$0\"; exec sleep 30",
        ];
        let ready = dir.join("ready.json");
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.insert(2, ready.display().to_string());
        let mut d = Daemon::spawn(
            Path::new("/bin/sh"),
            "sleeper",
            &dir,
            &args,
            "info",
            die_with_parent,
        )
        .unwrap();
        let v = d.wait_json(&ready, Duration::from_secs(10)).unwrap();
        assert_eq!(v["ready"], 1);
        assert!(d.log().contains("started"), "{}", d.log());
        assert!(d.log_tail(1).ends_with("started"), "{}", d.log_tail(1));
        let status = d
            .terminate(Duration::from_secs(10))
            .expect("exits on SIGTERM");
        assert!(!status.success());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn wait_json_says_when_the_daemon_exited() {
        let dir = std::env::temp_dir().join(format!("testkit-exit-{}", std::process::id()));
        let mut d = Daemon::spawn(
            Path::new("/bin/sh"),
            "quitter",
            &dir,
            &["-c".into(), "exit 3".into()],
            "info",
            |_| {},
        )
        .unwrap();
        let e = d
            .wait_json(&dir.join("never.json"), Duration::from_secs(10))
            .unwrap_err();
        assert!(e.contains("quitter exited at start"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
