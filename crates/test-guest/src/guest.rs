//! Booting a guest, talking to it while it runs, and collecting the outcome.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::GuestConfig;
use crate::error::{GuestError, Result};
use crate::image::{GuestImage, find_qemu};
use crate::output::{Shared, Source, State, pump_lines};
use crate::qemu::{QemuArgs, RunFiles, spawn_tied_to_process};
use crate::record::{GuestRun, Record};
use crate::sync::{ACCEPT_POLL, reply, serve, valid_name};

/// How long `spawn` waits for the guest's `/init` to start (bounded by the
/// config's timeout). Generous: a busy CI machine under TCG is slow.
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How often waits re-check the state besides being notified.
const POLL: Duration = Duration::from_millis(100);
/// When a wait gives up early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// When the job ends or QEMU exits.
    JobEnd,
    /// Also when a FAIL line appears.
    FirstFail,
    /// Only when QEMU exits (for waits on the exit itself).
    Exit,
}

/// Attempts when QEMU cannot bind an auto-picked forward port (another
/// process took it between our probe and QEMU's bind).
const START_ATTEMPTS: usize = 3;
/// How long to let the readers drain after QEMU ended, before a snapshot.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Extra time `finish` gives the monitor to enforce the guest's own timeout.
const DEADLINE_GRACE: Duration = Duration::from_secs(3);

/// Returns a port that was free on 127.0.0.1 a moment ago (bind to port 0,
/// read it, release it).
pub fn free_port() -> Result<u16> {
    testkit::net::free_port().map_err(|e| GuestError::io("finding a free port on 127.0.0.1", e))
}

/// Boots a guest, runs its job to the end and powers it off.
///
/// Returns the run when the job exited with status 0 and printed no `FAIL`
/// line; otherwise [`GuestError::JobFailed`] (or `Timeout`/`Ended`) whose
/// message quotes the FAIL lines and the tail of the log.
pub fn run_job(cfg: &GuestConfig) -> Result<GuestRun> {
    spawn(cfg)?.finish(cfg.timeout)
}

/// Boots a guest in the background and returns once its `/init` runs. The
/// job runs on its own; use [`RunningGuest::wait_ready`],
/// [`RunningGuest::wait_for`] / [`RunningGuest::release`] to act in step with
/// it and [`RunningGuest::finish`] to collect the outcome. QEMU is killed when
/// the `RunningGuest` is dropped (also on panic), when the config's timeout is
/// reached, and when the test process dies.
pub fn spawn(cfg: &GuestConfig) -> Result<RunningGuest> {
    cfg.validate()?;
    let qemu = find_qemu()?;
    let image = GuestImage::ensure_flavour(cfg.flavour)?;
    let runs = image.runs_dir();
    std::fs::create_dir_all(&runs)
        .map_err(|e| GuestError::io(format!("creating {}", runs.display()), e))?;
    let auto_ports = cfg.host_forwards.iter().any(|(h, _)| *h == 0);
    let mut attempt = 1;
    loop {
        let forwards = resolve_forwards(&cfg.host_forwards)?;
        match start(cfg, image, &qemu, &runs, forwards) {
            Err(GuestError::Ended { run, .. })
                if auto_ports
                    && attempt < START_ATTEMPTS
                    && run.log.contains("qemu| ")
                    && run.log.contains("host forwarding") =>
            {
                attempt += 1;
            }
            other => return other,
        }
    }
}

fn resolve_forwards(wanted: &[(u16, u16)]) -> Result<Vec<(u16, u16)>> {
    // Hold every probe listener until all ports are picked, so that two auto
    // forwards never get the same port.
    let mut held = Vec::new();
    let mut out = Vec::new();
    for &(host, guest) in wanted {
        if host != 0 {
            out.push((host, guest));
            continue;
        }
        let l = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| GuestError::io("binding 127.0.0.1:0 to find a free port", e))?;
        let port = l
            .local_addr()
            .map_err(|e| GuestError::io("reading a bound port", e))?
            .port();
        held.push(l);
        out.push((port, guest));
    }
    Ok(out)
}

fn bind_local(what: &str) -> Result<(TcpListener, u16)> {
    let l = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| GuestError::io(format!("binding the {what} listener"), e))?;
    let port = l
        .local_addr()
        .map_err(|e| GuestError::io(format!("reading the {what} port"), e))?
        .port();
    l.set_nonblocking(true)
        .map_err(|e| GuestError::io(format!("making the {what} listener non-blocking"), e))?;
    Ok((l, port))
}

fn start(
    cfg: &GuestConfig,
    image: &GuestImage,
    qemu: &Path,
    runs: &Path,
    forwards: Vec<(u16, u16)>,
) -> Result<RunningGuest> {
    let files = RunFiles::new(runs, &cfg.name);
    let (sync_listener, sync_port) = bind_local("host_sync")?;
    let (job_listener, job_port) = bind_local("job channel")?;
    std::fs::write(&files.job, cfg.job_script(sync_port))
        .map_err(|e| GuestError::io(format!("writing {}", files.job.display()), e))?;
    let log_file = File::create(&files.log)
        .map_err(|e| GuestError::io(format!("creating {}", files.log.display()), e))?;
    let args = QemuArgs {
        image,
        cfg,
        forwards: &forwards,
        job_channel_port: job_port,
        job_file: &files.job,
        qemu,
    };
    let shared = Arc::new(Shared::new(&cfg.name, files.log.clone(), Some(log_file)));
    shared.push_line(
        Source::Host,
        &format!("run {}: {}", files.id, args.display()),
    );
    shared.push_line(
        Source::Host,
        &format!(
            "job {} (sync port {sync_port}, forwards {forwards:?})",
            files.job.display()
        ),
    );

    let mut cmd = args.command();
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = spawn_tied_to_process(cmd)
        .map_err(|e| GuestError::io(format!("starting {}", qemu.display()), e))?;
    let pid = child.id();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();

    let mut guest = RunningGuest {
        shared: Arc::clone(&shared),
        name: cfg.name.clone(),
        log_path: files.log,
        job_path: files.job,
        forwards,
        sync_port,
        pid,
        timeout: cfg.timeout,
        deadline: Instant::now() + cfg.timeout,
        threads: Vec::new(),
        monitor: None,
    };
    shared.lock().readers_open = 3;
    guest.monitor = Some(thread("monitor", {
        let shared = Arc::clone(&shared);
        let deadline = guest.deadline;
        move || monitor(&shared, child, deadline)
    })?);
    if let Some(out) = stdout {
        let s = Arc::clone(&shared);
        guest.threads.push(thread("console", move || {
            pump_lines(&s, Source::Console, out)
        })?);
    }
    if let Some(err) = stderr {
        let s = Arc::clone(&shared);
        guest.threads.push(thread("qemu-stderr", move || {
            pump_lines(&s, Source::Qemu, err)
        })?);
    }
    {
        let s = Arc::clone(&shared);
        guest.threads.push(thread("job-channel", move || {
            job_channel(&s, job_listener)
        })?);
    }
    {
        let s = Arc::clone(&shared);
        guest
            .threads
            .push(thread("sync", move || serve(s, sync_listener))?);
    }
    let boot = START_TIMEOUT.min(cfg.timeout);
    guest.wait_until(
        "the guest's /init to start (HARNESS_INIT)",
        boot,
        Until::JobEnd,
        |st| st.init_seen.then_some(()),
    )?;
    Ok(guest)
}

fn thread(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("test-guest-{name}"))
        .spawn(f)
        .map_err(|e| GuestError::io(format!("starting the {name} thread"), e))
}

/// Accepts QEMU's connection for ttyS1 and pumps it into the log.
fn job_channel(shared: &Shared, listener: TcpListener) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                pump_lines(shared, Source::Job, stream);
                return;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let st = shared.lock();
                if st.stop || st.exited.is_some() {
                    let mut st = st;
                    st.readers_open = st.readers_open.saturating_sub(1);
                    drop(st);
                    shared.cond.notify_all();
                    return;
                }
                drop(st);
                std::thread::sleep(ACCEPT_POLL);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                let mut st = shared.lock();
                st.push_line(Source::Host, &format!("job channel accept failed: {e}"));
                st.readers_open = st.readers_open.saturating_sub(1);
                drop(st);
                shared.cond.notify_all();
                return;
            }
        }
    }
}

/// Owns QEMU: reaps it when it exits, kills it at the deadline or on request.
fn monitor(shared: &Shared, mut child: Child, deadline: Instant) {
    let mut st = shared.lock();
    let how = loop {
        match child.try_wait() {
            Ok(Some(status)) => break format!("QEMU {status}"),
            Ok(None) => {}
            Err(e) => break format!("QEMU wait failed: {e}"),
        }
        let now = Instant::now();
        let why = if st.kill_requested {
            Some("killed by the harness".to_string())
        } else if now >= deadline {
            st.timed_out = true;
            Some("killed: the guest's timeout (GuestConfig::timeout) was reached".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            drop(st);
            let _ = child.kill();
            let _ = child.wait();
            st = shared.lock();
            break why;
        }
        st = shared.wait(st, POLL.min(deadline.saturating_duration_since(now)));
    };
    st.push_line(Source::Host, &format!("guest ended: {how}"));
    st.exited = Some(how);
    st.stop = true;
    // Guests parked in host_sync get EOF instead of hanging on.
    st.sync.arrived.values_mut().for_each(|a| a.stream = None);
    drop(st);
    shared.cond.notify_all();
}

/// A booted guest. Dropping it kills QEMU.
pub struct RunningGuest {
    shared: Arc<Shared>,
    name: String,
    log_path: PathBuf,
    job_path: PathBuf,
    forwards: Vec<(u16, u16)>,
    sync_port: u16,
    pid: u32,
    timeout: Duration,
    deadline: Instant,
    threads: Vec<JoinHandle<()>>,
    monitor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for RunningGuest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningGuest")
            .field("name", &self.name)
            .field("pid", &self.pid)
            .field("log_path", &self.log_path)
            .field("forwards", &self.forwards)
            .finish_non_exhaustive()
    }
}

impl RunningGuest {
    /// The run's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The per-run log file (written while the guest runs).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The job file handed to the guest.
    pub fn job_path(&self) -> &Path {
        &self.job_path
    }

    /// QEMU's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The host port (on 127.0.0.1) forwarded to `guest_port`.
    pub fn host_port(&self, guest_port: u16) -> Option<u16> {
        self.forwards
            .iter()
            .find(|(_, g)| *g == guest_port)
            .map(|(h, _)| *h)
    }

    /// Resolved `(host_port, guest_port)` forwards.
    pub fn forwards(&self) -> &[(u16, u16)] {
        &self.forwards
    }

    /// The host port `host_sync` connects to (10.0.2.2:PORT from the guest).
    pub fn sync_port(&self) -> u16 {
        self.sync_port
    }

    /// The run so far.
    pub fn snapshot(&self) -> GuestRun {
        self.shared.lock().snapshot()
    }

    /// Job-channel lines printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.shared.lock().job_lines.clone()
    }

    /// Waits for the job's first `READY` line (printed by the `ready` helper).
    /// Fails at once if a `FAIL` line comes first or the job ends.
    pub fn wait_ready(&self, timeout: Duration) -> Result<Record> {
        self.wait_until(
            "a READY line from the job",
            timeout,
            Until::FirstFail,
            |st| st.run.ready.first().cloned(),
        )
    }

    /// Waits for a `PASS name` line.
    pub fn wait_pass(&self, name: &str, timeout: Duration) -> Result<Record> {
        self.wait_until(&format!("PASS {name}"), timeout, Until::JobEnd, |st| {
            st.run.passes.iter().find(|r| r.name == name).cloned()
        })
    }

    /// Waits for a job-channel line (any line printed so far counts) for
    /// which `pred` is true, and returns it.
    pub fn wait_line(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Result<String> {
        self.wait_until(what, timeout, Until::JobEnd, |st| {
            st.job_lines.iter().find(|l| pred(l)).cloned()
        })
    }

    /// Waits until the guest reaches `host_sync NAME [MESSAGE]` and returns
    /// MESSAGE. The guest stays blocked until [`RunningGuest::release`].
    pub fn wait_for(&self, name: &str, timeout: Duration) -> Result<String> {
        if !valid_name(name) {
            return Err(GuestError::Config(format!("sync name {name:?}")));
        }
        self.wait_until(&format!("host_sync {name}"), timeout, Until::JobEnd, |st| {
            st.sync.arrived.get(name).map(|a| a.message.clone())
        })
    }

    /// Lets the guest blocked in `host_sync NAME` go on (`host_sync` prints
    /// nothing). May be called before the guest gets there.
    pub fn release(&self, name: &str) -> Result<()> {
        self.release_with(name, "")
    }

    /// Like [`RunningGuest::release`]; `host_sync NAME` prints `payload`
    /// (one line) in the guest.
    pub fn release_with(&self, name: &str, payload: &str) -> Result<()> {
        if !valid_name(name) || payload.contains('\n') {
            return Err(GuestError::Config(format!(
                "sync name {name:?} / payload {payload:?} (one line)"
            )));
        }
        let mut st = self.shared.lock();
        let stream = match st.sync.arrived.get_mut(name) {
            Some(a) => match a.stream.take() {
                Some(s) => s,
                None => {
                    return Err(GuestError::Config(format!(
                        "sync point {name} was already released (or the guest is gone)"
                    )));
                }
            },
            None => {
                if st
                    .sync
                    .released
                    .insert(name.to_string(), payload.to_string())
                    .is_some()
                {
                    return Err(GuestError::Config(format!(
                        "sync point {name} released twice"
                    )));
                }
                st.push_line(
                    Source::Host,
                    &format!("sync {name}: released before arrival"),
                );
                return Ok(());
            }
        };
        drop(st);
        reply(&self.shared, name, stream, payload);
        Ok(())
    }

    /// Waits (up to `timeout`, and never past the config's timeout) for the
    /// job to end and the guest to power off, then judges the run like
    /// [`run_job`]. On timeout QEMU is killed and the error carries the log.
    pub fn finish(mut self, timeout: Duration) -> Result<GuestRun> {
        let limit =
            timeout.min(self.deadline.saturating_duration_since(Instant::now()) + DEADLINE_GRACE);
        let waited = self.wait_until("the guest to power off", limit, Until::Exit, |st| {
            st.exited.as_ref().map(|_| ())
        });
        self.shutdown();
        let (run, timed_out) = {
            let st = self.shared.lock();
            (st.snapshot(), st.timed_out)
        };
        if timed_out {
            return Err(GuestError::Timeout {
                what: "the job to finish (GuestConfig::timeout)".into(),
                after: self.timeout,
                run: Box::new(run),
            });
        }
        match waited {
            Err(GuestError::Timeout { what, after, .. }) => Err(GuestError::Timeout {
                what,
                after,
                run: Box::new(run),
            }),
            Err(e) => Err(e),
            Ok(()) if run.ok() => Ok(run),
            Ok(()) => Err(GuestError::JobFailed { run: Box::new(run) }),
        }
    }

    /// Kills QEMU now and returns the run as it stands (not judged).
    pub fn kill(mut self) -> GuestRun {
        self.shutdown();
        self.shared.lock().snapshot()
    }

    /// Kills QEMU (if still running) and joins the helper threads.
    fn shutdown(&mut self) {
        {
            let mut st = self.shared.lock();
            st.kill_requested = true;
        }
        self.shared.cond.notify_all();
        if let Some(m) = self.monitor.take() {
            let _ = m.join();
        }
        // QEMU is gone: its pipes and sockets are closed, so the readers end.
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// The common wait loop: `pred` is checked on every change; the wait
    /// fails early as `until` says, or on timeout.
    fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        until: Until,
        mut pred: impl FnMut(&mut State) -> Option<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        loop {
            if let Some(v) = pred(&mut st) {
                return Ok(v);
            }
            let ended = match until {
                Until::Exit => st.exited.is_some(),
                Until::JobEnd => st.exited.is_some() || st.done,
                Until::FirstFail => st.exited.is_some() || st.done || !st.run.fails.is_empty(),
            };
            if ended {
                let what = if st.exited.is_none() && !st.done {
                    format!("{what} (a FAIL line came first)")
                } else {
                    what.to_string()
                };
                st = self.drained(st);
                if let Some(v) = pred(&mut st) {
                    return Ok(v);
                }
                return Err(GuestError::Ended {
                    what,
                    run: Box::new(st.snapshot()),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(GuestError::Timeout {
                    what: what.to_string(),
                    after: timeout,
                    run: Box::new(st.snapshot()),
                });
            }
            st = self
                .shared
                .wait(st, POLL.min(deadline.saturating_duration_since(now)));
        }
    }

    /// Once QEMU has exited, gives the readers a moment to reach EOF so that
    /// a snapshot has the whole log.
    fn drained<'a>(
        &'a self,
        mut st: std::sync::MutexGuard<'a, State>,
    ) -> std::sync::MutexGuard<'a, State> {
        let until = Instant::now() + DRAIN_TIMEOUT;
        while st.exited.is_some() && st.readers_open > 0 && Instant::now() < until {
            st = self.shared.wait(st, POLL);
        }
        st
    }
}

impl Drop for RunningGuest {
    fn drop(&mut self) {
        self.shutdown();
    }
}
