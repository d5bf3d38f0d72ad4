//! State shared between a guest's helper threads and the test: the merged log,
//! parsed records, sync points and how QEMU ended. One mutex, one condvar:
//! every change notifies all waiters.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::record::{GuestRun, Line, classify};

/// The in-memory log stops growing past this (the file keeps a bit more); a
/// guest printing in a loop must not eat the host's memory.
const MAX_LOG_BYTES: usize = 32 << 20;
const MAX_FILE_BYTES: u64 = 128 << 20;
/// Longest line kept; longer ones are cut.
const MAX_LINE_BYTES: usize = 64 << 10;
/// Most sync points a guest may have waiting at once.
pub(crate) const MAX_SYNC_ARRIVALS: usize = 1024;

/// Where a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// ttyS1: the job's own output (records).
    Job,
    /// ttyS0: the kernel console.
    Console,
    /// QEMU's stderr.
    Qemu,
    /// The harness itself.
    Host,
}

/// A guest that reached `host_sync NAME MESSAGE`.
pub(crate) struct Arrival {
    pub message: String,
    /// The guest's connection, until it is released.
    pub stream: Option<TcpStream>,
}

#[derive(Default)]
pub(crate) struct SyncState {
    pub arrived: BTreeMap<String, Arrival>,
    /// Payloads released before the guest arrived.
    pub released: BTreeMap<String, String>,
}

pub(crate) struct State {
    pub run: GuestRun,
    pub started: Instant,
    file: Option<File>,
    file_bytes: u64,
    pub job_lines: Vec<String>,
    pub init_seen: bool,
    pub done: bool,
    /// How QEMU ended, once it has.
    pub exited: Option<String>,
    /// Reader threads that have not reached EOF yet.
    pub readers_open: u32,
    /// Asks the monitor thread to kill QEMU.
    pub kill_requested: bool,
    /// QEMU was killed because the guest's timeout was reached.
    pub timed_out: bool,
    /// Tells the accept loops to stop.
    pub stop: bool,
    pub qemu_stderr: String,
    pub sync: SyncState,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    pub cond: Condvar,
}

impl Shared {
    pub fn new(name: &str, log_path: PathBuf, file: Option<File>) -> Shared {
        Shared {
            state: Mutex::new(State {
                run: GuestRun {
                    name: name.to_string(),
                    log_path,
                    ..GuestRun::default()
                },
                started: Instant::now(),
                file,
                file_bytes: 0,
                job_lines: Vec::new(),
                init_seen: false,
                done: false,
                exited: None,
                readers_open: 0,
                kill_requested: false,
                timed_out: false,
                stop: false,
                qemu_stderr: String::new(),
                sync: SyncState::default(),
            }),
            cond: Condvar::new(),
        }
    }

    /// Locks the state; a panic in another thread holding it does not make
    /// the log unreadable.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a line to the log (and parses it when it is a job line).
    pub fn push_line(&self, src: Source, text: &str) {
        let mut st = self.lock();
        st.push_line(src, text);
        drop(st);
        self.cond.notify_all();
    }

    /// Waits on the condvar for at most `max`.
    pub fn wait<'a>(&self, st: MutexGuard<'a, State>, max: Duration) -> MutexGuard<'a, State> {
        match self.cond.wait_timeout(st, max) {
            Ok((g, _)) => g,
            Err(e) => e.into_inner().0,
        }
    }
}

impl State {
    pub fn push_line(&mut self, src: Source, text: &str) {
        let text = cut(text, MAX_LINE_BYTES);
        let logged = match src {
            Source::Job => text.to_string(),
            Source::Console => format!("console| {text}"),
            Source::Qemu => format!("qemu| {text}"),
            Source::Host => format!("host| {text}"),
        };
        if self.file_bytes < MAX_FILE_BYTES
            && let Some(f) = self.file.as_mut()
        {
            // The log is a diagnostic aid: a full disk must not fail the test.
            let _ = writeln!(f, "{logged}");
            self.file_bytes += logged.len() as u64 + 1;
        }
        if self.run.log.len() < MAX_LOG_BYTES {
            self.run.log.push_str(&logged);
            self.run.log.push('\n');
        } else if !self.run.log.ends_with("[log truncated]\n") {
            self.run.log.push_str("[log truncated]\n");
        }
        match src {
            Source::Job => self.on_job_line(text),
            Source::Qemu => {
                if self.qemu_stderr.len() < MAX_LINE_BYTES {
                    self.qemu_stderr.push_str(text);
                    self.qemu_stderr.push('\n');
                }
            }
            Source::Console | Source::Host => {}
        }
    }

    fn on_job_line(&mut self, text: &str) {
        if self.run.log.len() < MAX_LOG_BYTES {
            self.job_lines.push(text.to_string());
        }
        match classify(text) {
            Line::Pass(r) => self.run.passes.push(r),
            Line::Fail(r) => self.run.fails.push(r),
            Line::Ready(r) => self.run.ready.push(r),
            Line::Result(kv) => self.run.results.extend(kv),
            Line::Init => self.init_seen = true,
            Line::BootDone { uptime_secs } => self.run.boot_secs = uptime_secs,
            Line::Done { rc } => {
                self.done = true;
                self.run.rc = rc;
            }
            Line::Other => {}
        }
    }

    /// The run as of now.
    pub fn snapshot(&self) -> GuestRun {
        let mut run = self.run.clone();
        run.wall = self.started.elapsed();
        run.exit = self.exited.clone();
        run
    }
}

fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Reads `src` to EOF, splitting it into lines (`\r` dropped) for the log.
pub(crate) fn pump_lines(shared: &Shared, source: Source, mut src: impl Read) {
    let mut buf = [0u8; 8192];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = buf.get(..n).unwrap_or_default();
        pending.extend(chunk.iter().filter(|&&b| b != b'\r'));
        let mut lines = Vec::new();
        while let Some(pos) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=pos).collect();
            lines.push(String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
        }
        if pending.len() > MAX_LINE_BYTES {
            lines.push(String::from_utf8_lossy(&pending).into_owned());
            pending.clear();
        }
        if !lines.is_empty() {
            let mut st = shared.lock();
            for l in &lines {
                st.push_line(source, l);
            }
            drop(st);
            shared.cond.notify_all();
        }
    }
    let mut st = shared.lock();
    if !pending.is_empty() {
        let l = String::from_utf8_lossy(&pending).into_owned();
        st.push_line(source, &l);
    }
    st.readers_open = st.readers_open.saturating_sub(1);
    drop(st);
    shared.cond.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pump_splits_lines_strips_cr_and_parses_records() {
        let shared = Shared::new("t", PathBuf::from("/nonexistent"), None);
        shared.lock().readers_open = 1;
        let input: &[u8] = b"INFO a\r\nPASS x k=v\r\nRESULT r=1\nHARNESS_DONE rc=0\npartial";
        pump_lines(&shared, Source::Job, input);
        let st = shared.lock();
        assert_eq!(st.readers_open, 0);
        assert!(st.done);
        assert_eq!(st.run.rc, Some(0));
        assert_eq!(st.run.passes.len(), 1);
        assert_eq!(st.run.result("r"), Some("1"));
        assert_eq!(st.job_lines.last().map(String::as_str), Some("partial"));
        assert!(!st.run.log.contains('\r'));
    }

    #[test]
    fn console_lines_are_prefixed_and_never_parsed() {
        let shared = Shared::new("t", PathBuf::from("/nonexistent"), None);
        pump_lines(&shared, Source::Console, &b"FAIL not-a-record\n"[..]);
        let st = shared.lock();
        assert!(st.run.fails.is_empty());
        assert!(st.run.log.contains("console| FAIL not-a-record"));
    }

    #[test]
    fn cut_respects_char_boundaries() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("abc", 10), "abc");
    }
}
