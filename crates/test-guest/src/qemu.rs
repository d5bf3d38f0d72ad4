//! The QEMU command line, and starting QEMU so that it dies with the test
//! process.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use crate::config::GuestConfig;
use crate::image::GuestImage;

/// The guest's own address on QEMU's user network.
pub const GUEST_ADDR: &str = "10.0.2.15";
/// The host's 127.0.0.1 as seen from the guest (QEMU user networking).
pub const HOST_ADDR_FROM_GUEST: &str = "10.0.2.2";

/// Everything a QEMU invocation needs besides the config.
pub(crate) struct QemuArgs<'a> {
    pub image: &'a GuestImage,
    pub cfg: &'a GuestConfig,
    /// Resolved `(host_port, guest_port)` forwards.
    pub forwards: &'a [(u16, u16)],
    /// The host TCP port QEMU connects the job channel (ttyS1) to.
    pub job_channel_port: u16,
    pub job_file: &'a Path,
    pub qemu: &'a Path,
}

/// Acceleration: TCG unless `FERROBAY_GUEST_ACCEL=kvm` (auto-detection is
/// unsafe: a /dev/kvm that cannot run a stock kernel exists on some hosts).
fn accel() -> Vec<String> {
    match std::env::var("FERROBAY_GUEST_ACCEL").as_deref() {
        Ok("kvm") => vec!["-accel".into(), "kvm".into(), "-cpu".into(), "host".into()],
        _ => vec![
            "-accel".into(),
            "tcg,thread=multi".into(),
            "-cpu".into(),
            "max".into(),
        ],
    }
}

impl QemuArgs<'_> {
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(self.qemu);
        cmd.args(self.args());
        cmd
    }

    pub fn args(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
        push(&["-name", &format!("ferrobay-guest-{}", self.cfg.name)]);
        push(&[
            "-machine",
            "pc",
            "-nodefaults",
            "-no-user-config",
            "-no-reboot",
        ]);
        push(&["-display", "none"]);
        push(&[
            "-smp",
            &self.cfg.cpus.to_string(),
            "-m",
            &self.cfg.mem_mb.to_string(),
        ]);
        push(&["-kernel", &path_str(&self.image.kernel)]);
        push(&["-initrd", &path_str(&self.image.initramfs)]);
        // no_timer_check: under TCG on a busy host the kernel's IO-APIC timer check can
        // miss its ticks and panic at boot ("IO-APIC + timer doesn't work!"); QEMU's
        // timer is known good, so the check is skipped (as cloud images do).
        let append = format!(
            "console=ttyS0 quiet panic=-1 no_timer_check {}",
            self.cfg.extra_append
        );
        push(&["-append", append.trim_end()]);
        // ttyS0: kernel console on stdout; ttyS1: the job channel, a TCP
        // connection QEMU makes to the harness at start-up.
        push(&["-serial", "stdio"]);
        push(&[
            "-chardev",
            &format!(
                "socket,id=job,host=127.0.0.1,port={},server=off",
                self.job_channel_port
            ),
            "-serial",
            "chardev:job",
        ]);
        let mut netdev = String::from("user,id=n0");
        for (host, guest) in self.forwards {
            netdev.push_str(&format!(
                ",hostfwd=tcp:127.0.0.1:{host}-{GUEST_ADDR}:{guest}"
            ));
        }
        push(&[
            "-netdev",
            &netdev,
            "-device",
            "virtio-net-pci,netdev=n0,romfile=",
        ]);
        push(&[
            "-fw_cfg",
            // QEMU option syntax: a ',' in a value is written ',,'.
            &format!(
                "name=opt/ferrobay/job,file={}",
                path_str(self.job_file).replace(',', ",,")
            ),
        ]);
        a.extend(accel());
        a
    }

    /// The command line as one shell-pasteable string, for the log.
    pub fn display(&self) -> String {
        std::iter::once(path_str(self.qemu))
            .chain(self.args())
            .map(|w| {
                if w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,".contains(c))
                {
                    w
                } else {
                    crate::config::shell_quote(&w)
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Starts `cmd` from one long-lived thread, with `PR_SET_PDEATHSIG=SIGKILL`:
/// the kernel then kills QEMU when that thread, which lives as long as the
/// test process, goes away — also when the test binary is killed or aborts
/// and no `Drop` runs. (The death signal follows the forking *thread*, hence
/// the dedicated thread rather than the test's own.)
pub(crate) fn spawn_tied_to_process(mut cmd: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    cmd.stdin(Stdio::null());
    testkit::process::die_with_parent(&mut cmd);
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        let spawned = std::thread::Builder::new()
            .name("test-guest-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            });
        if let Err(e) = spawned {
            eprintln!("test-guest: cannot start the spawner thread: {e}");
        }
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    sender
        .lock()
        .map_err(|_| io::Error::other("spawner lock poisoned"))?
        .send((cmd, reply_tx))
        .map_err(|_| io::Error::other("spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("spawner thread did not answer"))?
}

/// Paths of the files a run leaves in the runs directory.
pub(crate) struct RunFiles {
    pub id: String,
    pub log: PathBuf,
    pub job: PathBuf,
}

impl RunFiles {
    pub fn new(runs_dir: &Path, name: &str) -> RunFiles {
        use std::sync::atomic::{AtomicU32, Ordering};
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let id = format!(
            "{name}-{secs}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        RunFiles {
            log: runs_dir.join(format!("{id}.log")),
            job: runs_dir.join(format!("{id}.job.sh")),
            id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_has_both_serials_forwards_and_job() {
        let image = GuestImage {
            dir: "/c".into(),
            kernel: "/c/out/vmlinux".into(),
            initramfs: "/c/out/initramfs.cpio".into(),
            kernel_version: "6.1".into(),
            flavour: crate::Flavour::Base,
        };
        let cfg = GuestConfig::new("t", "true").append("nvme_core.io_timeout=10");
        let q = QemuArgs {
            image: &image,
            cfg: &cfg,
            forwards: &[(40001, 4420)],
            job_channel_port: 40002,
            job_file: Path::new("/c/runs/t.job.sh"),
            qemu: Path::new("/usr/bin/qemu-system-x86_64"),
        };
        let line = q.display();
        assert!(
            line.contains("hostfwd=tcp:127.0.0.1:40001-10.0.2.15:4420"),
            "{line}"
        );
        assert!(line.contains("port=40002,server=off"), "{line}");
        assert!(
            line.contains("name=opt/ferrobay/job,file=/c/runs/t.job.sh"),
            "{line}"
        );
        assert!(
            line.contains("'console=ttyS0 quiet panic=-1 no_timer_check nvme_core.io_timeout=10'"),
            "{line}"
        );
        assert_eq!(q.args().iter().filter(|a| *a == "-serial").count(), 2);
    }

    #[test]
    fn run_files_are_unique() {
        let a = RunFiles::new(Path::new("/r"), "x");
        let b = RunFiles::new(Path::new("/r"), "x");
        assert_ne!(a.id, b.id);
        assert!(a.log.starts_with("/r") && a.job.to_string_lossy().ends_with(".job.sh"));
    }
}
