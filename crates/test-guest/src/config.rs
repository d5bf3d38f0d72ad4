//! How to boot a guest and what to run in it.

use std::time::Duration;

use crate::error::{GuestError, Result};
use crate::image::Flavour;

/// Default limit on a guest's whole life (QEMU is killed after it).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// One guest: machine size, kernel arguments, port forwards and the job.
///
/// The job is a busybox `ash` script sourced inside the guest after
/// `harness.sh` (see the crate docs for the helpers), in a subshell whose exit
/// status is the job's status.
#[derive(Debug, Clone)]
pub struct GuestConfig {
    /// Used in log file names and messages (letters, digits, `-_.`).
    pub name: String,
    /// Virtual CPUs (the Linux NVMe host opens one I/O queue per CPU).
    pub cpus: u32,
    /// Guest memory in MiB.
    pub mem_mb: u32,
    /// Limit on the guest's whole life: QEMU is killed when it is reached and
    /// waits fail with [`GuestError::Ended`].
    pub timeout: Duration,
    /// Appended to the kernel command line (e.g. `nvme_core.io_timeout=10`).
    pub extra_append: String,
    /// `(host_port, guest_port)`: QEMU forwards TCP `127.0.0.1:host_port` on
    /// the host to `10.0.2.15:guest_port` in the guest. A host port of 0 is
    /// replaced by a free port; see [`crate::RunningGuest::host_port`].
    pub host_forwards: Vec<(u16, u16)>,
    /// Shell variables set before the job runs (values are quoted).
    pub env: Vec<(String, String)>,
    /// The job script.
    pub job: String,
    /// Which image to boot.
    pub flavour: Flavour,
}

impl GuestConfig {
    /// A 2-CPU, 1 GiB guest running `job`, with [`DEFAULT_TIMEOUT`].
    pub fn new(name: impl Into<String>, job: impl Into<String>) -> Self {
        GuestConfig {
            name: name.into(),
            cpus: 2,
            mem_mb: 1024,
            timeout: DEFAULT_TIMEOUT,
            extra_append: String::new(),
            host_forwards: Vec::new(),
            env: Vec::new(),
            job: job.into(),
            flavour: Flavour::Base,
        }
    }

    /// Sets the number of virtual CPUs.
    pub fn cpus(mut self, cpus: u32) -> Self {
        self.cpus = cpus;
        self
    }

    /// Sets the guest memory in MiB.
    pub fn mem_mb(mut self, mem_mb: u32) -> Self {
        self.mem_mb = mem_mb;
        self
    }

    /// Sets the limit on the guest's whole life.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Appends kernel command line arguments.
    pub fn append(mut self, args: &str) -> Self {
        if !self.extra_append.is_empty() {
            self.extra_append.push(' ');
        }
        self.extra_append.push_str(args);
        self
    }

    /// Forwards a free host port on 127.0.0.1 to `guest_port` in the guest.
    pub fn forward(mut self, guest_port: u16) -> Self {
        self.host_forwards.push((0, guest_port));
        self
    }

    /// Forwards host `127.0.0.1:host_port` to `guest_port` in the guest.
    pub fn forward_fixed(mut self, host_port: u16, guest_port: u16) -> Self {
        self.host_forwards.push((host_port, guest_port));
        self
    }

    /// Sets a shell variable for the job.
    pub fn env(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.env.push((key.into(), value.to_string()));
        self
    }

    /// Boots the image with fio (larger; built on first use).
    pub fn with_fio(mut self) -> Self {
        self.flavour = Flavour::Fio;
        self
    }

    /// Boots the Debian trixie image (kernel 6.12 with DH-HMAC-CHAP and TLS,
    /// nvme-cli 2.13, tlshd; built on first use).
    pub fn trixie(mut self) -> Self {
        self.flavour = Flavour::Trixie;
        self
    }

    /// Boots the image of `flavour`.
    pub fn flavour(mut self, flavour: Flavour) -> Self {
        self.flavour = flavour;
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 100
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !name_ok {
            return Err(GuestError::Config(format!(
                "name {:?}: use 1..=100 of [A-Za-z0-9-_.]",
                self.name
            )));
        }
        if self.cpus == 0 || self.mem_mb < 256 {
            return Err(GuestError::Config(format!(
                "cpus={} mem_mb={}: need at least 1 CPU and 256 MiB",
                self.cpus, self.mem_mb
            )));
        }
        if let Some((k, _)) = self.env.iter().find(|(k, _)| !is_shell_name(k)) {
            return Err(GuestError::Config(format!(
                "env name {k:?} is not a shell variable name"
            )));
        }
        if let Some((_, g)) = self.host_forwards.iter().find(|(_, g)| *g == 0) {
            return Err(GuestError::Config(format!("guest port {g} in a forward")));
        }
        Ok(())
    }

    /// The script the guest runs: variables, then the job.
    pub(crate) fn job_script(&self, sync_port: u16) -> String {
        let mut s = String::from("# generated by crates/test-guest\n");
        s.push_str(&format!("FB_RUN={}\n", shell_quote(&self.name)));
        s.push_str(&format!("FB_SYNC_PORT={sync_port}\n"));
        for (k, v) in &self.env {
            s.push_str(&format!("{k}={}\n", shell_quote(v)));
        }
        s.push_str("# ---- job ----\n");
        s.push_str(&self.job);
        if !self.job.ends_with('\n') {
            s.push('\n');
        }
        s
    }
}

fn is_shell_name(k: &str) -> bool {
    let mut chars = k.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Quotes `s` for a POSIX shell: `'...'` with embedded `'` as `'\''`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes_and_spaces() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn job_script_sets_variables_before_the_job() {
        let cfg = GuestConfig::new("t1", "pass x").env("NQN", "nqn.a:b c");
        let s = cfg.job_script(4242);
        let sync = s.find("FB_SYNC_PORT=4242").expect("sync port");
        let nqn = s.find("NQN='nqn.a:b c'").expect("quoted env");
        let job = s.find("pass x\n").expect("job");
        assert!(sync < job && nqn < job);
    }

    #[test]
    fn validation_rejects_bad_names_and_env() {
        assert!(GuestConfig::new("ok-name_1.2", "").validate().is_ok());
        assert!(GuestConfig::new("bad name", "").validate().is_err());
        assert!(GuestConfig::new("", "").validate().is_err());
        assert!(GuestConfig::new("x", "").env("1A", "v").validate().is_err());
        assert!(
            GuestConfig::new("x", "")
                .env("A-B", "v")
                .validate()
                .is_err()
        );
        assert!(GuestConfig::new("x", "").mem_mb(64).validate().is_err());
        assert!(GuestConfig::new("x", "").forward(0).validate().is_err());
    }
}
