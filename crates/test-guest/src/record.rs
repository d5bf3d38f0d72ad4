//! Records printed by guest jobs (`PASS`, `FAIL`, `RESULT`, `READY`, ...) and
//! the outcome of a run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Number of log lines an error message or [`GuestRun::diagnostics`] quotes.
pub const LOG_TAIL_LINES: usize = 80;

/// One `TAG name k=v k=v ...` line: `PASS`, `FAIL` or `READY` (whose name is
/// empty unless the first word has no `=`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// The check's name (first word after the tag).
    pub name: String,
    /// `k=v` words; a word without `=` is stored with an empty value.
    pub kv: BTreeMap<String, String>,
    /// The whole line as printed.
    pub line: String,
}

impl Record {
    /// Value of `key`, if the record has it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.kv.get(key).map(String::as_str)
    }

    /// Parses the words after the tag. With `named`, the first word is the
    /// record's name even if it contains `=`.
    pub(crate) fn parse(line: &str, rest: &str, named: bool) -> Record {
        let mut words = rest.split_whitespace().peekable();
        let mut name = String::new();
        if let Some(first) = words.peek()
            && (named || !first.contains('='))
        {
            name = (*first).to_string();
            words.next();
        }
        Record {
            name,
            kv: parse_kv(words),
            line: line.to_string(),
        }
    }
}

fn parse_kv<'a>(words: impl Iterator<Item = &'a str>) -> BTreeMap<String, String> {
    words
        .map(|w| match w.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (w.to_string(), String::new()),
        })
        .collect()
}

/// What one line of the job channel means.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Line {
    Pass(Record),
    Fail(Record),
    Ready(Record),
    Result(BTreeMap<String, String>),
    Init,
    BootDone { uptime_secs: Option<f64> },
    Done { rc: Option<i32> },
    Other,
}

/// Classifies a job-channel line (trailing `\r` already stripped).
pub(crate) fn classify(line: &str) -> Line {
    let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
    match tag {
        "PASS" => Line::Pass(Record::parse(line, rest, true)),
        "FAIL" => Line::Fail(Record::parse(line, rest, true)),
        "READY" => Line::Ready(Record::parse(line, rest, false)),
        "RESULT" => Line::Result(parse_kv(rest.split_whitespace())),
        "HARNESS_INIT" => Line::Init,
        "HARNESS_READY" => Line::BootDone {
            uptime_secs: parse_kv(rest.split_whitespace())
                .get("uptime")
                .and_then(|v| v.parse().ok()),
        },
        "HARNESS_DONE" => Line::Done {
            rc: parse_kv(rest.split_whitespace())
                .get("rc")
                .and_then(|v| v.parse().ok()),
        },
        _ => Line::Other,
    }
}

/// Everything a guest run produced, complete or up to now.
#[derive(Debug, Clone, Default)]
pub struct GuestRun {
    /// The run's name (from [`crate::GuestConfig::name`]).
    pub name: String,
    /// Merged log: job-channel lines as printed, kernel console lines prefixed
    /// with `console| `, QEMU's own messages with `qemu| `, harness events
    /// with `host| `.
    pub log: String,
    /// Where the log is written while the guest runs.
    pub log_path: PathBuf,
    /// `PASS` records, in order.
    pub passes: Vec<Record>,
    /// `FAIL` records, in order.
    pub fails: Vec<Record>,
    /// `RESULT k=v` values (a later value replaces an earlier one).
    pub results: BTreeMap<String, String>,
    /// `READY` records, in order.
    pub ready: Vec<Record>,
    /// The job's exit status (`HARNESS_DONE rc=N`); `None` if the job never
    /// finished (killed, timed out, crashed).
    pub rc: Option<i32>,
    /// Guest uptime when the harness was up and the job started.
    pub boot_secs: Option<f64>,
    /// Host wall time from starting QEMU to now / to its exit.
    pub wall: Duration,
    /// How QEMU ended, if it did (e.g. `exit status: 0`, `killed: timeout`).
    pub exit: Option<String>,
}

impl GuestRun {
    /// True when the job finished with status 0 and printed no `FAIL` line.
    pub fn ok(&self) -> bool {
        self.rc == Some(0) && self.fails.is_empty()
    }

    /// The first `PASS` record named `name`.
    pub fn passed(&self, name: &str) -> Option<&Record> {
        self.passes.iter().find(|r| r.name == name)
    }

    /// The first `FAIL` record named `name`.
    pub fn failed(&self, name: &str) -> Option<&Record> {
        self.fails.iter().find(|r| r.name == name)
    }

    /// A `RESULT` value.
    pub fn result(&self, key: &str) -> Option<&str> {
        self.results.get(key).map(String::as_str)
    }

    /// The last `n` lines of the merged log.
    pub fn tail(&self, n: usize) -> String {
        let lines: Vec<&str> = self.log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// A multi-line report for error messages: status, `FAIL` lines, log path
    /// and the tail of the log.
    pub fn diagnostics(&self) -> String {
        let mut s = format!(
            "guest run '{}': rc={} exit={} passes={} fails={} wall={:.1}s\nlog: {}\n",
            self.name,
            self.rc
                .map_or("none (job did not finish)".to_string(), |r| r.to_string()),
            self.exit.as_deref().unwrap_or("running"),
            self.passes.len(),
            self.fails.len(),
            self.wall.as_secs_f64(),
            self.log_path.display(),
        );
        if !self.fails.is_empty() {
            s.push_str("FAIL lines:\n");
            for f in &self.fails {
                s.push_str("  ");
                s.push_str(&f.line);
                s.push('\n');
            }
        }
        s.push_str(&format!("---- last {LOG_TAIL_LINES} log lines ----\n"));
        s.push_str(&self.tail(LOG_TAIL_LINES));
        s.push_str("\n---- end of log tail ----");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_and_fail_lines_parse_name_and_kv() {
        let Line::Pass(r) = classify("PASS connect secs=1.25 ns=/dev/nvme0n1 flag") else {
            panic!("not a PASS")
        };
        assert_eq!(r.name, "connect");
        assert_eq!(r.get("secs"), Some("1.25"));
        assert_eq!(r.get("ns"), Some("/dev/nvme0n1"));
        assert_eq!(r.get("flag"), Some(""));
        let Line::Fail(r) = classify("FAIL io_512_at_512 rc=5") else {
            panic!("not a FAIL")
        };
        assert_eq!((r.name.as_str(), r.get("rc")), ("io_512_at_512", Some("5")));
    }

    #[test]
    fn ready_without_name_and_results_and_done() {
        let Line::Ready(r) = classify("READY port=4420 nqn=nqn.x:y") else {
            panic!("not READY")
        };
        assert_eq!(r.name, "");
        assert_eq!(r.get("nqn"), Some("nqn.x:y"));
        let Line::Result(kv) = classify("RESULT a=1 b=x=y") else {
            panic!("not RESULT")
        };
        assert_eq!(kv.get("b").map(String::as_str), Some("x=y"));
        assert_eq!(
            classify("HARNESS_DONE rc=3 uptime=9.1"),
            Line::Done { rc: Some(3) }
        );
        assert_eq!(
            classify("HARNESS_READY uptime=1.99 netdev=eth0"),
            Line::BootDone {
                uptime_secs: Some(1.99)
            }
        );
        assert_eq!(classify("PASSED x"), Line::Other);
        assert_eq!(classify(""), Line::Other);
    }

    #[test]
    fn ok_needs_rc_zero_and_no_fail() {
        let mut run = GuestRun {
            rc: Some(0),
            ..GuestRun::default()
        };
        assert!(run.ok());
        run.fails.push(Record::default());
        assert!(!run.ok());
        let run = GuestRun {
            rc: None,
            ..GuestRun::default()
        };
        assert!(!run.ok());
    }

    #[test]
    fn diagnostics_quote_fails_and_tail() {
        let mut run = GuestRun {
            name: "t".into(),
            rc: Some(1),
            log: (0..200).map(|i| format!("line {i}\n")).collect(),
            ..GuestRun::default()
        };
        run.fails.push(Record::parse("FAIL x rc=1", "x rc=1", true));
        let d = run.diagnostics();
        assert!(d.contains("FAIL x rc=1"));
        assert!(d.contains("line 199"));
        assert!(!d.contains("line 100\n"));
    }
}
